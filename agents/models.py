"""Policies: small Llama models built from configs, any local HF causal LM by path.

Shapes: S = rows (segments) in a batch, T = padded length, V = vocabulary size.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

import torch
import torch.nn.functional as F
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from cxsim.agents.chat import ChatFormat, ChatOptions, HFChatFormat, WordChatFormat
from cxsim.agents.tokenizer import SPECIAL_TOKENS
from cxsim.pretrained import policy_path
from cxsim.servable import check_servable, serving_layout

MARKER_FILE = "cxsim.json"
"""Written next to a policy saved by `save_policy`; names the chat format to load it with."""

PresetName = Literal["tiny", "small", "base"]


@dataclass(frozen=True)
class PolicyPreset:
    """Llama sizes; parameter counts below are for a ~500-word vocabulary."""

    layers: int
    """Transformer blocks."""
    hidden: int
    """Residual width."""
    heads: int
    """Attention heads (head size = hidden / heads); no grouped-query attention."""
    intermediate: int
    """Width of the SwiGLU MLP."""
    tie_embeddings: bool = False
    """Share the input embedding with the output projection."""


POLICY_PRESETS: dict[PresetName, PolicyPreset] = {
    "tiny": PolicyPreset(layers=2, hidden=64, heads=4, intermediate=256),  # ~0.2M
    "small": PolicyPreset(layers=4, hidden=128, heads=4, intermediate=384),  # ~1M
    "base": PolicyPreset(layers=6, hidden=256, heads=8, intermediate=768),  # ~5.4M
}


def build_policy(
    preset: PresetName,
    tokenizer: PreTrainedTokenizerBase,
    max_positions: int = 1024,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A freshly initialised Llama of the preset's size over `tokenizer`'s vocabulary.

    pad/bos/eos ids come from the tokenizer; initialisation is seeded without
    touching the global torch RNG.
    """
    if preset not in POLICY_PRESETS:
        raise ValueError(f"preset must be one of {sorted(POLICY_PRESETS)}; got {preset!r}")
    p = POLICY_PRESETS[preset]
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=p.hidden,
        intermediate_size=p.intermediate,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=p.tie_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def _is_word_tokenizer(tokenizer: PreTrainedTokenizerBase) -> bool:
    return tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == list(range(len(SPECIAL_TOKENS)))


def save_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    path: str | Path,
    chat_options: ChatOptions | None = None,
) -> None:
    """Save model, tokenizer and the `cxsim.json` marker naming the chat format (and, for a
    chat template, the `ChatOptions` it was trained with, which `load_policy` reuses)."""
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    marker: dict[str, object] = {"chat_format": "word" if _is_word_tokenizer(tokenizer) else "hf"}
    if marker["chat_format"] == "hf" and chat_options is not None:
        marker["chat_options"] = dataclasses.asdict(chat_options)
    (path / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")


def load_policy(
    path: str | Path,
    device: torch.device | str = "cpu",
    chat_options: ChatOptions | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, ChatFormat]:
    """Load a local causal-LM directory: (model, tokenizer, chat format).

    Directories saved by `save_policy` with the word tokenizer get
    `WordChatFormat`; any other Hugging Face model saved with `save_pretrained`
    gets `HFChatFormat` over its own chat template, with ``chat_options`` (None:
    those saved in `cxsim.json`, else the defaults).
    The weights load as float32 on ``device`` whatever dtype they were saved in:
    they are the master copy that optimizers update (bf16 is an autocast
    choice, `cxsim.devices`). Nothing is downloaded and no remote code runs.
    A model the KV-cache runtime would serve wrong or cannot run is refused here with
    a one-line ValueError saying why (`cxsim.servable.check_servable`).
    """
    path = policy_path(path)  # ``pretrained``: the shipped starting checkpoint
    if not (path / "config.json").is_file():
        what = "does not exist" if not path.exists() else "holds no model (no config.json)"
        raise FileNotFoundError(
            f"policy path {str(path)!r} {what}; pass --policy PATH to a directory made by "
            "`cxsim sft` or a Hugging Face model saved with save_pretrained"
        )
    model = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, trust_remote_code=False, dtype=torch.float32
    )
    serving_layout(model)  # refuse what the KV-cache runtime cannot serve, up front
    model = model.to(device)
    check_servable(model)  # and, with one forward on the device, encoders attending both ways
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    marker_file = path / MARKER_FILE
    marker = json.loads(marker_file.read_text()) if marker_file.is_file() else {}
    if chat_options is None:
        saved = marker.get("chat_options", {})
        chat_options = ChatOptions(
            **{**saved, "template_args": tuple(saved.get("template_args", ()))}
        )
    chat: ChatFormat = (
        WordChatFormat(tokenizer)
        if marker.get("chat_format", "hf") == "word"
        else HFChatFormat(tokenizer, chat_options)
    )
    return model, tokenizer, chat


@overload
def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: Literal[False] = False,
) -> torch.Tensor: ...
@overload
def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    return_entropy: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...
def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Score a padded batch in one forward pass, aligned per CONTRACTS.md.

    input_ids, attention_mask: (S, T); padding may sit on either side (position
    ids restart at each row's first real token).
    Returns logprobs (S, T) with `logprobs[s, t] = log softmax(z_{t-1} / temperature)[tok_t]`,
    where z_{t-1} are the logits after tokens 0..t-1 of the row; position 0 and
    padded positions hold 0. With `return_entropy`, also the entropy (S, T) of
    the same tempered distribution, aligned the same way.
    Gradients flow when called outside `torch.no_grad()`.
    """
    assert input_ids.dim() == 2 and input_ids.shape == attention_mask.shape, (
        f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must be the same (S, T)"
    )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    mask = attention_mask.long()
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(
        input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False
    ).logits  # (S, T, V)
    logp_all = F.log_softmax(logits[:, :-1].float() / temperature, dim=-1)  # (S, T-1, V)
    logp_next = logp_all.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (S, T-1)
    # A token is scored when it and its whole prefix up to it are real; with left or
    # right padding that is "this and the previous position are not padding".
    scored = (mask[:, 1:] * mask[:, :-1]).bool()
    zeros = logp_next.new_zeros(input_ids.shape[0], 1)
    logprobs = torch.cat([zeros, torch.where(scored, logp_next, 0.0)], dim=1)
    if not return_entropy:
        return logprobs
    entropy_next = -(logp_all.exp() * logp_all).sum(-1)  # (S, T-1)
    entropy = torch.cat([zeros, torch.where(scored, entropy_next, 0.0)], dim=1)
    return logprobs, entropy


HEAD_CHUNK_ELEMENTS = 2**24
"""Logits computed at once by `token_logprobs_at` (tokens x vocab; 64 MB in float32)."""


def decoder_of(model: PreTrainedModel) -> PreTrainedModel:
    """The transformer under a causal-LM head (``model.model``, GPT-2's ``transformer``, ...)."""
    decoder = model.get_decoder()
    return model.base_model if decoder is model else decoder  # older releases return self


def head_logits(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head on decoder states: hidden (..., H) -> logits (..., V), with the
    config's final logit transforms (Gemma-2 soft-capping, Granite/Cohere scaling)."""
    logits = model.get_output_embeddings()(hidden)
    config = model.config
    if getattr(config, "logits_scaling", None):
        logits = logits / config.logits_scaling
    if getattr(config, "logit_scale", None):
        logits = logits * config.logit_scale
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def _scored_tokens(
    head: torch.nn.Module,
    model: PreTrainedModel,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden (N, H), targets (N,) -> (log pi(target), entropy), both (N,) float32."""
    z = head_logits(model, hidden).float() / temperature  # (N, V)
    log_norm = torch.logsumexp(z, dim=-1)  # (N,)
    logp = z.gather(-1, targets[:, None]).squeeze(-1) - log_norm
    entropy = log_norm - (torch.softmax(z, dim=-1) * z).sum(-1)
    return logp, entropy


@overload
def token_logprobs_at(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: Literal[False] = False,
    chunk_elements: int = HEAD_CHUNK_ELEMENTS,
) -> torch.Tensor: ...
@overload
def token_logprobs_at(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    temperature: float = 1.0,
    *,
    return_entropy: Literal[True],
    chunk_elements: int = HEAD_CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor]: ...
def token_logprobs_at(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
    chunk_elements: int = HEAD_CHUNK_ELEMENTS,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`sequence_logprobs` at the positions the loss needs only.

    input_ids, attention_mask, positions: (S, T); positions (bool) marks the
    tokens to score (e.g. ``trainable`` or the PPO ``policy_mask``). Returns
    logprobs (S, T) (and the entropy (S, T) with `return_entropy`), equal to
    `sequence_logprobs` at the marked positions that it scores, 0 everywhere else.

    The decoder runs once over the batch; the LM head runs only on the states
    before the marked tokens, at most ``chunk_elements`` logits (tokens x vocab)
    at a time; with more than one chunk, each chunk's head is recomputed in the
    backward pass instead of keeping its logits, so memory is one chunk's logits,
    whatever rows x tokens x vocab is.
    """
    assert input_ids.shape == attention_mask.shape == positions.shape and input_ids.dim() == 2, (
        f"input_ids {tuple(input_ids.shape)}, attention_mask {tuple(attention_mask.shape)} and "
        f"positions {tuple(positions.shape)} must be the same (S, T)"
    )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    mask = attention_mask.long()
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    hidden = decoder_of(model)(
        input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state  # (S, T, H)
    # Same scored positions as sequence_logprobs: the token and its predecessor are real.
    scored = positions[:, 1:].bool() & (mask[:, 1:] * mask[:, :-1]).bool()  # (S, T-1)
    states = hidden[:, :-1][scored]  # (N, H): the state before each scored token
    targets = input_ids[:, 1:][scored]  # (N,)
    head = model.get_output_embeddings()
    rows = max(1, chunk_elements // head.weight.shape[0])
    pieces = []
    # At least one (possibly empty) chunk: the outputs stay in the graph with no marked token.
    for start in range(0, max(states.shape[0], 1), rows):
        args = (head, model, states[start : start + rows], targets[start : start + rows])
        if states.shape[0] > rows and torch.is_grad_enabled():
            pieces.append(
                torch.utils.checkpoint.checkpoint(
                    _scored_tokens, *args, temperature, use_reentrant=False
                )
            )
        else:
            pieces.append(_scored_tokens(*args, temperature))
    logp = torch.cat([p[0] for p in pieces])
    full = torch.zeros(scored.shape, dtype=torch.float32, device=input_ids.device)
    zeros = full.new_zeros(input_ids.shape[0], 1)
    logprobs = torch.cat([zeros, full.masked_scatter(scored, logp)], dim=1)
    if not return_entropy:
        return logprobs
    ent = torch.cat([p[1] for p in pieces])
    return logprobs, torch.cat([zeros, full.masked_scatter(scored, ent)], dim=1)


def enable_gradient_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each decoder layer's activations in the backward pass instead of keeping them.

    Uses the model's own (non-reentrant) checkpointing. Transformers checkpoints a
    layer only in training mode; the flag is set on the checkpointed layers alone,
    so dropout elsewhere keeps the mode the model was in (a policy loaded with
    `from_pretrained` stays deterministic). Forwards without gradients (sampling
    with the KV cache) run unchanged.
    """
    if not model.supports_gradient_checkpointing:
        raise ValueError(f"{type(model).__name__} does not support gradient checkpointing")
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # the name from transformers 5.24 on
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    for module in model.modules():
        if getattr(module, "gradient_checkpointing", False):
            module.training = True

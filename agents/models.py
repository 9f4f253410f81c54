"""Policies: small Llama models built from configs, any local HF causal LM by path.

Shapes: S = rows (segments) in a batch, T = padded length, V = vocabulary size.
"""

from __future__ import annotations

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

from cxsim.agents.chat import ChatFormat, HFChatFormat, WordChatFormat
from cxsim.agents.tokenizer import SPECIAL_TOKENS

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
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path
) -> None:
    """Save model, tokenizer and the `cxsim.json` marker naming the chat format."""
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    chat = "word" if _is_word_tokenizer(tokenizer) else "hf"
    (path / MARKER_FILE).write_text(json.dumps({"chat_format": chat}, indent=2) + "\n")


def load_policy(path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, ChatFormat]:
    """Load a local causal-LM directory: (model, tokenizer, chat format).

    Directories saved by `save_policy` with the word tokenizer get
    `WordChatFormat`; any other Hugging Face model saved with `save_pretrained`
    gets `HFChatFormat` over its own chat template. Nothing is downloaded and
    no remote code runs.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        what = "does not exist" if not path.exists() else "holds no model (no config.json)"
        raise FileNotFoundError(
            f"policy path {str(path)!r} {what}; pass --policy PATH to a directory made by "
            "`cxsim sft` or a Hugging Face model saved with save_pretrained"
        )
    model = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, trust_remote_code=False
    )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    marker = path / MARKER_FILE
    chat_name = json.loads(marker.read_text())["chat_format"] if marker.is_file() else "hf"
    chat: ChatFormat = WordChatFormat(tokenizer) if chat_name == "word" else HFChatFormat(tokenizer)
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

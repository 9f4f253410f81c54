"""Hugging Face policies built here, nothing downloaded: a byte-level BPE tokenizer trained
on the environments' words, ChatML and Gemma-style templates, tiny Qwen2 and GPT-2 models;
and the architecture sweep: every causal LM transformers builds from a config, made tiny,
served by the row cache or refused (tests/test_architecture_sweep.py).

``.venv/bin/python tests/local_hf_models.py [MODEL_TYPE ...]`` runs the sweep (every
model type when none is named; a line per result on stderr) and prints the Markdown table
that docs/training.md shows."""

from __future__ import annotations

from dataclasses import dataclass

import torch

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
"""Gemma's rules: no system message, user and assistant strictly alternating."""


def bpe_chatml_tokenizer():
    """A byte-level BPE trained here on the environments' words, with a ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from cxsim.envs import vocabulary

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    words = sorted(vocabulary())
    core.train_from_iterator([" ".join(words[i : i + 8]) for i in range(0, len(words), 8)], trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    tok.chat_template = CHATML
    return tok


def gemma_style_tokenizer():
    """The BPE tokenizer with a Gemma-style template: no system role, strict alternation."""
    tok = bpe_chatml_tokenizer()
    tok.add_special_tokens(
        {"bos_token": "<bos>", "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]}
    )
    tok.chat_template = GEMMA
    return tok


TOKENIZERS = {"chatml": bpe_chatml_tokenizer, "gemma": gemma_style_tokenizer}


def save_hf_policy(kind: str, path, template: str = "chatml") -> None:
    """A locally built Qwen2 or GPT-2 (random init, tiny) with a locally trained BPE
    tokenizer and a ChatML (or Gemma-style) template."""
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    tok = TOKENIZERS[template]()
    ids = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if kind == "qwen2":
            config = Qwen2Config(
                vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                tie_word_embeddings=True, **ids,
            )  # fmt: skip
            model = Qwen2ForCausalLM(config)
        else:
            config = GPT2Config(
                vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=1024, **ids
            )
            model = GPT2LMHeadModel(config)
    model.save_pretrained(path)
    tok.save_pretrained(path)


# ---------------------------------------------------------------------------------------------
# The architecture sweep: every causal LM transformers can build from a config, made tiny here,
# either served right by the row cache (cxsim/generation.py) or refused at load in one line
# (cxsim/servable.py).

SWEEP_TOLERANCE = 1e-4
"""Largest |cached - clean| log-prob a served architecture may show."""
SWEEP_CONTRAST = 10 * SWEEP_TOLERANCE
"""Smallest change that dropping the token before the last must make to a row's clean
log-probs: a model less sensitive to its context could hide a wrong position or a leaked
column under the tolerance."""
PARAMETER_CAP = 10_000_000
"""A tiny config still larger than this is skipped (it would be slow to build and run)."""

TINY_FIELDS: dict[str, object] = {
    "vocab_size": 96, "vocab_size_per_layer_input": 96,
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "dim": 32, "emb_dim": 32,
    "num_hidden_layers": 4, "n_layer": 4, "n_layers": 4, "num_layers": 4,
    "encoder_layers": 2, "decoder_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 128,
    "n_positions": 128, "max_seq_len": 128, "n_ctx": 128, "num_experts": 4,
    "n_routed_experts": 4, "num_local_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "moe_k": 2, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 8, "rotary_dim": 4, "laurel_rank": 4, "hidden_size_per_layer_input": 8,
    "num_kv_shared_layers": 2, "first_k_dense_replace": 1, "sliding_window": 6,
    "mamba_n_heads": 4, "mamba_d_state": 8, "state_size": 8, "ffn_hidden_size": 64,
    "expert_ffn_hidden_size": 64, "n_shared_experts": 1, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip
"""Field -> tiny value, set wherever a config declares the field with a non-None default
(a sliding window only where the architecture has one)."""
DERIVED_FIELDS = {
    "head_dim",
    "num_key_value_heads",
    "num_experts_per_tok",
    "n_routed_experts",
    "n_shared_experts",
}
"""Fields set even where their default is None (a size left to derive, or a required one)."""
INITIALIZER_RANGE = 0.1
"""Weights' standard deviation where a config sets one (larger than the usual 0.02, so that
a tiny random model's outputs depend on its context enough for the check to see errors)."""

TINY_OVERRIDES: dict[str, dict[str, object]] = {
    "dory": {"n_input_layers": 1, "n_output_layers": 1},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"] * 2, "num_dense_layers": 1},
    "mamba2": {"num_heads": 8, "n_groups": 1},
    "gpt_neo": {"attention_types": [[["global", "local"], 2]], "window_size": 6},
    "zaya": {"num_experts_per_tok": 1},
    "zamba2": {"layers_block_type": ["mamba", "hybrid"] * 2},
    "roc_bert": {"pronunciation_embed_dim": 8, "shape_embed_dim": 8, "shape_vocab_size": 32,
                 "pronunciation_vocab_size": 32},
    "longcat_flash": {"zero_expert_num": 2},
    "cohere_compass_text": {"layer_types": ["sliding_attention"] * 3 + ["full_attention"]},
    "reformer": {"is_decoder": True, "axial_pos_embds_dim": [16, 16], "axial_pos_shape": [8, 16]},
    "zamba": {"num_hidden_layers": 8},
    "moshi": {"audio_vocab_size": 32},
    "gemma4_assistant": {"hidden_size_per_layer_input": 0},
    **{name: {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 8,
              "indexer_budget": 8, "indexer_compress_ratio": 2}
       for name in ("qwen4_exp", "qwen4_exp_text")},
    "dots3_note_text": {"index_n_heads": 2, "index_head_dim": 8, "index_topk": 4},
    "dots3_note": {"index_n_heads": 2, "index_head_dim": 8, "index_topk": 4},
    **{name: {"layer_types": ["sliding_attention", "full_attention"] * 2}
       for name in ("gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text")},
}  # fmt: skip
"""Per model type: further fields its tiny config needs to be consistent."""

SWEEP_VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "falcon (alibi)": ("falcon", {"alibi": True}),
}
"""Extra sweep entries: a model type with a config switch that changes its attention."""


def tiny_fields(config_class: type) -> dict[str, object]:
    """Constructor arguments that make ``config_class`` tiny (sub-configs included)."""
    import dataclasses

    fields = {f.name: f.default for f in dataclasses.fields(config_class)}
    kwargs: dict[str, object] = {}
    for name, default in fields.items():
        if name in TINY_FIELDS and (default is not None or name in DERIVED_FIELDS):
            kwargs[name] = TINY_FIELDS[name]
        elif isinstance(default, int) and not isinstance(default, bool):
            if "intermediate" in name or "ffn_dim" in name:
                kwargs[name] = 64
            elif name.endswith("_attention_heads"):
                kwargs[name] = 4
    if "kv_lora_rank" in fields:  # multi-head latent attention: as many key heads as queries
        kwargs["num_key_value_heads"] = TINY_FIELDS["num_attention_heads"]
    if "initializer_range" in fields:
        kwargs["initializer_range"] = INITIALIZER_RANGE
    for name, sub_class in getattr(config_class, "sub_configs", {}).items():
        if dataclasses.is_dataclass(sub_class) and (sub_kwargs := tiny_fields(sub_class)):
            kwargs[name] = sub_kwargs
    return kwargs


def tiny_config(model_type: str, **changes: object):
    """A tiny config of ``model_type`` (a key of transformers' config mapping)."""
    from transformers import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type]
    kwargs = {**tiny_fields(config_class), **TINY_OVERRIDES.get(model_type, {}), **changes}
    return config_class(**kwargs)


def sweep_entries() -> dict[str, tuple[str, dict[str, object]]]:
    """Sweep name -> (model type, config changes): every causal-LM model type, then variants."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    entries = {name: (name, {}) for name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)}
    return {**entries, **SWEEP_VARIANTS}


@dataclass(frozen=True)
class SweepResult:
    """One architecture's outcome."""

    name: str
    """Model type (and variant)."""
    verdict: str
    """``served``, ``refused``, ``skipped`` (not built here), ``wrong`` or ``crashed``."""
    reason: str
    """The refusal, the skip's cause, the error or the crash, in one line."""
    model_class: str = ""
    error: float | None = None
    """Largest |cached - clean| log-prob over the turns (served or wrong)."""
    contrast: float | None = None
    """Smallest change that dropping the token before the last makes to a row's clean log-probs."""


def one_line(error: BaseException, limit: int = 160) -> str:
    """An exception as one line: its type and message, lines joined, cut at ``limit``."""
    said = " ".join(line.strip() for line in str(error).strip().splitlines())
    said = said if len(said) <= limit else said[: limit - 3] + "..."
    return f"{type(error).__name__}: {said}"


SERVE_PLAN = [
    ([0, 1, 2], {0, 1, 2}, [5, 3, 1]),
    ([0, 1, 2], set(), [1, 4, 2]),
    ([0, 1, 2], {1}, [2, 16, 1]),  # a rebuilt window next to short chunks: separate forwards
    ([0, 2, 3], {3}, [1, 3, 6]),  # row 1 leaves, row 3 joins
    ([0, 2, 3], {0}, [7, 1, 1]),
    ([0, 2, 3], set(), [3, 2, 4]),
    ([0, 2, 3], {2}, [2, 1, 1]),
    ([0, 2, 3], set(), [1, 1, 1]),  # the dead columns are dropped (re-packing) first
]
"""Turns of (row keys, rows that restart, chunk length per row)."""


def cached_against_clean(model, vocab: int = 90) -> tuple[float, float, bool]:
    """Serve ``model`` through the row cache over `SERVE_PLAN` and score every row after
    every turn against a clean forward over the row's window alone.

    Returns (largest |cached - clean| log-prob, smallest change that dropping the token
    before the last makes to a row's clean log-probs on the last turn, whether the cache
    was re-packed).
    """
    import torch.nn.functional as F

    from cxsim.generation import RowCache

    cache = RowCache(model, pad_id=0, device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    windows: dict[int, list[int]] = {}
    worst, contrast, repacked = 0.0, float("inf"), False

    def clean(tokens: list[int]) -> torch.Tensor:
        logits = model(input_ids=torch.tensor([tokens]), use_cache=False).logits[0, -1]
        return F.log_softmax(logits.float(), -1)

    with torch.inference_mode():
        for turn, (keys, restarts, lengths) in enumerate(SERVE_PLAN):
            reset = [k in restarts for k in keys]
            columns = cache.columns
            cache.arrange(keys, reset)
            repacked |= cache.columns < columns
            chunks = []
            for key, restart, length in zip(keys, reset, lengths, strict=True):
                chunk = torch.randint(3, vocab, (length,), generator=generator).tolist()
                windows[key] = chunk if restart else windows[key] + chunk
                chunks.append(chunk)
            logits = cache.append(chunks)
            for b, key in enumerate(keys):
                expected = clean(windows[key])
                got = F.log_softmax(logits[b].float(), -1)
                worst = max(worst, float((got - expected).abs().max()))
                if turn == len(SERVE_PLAN) - 1:  # without the token before the last one
                    shorter = clean(windows[key][:-2] + windows[key][-1:])
                    contrast = min(contrast, float((shorter - expected).abs().max()))
    return worst, contrast, repacked


def default_note(model_type: str) -> str:
    """ "; its default config fails too" when transformers cannot build the model type from
    its own default config either (on the meta device: no memory), else ""."""
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    try:
        with torch.device("meta"):
            AutoModelForCausalLM.from_config(CONFIG_MAPPING[model_type]())
    except Exception:
        return "; its default config fails too"
    return ""


def sweep_architecture(name: str) -> SweepResult:
    """Build ``name`` (a `sweep_entries` key) tiny and serve it, or see it refused as
    `cxsim.agents.models.load_policy` refuses it."""
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from cxsim.servable import attention_layout, check_servable, serving_layout

    model_type, changes = sweep_entries()[name]
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]

    def refused_by_config(config) -> SweepResult | None:
        """The config rules alone, for a model that cannot be built here."""
        try:
            attention_layout(config)
        except ValueError as refusal:
            return SweepResult(name, "refused", str(refusal), model_class)
        return None

    try:
        config = tiny_config(model_type, **changes)
    except Exception as error:
        try:
            refused = refused_by_config(CONFIG_MAPPING[model_type](**changes))
        except Exception:
            refused = None
        reason = f"no tiny config ({one_line(error)}){default_note(model_type)}"
        return refused or SweepResult(name, "skipped", reason, model_class)
    try:  # on the meta device: no memory, whatever the size
        with torch.device("meta"):
            shell = AutoModelForCausalLM.from_config(config)
    except Exception as error:  # e.g. a vision tower that needs another library
        reason = f"not built ({one_line(error)}){default_note(model_type)}"
        return refused_by_config(config) or SweepResult(name, "skipped", reason, model_class)
    model_class = type(shell).__name__
    try:
        serving_layout(shell)  # the signature rules: no weights needed
    except ValueError as refusal:
        return SweepResult(name, "refused", str(refusal), model_class)
    parameters = sum(p.numel() for p in shell.parameters())
    if parameters > PARAMETER_CAP:
        return SweepResult(
            name, "skipped", f"tiny config still has {parameters:,} parameters", model_class
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
    try:
        check_servable(model)
    except ValueError as refusal:
        return SweepResult(name, "refused", str(refusal), model_class)
    try:
        error, contrast, _ = cached_against_clean(model)
    except Exception as crash:
        return SweepResult(name, "crashed", one_line(crash), model_class)
    if error > SWEEP_TOLERANCE:
        reason = f"cached log-probs differ from a clean forward by {error:.2g}"
        return SweepResult(name, "wrong", reason, model_class, error, contrast)
    reason = f"cached log-probs = clean forward to {error:.1e}"
    return SweepResult(name, "served", reason, model_class, error, contrast)


def sweep_table(results: list[SweepResult]) -> str:
    """The sweep as a Markdown table: architecture, model class, verdict, reason."""
    lines = ["| architecture | model class | verdict | reason |", "|---|---|---|---|"]
    for r in results:
        reason = r.reason.replace("|", "\\|")
        lines.append(f"| `{r.name}` | {r.model_class or '-'} | {r.verdict} | {reason} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys
    import warnings

    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    names = sys.argv[1:] or list(sweep_entries())
    unknown = sorted(set(names) - set(sweep_entries()))
    if unknown:
        sys.exit(f"unknown model types {unknown}: name keys of transformers' config mapping")
    swept = []
    for entry in names:
        swept.append(sweep_architecture(entry))
        print(swept[-1], file=sys.stderr, flush=True)
    print(sweep_table(swept))

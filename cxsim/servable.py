"""Which models the row cache (``cxsim.generation``) can serve, read from a model's config
and its ``forward``.

``attention_layout`` reads the layer kinds of a decoder config (``full_attention`` or
``sliding_attention``, the sliding window, and whether ALiBi biases follow a 2D key mask)
into an ``AttentionLayout``, the masks the row cache builds; ``cache_argument`` and
``takes_logits_to_keep`` read what the model's ``forward`` takes.

What the row cache would serve wrong or cannot run is refused before any forward, in
one line saying why (``serving_layout``): other layer kinds (chunked, linear,
recurrent attention), ALiBi biases or a local window that follow the cache's column
index (MPT, GPT-Neo), a ``forward`` without ``position_ids`` (positions would count
cache columns), a sliding window the model's own code never applies (Moshi), a state
of the model's own in place of a KV cache (xLSTM), multimodal wrappers;
``check_servable`` (what ``load_policy`` runs) adds one forward that refuses encoders
attending both ways. The sweep over every architecture transformers builds from a
config is tests/test_architecture_sweep.py (its table: docs/training.md).
"""

from __future__ import annotations

import inspect
import sys
import typing
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache

FULL, SLIDING = "full_attention", "sliding_attention"


@dataclass(frozen=True)
class AttentionLayout:
    """Which attention each decoder layer uses, as far as the row cache must know."""

    kinds: tuple[str, ...]
    """Per layer: ``full_attention`` or ``sliding_attention``."""
    window: int | None
    """Sliding-window size (a query sees keys less than ``window`` positions behind it)."""
    key_mask: bool = False
    """The model takes a 2D mask over the cached and new key columns and builds its causal
    mask and its ALiBi biases from it, counting only the columns the mask keeps (Bloom,
    Falcon with ``alibi``); it gets that mask instead of a 4D one."""

    @property
    def mixed(self) -> bool:
        """Both kinds occur: the model gets a mapping of masks, not one mask."""
        return len(set(self.kinds)) > 1


CANNOT = "this architecture cannot be sampled here"


def attention_layout(config: PretrainedConfig) -> AttentionLayout:
    """The layer kinds of a decoder config; ValueError for one the row cache cannot serve.

    ``layer_types`` (Qwen2 with ``use_sliding_window``, Gemma-2/3, ...) names each
    layer; without it a set ``sliding_window`` makes every layer sliding (Mistral).
    ALiBi models whose biases follow a 2D key mask (Bloom, Falcon with ``alibi``) get
    ``key_mask``; those whose biases follow the cache's column index (MPT) are refused.
    """
    name = getattr(config, "model_type", type(config).__name__)
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{name}: encoder-decoder models are not served; use a causal LM")
    if getattr(config, "attention_chunk_size", None):
        raise ValueError(
            f"{name}: chunked attention (attention_chunk_size) is not served by the row cache"
        )
    if getattr(getattr(config, "attn_config", None), "alibi", False):
        raise ValueError(
            f"{name}: its ALiBi biases count the cache's columns, not the row's own tokens, so "
            f"a row whose window was rebuilt or padded would be scored wrong; {CANNOT}"
        )
    if "local" in (getattr(config, "attention_layers", None) or ()):
        raise ValueError(
            f"{name}: its local-attention layers count their window in the cache's columns, "
            f"not the row's own tokens; {CANNOT}"
        )
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) and getattr(config, "text_config", None) is not None:
        raise ValueError(
            f"{name}: a multimodal model (its decoder config is text_config); the row cache "
            "serves text-only causal LMs: save the text model alone"
        )
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"{name}: config has no num_hidden_layers; cannot build a KV cache")
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    kinds = tuple(types) if types else ((SLIDING if window else FULL),) * layers
    other = sorted(set(kinds) - {FULL, SLIDING})
    if other:
        raise ValueError(
            f"{name}: layer types {other} are not served by the row cache "
            f"(only {FULL} and {SLIDING}); {CANNOT}"
        )
    if len(kinds) != layers:
        raise ValueError(f"{name}: {len(kinds)} layer_types for {layers} layers")
    if SLIDING in kinds and not (isinstance(window, int) and window >= 1):
        raise ValueError(f"{name}: sliding-window layers need sliding_window >= 1; got {window!r}")
    key_mask = name == "bloom" or getattr(config, "alibi", False) is True
    if key_mask and SLIDING in kinds:
        raise ValueError(f"{name}: ALiBi with sliding-window layers is not served; {CANNOT}")
    return AttentionLayout(
        kinds=kinds, window=window if SLIDING in kinds else None, key_mask=key_mask
    )


def cache_argument(model: PreTrainedModel) -> str:
    """The name under which ``model.forward`` takes a KV cache (``cache`` or ``past_key_values``).

    ValueError when it takes neither, or takes a state of its own kind (xLSTM's recurrent
    state) instead of a transformers ``Cache``.
    """
    params = inspect.signature(model.forward).parameters
    try:  # annotations written as strings (postponed evaluation) resolved
        hints = typing.get_type_hints(model.forward)
    except Exception:
        hints = {}
    for name in ("cache", "past_key_values"):
        if name in params:
            annotation = hints.get(name, params[name].annotation)
            members = getattr(annotation, "__args__", None) or (annotation,)  # X | None
            kinds = [k for k in members if isinstance(k, type) and k.__name__.endswith("Cache")]
            if kinds and not any(issubclass(kind, Cache) for kind in kinds):
                raise ValueError(
                    f"{type(model).__name__}.forward takes its own state ({kinds[0].__name__}) "
                    f"as `{name}`, not a KV cache; {CANNOT}"
                )
            return name
    raise ValueError(
        f"{type(model).__name__}.forward takes neither `cache` nor `past_key_values`; "
        "cannot run it with a KV cache"
    )


def serving_layout(model: PreTrainedModel) -> AttentionLayout:
    """What the row cache needs to know about ``model``, read from its config and its
    ``forward`` signature (no forward runs); ValueError, one line saying why, for a model
    it would serve wrong or cannot run.

    Beyond ``attention_layout`` and ``cache_argument``: the row cache gives each row the
    positions of its own tokens as ``position_ids`` (a rebuilt window starts at 0, and
    padding and compacted-away columns do not count), so a model whose ``forward`` takes
    none (it would count cache columns) is refused, unless its positions come from the
    2D key mask (``AttentionLayout.key_mask``). So is a model with sliding-window layers
    whose code builds no sliding-window mask (Moshi: its forward attends to every key).
    """
    layout = attention_layout(model.config)
    cache_argument(model)
    name = getattr(model.config, "model_type", type(model).__name__)
    code = sys.modules.get(type(model).__module__)
    if SLIDING in layout.kinds and not hasattr(code, "create_sliding_window_causal_mask"):
        raise ValueError(
            f"{name}: the config sets sliding_window but the model's code builds no "
            f"sliding-window mask, so which keys it sees is unknown here; {CANNOT}"
        )
    if not layout.key_mask and "position_ids" not in inspect.signature(model.forward).parameters:
        raise ValueError(
            f"{name}: {type(model).__name__}.forward takes no position_ids, so its positions "
            f"would count the cache's columns (padding and compacted-away tokens too) instead "
            f"of the row's own tokens; {CANNOT}"
        )
    return layout


PROBE_TOLERANCE = 1e-5
"""Largest change in an earlier position's log-probs that `check_servable` lets a later
token make (a causal model makes none: the two forwards compute the same numbers)."""


def check_servable(model: PreTrainedModel) -> AttentionLayout:
    """`serving_layout`, then one probe on the model's device: two forwards over four token
    ids that differ only in the last one must give the same log-probs at the first three
    positions. A model whose earlier positions see later tokens (a BERT-style encoder
    with ``is_decoder`` false) is refused, and so is one that cannot run on token ids
    alone; each with a one-line ValueError.
    """
    layout = serving_layout(model)
    name = getattr(model.config, "model_type", type(model).__name__)
    embeddings = model.get_input_embeddings()
    vocab = getattr(embeddings, "num_embeddings", None) or model.config.vocab_size
    # Tokens from the middle of the vocabulary: special (e.g. image) tokens sit at its ends.
    first = vocab // 2
    device = next(model.parameters()).device
    ids = torch.tensor([[first, first + 1, first + 2, first + 3]], device=device)
    changed = ids.clone()
    changed[0, -1] = first + 4
    training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            logps = [
                F.log_softmax(model(input_ids=x, use_cache=False).logits[0, :-1].float(), -1)
                for x in (ids, changed)
            ]
    except Exception as error:
        said = (str(error).strip().splitlines() or [""])[0]
        raise ValueError(
            f"{name}: a forward over token ids alone fails ({type(error).__name__}: {said}); "
            f"{CANNOT}"
        ) from error
    finally:
        model.train(training)
    moved = float((logps[0] - logps[1]).abs().max())
    if moved > PROBE_TOLERANCE:
        raise ValueError(
            f"{name}: earlier positions see later tokens (log-probs moved by {moved:.1e}): the "
            f"model attends both ways, like an encoder with is_decoder false; only causal LMs "
            f"can be sampled here"
        )
    return layout


def takes_logits_to_keep(model: PreTrainedModel) -> bool:
    """Whether ``model.forward`` can compute the LM head at the last positions only."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters

"""Every causal-LM architecture transformers builds from a config (tiny, nothing downloaded)
is either served right by the row cache (cached log-probs over several turns, with rows that
restart, leave and join, equal a clean forward over each row's window) or refused at load
in one line saying why; never served wrong. The sweep itself is in tests/local_hf_models.py
(`python tests/local_hf_models.py` prints the table that docs/training.md shows)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from local_hf_models import (
    SWEEP_CONTRAST,
    SWEEP_TOLERANCE,
    SweepResult,
    cached_against_clean,
    sweep_architecture,
    sweep_entries,
    tiny_config,
)

import cxsim.generation as generation
from cxsim.generation import RowCache
from cxsim.servable import FULL, AttentionLayout, check_servable

FAST = {
    "llama": "served",  # rotary positions
    "gpt2": "served",  # learned absolute positions
    "mistral": "served",  # every layer sliding
    "gemma3_text": "served",  # sliding and full layers mixed
    "bloom": "served",  # ALiBi from the 2D key mask
    "falcon (alibi)": "served",  # the same, behind a config switch
    "gemma3n_text": "served",  # layers sharing another layer's keys and values
    "deepseek_v3": "served",  # keys and values of different head sizes (latent attention)
    "mpt": "refused",  # ALiBi from the cache's columns
    "gpt_neo": "refused",  # a local window counted in the cache's columns
    "bert": "refused",  # attends both ways
    "blenderbot-small": "refused",  # no position_ids
    "moshi": "refused",  # a sliding window its own code never applies
    "mamba": "refused",  # recurrent layers
    "xlstm": "refused",  # a state of its own in place of the cache
    "llama4_text": "refused",  # chunked attention
    "gemma3": "refused",  # a multimodal wrapper
}
"""One architecture per rule and per fix, with the verdict each must get."""

REASONS = {
    "mpt": "ALiBi",
    "gpt_neo": "local-attention",
    "bert": "attends both ways",
    "blenderbot-small": "position_ids",
    "moshi": "sliding_window",
    "mamba": "linear_attention",
    "xlstm": "xLSTMCache",
    "llama4_text": "chunked attention",
    "gemma3": "multimodal",
}


def check_result(result: SweepResult) -> None:
    """Served right with a context-sensitive model, or refused/skipped in one line."""
    assert result.verdict in ("served", "refused", "skipped"), result
    assert result.reason and "\n" not in result.reason, result
    if result.verdict == "served":
        assert result.error is not None and result.error <= SWEEP_TOLERANCE, result
        # The model's log-probs move when a token of its window goes: a wrong position
        # or a leaked column would show.
        assert result.contrast is not None and result.contrast >= SWEEP_CONTRAST, result


@pytest.mark.parametrize("name", sorted(FAST))
def test_architecture_is_served_right_or_refused_in_one_line(name):
    result = sweep_architecture(name)
    check_result(result)
    assert result.verdict == FAST[name], result
    if name in REASONS:
        assert REASONS[name] in result.reason, result


def test_the_fast_subset_exercises_the_cases_it_stands_for():
    """Shared KV layers, a value head size unlike the key's, a re-packed cache."""
    shared = tiny_model("gemma3n_text")
    assert shared.config.num_kv_shared_layers == 2
    cache = RowCache(shared, pad_id=0, device=torch.device("cpu"))
    with torch.inference_mode():
        cache.arrange([0, 1], [True, True])
        cache.append([[5, 6, 7], [8, 9]])
        cache.arrange([1], [False])  # a row leaves: the filled layers are re-indexed
    assert len(cache.filled_layers()) == 2 < len(cache.cache.layers)
    latent = tiny_config("deepseek_v3")
    assert latent.v_head_dim != latent.qk_nope_head_dim + latent.qk_rope_head_dim
    assert cached_against_clean(tiny_model("llama"))[2]  # the plan re-packs at least once


def served_anyway(monkeypatch, model, layout: AttentionLayout) -> float:
    """The cached-vs-clean error of ``model`` with its refusal bypassed (``layout`` forced)."""
    monkeypatch.setattr(generation, "serving_layout", lambda _: layout)
    return cached_against_clean(model)[0]


def tiny_model(model_type: str, **changes):
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(tiny_config(model_type, **changes)).eval()


def test_refused_architectures_would_be_served_wrong(monkeypatch):
    """The refusals are needed: with them bypassed, MPT's log-probs are off after a row
    restarts and GPT-Neo's once a window outgrows its local window."""
    full = AttentionLayout((FULL,) * 4, None)
    assert served_anyway(monkeypatch, tiny_model("mpt"), full) > 100 * SWEEP_TOLERANCE
    assert served_anyway(monkeypatch, tiny_model("gpt_neo"), full) > 100 * SWEEP_TOLERANCE


def test_bloom_needs_the_key_mask(monkeypatch):
    """Bloom builds its ALiBi biases from a 2D mask: given the 4D masks it cannot run."""
    with pytest.raises(ValueError, match="too many values to unpack"):
        served_anyway(monkeypatch, tiny_model("bloom"), AttentionLayout((FULL,) * 4, None))


def test_check_servable_refuses_encoders_and_restores_the_training_flag():
    encoder = tiny_model("bert").train()
    with pytest.raises(ValueError, match="attends both ways"):
        check_servable(encoder)
    assert encoder.training  # the probe ran in eval mode and gave the mode back
    decoder = tiny_model("llama").train()
    check_servable(decoder)
    assert decoder.training


@pytest.mark.slow
def test_full_sweep_never_serves_an_architecture_wrong():
    """Every causal-LM model type of the installed transformers, plus the variants; the
    table in docs/training.md names the same verdicts."""
    results = [sweep_architecture(name) for name in sweep_entries()]
    for result in results:
        check_result(result)
    verdicts = {r.name: r.verdict for r in results}
    assert sum(v == "served" for v in verdicts.values()) >= len(FAST)
    table = Path(__file__).parents[1] / "docs" / "training.md"
    documented = dict(re.findall(r"^\| `([^`]+)` \| [^|]+ \| (\w+) \|", table.read_text(), re.M))
    assert documented == verdicts, "rerun `python tests/local_hf_models.py` for the docs table"

"""Pass@1 intervals and protocol evaluation with scripted agents."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from cxsim.agents import WordChatFormat, default_tokenizer
from cxsim.agents.scripted import ScriptedAgent
from cxsim.config import DEFAULT_COMPACTION, DEFAULT_ENV, DEFAULT_ENV_KWARGS
from cxsim.envs.defaults import PUBLISHED_SIZES
from cxsim.evaluation import (
    evaluate_protocol,
    format_table,
    pass_at_1,
    protocol_config,
    t_interval,
    wilson_interval,
)

SIZED = replace(DEFAULT_COMPACTION, **PUBLISHED_SIZES[DEFAULT_ENV])
"""The default task's sizes in the word-level format (what the entry points derive)."""


def test_wilson_interval_known_values():
    # 8 of 10: the textbook Wilson interval is [0.490, 0.943]
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(20, 20)[1] == 1.0
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(1 - high)  # symmetric at p = 1/2
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)


@pytest.mark.slow
def test_wilson_interval_covers_at_the_nominal_rate():
    rng = np.random.default_rng(0)
    p, n, trials = 0.3, 40, 4000
    hits = 0
    for k in rng.binomial(n, p, size=trials):
        low, high = wilson_interval(float(k), n)
        hits += low <= p <= high
    assert 0.93 <= hits / trials <= 0.97


def test_pass_at_1_counts_tasks_not_runs():
    success = np.array([[1, 1, 0, 0]] * 10 + [[0, 0, 0, 0]] * 10)  # 20 tasks x 4 repeats
    stats = pass_at_1(success)
    assert stats.mean == 0.25 and stats.tasks == 20 and stats.runs == 80
    assert (stats.low, stats.high) == wilson_interval(5.0, 20)


def test_t_interval():
    low, high = t_interval([0.5, 0.6, 0.7])
    assert low == pytest.approx(0.6 - 4.303 * 0.1 / math.sqrt(3), abs=1e-3)
    assert high == pytest.approx(0.6 + 4.303 * 0.1 / math.sqrt(3), abs=1e-3)
    assert all(math.isnan(x) for x in t_interval([0.5]))


def test_protocol_config_single_keeps_the_budget():
    single = protocol_config(SIZED, "single")
    assert single.protocol == "single" and single.budget == SIZED.budget
    with pytest.raises(ValueError, match="protocol"):
        protocol_config(SIZED, "both")


def test_scripted_oracle_under_both_protocols():
    """The default task needs 3 windows: Single always fails; the oracle's Compacted Pass@1
    follows its summarizer (chance 1/4 once the key is dropped)."""
    chat = WordChatFormat(default_tokenizer())
    env = (DEFAULT_ENV, DEFAULT_ENV_KWARGS)
    rows = []
    for omission in (0.0, 0.5):
        agent = ScriptedAgent(DEFAULT_ENV, chat, omission_rate=omission, seed=0)
        for protocol in ("single", "compacted"):
            result, records = evaluate_protocol(
                *env, agent, chat, SIZED, protocol, episodes=40, repeats=2
            )
            rows.append((f"oracle {omission}", result))
            assert result["runs"] == 80 and len(records) == 80
            assert result["ci95_low"] <= result["pass_at_1"] <= result["ci95_high"]
            survival = result["survival"]
            if protocol == "single":
                assert result["pass_at_1"] == 0.0 and result["mean_compactions"] == 0
                assert survival == {}  # no summary, nothing to survive
            elif omission == 0.0:
                assert result["pass_at_1"] == 1.0 and result["summary_recall"] == 1.0
                assert result["mean_compactions"] >= 1.9
                assert survival["share"][:2] == [1.0, 1.0] and survival["cliff_round"] is None
                assert set(survival["by_type"]) == {"key"} and survival["facts"][0] == 80
            else:
                assert 0.25 < result["pass_at_1"] < 0.7
                assert 0.2 < result["summary_recall"] < 0.6
                assert survival["cliff_round"] is not None  # half lost at each summary
    table = format_table(rows).splitlines()
    for label, result in rows:  # one row per result, its figures as measured
        (line,) = [x for x in table if x.startswith(f"| {label} | {result['protocol']} |")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2] == f"{result['pass_at_1']:.3f}" and cells[-1] == "80"
        assert cells[3] == f"[{result['ci95_low']:.3f}, {result['ci95_high']:.3f}]"


def test_external_summarizer_protocol_follows_the_summarizer():
    """A fixed oracle executor with swapped summarizers (Table 1): a summarizer that keeps
    every fact gives Pass@1 1 and recall 1; one that drops every fact gives recall 0 and
    Pass@1 near chance (1/4 values)."""
    chat = WordChatFormat(default_tokenizer())
    executor = ScriptedAgent(DEFAULT_ENV, chat, omission_rate=0.0, seed=0)
    results = {}
    for omission in (0.0, 1.0):
        summarizer = ScriptedAgent(DEFAULT_ENV, chat, omission_rate=omission, seed=1)
        results[omission], records = evaluate_protocol(
            DEFAULT_ENV, DEFAULT_ENV_KWARGS, executor, chat, SIZED,
            "external-summarizer", episodes=48, summarizer_agent=summarizer,
        )  # fmt: skip
        assert results[omission]["protocol"] == "external-summarizer" and len(records) == 48
        assert results[omission]["mean_compactions"] >= 1.9
    assert results[0.0]["pass_at_1"] == 1.0 and results[0.0]["summary_recall"] == 1.0
    assert results[1.0]["summary_recall"] == 0.0 and results[1.0]["pass_at_1"] < 0.5
    with pytest.raises(ValueError, match="summarizer_agent"):
        evaluate_protocol(DEFAULT_ENV, DEFAULT_ENV_KWARGS, executor, chat, SIZED,
                          "external-summarizer", episodes=2)  # fmt: skip

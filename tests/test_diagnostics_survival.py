"""Fact survival by compaction round: hand-made summaries with known survival per round, per
fact type and cliff; records without types; no compaction; and a real scripted rollout whose
survival is counted from what the runtime recorded."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from cxsim.agents.chat import WordChatFormat
from cxsim.agents.scripted import ScriptedAgent
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.diagnostics import summarize_all, summary_omission
from cxsim.diagnostics.survival import (
    UNTYPED,
    fact_survival,
    survival_stats,
    survival_summary,
)
from cxsim.runtime import CompactionConfig, collect_rollouts


def _typed_records() -> list[dict]:
    """Two rollouts: ``a`` (a key) and ``b`` (revised before the second summary).

    round 1: a kept, b kept | a kept  -> 3 of 3 alive (key 3/3: b is not revised yet)
    round 2: a lost, b kept | a kept  -> 2 of 3 (key 1/2, revised 1/1)
    round 3: a lost, b lost           -> 0 of 2 (key 0/1, revised 0/1): the cliff
    """
    first = {
        "success": False,
        "summary_recall": [
            {"a": True, "b": True},
            {"a": False, "b": True},
            {"a": False, "b": False},
        ],
        "summary_fact_types": [
            {"a": "key", "b": "key"},
            {"a": "key", "b": "revised"},
            {"a": "key", "b": "revised"},
        ],
    }
    second = {
        "success": True,
        "summary_recall": [{"a": True}, {"a": True}],
        "summary_fact_types": [{"a": "key"}, {"a": "key"}],
    }
    return [first, second]


def _as_run(records: list[dict]) -> list[dict]:
    """Records with every key ``summarize_all`` reads (the survival keys as given)."""
    rest = {"success": False, "turns": 4, "summaries": [], "summary_stated": []}
    rest |= {"tokens_generated": 9, "tokens_prefilled": 20, "tokens_summarised": 2}
    return [rest | {"compactions": len(r["summary_recall"])} | r for r in records]


def test_survival_per_round_per_type_and_the_cliff_on_hand_made_summaries():
    survival = fact_survival(_typed_records())
    assert survival.overall.counted == [3, 3, 2]
    assert survival.overall.alive == [3, 2, 0]
    assert survival.overall.shares() == [1.0, 2 / 3, 0.0]
    assert survival.overall.cliff_round() == 3
    key, revised = survival.by_type["key"], survival.by_type["revised"]
    assert (key.counted, key.alive) == ([3, 2, 1], [3, 1, 0])
    assert key.shares() == [1.0, 0.5, 0.0]
    assert key.cliff_round() == 3  # one half is not below one half
    assert (revised.counted, revised.alive) == ([0, 1, 1], [0, 1, 0])
    assert revised.shares() == [None, 1.0, 0.0]  # no revised fact at round 1
    assert revised.cliff_round() == 3

    stats = survival_stats(_typed_records())
    assert stats == {
        "survival/round1": 1.0,
        "survival/round2": 2 / 3,
        "survival/round3": 0.0,
        "survival/cliff_round": 3.0,
        "survival/facts_round1": 3.0,
        "survival/facts_round2": 3.0,
        "survival/facts_round3": 2.0,
        "survival/key/round1": 1.0,
        "survival/key/round2": 0.5,
        "survival/key/round3": 0.0,
        "survival/key/cliff_round": 3.0,
        "survival/revised/round2": 1.0,  # round 1 counted none: left out
        "survival/revised/round3": 0.0,
        "survival/revised/cliff_round": 3.0,
    }
    summary = survival_summary(_typed_records())
    assert summary["share"] == [1.0, 2 / 3, 0.0] and summary["facts"] == [3, 3, 2]
    assert summary["cliff_round"] == 3
    assert summary["by_type"]["revised"] == {
        "share": [None, 1.0, 0.0],
        "facts": [0, 1, 1],
        "cliff_round": 3,
    }


def test_a_round_is_scored_on_its_own_and_a_survival_above_half_has_no_cliff():
    # lost at round 2, written again at round 3: alive there (what summary 3 carries)
    records = [{"summary_recall": [{"a": True}, {"a": False}, {"a": True}]}] * 2
    records += [{"summary_recall": [{"a": True}, {"a": True}, {"a": True}]}] * 2
    survival = fact_survival(records).overall
    assert survival.shares() == [1.0, 0.5, 1.0]
    assert survival.cliff_round() is None
    assert "survival/cliff_round" not in survival_stats(records)
    assert survival_summary(records)["cliff_round"] is None


def test_survival_is_one_minus_omission_at_each_compaction():
    stats = summarize_all(records=_as_run(_typed_records()))
    omission = summary_omission(_typed_records())
    for k in (1, 2, 3):
        assert stats[f"survival/round{k}"] == pytest.approx(
            1 - omission[f"omission/compaction{k - 1}"]
        )


def test_an_environment_without_types_gives_every_fact_the_type_fact():
    records = [
        {"summary_recall": [{"a": True, "b": False}, {"a": False}]},  # a dict without the key
        SimpleNamespace(summary_recall=[{"a": True}], summary_fact_types=[]),  # a hook-less env
    ]
    survival = fact_survival(records)
    assert set(survival.by_type) == {UNTYPED}
    assert survival.by_type[UNTYPED].shares() == survival.overall.shares() == [2 / 3, 0.0]
    stats = survival_stats(records)
    assert stats["survival/fact/round1"] == stats["survival/round1"] == 2 / 3
    assert stats["survival/cliff_round"] == 2.0
    # a fact the types dict does not name is untyped too
    partial = [{"summary_recall": [{"a": True, "b": True}], "summary_fact_types": [{"a": "key"}]}]
    assert set(fact_survival(partial).by_type) == {"key", UNTYPED}


def test_without_compaction_there_is_nothing_to_survive():
    uncompacted = [{"summary_recall": [], "summary_fact_types": []}] * 3
    assert fact_survival(uncompacted).overall.counted == []
    assert survival_stats(uncompacted) == {}
    assert survival_summary(uncompacted) == {}
    # summaries written before any needed fact was shown count nothing either
    assert survival_stats([{"summary_recall": [{}, {}]}]) == {}
    assert not any(
        key.startswith("survival/") for key in summarize_all(records=_as_run(uncompacted))
    )


# -- a real rollout --------------------------------------------------------------------------

ENV = "cxsim/KeyRecall-v0"
REVISION = "news : the key is now"


def test_a_scripted_rollout_is_counted_from_what_the_runtime_recorded():
    """KeyRecall with one revision over a long corridor: the scripted agent at omission 0.3
    writes 3+ summaries; each fact counts under the type it had when its summary was written
    (``revised`` once the transcript shows the revision before that summary)."""
    chat = WordChatFormat(default_tokenizer())
    agent = ScriptedAgent(ENV, chat, omission_rate=0.3, seed=0)
    kwargs = {"memory_length": 20, "num_revisions": 1}
    batch = collect_rollouts(
        ENV, kwargs, agent, CompactionConfig(max_compactions=8), list(range(12)), chat
    )
    records = batch.records
    assert min(r.compactions for r in records) >= 3
    alive: dict[tuple[int, str], list[bool]] = {}
    for rec in records:
        assert len(rec.summary_fact_types) == len(rec.summary_recall) == len(rec.summaries)
        for k, (recall, types) in enumerate(
            zip(rec.summary_recall, rec.summary_fact_types, strict=True)
        ):
            assert set(recall) == set(types) == {"key"}
            before = rec.transcript.split(f"[summary {k + 1}]")[0]
            assert types["key"] == ("revised" if REVISION in before else "key")
            kept = re.search(r"the key is (k\d+)", rec.summaries[k])
            assert recall["key"] == (kept is not None and kept[1] in _current_key(before))
            alive.setdefault((k, types["key"]), []).append(recall["key"])
            alive.setdefault((k, "all"), []).append(recall["key"])
    stats = survival_stats(records)
    assert stats == {
        key: v for key, v in summarize_all(records=records).items() if key.startswith("survival/")
    }
    for (k, fact_type), flags in alive.items():
        prefix = "survival/" if fact_type == "all" else f"survival/{fact_type}/"
        assert stats[f"{prefix}round{k + 1}"] == pytest.approx(sum(flags) / len(flags))
    assert {"survival/key/round1", "survival/revised/round3"} <= set(stats)
    assert 0.0 < stats["survival/round1"] < 1.0  # omission 0.3 drops some

    perfect = ScriptedAgent(ENV, chat, omission_rate=0.0, seed=0)
    clean = collect_rollouts(
        ENV, kwargs, perfect, CompactionConfig(max_compactions=8), [0, 1, 2], chat
    )
    summary = survival_summary(clean.records)
    assert all(share == 1.0 for share in summary["share"]) and summary["cliff_round"] is None


def _current_key(text: str) -> set[str]:
    """The key's value at the end of ``text`` (a transcript prefix): the last revision, else
    the task's key."""
    revised = re.findall(r"news : the key is now (k\d+)", text)
    return {revised[-1]} if revised else set(re.findall(r"the key is (k\d+)", text)[:1])

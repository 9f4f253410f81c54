"""FactTrail's dials against the strategies: at each dial setting the scripted oracle solves
every task at the derived budget under each strategy that can serve it, and the pre-flight
refuses the others in one line (the codes arrive in observations that a sliding window or
observation masking drops)."""

from __future__ import annotations

import pytest

from tests.fact_trail_runs import EVERY_DIAL, dials, oracle_at_derived_budget

SETTINGS = {
    "early": dials(fact_position=0.0),
    "middle": dials(fact_position=0.6),
    "late": dials(fact_position=1.0),
    "distractors": dials(num_distractors=4),
    "revisions": dials(num_revisions=2),
    "k3": dials(num_facts=3),
    "hops": dials(num_hops=1),
    "subtasks": dials(num_subtasks=2),
    "every dial": EVERY_DIAL,
    "default": {},  # the calibrated default preset: one code, a distractor, a revision
}
SERVING = (
    "compacted",
    "external-summarizer",
    "memory-state",
    "self-compaction",
    "self-compaction-drawn",
    "folding",
    "memory-notes",
)
REFUSING = ("sliding-window", "observation-masking")
TASKS = 8


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_oracle_solves_each_setting_under_every_strategy_that_can(setting: str) -> None:
    for protocol in SERVING:
        config, records = oracle_at_derived_budget(SETTINGS[setting], protocol, TASKS)
        assert all(r.success for r in records), (protocol, [r.end_reason for r in records])
        assert all(r.peak_context <= config.budget for r in records)
        assert sum(r.compactions + r.branches > 0 for r in records) >= TASKS // 2, protocol
    for protocol in REFUSING:
        with pytest.raises(ValueError, match=rf"^pre-flight failed: {protocol} cannot serve") as e:
            oracle_at_derived_budget(SETTINGS[setting], protocol, TASKS)
        assert "\n" not in str(e.value)

"""FactTrail's ``fact_position``: where the needed codes arrive relative to the compaction
points of the scripted oracle at the derived budget (``compacted``)."""

from __future__ import annotations

import pytest

from cxsim.envs.fact_trail import POSITIONS, FactTrail
from tests.fact_trail_runs import (
    compaction_steps,
    dials,
    oracle_at_derived_budget,
    oracle_episode,
)


def windows_of_arrivals(kwargs: dict, tasks: int = 16) -> list[tuple[list[int], int]]:
    """Per task: the window each needed code arrived in (1: before the first compaction), and
    the window the first question is asked in."""
    _, records = oracle_at_derived_budget(kwargs, tasks=tasks)
    assert all(r.success for r in records)
    out = []
    for seed, record in enumerate(records):
        info = oracle_episode(kwargs, seed).infos[-1]
        question = min(info["fact_needed_step"].values())
        cuts = [c for c in compaction_steps(record.transcript) if c < question]
        arrived = [info["fact_shown_step"][n] for n in info["needed_facts"]]
        out.append(([1 + sum(c < a for c in cuts) for a in arrived], len(cuts) + 1))
    return out


def test_the_codes_arrive_in_observations_not_in_the_task() -> None:
    episode = oracle_episode(dials(), seed=3)
    info = episode.reset_info
    for name in info["needed_facts"]:
        assert info["key_facts"][name] not in episode.task.split()
        assert info["fact_shown_step"][name] == -1
    shown = episode.infos[-1]["fact_shown_step"]
    assert all(shown[n] >= 1 for n in info["needed_facts"])


@pytest.mark.parametrize("position", [0.0, 0.6, 1.0])
def test_the_block_start_is_a_share_of_the_corridor(position: float) -> None:
    env = FactTrail(**dials(fact_position=position))
    latest = env.memory_length - 1 - 2 + 1  # corridor steps 1 .. 15, a block of 2
    assert env.block_start() == 1 + round(position * (latest - 1))
    shown = oracle_episode(dials(fact_position=position), seed=0).infos[-1]["fact_shown_step"]
    assert sorted(shown.values()) == [env.block_start(), env.block_start() + 1]


def test_named_positions_and_bad_ones() -> None:
    assert FactTrail(fact_position="late").fact_position == POSITIONS["late"] == 1.0
    with pytest.raises(ValueError, match="fact_position"):
        FactTrail(fact_position=1.5)


def test_early_codes_arrive_before_the_first_compaction() -> None:
    assert all(
        windows == [1, 1] and last > 1
        for windows, last in windows_of_arrivals(dials(fact_position=0.0))
    )


def test_middle_codes_arrive_between_two_compactions() -> None:
    """At the default dials' derived budget, 0.6 puts both codes after the first compaction
    and before the last one ahead of the questions, on every task (measured: 32 of 32)."""
    assert all(
        all(1 < w < last for w in windows)
        for windows, last in windows_of_arrivals(dials(fact_position=0.6))
    )


def test_late_codes_arrive_in_the_window_of_the_questions() -> None:
    """Measured 27 of 32 tasks; on the others the last compaction before the questions cut
    between the codes and the first question."""
    rows = windows_of_arrivals(dials(fact_position=1.0))
    assert all(min(windows) > 1 for windows, _ in rows)
    assert sum(all(w == last for w in windows) for windows, last in rows) >= 12


def test_where_the_codes_arrive_decides_what_a_sliding_window_serves() -> None:
    """One code: the sliding window (the last 2 steps, no summary) keeps it when it arrives
    just before the question, and the pre-flight refuses it in one line when it arrives early."""
    _, records = oracle_at_derived_budget(dials(num_facts=1, fact_position=1.0), "sliding-window")
    assert all(r.success for r in records) and any(r.compactions for r in records)
    with pytest.raises(ValueError, match=r"^pre-flight failed: sliding-window cannot serve") as e:
        oracle_at_derived_budget(dials(num_facts=1, fact_position=0.0), "sliding-window")
    assert "\n" not in str(e.value)

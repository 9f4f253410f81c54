"""FactTrail's ``num_subtasks``: a gate's word is needed only inside its sub-task, and
``folding``'s oracle folds each sub-task into a child window."""

from __future__ import annotations

import gymnasium as gym

from tests.fact_trail_runs import dials, oracle_at_derived_budget, oracle_episode

KWARGS = dials(num_subtasks=2)


def test_a_gate_word_is_needed_only_until_its_gate() -> None:
    for seed in range(10):
        episode = oracle_episode(KWARGS, seed)
        infos = [episode.reset_info, *episode.infos]
        for gate in ("gate 1", "gate 2"):
            word = infos[-1]["key_facts"][gate]
            passed = episode.actions.index(f"pass {word}") + 1  # the step of the pass
            assert all(gate in info["needed_facts"] for info in infos[:passed])
            assert all(gate not in info["needed_facts"] for info in infos[passed:])
            assert infos[passed - 1]["fact_needed_step"][gate] == passed
            opened = infos[passed - 1]["state"]["subtask_step"]
            assert infos[opened]["state"]["subtask"] == "gate"
            assert infos[passed]["state"]["subtask"] is None
        assert episode.success


def test_a_wrong_word_at_a_gate_fails_the_task() -> None:
    env = gym.make("cxsim/FactTrail-v0", **KWARGS)
    episode = oracle_episode(KWARGS, seed=1)
    env.reset(seed=1)
    for action in episode.actions:
        if action.startswith("pass"):
            action = "pass k1" if action != "pass k1" else "pass k2"
        obs, _, _, _, end = env.step(action)
        if action.startswith("pass"):
            assert obs.startswith("the guard says wrong .")
    assert not end["success"]


def test_folding_keeps_each_gate_word_in_a_child_window() -> None:
    """At the derived budget the folding oracle branches once per sub-task, passes the gate
    in the child and returns; the root never holds a gate word, its summaries never keep one."""
    _, records = oracle_at_derived_budget(KWARGS, "folding")
    assert all(r.success and r.branches == 2 for r in records)
    for seed, record in enumerate(records):
        words = {
            oracle_episode(KWARGS, seed).infos[-1]["key_facts"][g] for g in ("gate 1", "gate 2")
        }
        depth, root = 0, []
        for line in record.transcript.splitlines():
            if line.startswith("== branch"):
                depth = 1
            elif line.startswith("== return"):
                depth = 0
            elif depth == 0 and not line.startswith("[summary"):
                root += line.split()
        assert not words & set(root)
        assert all(not words & set(s.split()) for s in record.summaries)


def test_compacted_serves_the_sub_tasks_too() -> None:
    _, records = oracle_at_derived_budget(KWARGS)
    assert all(r.success and r.branches == 0 for r in records)

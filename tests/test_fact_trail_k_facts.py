"""FactTrail's ``num_facts``: k codes needed together; one wrong answer fails the task."""

from __future__ import annotations

import gymnasium as gym
import pytest

from tests.fact_trail_runs import dials, oracle_at_derived_budget, oracle_episode


@pytest.mark.parametrize("k", [1, 3, 5])
def test_k_codes_are_asked_and_all_are_needed(k: int) -> None:
    kwargs = dials(num_facts=k, num_distractors=1)
    env = gym.make("cxsim/FactTrail-v0", **kwargs)
    for seed in range(5):
        episode = oracle_episode(kwargs, seed)
        info = episode.infos[-1]
        assert len(info["needed_facts"]) == k and episode.success
        assert sum(a.startswith("answer") for a in episode.actions) == k
        for name in info["needed_facts"]:
            assert f"the {name} code" in episode.task
        for wrong in range(k):  # any one answer wrong fails the task
            env.reset(seed=seed)
            answers = 0
            for action in episode.actions:
                if action.startswith("answer"):
                    other = "answer k1" if action != "answer k1" else "answer k2"
                    action = other if answers == wrong else action
                    answers += 1
                *_, end = env.step(action)
            assert not end["success"]


def test_the_oracle_holds_three_codes_at_the_derived_budget() -> None:
    _, records = oracle_at_derived_budget(dials(num_facts=3))
    assert all(r.success for r in records) and all(r.compactions for r in records)
    assert all(len(recall) == 3 for r in records for recall in r.summary_recall[-1:])

"""FactTrail's ``num_revisions``: a code arrived is changed later; only its latest value counts,
and the oracle answers it at the derived budget."""

from __future__ import annotations

import gymnasium as gym

from cxsim.envs.scripted import fact_types
from tests.fact_trail_runs import dials, oracle_at_derived_budget, oracle_episode

KWARGS = dials(num_revisions=2)


def test_the_latest_value_is_the_answer() -> None:
    env = gym.make("cxsim/FactTrail-v0", **KWARGS)
    for seed in range(10):
        episode = oracle_episode(KWARGS, seed)
        first, last = episode.reset_info, episode.infos[-1]
        revised = [n for n, steps in last["fact_revised_steps"].items() if steps]
        assert revised and sum(len(s) for s in last["fact_revised_steps"].values()) == 2
        for name in revised:
            assert last["key_facts"][name] != first["key_facts"][name]
            assert min(last["fact_revised_steps"][name]) > last["fact_shown_step"][name]
            assert f"answer {last['key_facts'][name]}" in episode.actions
            assert f"answer {first['key_facts'][name]}" not in episode.actions
        assert episode.success and fact_types(last)[revised[0]] == "revised"
        # the first value, answered, fails
        env.reset(seed=seed)
        info = episode.reset_info
        for action, step_info in zip(episode.actions, [info, *episode.infos], strict=False):
            state = step_info["state"]
            if state["phase"] == "query" and state["query_fact"] == revised[0]:
                action = f"answer {first['key_facts'][revised[0]]}"
            *_, end = env.step(action)
        assert not end["success"]


def test_the_oracle_answers_the_latest_value_at_the_derived_budget() -> None:
    _, records = oracle_at_derived_budget(KWARGS)
    assert all(r.success for r in records) and all(r.compactions for r in records)
    for seed, record in enumerate(records):
        info = oracle_episode(KWARGS, seed).infos[-1]
        for name in info["needed_facts"]:
            assert f"[assistant] answer {info['key_facts'][name]}" in record.transcript
    types = {t for r in records for typed in r.summary_fact_types for t in typed.values()}
    assert "revised" in types

"""FactTrail's ``num_hops``: a sign says which door a code is behind (the hop, type ``hop``);
the code is read only by opening that door at the row of doors before the questions."""

from __future__ import annotations

import gymnasium as gym

from tests.fact_trail_runs import dials, oracle_at_derived_budget, oracle_episode

KWARGS = dials(num_hops=1)


def test_the_pointer_says_where_the_code_is() -> None:
    for seed in range(10):
        episode = oracle_episode(KWARGS, seed)
        info = episode.infos[-1]
        (door,) = [n for n in info["key_facts"] if n.endswith(" door")]
        code = door.removesuffix(" door")
        pointer = f"the {code} code is behind door {info['key_facts'][door]} ."
        shown = info["fact_shown_step"]
        assert pointer in episode.observations[shown[door] - 1]
        assert f"open {info['key_facts'][door]}" == episode.actions[shown[code] - 1]
        assert (
            f"the code here is {info['key_facts'][code]} ." in episode.observations[shown[code] - 1]
        )
        assert shown[door] < shown[code] and episode.success
        before = episode.infos[shown[door] - 1]
        assert door in before["needed_facts"] and door not in info["needed_facts"]
        assert gym.make("cxsim/FactTrail-v0", **KWARGS).unwrapped.fact_types(before)[door] == "hop"


def test_the_wrong_door_hides_the_code() -> None:
    """Behind another door the code is never shown: an agent can only guess it (the grounded
    scripted agent does, ``ground_action``)."""
    env = gym.make("cxsim/FactTrail-v0", **KWARGS)
    episode = oracle_episode(KWARGS, seed=2)
    info = episode.infos[-1]
    (door,) = [n for n in info["key_facts"] if n.endswith(" door")]
    code = door.removesuffix(" door")
    wrong = next(v for v in env.unwrapped.values if v not in info["key_facts"].values())
    env.reset(seed=2)
    seen = []
    for action in episode.actions:
        action = f"open {wrong}" if action.startswith("open") else action
        obs, _, _, _, end = env.step(action)
        seen += obs.split()
        if action.startswith("open"):
            assert obs.startswith(f"you open door {wrong} . it is empty .")
    assert end["fact_shown_step"][code] == -1 and info["key_facts"][code] not in seen


def test_the_oracle_follows_the_hop_at_the_derived_budget() -> None:
    _, records = oracle_at_derived_budget(KWARGS)
    assert all(r.success for r in records) and all(r.compactions for r in records)
    assert any("hop" in types.values() for r in records for types in r.summary_fact_types)
    kept = [s for r in records for s in r.summaries if "behind door" in s]
    assert kept  # a summary written between the sign and the door carries the pointer

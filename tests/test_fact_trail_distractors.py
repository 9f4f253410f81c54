"""FactTrail's ``num_distractors``: codes of colours never asked, read like the needed ones,
are ground truth of type ``distractor`` but never needed facts."""

from __future__ import annotations

from cxsim.envs.scripted import summary_recall
from tests.fact_trail_runs import dials, oracle_at_derived_budget, oracle_episode

KWARGS = dials(num_distractors=4)


def test_distractors_read_like_codes_and_are_never_needed() -> None:
    for seed in range(10):
        episode = oracle_episode(KWARGS, seed)
        info = episode.infos[-1]
        distractors = set(info["key_facts"]) - set(info["needed_facts"])
        assert len(distractors) == 4 and episode.success
        text = " ".join(episode.observations)
        for name in distractors:
            assert f"the {name} code is {info['key_facts'][name]} ." in text
            assert name not in episode.task.split()
            assert info["fact_shown_step"][name] >= 1
        env = episode_env(KWARGS)
        types = env.fact_types(info)
        assert {types[n] for n in distractors} == {"distractor"}
        assert set(summary_recall("summary :", info)) == set(info["needed_facts"])


def episode_env(kwargs):
    import gymnasium as gym

    return gym.make("cxsim/FactTrail-v0", **kwargs).unwrapped


def test_the_oracle_keeps_no_distractor_and_solves_at_the_derived_budget() -> None:
    _, records = oracle_at_derived_budget(KWARGS)
    assert all(r.success for r in records) and all(r.compactions for r in records)
    for seed, record in enumerate(records):
        info = oracle_episode(KWARGS, seed).infos[-1]
        values = {info["key_facts"][n] for n in set(info["key_facts"]) - set(info["needed_facts"])}
        assert all(not values & set(s.split()) for s in record.summaries)
        assert all(set(recall) <= set(info["needed_facts"]) for recall in record.summary_recall)
        # typed for the survival measure, but never counted in a summary's recall
        for recall, types in zip(record.summary_recall, record.summary_fact_types, strict=True):
            distractors = {n for n, t in types.items() if t == "distractor"}
            assert not distractors & set(recall)
    typed = {t for r in records for types in r.summary_fact_types for t in types.values()}
    assert "distractor" in typed

"""FactUpdate knobs, measured from the ground truth in info."""

from __future__ import annotations

import pytest

from cxsim.envs import FactUpdate
from cxsim.envs.scripted import CorridorOracle, play


@pytest.mark.parametrize(
    ("facts", "questions", "revisions", "decoys"), [(2, 1, 0, 0), (4, 3, 5, 3)]
)
def test_counts_and_memory_length(facts: int, questions: int, revisions: int, decoys: int) -> None:
    env = FactUpdate(
        num_facts=facts,
        num_questions=questions,
        num_revisions=revisions,
        num_decoys=decoys,
        memory_length=9,
    )
    for seed in range(20):
        episode = play(env, CorridorOracle(), seed)
        info = episode.infos[-1]
        assert len(info["key_facts"]) == facts and len(info["needed_facts"]) == questions
        assert sum(len(v) for v in info["fact_revised_steps"].values()) == revisions
        text = " ".join(episode.observations)
        assert text.count("update :") == revisions and text.count(" says the ") == decoys
        first = info["needed_facts"][0]
        assert info["fact_needed_step"][first] - info["fact_shown_step"][first] == 9
        assert [info["fact_needed_step"][n] for n in info["needed_facts"]] == list(
            range(9, 9 + questions)
        )
        assert episode.success


def test_only_latest_values_count_and_decoys_are_never_asked() -> None:
    env = FactUpdate(num_facts=3, num_questions=3, num_revisions=4, num_decoys=3)
    for seed in range(20):
        episode = play(env, CorridorOracle(), seed)
        info = episode.infos[-1]
        asked = {
            w
            for o in episode.observations
            for w in o.split()
            if o.startswith(("question", "noted"))
        }
        decoy_names = {
            o.split()[o.split().index("says") + 2]
            for o in episode.observations
            if "says" in o.split()
        }
        assert not decoy_names & set(info["needed_facts"]) and not decoy_names & asked
        env.reset(seed=seed)
        for _ in range(12):
            env.step("next")
        # Answering with the initial values fails whenever an asked code was revised.
        initial = episode.reset_info["key_facts"]
        rewards = [env.step(f"answer {initial[n]}")[1] for n in info["needed_facts"]]
        revised = any(info["fact_revised_steps"][n] for n in info["needed_facts"])
        assert rewards[-1] == float(not revised)


def test_query_errors_shift_the_needed_step_and_keep_the_question() -> None:
    env = FactUpdate(num_facts=2, num_questions=2, num_revisions=0, num_decoys=0, memory_length=3)
    env.reset(seed=0)
    for _ in range(3):
        env.step("next")
    obs, *_, info = env.step("next")
    assert info["error"] == "answer the question" and "question" in obs.split()
    # The question is asked again at step 4, so it (and the next one) is needed a step later.
    assert list(info["fact_needed_step"].values()) == [4, 5]

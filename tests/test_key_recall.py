"""KeyRecall knobs do what they say, measured from the ground truth in info."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from cxsim.agents.chat import WordChatFormat
from cxsim.agents.scripted import ScriptedAgent
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig
from cxsim.envs import KeyRecall
from cxsim.envs.defaults import sample_episodes
from cxsim.envs.scripted import CorridorOracle, play
from cxsim.preflight import preflight
from cxsim.runtime import collect_rollouts


class Walker:
    """Walks on and never answers (nor opens the box)."""

    def act(self, observation: str, info: dict) -> str:
        return "next"


@pytest.mark.parametrize("variant", ["passive", "active"])
@pytest.mark.parametrize("memory_length", [1, 5, 17])
def test_memory_length_is_exact(variant: str, memory_length: int) -> None:
    env = KeyRecall(variant=variant, memory_length=memory_length)
    for seed in range(5):
        info = play(env, CorridorOracle(), seed).infos[-1]
        assert info["fact_needed_step"]["key"] - info["fact_shown_step"]["key"] == memory_length


@pytest.mark.parametrize("credit_length", [0, 1, 6])
def test_credit_length_separates_answer_and_reward(credit_length: int) -> None:
    env = KeyRecall(memory_length=4, credit_length=credit_length)
    episode = play(env, CorridorOracle(), seed=0)
    answer_step = next(i for i, a in enumerate(episode.actions) if a.startswith("answer"))
    reward_step = len(episode.actions) - 1
    assert reward_step - answer_step == credit_length
    assert episode.rewards[-1] == 1.0 and sum(episode.rewards[:-1]) == 0.0


@pytest.mark.parametrize(("mean", "std"), [(8.0, 0.0), (20.0, 5.0), (40.0, 12.0)])
def test_observation_lengths_follow_the_distribution(mean: float, std: float) -> None:
    env = KeyRecall(memory_length=30, obs_words_mean=mean, obs_words_std=std)
    lengths = []
    for seed in range(40):
        episode = play(env, CorridorOracle(), seed)
        lengths += [len(o.split()) for o in episode.observations[:-2]]  # corridor only
    assert abs(np.mean(lengths) - mean) < 0.05 * mean + 0.3
    assert abs(np.std(lengths) - std) < 0.1 * std + 0.3


def test_num_values_sets_chance() -> None:
    env = KeyRecall(memory_length=2, num_values=4)
    keys = [play(env, CorridorOracle(), s).infos[-1]["key_facts"]["key"] for s in range(400)]
    counts = {k: keys.count(k) for k in set(keys)}
    assert set(counts) == {"k1", "k2", "k3", "k4"}
    assert min(counts.values()) > 60


def test_active_variant_reveals_only_on_open_box() -> None:
    env = KeyRecall(variant="active", memory_length=6)
    task, info = env.reset(seed=2)
    key = info["key_facts"]["key"]
    assert key not in task.split() and info["admissible_actions"] == ["open box", "next"]
    episode = play(env, Walker(), seed=2)  # never opens: the key never appears
    assert all(key not in o.split() for o in episode.observations)
    assert episode.infos[-1]["fact_shown_step"]["key"] == -1
    obs, _, _, _, info = (env.reset(seed=2), env.step("open box"))[1]
    assert f"the key is {key}" in obs and info["fact_shown_step"]["key"] == 1
    obs, _, _, _, info = env.step("open box")
    assert info["error"] == "the box is behind you"


def test_revisions_change_the_answer() -> None:
    env = KeyRecall(memory_length=10, num_revisions=2)
    for seed in range(20):
        episode = play(env, CorridorOracle(), seed)
        info = episode.infos[-1]
        first = episode.reset_info["key_facts"]["key"]
        assert len(info["fact_revised_steps"]["key"]) == 2 and info["key_facts"]["key"] != first
        assert episode.success
        env.reset(seed=seed)
        for _ in range(10):
            env.step("next")
        assert env.step(f"answer {first}")[1] == 0.0  # the first value no longer counts


def test_decoys_are_distinct_look_alike_values() -> None:
    env = KeyRecall(memory_length=10, num_decoys=3)
    for seed in range(20):
        episode = play(env, CorridorOracle(), seed)
        text = " ".join(episode.observations)
        key = episode.infos[-1]["key_facts"]["key"]
        mentioned = {w for w in text.split() if w.startswith("k") and w[1:].isdigit()}
        assert len(mentioned) == 3 and key not in mentioned


def test_noise_corrupts_about_the_requested_fraction() -> None:
    env = KeyRecall(memory_length=30, noise=0.2)
    words = []
    for seed in range(20):
        words += " ".join(play(env, CorridorOracle(), seed).observations[:-2]).split()
    assert abs(words.count("#") / len(words) - 0.2) < 0.03


def test_truncated_at_horizon_without_answer() -> None:
    env = KeyRecall(memory_length=3, horizon=9)
    episode = play(env, Walker(), seed=0)
    assert episode.truncated and not episode.terminated and len(episode.actions) == 9
    assert episode.infos[-1]["error"] == "answer the question"
    assert not episode.infos[-1]["success"]


def test_error_penalty_and_errors_keep_the_clock() -> None:
    env = KeyRecall(memory_length=4, error_penalty=0.5)
    env.reset(seed=0)
    obs, reward, terminated, _truncated, info = env.step("answer k1")
    assert reward == -0.5 and info["error"] == "no question yet" and not terminated
    assert obs.startswith("error : no question yet .") and len(obs.split()) > 6
    assert env.step("")[4]["error"] == "empty action"
    assert env.step("hello world")[4]["error"] == "unknown word"
    obs, *_ = env.step("next")
    assert "question" in obs.split()  # the query arrives at step memory_length regardless


@pytest.mark.parametrize(
    "kwargs",
    [
        {"variant": "sideways"},
        {"memory_length": 0},
        {"num_values": 1},
        {"num_values": 2, "num_decoys": 2},
        {"obs_words_mean": 1.0},
        {"memory_length": 10, "horizon": 5},
    ],
)
def test_bad_arguments_say_what_to_change(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        KeyRecall(**kwargs)


# -- the horizon dial: each episode's memory length drawn from a range --------------------

DIAL_KWARGS = {
    "obs_words_mean": 8.0, "obs_words_std": 2.0, "num_values": 4,
    "memory_length_min": 1, "memory_length_max": 24,
}  # fmt: skip
"""The main job's task with memory lengths 1 .. 24 instead of 12."""


def measured_length(info: dict) -> int:
    return info["fact_needed_step"]["key"] - info["fact_shown_step"]["key"]


def test_the_dial_draws_each_episode_length_from_the_seeded_range() -> None:
    env = KeyRecall(memory_length_min=2, memory_length_max=6)
    lengths = [measured_length(play(env, CorridorOracle(), s).infos[-1]) for s in range(120)]
    assert set(lengths) == {2, 3, 4, 5, 6}  # every length of the range, none outside
    assert min(lengths.count(n) for n in range(2, 7)) > 10  # about uniform (24 each)
    again = KeyRecall(memory_length_min=2, memory_length_max=6)  # the seed decides the length
    assert [measured_length(again.reset(seed=s)[1]) for s in range(20)] == lengths[:20]
    episode = play(env, CorridorOracle(), seed=3)
    assert episode.rewards[-1] == 1.0 and len(episode.actions) == lengths[3] + 1
    assert env.horizon == 6 + 1 + 8  # sized for the longest: an errorless episode + 8


def test_the_dial_is_off_by_default_and_a_reset_option_fixes_one_length() -> None:
    plain = KeyRecall(memory_length=5)
    assert plain.longest_episode_options() is None
    assert {measured_length(plain.reset(seed=s)[1]) for s in range(30)} == {5}
    env = KeyRecall(memory_length_min=1, memory_length_max=9)
    assert env.longest_episode_options() == {"memory_length": 9}
    _, info = env.reset(seed=0, options={"memory_length": 9})
    assert measured_length(info) == 9
    with pytest.raises(ValueError, match=r"memory_length=12 must lie in \[1, 9\]"):
        env.reset(seed=0, options={"memory_length": 12})


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"memory_length_min": 3}, "give both memory_length_min and memory_length_max"),
        ({"memory_length_min": 5, "memory_length_max": 2}, "must satisfy 1 <= min <= max"),
        ({"memory_length_min": 0, "memory_length_max": 2}, "must satisfy 1 <= min <= max"),
        (
            {"memory_length_min": 1, "memory_length_max": 5, "num_decoys": 1},
            "raise memory_length_min",
        ),
        ({"memory_length_min": 1, "memory_length_max": 20, "horizon": 10}, "horizon=10"),
    ],
)
def test_bad_dial_settings_fail_in_one_line(kwargs: dict, says: str) -> None:
    with pytest.raises(ValueError) as info:
        KeyRecall(**kwargs)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_one_batch_mixes_one_window_and_many_window_rollouts() -> None:
    """256 oracle episodes under Compacted at the published window sizes, with room for 10
    windows: the dial spreads them from one window to six."""
    chat = WordChatFormat(default_tokenizer())
    window = CompactionConfig(
        budget=200, threshold=72, max_summary_tokens=32, max_response_tokens=8,
        max_compactions=9,
    )  # fmt: skip
    agent = ScriptedAgent("cxsim/KeyRecall-v0", chat, omission_rate=0.0, seed=0)
    records = collect_rollouts(
        "cxsim/KeyRecall-v0", DIAL_KWARGS, agent, window, list(range(256)), chat
    ).records
    windows = Counter(r.compactions + 1 for r in records)
    assert all(r.success for r in records)
    assert windows[1] >= 20, windows  # short episodes fit in one window
    assert sum(n for w, n in windows.items() if w >= 5) >= 30, windows
    assert max(windows) >= 6, windows


def test_the_window_sizing_holds_the_longest_episode() -> None:
    """The sizing texts include the longest memory length, so the derived budget fits it:
    every episode of that length (fixed by the range max..max) solves under the sizes."""
    texts = sample_episodes("cxsim/KeyRecall-v0", DIAL_KWARGS, 16)
    assert len(texts) == 17 and len(texts[-1].actions) == 24 + 1  # the longest, added
    chat = WordChatFormat(default_tokenizer())
    sized = preflight(EnvConfig(kwargs=DIAL_KWARGS), DEFAULT_COMPACTION, chat)
    assert sized.budget > 200  # 4 windows of the published 200 tokens cannot hold 24 steps
    longest = {**DIAL_KWARGS, "memory_length_min": 24}
    agent = ScriptedAgent("cxsim/KeyRecall-v0", chat, omission_rate=0.0, seed=0)
    runtime = replace(sized, protocol="compacted")
    records = collect_rollouts(
        "cxsim/KeyRecall-v0", longest, agent, runtime, list(range(1000, 1032)), chat
    ).records
    assert all(r.success for r in records), [r.end_reason for r in records]

"""``fit_sizes``: compaction sizes derived from episode text in a chat format's tokens."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest

from cxsim.agents import WordChatFormat, default_tokenizer
from cxsim.compaction import CompactionConfig, _episode_plan, _Measured, fit_sizes
from cxsim.envs.defaults import EpisodeText
from cxsim.strategies import STRATEGIES

UNSIZED = CompactionConfig(
    budget=None, threshold=None, max_response_tokens=None, max_summary_tokens=None
)
SYSTEM = "remember the key ."
CHAT = WordChatFormat(default_tokenizer())


def episode(steps: int, obs_words: int) -> EpisodeText:
    return EpisodeText(
        task="the key is k3 .",
        actions=["next"] * (steps - 1) + ["answer k3"],
        observations=[" ".join(["the"] * obs_words)] * steps,
        summaries=["summary : the key is k3 ."] * steps,
    )


def test_caps_and_threshold_follow_the_longest_pieces() -> None:
    sized = fit_sizes(UNSIZED, CHAT, SYSTEM, [episode(6, 5), episode(4, 9)])
    assert sized.max_response_tokens == 3  # "answer k3" + end
    assert sized.max_summary_tokens == 8  # 7 words + end
    q_sum = len(CHAT.summary_request(UNSIZED.summary_instruction))
    assert sized.threshold == q_sum + 8 + 1 + 3 + (1 + 9)  # reserve, header, response, obs turn
    sized.validate(CHAT, SYSTEM)


def test_budget_is_the_smallest_that_fits_every_episode() -> None:
    """One less token and some episode needs a fifth window (checked by the plan replay)."""
    episodes = [episode(12, 8), episode(16, 6)]
    sized = fit_sizes(UNSIZED, CHAT, SYSTEM, episodes)
    system = len(CHAT.system(SYSTEM))
    plans = [_episode_plan(sized, _Measured(CHAT), system, e) for e in episodes]
    assert all(p.fits(sized, sized.budget) for p in plans)
    assert not all(p.fits(sized, sized.budget - 1) for p in plans)
    longer = fit_sizes(UNSIZED, CHAT, SYSTEM, [episode(30, 8)])
    assert longer.budget > sized.budget
    single = fit_sizes(replace(UNSIZED, protocol="single"), CHAT, SYSTEM, episodes)
    assert single.budget > sized.budget  # one window must hold a whole episode


def test_given_sizes_and_floors() -> None:
    episodes = [episode(6, 5)]
    given = fit_sizes(replace(UNSIZED, threshold=90), CHAT, SYSTEM, episodes)
    assert given.threshold == 90
    floored = fit_sizes(UNSIZED, CHAT, SYSTEM, episodes, {"max_response_tokens": 8, "budget": 999})
    assert floored.max_response_tokens == 8 and floored.budget == 999
    with pytest.raises(ValueError, match="at least one episode"):
        fit_sizes(UNSIZED, CHAT, SYSTEM, [])


def test_unsized_config_refuses_to_run() -> None:
    with pytest.raises(ValueError, match="budget, threshold, max_response_tokens"):
        UNSIZED.validate(CHAT, SYSTEM)
    assert not UNSIZED.sized and CompactionConfig().sized
    with pytest.raises(ValueError, match="threshold"):
        CompactionConfig(budget=None, threshold=0)


# --------------------------------------------------------------- the sizing against the runtime

AGREEMENT_IDS = (
    "cxsim/KeyRecall-v0",
    "cxsim/FactUpdate-v0",
    "cxsim/FactTrail-v0",
    "cxsim/SimRepo-v0",
    "cxsim/KeyRecallActive-v0",
)


def env_actions(transcript: str) -> list[str]:
    """The actions a transcript sent to the environment: the assistant turns an observation
    answers (a note, a state or a summary gets none)."""
    lines = transcript.splitlines()
    return [
        line.removeprefix("[assistant] ")
        for line, after in pairwise(lines)
        if line.startswith("[assistant] ") and after.startswith("[observation] ")
    ]


@pytest.mark.slow  # 50 pairs, each 16 episodes sized and then played (about 35 s in all)
@pytest.mark.parametrize("env_id", AGREEMENT_IDS)
@pytest.mark.parametrize("protocol", STRATEGIES.choices())
def test_the_derived_budget_holds_the_runtimes_oracle_episodes(env_id: str, protocol: str) -> None:
    """The sizing replays the runtime's decisions on token counts (``_EpisodePlan``); the real
    runtime, with the strategy's scripted agents (oracle, perfect summaries) on the sized
    episodes' seeds at the derived budget, ends none for want of room while it keeps to its
    sized actions. (An oracle that reads its context can act otherwise once the strategy drops
    what it read, as SimRepo's under sliding-window edits the wrong patch until the window is
    full: those episodes are the pre-flight's to refuse, not the sizing's.)"""
    import gymnasium as gym

    from cxsim.envs.defaults import DEFAULT_KWARGS, sample_episodes
    from cxsim.runtime import collect_rollouts

    kwargs = DEFAULT_KWARGS.get(env_id, {})
    env = gym.make(env_id, **kwargs)
    system = env.unwrapped.system_prompt
    env.close()
    episodes = sample_episodes(env_id, kwargs, 16)
    sized = fit_sizes(replace(UNSIZED, protocol=protocol), CHAT, system, episodes)
    agents = sized.strategy.scripted_agents(env_id, CHAT, config=sized)
    records = collect_rollouts(
        env_id, kwargs, agents.actor, sized, list(range(16)), CHAT, agents.summarizer
    ).records
    for record, episode in zip(records, episodes, strict=False):
        if record.end_reason == "window_full":  # out of room: only off the sized actions
            actions = env_actions(record.transcript)
            assert actions != episode.actions[: len(actions)], (record.seed, actions)

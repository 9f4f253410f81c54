"""Scripted agents behind the Agent interface: oracle grounded in context, noisy, random."""

from __future__ import annotations

from functools import cache

import gymnasium as gym
import numpy as np
import pytest

from cxsim.agent_api import TurnRequest
from cxsim.agents.chat import WordChatFormat
from cxsim.agents.scripted import RandomAgent, ScriptedAgent, ground_action
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.envs import KeyRecall
from cxsim.envs.scripted import ScriptedSummarizer, oracle_for
from cxsim.runtime import CompactionConfig, collect_rollouts

ENV = "cxsim/KeyRecall-v0"


@cache
def chat() -> WordChatFormat:
    return WordChatFormat(default_tokenizer())


def query_info(key: str = "k3") -> dict:
    """An info at KeyRecall's question (from a real episode, with the key replaced)."""
    env = gym.make(ENV, memory_length=2)
    _, info = env.reset(seed=0)
    while info["state"]["phase"] != "query":
        _, _, _, _, info = env.step("next")
    info["key_facts"] = {"key": key}
    return info


def request(kind="act", context="", info=None, append=None, cap=16, row=0) -> TurnRequest:
    info = query_info() if info is None else info
    append = chat().observation("question : what is the key ?") if append is None else append
    return TurnRequest(row, kind, append, False, cap, context, info)


def test_ground_action_keeps_known_values_and_guesses_lost_ones():
    info = query_info("k3")
    rng = np.random.default_rng(0)
    assert ground_action("answer k3", "summary : the key is k3 .", info, rng) == "answer k3"
    guesses = {ground_action("answer k3", "the key is unknown .", info, rng) for _ in range(300)}
    assert guesses == set(info["admissible_actions"])  # uniform over every answer
    assert ground_action("next", "", info, rng) == "next"


def test_scripted_agent_emits_the_grounded_oracle_text_and_summaries():
    ch = chat()
    agent = ScriptedAgent(ENV, ch, omission_rate=0.0)
    info = query_info("k3")
    act, summ, cut = agent.respond(
        [
            request(context="the key is k3 . question : what is the key ?", info=info),
            request("summarize", context="the key is k3 .", info=info, cap=48, row=1),
            request(context="the key is k3 .", info=info, cap=1, row=2),
        ]
    )
    assert act.token_ids == [*ch.encode("answer k3"), ch.end_id]
    assert act.text == "answer k3" and act.finished and act.logprobs == [0.0, 0.0, 0.0]
    expected = ScriptedSummarizer(0.0, 0, KeyRecall.family).summarize("the key is k3 .", info)
    assert summ.text == expected and summ.token_ids[-1] == ch.end_id
    assert "k3" in summ.text
    assert cut.token_ids == ch.encode("answer")[:1] and not cut.finished


def test_noisy_oracle_and_random_agent_pick_admissible_actions():
    info = query_info("k3")
    noisy = ScriptedAgent(ENV, chat(), epsilon=1.0, seed=1)
    texts = {noisy.respond([request(context="k3", info=info)])[0].text for _ in range(200)}
    assert texts == set(info["admissible_actions"])
    rand = RandomAgent(chat(), seed=0)
    texts = {rand.respond([request(info=info)])[0].text for _ in range(200)}
    assert texts <= set(info["admissible_actions"]) and len(texts) > 1
    with pytest.raises(ValueError, match="epsilon"):
        ScriptedAgent(ENV, chat(), epsilon=2.0)


def test_scripted_rollouts_are_sft_data():
    """Trainable tokens are exactly the oracle's actions and the scripted summaries."""
    ch = chat()
    batch = collect_rollouts(
        ENV, {"memory_length": 20}, ScriptedAgent(ENV, ch), CompactionConfig(max_compactions=8),
        [0, 1], ch,
    )  # fmt: skip
    env = gym.make(ENV, memory_length=20)
    for rec in batch.records:
        # Replay the episode with the plain oracle: it must produce the same actions.
        _, info = env.reset(seed=rec.seed)
        oracle = oracle_for(env)
        actions, done = [], False
        while not done:
            action = oracle.act("", info)
            actions.append(action)
            _, _, term, trunc, info = env.step(action)
            done = term or trunc
        segs = [s for s in batch.segments if s.rollout_id == rec.rollout_id]
        trained = []
        for seg in segs:
            ids = [t for t, tr in zip(seg.token_ids, seg.trainable, strict=True) if tr]
            trained += ch.decode(ids).split(" ") if seg.role == "execution" else []
        assert " ".join(trained) == " ".join(actions)
        summaries = [
            ch.decode([t for t, tr in zip(s.token_ids, s.trainable, strict=True) if tr])
            for s in segs
            if s.role == "summary"
        ]
        assert summaries == rec.summaries and len(summaries) == rec.compactions >= 3


def test_skip_rate_skips_the_optional_first_action_at_that_rate():
    env = gym.make("cxsim/KeyRecallActive-v0")
    _, info = env.reset(seed=0)
    assert "open box" in info["admissible_actions"]
    first = request(context="", info=info)

    def first_actions(rate: float) -> list[str]:
        agent = ScriptedAgent("cxsim/KeyRecallActive-v0", chat(), skip_rate=rate, seed=2)
        return [agent.respond([first])[0].text for _ in range(400)]

    assert set(first_actions(0.0)) == {"open box"}
    assert set(first_actions(1.0)) == {"next"}
    share = first_actions(0.5).count("next") / 400
    assert 0.4 < share < 0.6
    # only the optional action is skipped: the answer at the question is untouched
    agent = ScriptedAgent(ENV, chat(), skip_rate=1.0)
    assert agent.respond([request(context="k3", info=query_info("k3"))])[0].text == "answer k3"
    with pytest.raises(ValueError, match="skip_rate"):
        ScriptedAgent(ENV, chat(), skip_rate=-0.1)

"""Compaction runtime: budgets, protocols, caps, segment layout, success under omission."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import gymnasium as gym
import pytest
import torch

from cxsim.advantages import segment_gae, stitched_gae
from cxsim.agent_api import TurnRequest, TurnResponse
from cxsim.agents.chat import WordChatFormat
from cxsim.agents.scripted import RandomAgent, ScriptedAgent
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.envs import KeyRecall
from cxsim.runtime import CompactionConfig, RolloutBatch, collect_rollouts
from cxsim.segments import EPISODE_ENDS, pack_segments

ENV = "cxsim/KeyRecall-v0"
# 20 corridor steps of ~20 words: each episode needs at least 4 windows (3 compactions).
LONG = {"memory_length": 20}
CFG = CompactionConfig(max_compactions=8)


@cache
def chat() -> WordChatFormat:
    return WordChatFormat(default_tokenizer())


def run(
    agent=None, config: CompactionConfig = CFG, seeds=range(16), env_kwargs=None, **kw
) -> RolloutBatch:
    agent = agent or ScriptedAgent(ENV, chat())
    kwargs = LONG if env_kwargs is None else env_kwargs
    return collect_rollouts(ENV, kwargs, agent, config, list(seeds), chat(), **kw)


def by_rollout(batch: RolloutBatch) -> dict[int, list]:
    out: dict[int, list] = {}
    for seg in batch.segments:
        out.setdefault(seg.rollout_id, []).append(seg)
    return out


# -- configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 300, "budget": 256}, r"threshold \(300\) must be <= budget \(256\)"),
        ({"protocol": "bogus"}, "protocol 'bogus' is unknown"),
        ({"keep_last": -1}, "keep_last"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_summary_tokens": 200, "threshold": 128}, "max_summary_tokens"),
        ({"summary_instruction": " "}, "summary_instruction"),
    ],
)
def test_config_pure_checks(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CompactionConfig(**kwargs)


def test_config_checks_that_need_the_chat_format():
    sys = "you walk a corridor ."
    with pytest.raises(ValueError, match=r"threshold \(60\) must be >= \|q_sum\|"):
        CompactionConfig(threshold=60, max_summary_tokens=55).validate(chat(), sys)
    with pytest.raises(ValueError, match="too small for a rebuilt window"):
        CompactionConfig(budget=140, threshold=128).validate(chat(), sys)
    # Single needs no room for a summary.
    CompactionConfig(protocol="single", budget=140, threshold=10).validate(chat(), sys)
    with pytest.raises(ValueError, match="summarizer_agent"):
        run(config=replace(CFG, protocol="external-summarizer"), seeds=[0])


# -- budgets and segment layout ------------------------------------------------------


def test_no_context_exceeds_the_budget_and_segments_are_ordered():
    batch = run(seeds=range(24))
    c = CFG.budget
    for rec in batch.records:
        assert rec.terminated and rec.compactions >= 3
        assert rec.peak_context <= c
    for rid, segs in by_rollout(batch).items():
        assert [s.segment_index for s in segs] == list(range(len(segs)))
        roles = [s.role for s in segs]
        assert roles == ["execution", "summary"] * (len(segs) // 2) + ["execution"]
        assert roles.count("summary") == batch.records[rid].compactions
        for s in segs:
            assert len(s.token_ids) <= c
            assert s.reward == batch.records[rid].reward
            assert not s.trainable[0]


def test_summary_segment_extends_the_window_and_next_window_is_rebuilt():
    ch = chat()
    q_sum = ch.summary_request(CFG.summary_instruction)
    batch = run(seeds=range(4))
    system = ch.system(ScriptedAgent(ENV, ch).env.unwrapped.system_prompt)
    for rid, segs in by_rollout(batch).items():
        rec = batch.records[rid]
        for i in range(1, len(segs) - 1, 2):
            exe, summ, nxt = segs[i - 1], segs[i], segs[i + 1]
            n = len(exe.token_ids)
            # h_t + q_sum + S; trainable exactly on S.
            assert summ.token_ids[:n] == exe.token_ids
            assert summ.token_ids[n : n + len(q_sum)] == q_sum
            assert summ.trainable == [False] * (n + len(q_sum)) + [True] * (
                len(summ.token_ids) - n - len(q_sum)
            )
            assert summ.token_ids[-1] == ch.end_id
            summary_text = ch.decode(summ.token_ids[n + len(q_sum) :])
            assert summary_text == rec.summaries[i // 2]
            # The next window starts (s) + u_resume(S), then copies the last k steps untrained.
            rebuilt = system + ch.resume(CFG.resume_instruction, summary_text)
            assert nxt.token_ids[: len(rebuilt)] == rebuilt
            first_trained = nxt.trainable.index(True)
            copied = nxt.token_ids[len(rebuilt) : first_trained - 1]
            assert copied and copied == exe.token_ids[len(exe.token_ids) - len(copied) :]
            assert CFG.budget - (first_trained - 1) >= CFG.threshold
        assert all(rec.summary_recall[k]["key"] for k in range(rec.compactions))
        # what a reader of each summary sees: it states a key (the right one, here)
        assert all(rec.summary_stated[k]["key"] for k in range(rec.compactions))


def test_trainable_tokens_are_exactly_the_agents_outputs():
    ch = chat()
    header = ch.assistant_prefix()
    batch = run(seeds=range(4))
    for seg in batch.segments:
        runs, current = [], []
        for i, (tok, tr) in enumerate(zip(seg.token_ids, seg.trainable, strict=True)):
            if tr:
                if not current and seg.role == "execution":
                    assert seg.token_ids[i - len(header) : i] == header
                current.append(tok)
            elif current:
                runs.append(current)
                current = []
        runs += [current] if current else []
        assert runs and all(r[-1] == ch.end_id for r in runs)
        texts = [ch.decode(r) for r in runs]
        if seg.role == "execution":
            assert all(t == "next" or t.startswith("answer k") for t in texts), texts
        else:
            assert len(texts) == 1 and texts[0].startswith("summary :")
        assert all(lp == 0.0 for lp in seg.logprobs)


def test_keep_last_falls_back_until_the_threshold_fits():
    # Observations of ~60 words: two copied steps would leave less than T_comp.
    cfg = CompactionConfig(budget=400, threshold=200, keep_last=3, max_compactions=20)
    kwargs = {"memory_length": 12, "obs_words_mean": 60.0, "obs_words_std": 2.0}
    batch = run(config=cfg, env_kwargs=kwargs, seeds=range(6))
    kept = [
        int(line.split("kept ")[1].split()[0])
        for rec in batch.records
        for line in rec.transcript.splitlines()
        if line.startswith("== window")
    ]
    assert kept and max(kept) < cfg.keep_last
    for rec in batch.records:
        assert rec.success and rec.peak_context <= cfg.budget


def test_single_never_compacts_and_fails_when_the_window_is_full():
    batch = run(config=replace(CFG, protocol="single"), seeds=range(16))
    assert all(s.role == "execution" for s in batch.segments)
    for rec in batch.records:
        assert rec.compactions == 0 and not rec.summaries
        assert rec.truncated and not rec.terminated and not rec.success
        assert rec.end_reason == "window_full" and rec.peak_context <= CFG.budget
    # A short episode fits in one window and succeeds.
    short = run(config=replace(CFG, protocol="single"), env_kwargs={"memory_length": 2}, seeds=[0])
    assert short.records[0].success and short.records[0].compactions == 0


def test_turn_and_compaction_caps():
    batch = run(config=replace(CFG, max_turns=3), seeds=range(4))
    for rec in batch.records:
        assert rec.turns == 3 and rec.end_reason == "max_turns" and rec.truncated
        assert not rec.success and rec.reward == 0.0
    batch = run(config=replace(CFG, max_compactions=1), seeds=range(4))
    for rec in batch.records:
        assert rec.compactions == 1 and rec.end_reason == "window_full" and not rec.success
    assert all(len(segs) == 3 for segs in by_rollout(batch).values())


def test_observation_that_does_not_fit_ends_the_episode():
    cfg = CompactionConfig(budget=320, threshold=70, max_summary_tokens=40, max_compactions=8)
    kwargs = {"memory_length": 10, "obs_words_mean": 60.0, "obs_words_std": 1.0}
    batch = run(config=cfg, env_kwargs=kwargs, seeds=range(4))
    for rec in batch.records:
        assert rec.end_reason == "observation_overflow" and rec.truncated and not rec.success
        assert rec.peak_context <= cfg.budget


def test_sliding_window_and_external_summarizer():
    batch = run(config=replace(CFG, protocol="sliding-window"), seeds=range(8))
    assert all(s.role == "execution" for s in batch.segments)
    assert all(r.compactions >= 3 and not r.summaries for r in batch.records)
    # The passive task text carries the key, and sliding-window keeps the task.
    assert all(r.success for r in batch.records)

    summarizer = ScriptedAgent(ENV, chat())
    batch = run(
        config=replace(CFG, protocol="external-summarizer"),
        summarizer_agent=summarizer,
        seeds=range(8),
        rollout_id_start=100,
        group_ids=[7] * 8,
    )
    assert all(s.role == "execution" and s.group_id == 7 for s in batch.segments)
    for rid, segs in by_rollout(batch).items():
        rec = batch.records[rid - 100]
        assert rec.rollout_id == rid and rec.success
        assert len(rec.summaries) == rec.compactions == len(segs) - 1


# -- success under omission (the oracle acts from its context) ----------------------


def test_compacted_success_follows_summary_omission():
    seeds = range(200)
    good = run(ScriptedAgent(ENV, chat(), omission_rate=0.0), seeds=seeds)
    assert min(r.compactions for r in good.records) >= 3
    assert sum(r.success for r in good.records) / len(seeds) >= 0.99

    lossy = run(ScriptedAgent(ENV, chat(), omission_rate=1.0, seed=1), seeds=seeds)
    rate = sum(r.success for r in lossy.records) / len(seeds)
    assert 0.05 <= rate <= 0.22  # chance is 1/8; ~3 standard errors either side
    assert not any(rec.summary_recall[0]["key"] for rec in lossy.records)
    assert not any(rec.summary_stated[0]["key"] for rec in lossy.records)  # states none

    # Single: an episode that needs more than one window fails outright (below chance).
    single = run(config=replace(CFG, protocol="single"), seeds=range(40))
    assert sum(r.success for r in single.records) == 0


# -- bad model output ----------------------------------------------------------------


class BadAgent:
    """Garbage, unknown words, empty and unterminated responses, empty summaries."""

    def __init__(self):
        self.calls = 0

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        ch = chat()
        out = []
        for r in requests:
            self.calls += 1
            kind = (r.row + self.calls) % 4
            if r.kind == "summarize" or kind == 0:
                ids = [ch.end_id]  # empty text
            elif kind == 1:
                ids = [1] * r.max_new_tokens  # <unk> until the cap, no end token
            elif kind == 2:
                ids = [5, 6, 2, ch.end_id]  # special tokens as "words"
            else:
                ids = ch.encode("answer k31 the door")[: r.max_new_tokens]
            ids = ids[: r.max_new_tokens]
            finished = bool(ids) and ids[-1] == ch.end_id
            out.append(TurnResponse(ids, [0.0] * len(ids), ch.decode(ids), finished))
        return out


def test_bad_output_never_crashes_a_rollout():
    batch = run(BadAgent(), config=replace(CFG, max_turns=40), seeds=range(6))
    for rec in batch.records:
        assert not rec.success and rec.peak_context <= CFG.budget
        assert "error" in rec.transcript
    assert any(r.compactions > 0 for r in batch.records)
    assert all("" in r.summaries for r in batch.records if r.compactions)

    garbage = RandomAgent(chat(), seed=0, garbage_rate=1.0, family=KeyRecall.family)
    batch = run(garbage, config=replace(CFG, max_turns=30), seeds=range(4))
    assert all(r.turns > 0 and not r.success for r in batch.records)


# -- rewards where they happen, episode ends on the batch ---------------------------------


class PenaltyEnv(gym.Env):
    """Corridor of ``horizon`` steps with 12-word observations; step t pays -0.1 when t is in
    ``penalised`` and the last step pays 1. No cxsim info keys."""

    system_prompt = "walk"

    def __init__(self, horizon: int = 20, penalised: tuple[int, ...] = ()):
        self.horizon, self.penalised, self.t = horizon, set(penalised), 0
        letters = "abcdefghijklmnopqrstuvwxyz "
        self.observation_space = gym.spaces.Text(200, charset=letters)
        self.action_space = gym.spaces.Text(50, charset=letters)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "walk", {}

    def step(self, action):
        self.t += 1
        done = self.t == self.horizon
        reward = 1.0 if done else (-0.1 if self.t in self.penalised else 0.0)
        return " ".join(["next"] * 12), reward, done, False, {}


gym.register("cxsim-test/Penalty-v0", entry_point=PenaltyEnv)


class NextAgent:
    """Answers every turn with ``next <|end|>`` (log-prob -0.5 per token)."""

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        ids = [*chat().encode("next"), chat().end_id]
        return [TurnResponse(ids, [-0.5] * len(ids), "next", True) for _ in requests]


PENALTY_CFG = CompactionConfig(
    budget=160, threshold=72, max_summary_tokens=16, max_response_tokens=4, keep_last=0
)


def penalty_run(penalised: tuple[int, ...]) -> RolloutBatch:
    kwargs = {"horizon": 20, "penalised": penalised}
    return collect_rollouts("cxsim-test/Penalty-v0", kwargs, NextAgent(), PENALTY_CFG, [0], chat())


def response_windows(batch: RolloutBatch) -> list[int]:
    """The execution window (1, 2, ...) of each turn's response, in time order."""
    windows, k = [], 0
    for seg in batch.segments:
        if seg.role == "execution":
            k += 1
            ends = [
                t
                for t in range(len(seg.trainable) - 1)
                if seg.trainable[t] and not seg.trainable[t + 1]
            ]
            windows += [k] * len(ends)
    return windows


def test_step_rewards_sit_in_the_window_that_earned_them():
    """Penalties in windows 1 and 3 reach the advantages of those windows' tokens (and, by
    the stitched estimator, earlier tokens), never window 2's local target."""
    windows = response_windows(penalty_run(()))
    assert len(set(windows)) >= 3, windows  # the corridor needs three windows
    penalised = tuple(t + 1 for t, w in enumerate(windows) if w in (1, 3) and t + 1 < 20)
    batch = penalty_run(penalised)
    rec, execs = batch.records[0], [s for s in batch.segments if s.role == "execution"]
    assert rec.end_reason == "terminated" and rec.reward == pytest.approx(1 - 0.1 * len(penalised))
    assert all(s.reward == 1.0 for s in batch.segments)  # R, where the method puts it
    paid = [sum(s.step_rewards) for s in execs[:3]]
    per_window = [sum(1 for t in penalised if windows[t - 1] == k) for k in (1, 2, 3)]
    assert paid == pytest.approx([-0.1 * n for n in per_window]) and per_window[1] == 0
    for seg in execs:  # each penalty on the last token of a response
        for t, r in enumerate(seg.step_rewards):
            if r:
                assert seg.trainable[t] and not seg.trainable[t + 1]

    packed = pack_segments(batch.segments)
    zeros = torch.zeros(packed.token_ids.shape)
    args = (zeros, packed.trainable, packed.rewards)
    local = segment_gae(*args, 1.0, 1.0, step_rewards=packed.step_rewards)
    seg_args = (packed.rollout_id, packed.segment_index, 1.0, 1.0)
    stitched = stitched_gae(*args, *seg_args, step_rewards=packed.step_rewards)
    # hand-computed rewards-to-go (V = 0, gamma = lambda = 1)
    rows = sorted(range(len(packed)), key=lambda r: int(packed.segment_index[r]))
    later = 0.0
    for row in reversed(rows):
        seg = batch.segments[row]
        steps = seg.step_rewards or [0.0] * len(seg.token_ids)
        own = 1.0  # R at this segment's last trainable token
        for t in reversed(range(len(seg.token_ids))):
            own += steps[t]
            if seg.trainable[t]:
                assert float(local[row, t]) == pytest.approx(own)
                # stitched: R once, at the rollout's end, plus every later step reward
                assert float(stitched[row, t]) == pytest.approx(own + later)
        later += sum(steps)
    window2 = [r for r in rows if batch.segments[r].role == "execution"][1]
    trained = packed.trainable[window2]
    assert torch.allclose(local[window2][trained], torch.ones(int(trained.sum())))  # R only


END_CASES = {
    "terminated": ({}, CFG, {"memory_length": 3}),
    "env_truncated": ({}, CFG, {"memory_length": 20, "max_episode_steps": 3}),
    "window_full": ({}, replace(CFG, protocol="single"), LONG),
    "max_turns": ({}, replace(CFG, max_turns=3), LONG),
    "observation_overflow": (
        {},
        CompactionConfig(budget=320, threshold=70, max_summary_tokens=40, max_compactions=8),
        {"memory_length": 10, "obs_words_mean": 60.0, "obs_words_std": 1.0},
    ),
}


@pytest.mark.parametrize("reason", list(END_CASES))
def test_each_end_reason_reaches_the_batch(reason):
    _, config, kwargs = END_CASES[reason]
    batch = run(config=config, env_kwargs=kwargs, seeds=range(3))
    packed = pack_segments(batch.segments)
    for rec in batch.records:
        assert rec.end_reason == reason
        rows = (packed.rollout_id == rec.rollout_id).nonzero().squeeze(1)
        last = rows[packed.segment_index[rows].argmax()]
        assert EPISODE_ENDS[int(packed.episode_end[last])] == reason
        others = rows[rows != last]
        assert (packed.episode_end[others] == EPISODE_ENDS.index("none")).all()  # boundaries
    assert packed.ends(reason).sum() == len(batch.records)

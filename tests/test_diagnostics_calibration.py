"""Critic calibration: reliability bins, expected calibration error, explained variance."""

import math

import pytest
import torch

from cxsim.diagnostics import critic_calibration, monte_carlo_returns
from cxsim.diagnostics._common import explained_variance
from cxsim.ppo import explained_variance as ppo_explained_variance
from cxsim.segments import Segment, SegmentBatch, pack_segments

LAYOUT = [("execution", 3), ("summary", 2), ("execution", 2)]


def _batch(rewards: list[float]) -> SegmentBatch:
    segments = []
    for rid, reward in enumerate(rewards):
        for k, (role, n) in enumerate(LAYOUT):
            mask = [False, False] + [True, False] * (n - 1) + [True]  # prompt, tokens, observations
            segments.append(
                Segment(role, list(range(len(mask))), mask, [0.0] * len(mask), rid, k, reward)
            )
    return pack_segments(segments)


def _returns(batch: SegmentBatch, gamma: float) -> torch.Tensor:
    return monte_carlo_returns(
        batch.rewards, batch.trainable, batch.rollout_id, batch.segment_index, gamma
    )


def test_monte_carlo_return_discounts_by_trainable_tokens_to_the_end():
    batch = _batch([1.0, 0.0])
    returns = _returns(batch, 0.5)
    # rollout 0: 7 trainable tokens, distances 6..0; observations and prompts are 0
    assert returns[0].tolist() == [0, 0, 0.5**6, 0, 0.5**5, 0, 0.5**4]
    assert returns[2, :5].tolist() == [0, 0, 0.5, 0, 1.0]
    assert returns[3:].abs().sum() == 0


@pytest.mark.parametrize("where", ["first", "all"])
def test_exact_critic_has_zero_ece_and_explained_variance_one(where):
    batch = _batch([1.0, 0.0, 1.0, 1.0, 0.0])
    returns = _returns(batch, 0.9)
    stats = critic_calibration(
        returns.clone(), returns, batch.trainable, batch.segment_index, where
    )
    assert stats["critic/ece"] == 0.0
    assert stats["critic/mc_ev"] == 1.0
    assert stats["critic/bias"] == 0.0
    for k in range(3):
        assert stats[f"critic/ece_seg{k}"] == 0.0
        assert stats[f"critic/mc_ev_seg{k}"] == 1.0
    bins = [b for b in range(10) if stats[f"critic/bin{b}_count"] > 0]
    for b in bins:
        assert stats[f"critic/bin{b}_pred"] == pytest.approx(stats[f"critic/bin{b}_real"])
    expected = 15 if where == "first" else 35
    assert sum(stats[f"critic/bin{b}_count"] for b in range(10)) == expected


def test_constant_critic_has_explained_variance_zero():
    batch = _batch([1.0, 0.0, 1.0, 1.0, 0.0])
    returns = _returns(batch, 1.0)
    values = torch.full_like(returns, 0.75)
    stats = critic_calibration(values, returns, batch.trainable, batch.segment_index)
    assert stats["critic/mc_ev"] == pytest.approx(0.0, abs=1e-12)
    # one bin holds everything: |0.75 - mean R| with mean R = 0.6
    assert stats["critic/ece"] == pytest.approx(0.15)
    assert stats["critic/bias"] == pytest.approx(0.15)
    assert stats["critic/bin0_count"] == 15


def test_binned_reliability_on_a_hand_built_critic():
    # first-token values 0.2 for the failed rollouts, 0.9 for the successful ones
    batch = _batch([1.0, 0.0, 1.0, 0.0])
    returns = _returns(batch, 1.0)
    values = torch.where(batch.rewards[:, None] > 0, 0.9, 0.2).expand_as(returns).clone()
    stats = critic_calibration(
        values, returns, batch.trainable, batch.segment_index, num_bins=2, value_range=(0.0, 1.0)
    )
    assert stats["critic/bin0_pred"] == pytest.approx(0.2)
    assert stats["critic/bin0_real"] == 0.0
    assert stats["critic/bin1_pred"] == pytest.approx(0.9)
    assert stats["critic/bin1_real"] == 1.0
    assert stats["critic/ece"] == pytest.approx(0.5 * 0.2 + 0.5 * 0.1)
    # Var(R - V) = Var of {-0.2, 0.1} = 0.0225, Var(R) = 0.25
    assert stats["critic/mc_ev"] == pytest.approx(1 - 0.0225 / 0.25)


def test_constant_return_leaves_explained_variance_out():
    batch = _batch([1.0, 1.0])
    returns = _returns(batch, 1.0)
    stats = critic_calibration(returns, returns, batch.trainable, batch.segment_index)
    assert "critic/mc_ev" not in stats
    assert stats["critic/ece"] == 0.0


def test_returns_equal_up_to_rounding_leave_explained_variance_out():
    # every rollout succeeded: float32 Monte Carlo targets differ from 1 by rounding only
    returns = torch.ones(2, 40)
    returns[0, 3], returns[1, 7] = 0.99999994, 1.0000001
    mask = torch.ones(2, 40, dtype=torch.bool)
    values = torch.full((2, 40), 0.9)
    assert math.isnan(ppo_explained_variance(values, returns, mask))  # not -1e14
    assert math.isnan(float(explained_variance(values[mask], returns[mask])))
    # one failure among them is an outcome that varies: defined, and the constant 0.9 explains 0
    returns[1] = 0.0
    assert ppo_explained_variance(torch.full((2, 40), 0.5), returns, mask) == pytest.approx(0.0)


def _stepped_segments(
    step_at: dict[tuple[int, int], float], reward: float = 1.0, rid: int = 0
) -> list[Segment]:
    """One rollout of LAYOUT with step rewards at (segment, position)."""
    segments = []
    for k, (role, n) in enumerate(LAYOUT):
        mask = [False, False] + [True, False] * (n - 1) + [True]
        steps = [step_at.get((k, t), 0.0) for t in range(len(mask))]
        segments.append(
            Segment(role, list(range(len(mask))), mask, [0.0] * len(mask), rid, k, reward,
                    step_rewards=steps)
        )  # fmt: skip
    return segments


def test_monte_carlo_return_adds_the_discounted_step_rewards_after_each_token():
    # trainable tokens in order: a1 a2 a3 (segment 0, positions 2 4 6), b1 b2 (segment 1,
    # positions 2 4), c1 c2 (segment 2, positions 2 4); distances to the end 6 .. 0.
    # Step rewards 0.5 at a2 and 0.25 at c1; 9 at an observation (off the mask: left out).
    batch = pack_segments(_stepped_segments({(0, 4): 0.5, (2, 2): 0.25, (0, 3): 9.0}))
    args = (batch.rewards, batch.trainable, batch.rollout_id, batch.segment_index)
    returns = monte_carlo_returns(*args, 0.5, step_rewards=batch.step_rewards)
    # G(a1) = 0.5^6 R + 0.5^1 * 0.5 + 0.5^5 * 0.25, and so on
    a = [0.015625 + 0.25 + 0.0078125, 0.03125 + 0.5 + 0.015625, 0.0625 + 0.03125]
    b = [0.125 + 0.0625, 0.25 + 0.125]
    c = [0.5 + 0.25, 1.0]
    assert returns[0].tolist() == [0, 0, a[0], 0, a[1], 0, a[2]]
    assert returns[1, :5].tolist() == [0, 0, b[0], 0, b[1]]
    assert returns[2, :5].tolist() == [0, 0, c[0], 0, c[1]]
    undiscounted = monte_carlo_returns(*args, 1.0, step_rewards=batch.step_rewards)
    assert undiscounted[0, 2] == 1.75  # from the first token: R + every step reward
    assert undiscounted[2, 2] == 1.25 and undiscounted[2, 4] == 1.0
    assert monte_carlo_returns(*args, 0.5)[0, 2] == 0.5**6  # no step rewards: R alone


def test_calibration_in_summarize_all_counts_the_step_rewards():
    from cxsim.diagnostics import summarize_all

    steps = [{(0, 4): 0.5}, {}, {(1, 2): -0.5, (2, 2): 0.25}, {(0, 2): 0.75}]
    rewards = [1.0, 0.0, 1.0, 0.0]
    batch = pack_segments(
        [seg for rid, (s, r) in enumerate(zip(steps, rewards, strict=True))
         for seg in _stepped_segments(s, r, rid)]
    )  # fmt: skip
    args = (batch.rewards, batch.trainable, batch.rollout_id, batch.segment_index, 1.0)
    exact = monte_carlo_returns(*args, step_rewards=batch.step_rewards)
    stats = summarize_all(batch, values=exact, gamma=1.0)
    assert stats["critic/mc_ev"] == 1.0 and stats["critic/ece"] == 0.0
    assert stats["critic/bias"] == 0.0
    # the terminal reward alone would call the same critic miscalibrated
    alone = critic_calibration(exact, monte_carlo_returns(*args), batch.trainable,
                               batch.segment_index)  # fmt: skip
    assert alone["critic/mc_ev"] < 0.9 and alone["critic/bias"] != 0.0

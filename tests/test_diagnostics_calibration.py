"""Critic calibration: reliability bins, expected calibration error, explained variance."""

import pytest
import torch

from cxsim.diagnostics import critic_calibration, monte_carlo_returns
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

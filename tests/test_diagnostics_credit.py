"""Credit decay: |advantage| by segment, role, token distance and summary order."""

import pytest
import torch

from cxsim.advantages import cross_segment_gae, segment_gae
from cxsim.diagnostics import (
    applied_discount,
    credit_decay,
    discount_by_segment,
    distance_edges,
    summary_ordinal,
)
from cxsim.segments import Segment, SegmentBatch, pack_segments

# exec_0 (4 trainable), sum_0 (2), exec_1 (3), sum_1 (2), exec_2 (1)
LAYOUT = [("execution", 4), ("summary", 2), ("execution", 3), ("summary", 2), ("execution", 1)]
N_AFTER = [8, 6, 3, 1, 0]  # N_{>s} for LAYOUT


def _trainable(n: int) -> list[bool]:
    """Two prompt tokens, then responses of two tokens separated by one observation."""
    out = [False, False]
    for i in range(n):
        out.append(True)
        if i % 2 == 1 and i < n - 1:
            out.append(False)
    return out


def _batch(layouts: list[list[tuple[str, int]]], rewards: list[float]) -> SegmentBatch:
    segments = []
    for rid, (layout, reward) in enumerate(zip(layouts, rewards, strict=True)):
        for k, (role, n) in enumerate(layout):
            mask = _trainable(n)
            segments.append(
                Segment(role, list(range(len(mask))), mask, [0.0] * len(mask), rid, k, reward)
            )
    return pack_segments(segments)


def _args(batch: SegmentBatch):
    return batch.trainable, batch.is_summary, batch.rollout_id, batch.segment_index


def test_geometric_segment_pattern_gives_decay_gl_to_the_tokens_after():
    gl = 0.8
    batch = _batch([LAYOUT] * 3, [1.0, 1.0, 1.0])
    factor = torch.tensor([gl ** N_AFTER[int(k)] for k in batch.segment_index])
    adv = torch.where(batch.trainable, 2.0 * factor[:, None], 0.0)
    stats = credit_decay(adv, *_args(batch))
    for k, n_after in enumerate(N_AFTER):
        assert stats[f"credit/abs_adv_seg{k}"] == pytest.approx(2.0 * gl**n_after)
        assert stats[f"credit/decay_seg{k}"] == pytest.approx(gl**n_after)
    assert stats["credit/abs_adv_last"] == pytest.approx(2.0)
    exec_tokens = 4 * gl**8 + 3 * gl**3 + 1
    assert stats["credit/abs_adv_execution"] == pytest.approx(2.0 * exec_tokens / 8)
    assert stats["credit/abs_adv_summary"] == pytest.approx(2.0 * (gl**6 + gl**1) / 2)
    assert stats["credit/abs_adv_summary0"] == pytest.approx(2.0 * gl**6)
    assert stats["credit/abs_adv_summary1"] == pytest.approx(2.0 * gl**1)
    assert stats["credit/summary_first_over_last"] == pytest.approx(gl**5)


def test_cross_segment_with_zero_values_decays_by_token_distance():
    gamma, lam = 1.0, 0.5
    batch = _batch([LAYOUT, LAYOUT[:3]], [1.0, -1.0])
    values = torch.zeros(batch.trainable.shape)
    adv = cross_segment_gae(
        values, batch.trainable, batch.rewards, batch.rollout_id, batch.segment_index, gamma, lam
    )
    stats = credit_decay(adv, *_args(batch))
    # |A| = lam^d at distance d in both rollouts; bins [0,1) [1,2) [2,4) [4,8) [8,16)
    assert distance_edges(11) == [0, 1, 2, 4, 8, 16]
    assert stats["credit/abs_adv_dist0"] == pytest.approx(1.0)
    assert stats["credit/abs_adv_dist1"] == pytest.approx(lam)
    assert stats["credit/abs_adv_dist2"] == pytest.approx((lam**2 + lam**3) / 2)
    # distances 8..11 in the first rollout, 8 in the second
    dist8 = (sum(lam**d for d in range(8, 12)) + lam**8) / 5
    assert stats["credit/abs_adv_dist8"] == pytest.approx(dist8)
    # signed: the second rollout failed
    assert stats["credit/adv_seg4"] == pytest.approx(1.0)  # only the first rollout has seg 4
    assert stats["credit/adv_seg0"] == pytest.approx(
        (sum(lam**d for d in range(8, 12)) - sum(lam**d for d in range(5, 9))) / 8
    )


def test_applied_discount_is_the_ratio_of_cross_segment_to_local_gae():
    gamma, lam = 0.9, 0.7
    batch = _batch([LAYOUT, LAYOUT[:3], LAYOUT[:1]], [1.0, 0.0, 1.0])
    gen = torch.Generator().manual_seed(0)
    values = torch.rand(batch.trainable.shape, generator=gen)
    args = (values, batch.trainable, batch.rewards)
    ids = (batch.rollout_id, batch.segment_index)
    local = segment_gae(*args, gamma, lam)
    cross = cross_segment_gae(*args, *ids, gamma, lam)
    factor = applied_discount(batch.trainable, *ids, gamma, lam)
    torch.testing.assert_close(cross.double(), local.double() * factor[:, None])
    stats = discount_by_segment(batch.trainable, *ids, gamma, lam)
    # segment 0: N_{>0} = 8, 5 and 0 in the three rollouts
    assert stats["credit/discount_seg0"] == pytest.approx(
        ((gamma * lam) ** 8 + (gamma * lam) ** 5 + 1) / 3
    )
    assert stats["credit/log10_discount_seg4"] == 0.0
    assert stats["credit/discount_seg3"] == pytest.approx(gamma * lam)


def test_summary_ordinal_and_policy_mask_without_summaries():
    batch = _batch([LAYOUT, LAYOUT[:3]], [1.0, 1.0])
    ordinal = summary_ordinal(batch.is_summary, batch.rollout_id, batch.segment_index)
    assert ordinal.tolist() == [-1, 0, -1, 1, -1, -1, 0, -1]
    mask = batch.policy_mask(train_summaries=False)
    adv = torch.where(mask, 1.0, 0.0)
    stats = credit_decay(adv, mask, batch.is_summary, batch.rollout_id, batch.segment_index)
    assert "credit/abs_adv_summary" not in stats
    assert "credit/summary_first" not in stats
    assert "credit/abs_adv_seg1" not in stats
    assert stats["credit/abs_adv_seg2"] == 1.0


def test_shape_mismatch_names_the_argument():
    batch = _batch([LAYOUT], [1.0])
    with pytest.raises(ValueError, match="advantages"):
        credit_decay(torch.zeros(2, 2), *_args(batch))

"""Estimator gap: cross-segment GAE against stitched GAE on the same batch."""

import pytest
import torch

from cxsim.advantages import cross_segment_gae, stitched_gae
from cxsim.diagnostics import estimator_gap
from cxsim.segments import Segment, SegmentBatch, pack_segments

LAYOUT = [("execution", 5), ("summary", 3), ("execution", 4), ("summary", 2), ("execution", 3)]


def _batch() -> SegmentBatch:
    segments = []
    for rid, (num_segments, reward) in enumerate([(5, 1.0), (3, 0.0), (1, 1.0), (5, 0.0)]):
        for k, (role, n) in enumerate(LAYOUT[:num_segments]):
            mask = [False, False, False] + [True, False] * (n - 1) + [True]
            segments.append(
                Segment(role, list(range(len(mask))), mask, [0.0] * len(mask), rid, k, reward)
            )
    return pack_segments(segments)


def _both(batch: SegmentBatch, values: torch.Tensor, gamma: float, lam: float):
    args = (values, batch.trainable, batch.rewards, batch.rollout_id, batch.segment_index)
    return cross_segment_gae(*args, gamma, lam), stitched_gae(*args, gamma, lam)


def test_zero_values_make_cross_segment_equal_stitched():
    batch = _batch()
    cross, stitched = _both(batch, torch.zeros(batch.trainable.shape), 0.99, 0.9)
    stats = estimator_gap(cross, stitched, batch.trainable, batch.segment_index)
    assert stats["gap/rel_err"] == pytest.approx(0.0, abs=1e-6)
    assert stats["gap/mean_abs_diff"] == pytest.approx(0.0, abs=1e-7)
    assert stats["gap/corr"] == pytest.approx(1.0)
    assert stats["gap/sign_agree"] == 1.0
    for k in range(5):
        assert stats[f"gap/rel_err_seg{k}"] == pytest.approx(0.0, abs=1e-6)


def test_nonzero_values_open_a_gap_that_the_segment_index_locates():
    batch = _batch()
    values = torch.rand(batch.trainable.shape, generator=torch.Generator().manual_seed(0))
    cross, stitched = _both(batch, values, 1.0, 0.9)
    stats = estimator_gap(cross, stitched, batch.trainable, batch.segment_index)
    assert stats["gap/rel_err"] > 0.01
    # the last segment of a rollout is identical under both (no later segments);
    # segment 4 is last in every rollout that has one
    assert stats["gap/rel_err_seg4"] == pytest.approx(0.0, abs=1e-6)
    assert stats["gap/rel_err_seg0"] > 0.01


def test_hand_built_statistics_and_a_custom_prefix():
    mask = torch.tensor([[False, True, True], [False, True, True]])
    seg = torch.tensor([0, 1])
    reference = torch.tensor([[0.0, 1.0, -1.0], [0.0, 2.0, 1.0]])
    stats = estimator_gap(-reference, reference, mask, seg, prefix="truth")
    assert stats["truth/corr"] == pytest.approx(-1.0)
    assert stats["truth/sign_agree"] == 0.0
    assert stats["truth/rel_err"] == pytest.approx(2.0)
    assert stats["truth/mean_diff"] == pytest.approx(-2 * (1 - 1 + 2 + 1) / 4)
    assert stats["truth/mean_abs_diff"] == pytest.approx(2 * (1 + 1 + 2 + 1) / 4)
    constant = torch.where(mask, 1.0, 0.0)
    assert "truth/corr" not in estimator_gap(constant, reference, mask, seg, prefix="truth")

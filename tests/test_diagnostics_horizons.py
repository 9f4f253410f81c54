"""Gradient share by horizon: rollouts grouped by window count, each group's share of the
rollouts and of the gradient weight under each loss mode."""

import pytest
import torch

from cxsim.diagnostics import horizon_shares, horizon_stats, summarize_all
from cxsim.losses import LOSS_MODES
from cxsim.segments import Segment, pack_segments


def _one_short_one_long():
    """Rollout 0: one window of 4 policy tokens. Rollout 1: three windows (2 tokens each)
    and two summaries (1 token each): 8 policy tokens in 5 segments."""
    layout = {
        0: [("execution", 4)],
        1: [("execution", 2), ("summary", 1), ("execution", 2), ("summary", 1), ("execution", 2)],
    }
    segments = []
    for rid, rows in layout.items():
        for k, (role, n) in enumerate(rows):
            mask = [False] + [True] * n
            segments.append(Segment(role, list(range(n + 1)), mask, [0.0] * (n + 1), rid, k, 1.0))
    return pack_segments(segments)


def test_hand_computed_shares_token_mean_vs_segment_mean():
    batch = _one_short_one_long()
    shares = horizon_shares(batch.trainable, batch.rollout_id, batch.is_summary)
    assert shares.windows.tolist() == [1, 3] and shares.rollouts.tolist() == [1, 1]
    assert shares.rollout_share.tolist() == [0.5, 0.5]
    assert shares.tokens.tolist() == [4.0, 8.0]
    # token-mean: 4 of 12 tokens vs 8 of 12
    torch.testing.assert_close(
        shares.grad_share["token-mean"], torch.tensor([4 / 12, 8 / 12], dtype=torch.float64)
    )
    # segment-mean: 1 of 6 segments vs 5 of 6
    torch.testing.assert_close(
        shares.grad_share["segment-mean"], torch.tensor([1 / 6, 5 / 6], dtype=torch.float64)
    )
    # rollout-mean: one vote each; seq-mean-token-sum: every token 1/S', as token-mean
    torch.testing.assert_close(
        shares.grad_share["rollout-mean"], torch.tensor([0.5, 0.5], dtype=torch.float64)
    )
    torch.testing.assert_close(
        shares.grad_share["seq-mean-token-sum"], shares.grad_share["token-mean"]
    )
    stats = shares.as_dict()
    assert stats["horizon/rollout_share_k1"] == 0.5
    assert stats["horizon/token-mean/grad_share_k3"] == pytest.approx(2 / 3)
    assert stats["horizon/segment-mean/grad_share_k1"] == pytest.approx(1 / 6)
    assert not any(key.endswith("_k2") for key in stats)  # only the window counts present


def test_without_summary_training_only_the_windows_carry_weight():
    batch = _one_short_one_long()
    mask = batch.policy_mask(False)
    stats = horizon_stats(mask, batch.rollout_id, batch.is_summary, ("segment-mean",))
    # the summaries still count as the long rollout's structure, but lose their votes: 1 of 4
    assert stats["horizon/segment-mean/grad_share_k1"] == pytest.approx(1 / 4)
    assert set(stats) == {
        "horizon/rollout_share_k1",
        "horizon/rollout_share_k3",
        "horizon/segment-mean/grad_share_k1",
        "horizon/segment-mean/grad_share_k3",
    }


def test_rows_in_any_order_and_every_mode_sums_to_one():
    batch = _one_short_one_long()
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    shares = horizon_shares(batch.trainable[perm], batch.rollout_id[perm], batch.is_summary[perm])
    assert shares.windows.tolist() == [1, 3]
    for mode in LOSS_MODES:
        assert float(shares.grad_share[mode].sum()) == pytest.approx(1.0)
    assert float(shares.grad_share["segment-mean"][0]) == pytest.approx(1 / 6)


def test_summarize_all_writes_the_horizon_tags():
    batch = _one_short_one_long()
    stats = summarize_all(batch)
    assert stats["horizon/rollout_share_k3"] == 0.5
    assert stats["horizon/token-mean/grad_share_k1"] == pytest.approx(1 / 3)


def test_bad_shapes_fail_in_one_line():
    batch = _one_short_one_long()
    with pytest.raises(ValueError, match=r"is_summary must have shape \(6,\)"):
        horizon_shares(batch.trainable, batch.rollout_id, batch.is_summary[:3])
    with pytest.raises(ValueError, match="mode must be one of"):
        horizon_shares(batch.trainable, batch.rollout_id, batch.is_summary, ("token-sum",))

"""Segment weights: each segment's share of the gradient under each loss mode."""

import pytest
import torch

from cxsim.diagnostics import (
    gini,
    segment_weight_stats,
    segment_weights,
    token_weights,
    token_weights_autograd,
)
from cxsim.losses import LOSS_MODES


def _random_batch(seed: int):
    """Unequal segment lengths, rollouts of 1-4 segments, one row with an empty mask."""
    gen = torch.Generator().manual_seed(seed)
    rollout_id, segment_index = [], []
    for rid in range(5):
        for k in range(int(torch.randint(1, 5, (1,), generator=gen))):
            rollout_id.append(rid)
            segment_index.append(k)
    num_rows, width = len(rollout_id), 12
    lengths = torch.randint(1, width, (num_rows,), generator=gen)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    mask &= torch.rand(num_rows, width, generator=gen) < 0.7
    mask[:, 0] = False
    mask[2] = False
    perm = torch.randperm(num_rows, generator=gen)  # rows in any order
    return (
        mask[perm],
        torch.tensor(rollout_id)[perm],
        torch.tensor(segment_index)[perm],
        (torch.tensor(segment_index) % 2 == 1)[perm],
    )


@pytest.mark.parametrize("mode", LOSS_MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_equals_gradient_of_aggregate(mode, seed):
    mask, rollout_id, _, _ = _random_batch(seed)
    torch.testing.assert_close(
        token_weights(mask, mode, rollout_id), token_weights_autograd(mask, mode, rollout_id)
    )


def test_segment_mean_gives_each_segment_one_over_s():
    mask, rollout_id, segment_index, is_summary = _random_batch(0)
    voting = int(mask.any(dim=1).sum())
    result = segment_weights(mask, "segment-mean", rollout_id, is_summary, segment_index)
    torch.testing.assert_close(
        result.shares, torch.full((voting,), 1 / voting, dtype=torch.float64)
    )
    stats = result.as_dict()
    assert stats["weights/segment-mean/max_rel_share"] == pytest.approx(1.0)
    assert stats["weights/segment-mean/gini"] == pytest.approx(0.0, abs=1e-12)
    assert stats["weights/segment-mean/entropy_ratio"] == pytest.approx(1.0)
    assert stats["weights/segment-mean/hist_1x"] == voting
    assert stats["weights/segment-mean/summary_share"] == pytest.approx(
        int((mask.any(dim=1) & is_summary).sum()) / voting
    )


def test_token_mean_shares_are_proportional_to_trainable_counts():
    mask, rollout_id, segment_index, is_summary = _random_batch(1)
    result = segment_weights(mask, "token-mean", rollout_id, is_summary, segment_index)
    counts = mask.sum(dim=1)[result.rows].double()
    torch.testing.assert_close(result.shares, counts / counts.sum())
    stats = result.as_dict()
    assert stats["weights/token-mean/summary_share"] == pytest.approx(
        float(mask[is_summary].sum() / mask.sum())
    )
    assert sum(stats[k] for k in stats if "/hist_" in k) == len(result.rows)
    num_k = int(segment_index.max()) + 1
    assert sum(stats[f"weights/token-mean/share_seg{k}"] for k in range(num_k)) == pytest.approx(1)


def test_rollout_mean_gives_each_rollout_one_over_r():
    mask, rollout_id, segment_index, is_summary = _random_batch(2)
    result = segment_weights(mask, "rollout-mean", rollout_id, is_summary, segment_index)
    voters = rollout_id[result.rows]
    per_rollout = torch.zeros(5, dtype=torch.float64).index_add_(0, voters, result.shares)
    num = voters.unique().numel()
    torch.testing.assert_close(per_rollout[voters.unique()], torch.full((num,), 1 / num).double())


def test_histogram_and_gini_on_a_hand_built_batch():
    # trainable counts 1, 1, 2 and 8 -> token-mean shares 1/12, 1/12, 2/12, 8/12
    mask = torch.zeros(4, 9, dtype=torch.bool)
    for row, n in enumerate([1, 1, 2, 8]):
        mask[row, 1 : 1 + n] = True
    rollout_id = torch.tensor([0, 0, 1, 1])
    segment_index = torch.tensor([0, 1, 0, 1])
    is_summary = torch.tensor([False, True, False, True])
    stats = segment_weight_stats(mask, rollout_id, is_summary, segment_index, ("token-mean",))
    # relative shares 1/3, 1/3, 2/3, 8/3 -> bins 0.25x, 0.25x, 0.5x, 2x
    assert stats["weights/token-mean/hist_0.25x"] == 2
    assert stats["weights/token-mean/hist_0.5x"] == 1
    assert stats["weights/token-mean/hist_2x"] == 1
    assert stats["weights/token-mean/max_share"] == pytest.approx(8 / 12)
    assert stats["weights/token-mean/share_seg1"] == pytest.approx(9 / 12)
    assert stats["weights/token-mean/summary_share"] == pytest.approx(9 / 12)
    assert gini(torch.tensor([0.0, 0.0, 0.0, 1.0])) == pytest.approx(0.75)
    assert stats["weights/token-mean/gini"] == pytest.approx(
        float(gini(torch.tensor([1, 1, 2, 8]) / 12.0))
    )

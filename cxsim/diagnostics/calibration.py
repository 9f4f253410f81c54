"""Critic calibration: predicted value against realised return (docs/diagnostics.md).

Shapes: S segments, T tokens. ``values[s, t] = V(tokens_<t)`` (CONTRACTS.md
alignment); ``mask`` (S, T) bool marks trainable tokens.
"""

from __future__ import annotations

from typing import Literal

import torch

from cxsim.advantages import stitched_gae
from cxsim.diagnostics._common import (
    check_per_row,
    check_per_token,
    explained_variance,
    group_sums,
    safe_div,
    to_floats,
    token_distance,
)

Where = Literal["first", "all"]


def monte_carlo_returns(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    rollout_id: torch.Tensor,
    segment_index: torch.Tensor,
    gamma: float,
    step_rewards: torch.Tensor | None = None,
) -> torch.Tensor:  # (S, T) float
    """Realised return of each trainable token: ``gamma^d R + sum_j gamma^(d - d_j) r_j``.

    ``d`` is the token's trainable-token distance to the end of the rollout, ``R``
    (``rewards``, (S,)) the terminal reward, and the sum runs over the rollout's step
    rewards ``r_j`` (``step_rewards``, (S, T): each at the last token of the response that
    earned it) at this token and the masked tokens after it, in any later segment, ``d_j``
    their distance. This is what the critic's value estimates with time steps the
    trainable tokens (GAE's clock); a step reward off ``mask`` is left out, as GAE leaves
    it. 0 where ``mask`` is False.
    """
    check_per_row("rewards", rewards, mask)
    dist = token_distance(mask, rollout_id, segment_index).to(rewards.dtype)
    discount = torch.pow(torch.as_tensor(gamma, dtype=rewards.dtype), dist)
    returns = torch.where(mask, discount * rewards[:, None], 0.0)
    if step_rewards is None:
        return returns
    check_per_token("step_rewards", step_rewards, mask)
    # GAE at lambda 1 over the rollout's tokens in order with V = 0 and R = 0: the
    # discounted sum of the step rewards from each token on
    steps = stitched_gae(
        torch.zeros_like(returns), mask, torch.zeros_like(rewards), rollout_id, segment_index,
        gamma, 1.0, step_rewards=step_rewards.to(rewards.dtype),
    )  # fmt: skip
    return returns + steps


def _pairs(
    values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, where: Where
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(predicted, realised, row) for each scored position."""
    if where == "first":
        rows = torch.nonzero(mask.any(dim=1)).squeeze(1)
        first = mask.long().argmax(dim=1)[rows]  # first True of each row
        return values[rows, first], returns[rows, first], rows
    if where == "all":
        rows = torch.nonzero(mask)[:, 0]
        return values[mask], returns[mask], rows
    raise ValueError(f"where must be 'first' or 'all', got {where!r}")


def critic_calibration(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    segment_index: torch.Tensor,
    where: Where = "first",
    num_bins: int = 10,
    value_range: tuple[float, float] | None = None,
) -> dict[str, float]:
    """Reliability, expected calibration error and explained variance, by segment index.

    ``where="first"`` scores each segment once, at its first trainable token:
    the value of the segment's start state (its prompt), which is what
    stitched GAE bootstraps from at a boundary. ``where="all"`` scores every
    trainable token. ``returns`` (S, T) is the realised return, e.g.
    :func:`monte_carlo_returns` with the batch's step rewards (not the bootstrapped
    critic target).

    With pairs ``(V_j, R_j)`` placed in ``num_bins`` equal-width bins of V over
    ``value_range`` (default: the range of V in the batch):

    - ``critic/ece`` = ``sum_b (n_b / n) |mean_b V - mean_b R|``;
    - ``critic/mc_ev`` = ``1 - Var(R - V) / Var(R)`` (1: exact; 0: no better than
      a constant; negative: worse than one); left out when ``Var(R) = 0``;
    - ``critic/bias`` = ``mean(V - R)``; ``critic/count``;
    - ``critic/bin{b}_pred``, ``critic/bin{b}_real``, ``critic/bin{b}_count``:
      the reliability diagram (a calibrated critic has pred = real);
    - ``critic/ece_seg{k}``, ``critic/mc_ev_seg{k}``, ``critic/bias_seg{k}``,
      ``critic/count_seg{k}`` over the segments at index k (same bins).
    """
    check_per_token("values", values, mask)
    check_per_token("returns", returns, mask)
    check_per_row("segment_index", segment_index, mask)
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    pred, real, rows = _pairs(values.detach().double(), returns.double(), mask, where)
    seg = segment_index[rows]
    if value_range is None:
        lo, hi = (pred.min(), pred.max()) if pred.numel() else (pred.new_zeros(()),) * 2
    else:
        lo, hi = (pred.new_tensor(value_range[0]), pred.new_tensor(value_range[1]))
    width = torch.where(hi > lo, (hi - lo) / num_bins, 1.0)
    bins = ((pred - lo) / width).floor().long().clamp(0, num_bins - 1)

    def block(sel: torch.Tensor, suffix: str, reliability: bool) -> dict[str, torch.Tensor]:
        p, r, b = pred[sel], real[sel], bins[sel]
        n_b = group_sums(torch.ones_like(p), b, num_bins)
        pred_b = safe_div(group_sums(p, b, num_bins), n_b)
        real_b = safe_div(group_sums(r, b, num_bins), n_b)
        gap = torch.where(n_b > 0, (pred_b - real_b).abs(), 0.0)
        out = {
            f"critic/ece{suffix}": safe_div((n_b * gap).sum(), n_b.sum()),
            f"critic/mc_ev{suffix}": explained_variance(p, r),
            f"critic/bias{suffix}": (p - r).mean() if p.numel() else p.new_tensor(torch.nan),
            f"critic/count{suffix}": n_b.sum(),
        }
        if reliability:
            for i in range(num_bins):
                out[f"critic/bin{i}_pred"] = pred_b[i]
                out[f"critic/bin{i}_real"] = real_b[i]
                out[f"critic/bin{i}_count"] = n_b[i]
        return out

    stats = block(torch.ones_like(seg, dtype=torch.bool), "", reliability=True)
    for k in range(int(segment_index.max()) + 1):
        stats.update(block(seg == k, f"_seg{k}", reliability=False))
    return to_floats(stats)

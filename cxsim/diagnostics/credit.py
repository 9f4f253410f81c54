"""Credit decay: how much advantage reaches early segments (docs/diagnostics.md).

Under the cross-segment correction the terminal reward reaches token ``(s, i)``
discounted by ``(gamma lambda)^(N_{>s} + n_s - i)``; with lambda < 1 and long
rollouts, early segments (and the summaries written early) receive almost no
credit. These functions measure that on the advantages actually trained on.

Shapes: S segments (rows), T tokens. ``mask`` (S, T) bool marks the tokens that
enter the policy loss (``SegmentBatch.policy_mask(...)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cxsim.advantages import tokens_after
from cxsim.diagnostics._common import (
    check_per_row,
    check_per_token,
    group_sums,
    last_segment,
    safe_div,
    same_rollout,
    to_floats,
    token_distance,
)


def distance_edges(max_distance: int) -> list[int]:
    """Default bin edges for token distance: 0, 1, 2, 4, 8, ... past ``max_distance``.

    Bin ``[edges[b], edges[b + 1])``; geometric bins suit a geometric decay.
    """
    edges = [0, 1]
    while edges[-1] <= max_distance:
        edges.append(edges[-1] * 2)
    return edges


def summary_ordinal(
    is_summary: torch.Tensor, rollout_id: torch.Tensor, segment_index: torch.Tensor
) -> torch.Tensor:  # (S,) long
    """For summary rows, how many summaries precede it in its rollout (0 = first
    compaction); -1 for execution rows."""
    earlier = same_rollout(rollout_id) & (segment_index[None, :] < segment_index[:, None])
    ordinal = (earlier & is_summary[None, :]).sum(dim=1)
    return torch.where(is_summary, ordinal, -1)


def credit_decay(
    advantages: torch.Tensor,
    mask: torch.Tensor,
    is_summary: torch.Tensor,
    rollout_id: torch.Tensor,
    segment_index: torch.Tensor,
    edges: list[int] | None = None,
) -> dict[str, float]:
    """Mean |A| by segment index, role, token distance to the end, and summary order.

    Means are pooled over masked tokens (each token one vote). Keys:

    - ``credit/abs_adv``, ``credit/abs_adv_execution``, ``credit/abs_adv_summary``;
    - ``credit/abs_adv_seg{k}`` and ``credit/adv_seg{k}`` (signed) by segment index k;
    - ``credit/decay_seg{k}`` = ``abs_adv_seg{k} / abs_adv_last``: the empirical
      effective discount, where ``abs_adv_last`` (also logged as
      ``credit/abs_adv_last``) pools the last trainable segment of every
      rollout. For advantages ``A_{s,i} = c (gamma lambda)^{N_{>s}}`` on
      rollouts of one shape, ``decay_seg{k} = (gamma lambda)^{N_{>k}}``;
    - ``credit/abs_adv_dist{lo}``: tokens whose trainable-token distance to
      the end of the rollout lies in ``[lo, next edge)`` (edges default to
      :func:`distance_edges`);
    - ``credit/abs_adv_summary{j}``: the j-th summary of each rollout;
      ``credit/summary_first``, ``credit/summary_last`` and
      ``credit/summary_first_over_last``: first against last summary, over the
      rollouts with at least two trainable summaries.

    Keys of empty groups are left out.
    """
    check_per_token("advantages", advantages, mask)
    for name, x in (("is_summary", is_summary), ("rollout_id", rollout_id)):
        check_per_row(name, x, mask)
    check_per_row("segment_index", segment_index, mask)
    w = mask.to(advantages.dtype)
    rows = _RowSums(
        abs=(advantages.abs() * w).sum(dim=1), signed=(advantages * w).sum(dim=1), n=w.sum(dim=1)
    )
    stats: dict[str, torch.Tensor] = {
        "credit/abs_adv": safe_div(rows.abs.sum(), rows.n.sum()),
        "credit/abs_adv_execution": rows.pooled(~is_summary),
        "credit/abs_adv_summary": rows.pooled(is_summary),
    }
    stats |= _by_segment(rows, mask, rollout_id, segment_index)
    stats |= _by_distance(advantages, mask, rollout_id, segment_index, edges)
    stats |= _by_summary(rows, mask, is_summary, rollout_id, segment_index)
    return to_floats(stats)


@dataclass(frozen=True)
class _RowSums:
    """Per-row sums over masked tokens: |A|, A and the token count, each (S,)."""

    abs: torch.Tensor
    signed: torch.Tensor
    n: torch.Tensor

    def pooled(self, rows: torch.Tensor) -> torch.Tensor:
        """Mean |A| over the masked tokens of the selected rows."""
        return safe_div(self.abs[rows].sum(), self.n[rows].sum())


def _by_segment(rows: _RowSums, mask, rollout_id, segment_index) -> dict[str, torch.Tensor]:
    """|A| and A by segment index, and the decay relative to each rollout's last segment."""
    abs_last = rows.pooled(last_segment(mask, rollout_id, segment_index))
    stats = {"credit/abs_adv_last": abs_last}
    num_k = int(segment_index.max()) + 1
    count = group_sums(rows.n, segment_index, num_k)
    seg_abs = safe_div(group_sums(rows.abs, segment_index, num_k), count)
    seg_signed = safe_div(group_sums(rows.signed, segment_index, num_k), count)
    for k in range(num_k):
        stats[f"credit/abs_adv_seg{k}"] = seg_abs[k]
        stats[f"credit/adv_seg{k}"] = seg_signed[k]
        stats[f"credit/decay_seg{k}"] = safe_div(seg_abs[k], abs_last)
    return stats


def _by_distance(
    advantages, mask, rollout_id, segment_index, edges: list[int] | None
) -> dict[str, torch.Tensor]:
    """|A| by the token's trainable-token distance to the end of its rollout, binned."""
    dist = token_distance(mask, rollout_id, segment_index)
    if edges is None:
        edges = distance_edges(int(dist[mask].max()) if bool(mask.any()) else 0)
    bounds = torch.tensor(edges, device=dist.device)
    bins = torch.bucketize(dist[mask], bounds, right=True) - 1  # bin b: [edges[b], edges[b+1])
    num_bins = len(edges) - 1
    inside = (bins >= 0) & (bins < num_bins)
    abs_masked = advantages.abs()[mask][inside]
    bins = bins[inside]
    dist_abs = safe_div(
        group_sums(abs_masked, bins, num_bins),
        group_sums(torch.ones_like(abs_masked), bins, num_bins),
    )
    return {f"credit/abs_adv_dist{edges[b]}": dist_abs[b] for b in range(num_bins)}


def _by_summary(
    rows: _RowSums, mask, is_summary, rollout_id, segment_index
) -> dict[str, torch.Tensor]:
    """|A| of the j-th summary of each rollout, and first against last summary."""
    trainable_summary = is_summary & mask.any(dim=1)
    ordinal = summary_ordinal(trainable_summary, rollout_id, segment_index)
    stats = {
        f"credit/abs_adv_summary{j}": rows.pooled(ordinal == j)
        for j in range(int(ordinal.max()) + 1)
    }
    # first vs last summary within the same rollouts, so rollout length does not confound
    num_summaries = (same_rollout(rollout_id) & trainable_summary[None, :]).sum(dim=1)
    multi = num_summaries >= 2
    first = rows.pooled(multi & (ordinal == 0))
    last = rows.pooled(multi & (ordinal == num_summaries - 1))
    stats["credit/summary_first"] = first
    stats["credit/summary_last"] = last
    stats["credit/summary_first_over_last"] = safe_div(first, last)
    return stats


def applied_discount(
    mask: torch.Tensor,
    rollout_id: torch.Tensor,
    segment_index: torch.Tensor,
    gamma: float,
    lam: float | torch.Tensor,
) -> torch.Tensor:  # (S,)
    """The cross-segment correction factor ``(gamma lambda_s)^{N_{>s}}`` (docs/method.md section 3).

    ``lam`` is a float or an (S,) tensor (length-adaptive lambda), as in
    ``cxsim.advantages.cross_segment_gae``; ``N_{>s}`` counts masked tokens in
    later segments of the same rollout. Float64; it underflows to 0 for long
    rollouts (``credit/log10_discount_seg{k}`` stays readable).
    """
    n_after = tokens_after(mask, rollout_id, segment_index).to(torch.float64)
    gl = gamma * torch.as_tensor(lam, dtype=torch.float64, device=mask.device)
    return torch.pow(gl, n_after)


def discount_by_segment(
    mask: torch.Tensor,
    rollout_id: torch.Tensor,
    segment_index: torch.Tensor,
    gamma: float,
    lam: float | torch.Tensor,
) -> dict[str, float]:
    """``credit/discount_seg{k}``: mean over segments at index k of the factor
    :func:`applied_discount` (the discount the estimator applied, as opposed to
    the empirical ``credit/decay_seg{k}``), and ``credit/log10_discount_seg{k}``,
    readable where the factor underflows."""
    factor = applied_discount(mask, rollout_id, segment_index, gamma, lam)
    n_after = tokens_after(mask, rollout_id, segment_index).to(torch.float64)
    gl = gamma * torch.as_tensor(lam, dtype=torch.float64, device=mask.device)
    log10 = n_after * torch.log10(gl) * torch.ones_like(factor)
    log10 = torch.where(n_after > 0, log10, 0.0)
    rows = mask.any(dim=1)
    num_k = int(segment_index.max()) + 1
    idx = segment_index[rows]
    count = group_sums(torch.ones_like(factor[rows]), idx, num_k)
    mean_factor = safe_div(group_sums(factor[rows], idx, num_k), count)
    mean_log10 = safe_div(group_sums(log10[rows], idx, num_k), count)
    stats: dict[str, torch.Tensor] = {}
    for k in range(num_k):
        stats[f"credit/discount_seg{k}"] = mean_factor[k]
        stats[f"credit/log10_discount_seg{k}"] = mean_log10[k]
    return to_floats(stats)

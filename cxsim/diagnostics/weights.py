"""Segment weights: each segment's share of the gradient under each loss mode.

The policy loss is ``aggregate(l, mask, mode)`` (``cxsim.losses``), linear in
the per-token loss ``l``, so token ``(s, t)`` enters the gradient with the
weight ``w_{s,t} = d aggregate / d l_{s,t}``, whatever ``l`` is. Summed over a
segment, ``W_s = sum_t w_{s,t}``; the segment's share is ``W_s / sum_j W_j``.
Under ``token-mean`` long execution windows dominate and short summaries get
little weight; under ``segment-mean`` every segment gets ``1/S'``.

Shapes: S segments, T tokens; ``mask`` (S, T) bool (the policy mask).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cxsim.diagnostics._common import (
    check_per_row,
    group_sums,
    safe_div,
    segment_counts,
    to_floats,
)
from cxsim.loss_modes import LOSS_MODES, role_keywords
from cxsim.losses import aggregate

# Histogram of share relative to uniform (share * S'): bins centred on powers of
# two, edges at 2^(k +- 1/2); the outer bins are open.
SHARE_BIN_CENTRES: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
SHARE_BIN_LABELS: tuple[str, ...] = ("0.125x", "0.25x", "0.5x", "1x", "2x", "4x", "8x")


def token_weights(
    mask: torch.Tensor,
    mode: str,
    rollout_id: torch.Tensor,
    is_summary: torch.Tensor | None = None,
) -> torch.Tensor:
    """Closed-form gradient weight of every token under ``mode`` (S, T), float64: the
    mode's own ``weights`` in :data:`cxsim.loss_modes.LOSS_MODES` (token-mean ``1/|M|``;
    segment-mean ``1/(S' n_s)``; rollout-mean ``1/(R' N_tau)``; seq-mean-token-sum
    ``1/S'``). Zero off the mask. Equals :func:`token_weights_autograd` (tested).
    ``is_summary`` (S,): each row's role, for the modes that read it (``summary-loss``).
    """
    check_per_row("rollout_id", rollout_id, mask)
    if mode not in LOSS_MODES:
        raise ValueError(f"mode must be one of {tuple(LOSS_MODES)}, got {mode!r}")
    spec = LOSS_MODES[mode]
    return spec.weights(mask, rollout_id, **role_keywords(spec, is_summary))


def token_weights_autograd(mask: torch.Tensor, mode: str, rollout_id: torch.Tensor) -> torch.Tensor:
    """Gradient weight of every token as ``d aggregate(l, mask, mode) / d l`` at ``l = 1``
    (S, T), float64: the reference for :func:`token_weights`."""
    loss = torch.ones(mask.shape, dtype=torch.float64, device=mask.device, requires_grad=True)
    (grad,) = torch.autograd.grad(aggregate(loss, mask, mode, rollout_id), loss)
    return grad


def gini(x: torch.Tensor) -> torch.Tensor:
    """Gini coefficient of non-negative ``x`` (N,): 0 when equal, ``1 - 1/N`` when
    one entry holds everything. ``sum_i (2i - N - 1) x_(i) / (N sum x)``, x sorted."""
    n = x.numel()
    xs = x.sort().values
    i = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)
    return safe_div(((2 * i - n - 1) * xs).sum(), n * xs.sum())


@dataclass
class SegmentWeights:
    """Per-segment shares under one loss mode, over the S' segments with a masked token."""

    mode: str
    shares: torch.Tensor  # (S',) float64, sums to 1; for TensorBoard's add_histogram
    rows: torch.Tensor  # (S',) long, their rows in the batch
    counts: torch.Tensor  # (len(SHARE_BIN_CENTRES),) long: histogram of shares * S'
    stats: dict[str, torch.Tensor]  # 0-dim tensors, keys as in :meth:`as_dict`

    def as_dict(self) -> dict[str, float]:
        return to_floats(self.stats)


def segment_weights(
    mask: torch.Tensor,
    mode: str,
    rollout_id: torch.Tensor,
    is_summary: torch.Tensor,
    segment_index: torch.Tensor,
) -> SegmentWeights:
    """Shares of the gradient weight by segment under ``mode``, with summary statistics.

    Keys (prefix ``weights/{mode}/``): ``max_share``; ``max_rel_share`` (max share
    times S', 1 when uniform); ``gini`` (0 when uniform); ``entropy_ratio``
    (``H(shares) / log S'``, 1 when uniform); ``summary_share`` (total share of
    summary segments); ``share_seg{k}`` (total share of the segments at index k);
    ``hist_{c}x``: number of segments whose relative share ``share * S'`` is
    within a factor sqrt(2) of ``c`` (c = 0.125 ... 8, outer bins open).
    """
    for name, x in (("is_summary", is_summary), ("segment_index", segment_index)):
        check_per_row(name, x, mask)
    per_row = token_weights(mask, mode, rollout_id, is_summary).sum(dim=1)
    rows = torch.nonzero(segment_counts(mask) > 0).squeeze(1)
    if rows.numel() == 0:
        raise ValueError("mask has no True entry: no segment carries gradient weight")
    shares = per_row[rows] / per_row[rows].sum()
    num = shares.numel()
    rel = shares * num
    inner_edges = torch.tensor(
        [c * math.sqrt(2) for c in SHARE_BIN_CENTRES[:-1]], dtype=rel.dtype, device=rel.device
    )
    bins = torch.bucketize(rel, inner_edges)
    counts = torch.bincount(bins, minlength=len(SHARE_BIN_CENTRES))
    prefix = f"weights/{mode}/"
    entropy = -(shares * torch.log(shares.clamp(min=1e-300))).sum()
    stats: dict[str, torch.Tensor] = {
        prefix + "max_share": shares.max(),
        prefix + "max_rel_share": rel.max(),
        prefix + "gini": gini(shares),
        prefix + "entropy_ratio": entropy / math.log(num) if num > 1 else shares.new_tensor(1.0),
        prefix + "summary_share": shares[is_summary[rows]].sum(),
    }
    num_k = int(segment_index.max()) + 1
    by_k = group_sums(shares, segment_index[rows], num_k)
    for k in range(num_k):
        stats[prefix + f"share_seg{k}"] = by_k[k]
    for label, count in zip(SHARE_BIN_LABELS, counts, strict=True):
        stats[prefix + f"hist_{label}"] = count
    return SegmentWeights(mode=mode, shares=shares, rows=rows, counts=counts, stats=stats)


def segment_weight_stats(
    mask: torch.Tensor,
    rollout_id: torch.Tensor,
    is_summary: torch.Tensor,
    segment_index: torch.Tensor,
    modes: tuple[str, ...] | None = None,
) -> dict[str, float]:
    """:func:`segment_weights` for each mode, merged into one flat dict."""
    out: dict[str, float] = {}
    for mode in LOSS_MODES if modes is None else modes:
        out.update(segment_weights(mask, mode, rollout_id, is_summary, segment_index).as_dict())
    return out

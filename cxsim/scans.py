"""Row primitives shared by the estimators and the losses: a log-depth reverse linear
scan, and sort-based grouping of rows by an integer id.

Every function is a pure tensor op with no Python loop over rows or tokens and
no host synchronisation, so the same code runs on CPU and GPU, and gradients
flow through the sums (the losses use :func:`per_group_sum`). Ids may be any
integers, in any row order.
"""

from __future__ import annotations

import torch


def reverse_linear_scan(coef: torch.Tensor, delta: torch.Tensor, span: int) -> torch.Tensor:
    """Solves ``A_t = delta_t + coef_t * A_{t+1}`` along a 1-D sequence, ``A_L = 0``.

    Hillis-Steele scan: after the round with offset ``k`` each position holds
    ``(C_t, D_t)`` with ``A_t = D_t + C_t * A_{t+2k}``; ``ceil(log2 span)``
    rounds, where ``span`` bounds the length of every chain (a chain ends at a
    ``coef_t = 0``). Several sequences can thus share one flat tensor: a zero
    coefficient at each one's end zeroes every product that reaches past it.
    Products of coefficients only shrink toward their true value (no division),
    so ``q**2048`` underflowing to 0 is harmless.
    """
    c, d = coef, delta
    k = 1
    while k < span:
        # Out of place, so that sums of losses (per_group_sum) stay differentiable.
        d = torch.cat([torch.addcmul(d[:-k], c[:-k], d[k:]), d[-k:]])
        if 2 * k < span:
            c = torch.cat([c[:-k] * c[k:], c[-k:]])
        k *= 2
    return d


def next_index(mask: torch.Tensor) -> torch.Tensor:
    """For each position t, the smallest t' > t with ``mask[..., t']``, else L. Shape of mask."""
    length = mask.shape[-1]
    pos = torch.arange(length, device=mask.device).expand_as(mask)
    marked = torch.where(mask, pos, torch.full_like(pos, length))
    # suffix minimum over t' >= t, then shift by one for t' > t
    suffix_min = torch.flip(torch.cummin(torch.flip(marked, [-1]), dim=-1).values, [-1])
    tail = torch.full_like(suffix_min[..., :1], length)
    return torch.cat([suffix_min[..., 1:], tail], dim=-1)


def rollout_order(rollout_id: torch.Tensor, segment_index: torch.Tensor) -> torch.Tensor:
    """(S,) permutation sorting rows by (rollout_id, segment_index)."""
    by_segment = torch.sort(segment_index, stable=True).indices
    by_rollout = torch.sort(rollout_id[by_segment], stable=True).indices
    return by_segment[by_rollout]


def last_in_run(keys_sorted: torch.Tensor) -> torch.Tensor:
    """For sorted keys, the index of the last element of each element's run of equal keys."""
    n = keys_sorted.shape[0]
    pos = torch.arange(n, device=keys_sorted.device)
    is_last = torch.ones(n, dtype=torch.bool, device=keys_sorted.device)
    is_last[:-1] = keys_sorted[1:] != keys_sorted[:-1]
    marked = torch.where(is_last, pos, torch.full_like(pos, n))
    return torch.flip(torch.cummin(torch.flip(marked, [0]), dim=0).values, [0])


def first_in_run(keys_sorted: torch.Tensor) -> torch.Tensor:
    """For sorted keys, the index of the first element of each element's run of equal keys."""
    n = keys_sorted.shape[0]
    pos = torch.arange(n, device=keys_sorted.device)
    is_first = torch.ones(n, dtype=torch.bool, device=keys_sorted.device)
    is_first[1:] = keys_sorted[1:] != keys_sorted[:-1]
    return torch.cummax(torch.where(is_first, pos, torch.zeros_like(pos)), dim=0).values


def per_group_sum(x: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """(S,) -> (S,): for each row, the sum of ``x`` over all rows with the same ``group``.

    Sort-based, so ids may be any integers and no host sync is needed. The sum
    is a segmented scan (no global prefix sums whose difference would lose
    float precision), deterministic on every device.
    """
    order = torch.sort(group, stable=True).indices
    keys = group[order]
    same_as_next = torch.zeros_like(keys, dtype=torch.bool)
    same_as_next[:-1] = keys[1:] == keys[:-1]
    suffix = reverse_linear_scan(same_as_next.to(x.dtype), x[order], span=x.shape[0])
    out = torch.empty_like(suffix)
    out[order] = suffix[first_in_run(keys)]
    return out


def first_in_group(group: torch.Tensor) -> torch.Tensor:
    """(S,) bool: True on exactly one row of each group (its first row in row order)."""
    order = torch.sort(group, stable=True).indices
    keys = group[order]
    is_first = torch.ones_like(keys, dtype=torch.bool)
    is_first[1:] = keys[1:] != keys[:-1]
    out = torch.empty_like(is_first)
    out[order] = is_first
    return out

"""cxsim's own estimators and reduction behind every layout: the adapters of docs/conformance.md.

Each function has the exact signature the check calls for its layout and
quantity, and forwards to ``cxsim.advantages`` / ``cxsim.losses``. They pass
the check (``tests/test_conformance.py``) and show how a user wraps a function
whose layout differs. Run one with, for example::

    cxsim conform cxsim.conformance.adapters:cross_segment_gae_samples \\
        --quantity cross-segment-gae --layout samples
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from cxsim.advantages import (
    adaptive_lambda,
    cross_segment_gae,
    group_broadcast,
    segment_gae,
    stitched_gae,
)
from cxsim.estimators import split_over_chains
from cxsim.loss_modes import LOSS_MODES
from cxsim.loss_weighting import row_weights
from cxsim.losses import aggregate

Lam = float | torch.Tensor


def _lam(lam: float | None, trainable, rollout_id, alpha: float, scope: str) -> Lam:
    if lam is not None:
        return lam
    return adaptive_lambda(trainable, rollout_id, scope, alpha).double()


# --------------------------------------------------------------------------- segment rows


def local_gae_rows(
    values, response_mask, attention_mask, rewards, rollout_id, segment_index, gamma, lam, alpha,
    lambda_scope,
) -> torch.Tensor:  # fmt: skip
    lam_used = _lam(lam, response_mask, rollout_id, alpha, lambda_scope)
    return segment_gae(values, response_mask, rewards, gamma, lam_used)


def _segmented_rows(estimator: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def adapter(
        values, response_mask, attention_mask, rewards, rollout_id, segment_index, gamma, lam,
        alpha, lambda_scope,
    ) -> torch.Tensor:  # fmt: skip
        lam_used = _lam(lam, response_mask, rollout_id, alpha, lambda_scope)
        return estimator(values, response_mask, rewards, rollout_id, segment_index, gamma, lam_used)

    return adapter


cross_segment_gae_rows = _segmented_rows(cross_segment_gae)
stitched_gae_rows = _segmented_rows(stitched_gae)


def group_broadcast_rows(
    rewards, response_mask, attention_mask, rollout_id, group_id, eps
) -> torch.Tensor:
    return group_broadcast(rewards, response_mask, rollout_id, group_id, eps=eps)


def chain_split_rows(
    rewards, response_mask, attention_mask, rollout_id, segment_index
) -> torch.Tensor:
    return split_over_chains(rewards, response_mask, rollout_id)


def adaptive_lambda_rows(
    response_mask, attention_mask, rollout_id, alpha, lambda_scope
) -> torch.Tensor:
    return adaptive_lambda(response_mask, rollout_id, lambda_scope, alpha)


# --------------------------------------------------------------------------- rollout rows


def _from_rollout_rows(estimator: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Adapter: cuts each rollout row at its segment ids into segment rows, and back."""

    def adapter(
        values, response_mask, attention_mask, segment_ids, rewards, gamma, lam, alpha,
        lambda_scope,
    ) -> torch.Tensor:  # fmt: skip
        pieces = [
            (r, int(k), (segment_ids[r] == k).nonzero().flatten())
            for r in range(values.shape[0])
            for k in segment_ids[r].unique()
            if k >= 0
        ]
        width = max(len(cols) for _, _, cols in pieces)
        rows = len(pieces)
        seg_values = values.new_zeros(rows, width)
        seg_mask = torch.zeros(rows, width, dtype=torch.bool)
        for i, (r, _, cols) in enumerate(pieces):
            seg_values[i, : len(cols)] = values[r, cols]
            seg_mask[i, : len(cols)] = response_mask[r, cols]
        rollout_id = torch.tensor([r for r, _, _ in pieces])
        segment_index = torch.tensor([k for _, k, _ in pieces])
        seg_rewards = rewards[rollout_id].to(values.dtype)
        out = estimator(
            seg_values, seg_mask, seg_mask, seg_rewards, rollout_id, segment_index, gamma, lam,
            alpha, lambda_scope,
        )  # fmt: skip
        back = torch.zeros_like(values)
        for i, (r, _, cols) in enumerate(pieces):
            back[r, cols] = out[i, : len(cols)]
        return back

    return adapter


local_gae_rollout_rows = _from_rollout_rows(local_gae_rows)
cross_segment_gae_rollout_rows = _from_rollout_rows(cross_segment_gae_rows)
stitched_gae_rollout_rows = _from_rollout_rows(stitched_gae_rows)


# --------------------------------------------------------------------------- samples


def _pad(samples: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    width = max(len(s) for s in samples)
    out = torch.zeros(len(samples), width, dtype=dtype)
    for i, s in enumerate(samples):
        out[i, : len(s)] = torch.as_tensor(s, dtype=dtype)
    return out


def _unpad(padded: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    return [padded[i, :n] for i, n in enumerate(lengths)]


def _from_samples(estimator: Callable[..., torch.Tensor]) -> Callable[..., list[torch.Tensor]]:
    """Adapter: pads the samples into segment rows (tokens_after is recomputed by cxsim)."""

    def adapter(
        values, loss_masks, rewards, response_lengths, rollout_ids, segment_indices,
        trainable_counts, tokens_after, gamma, lam, alpha, lambda_scope,
    ) -> list[torch.Tensor]:  # fmt: skip
        mask = _pad(loss_masks, torch.bool)
        out = estimator(
            _pad(values, torch.float64), mask, mask,
            torch.tensor(rewards, dtype=torch.float64), torch.tensor(rollout_ids),
            torch.tensor(segment_indices), gamma, lam, alpha, lambda_scope,
        )  # fmt: skip
        return _unpad(out, response_lengths)

    return adapter


local_gae_samples = _from_samples(local_gae_rows)
cross_segment_gae_samples = _from_samples(cross_segment_gae_rows)
stitched_gae_samples = _from_samples(stitched_gae_rows)


def group_broadcast_samples(
    rewards, loss_masks, response_lengths, rollout_ids, group_ids, eps
) -> list[torch.Tensor]:
    mask = _pad(loss_masks, torch.bool)
    out = group_broadcast(
        torch.tensor(rewards, dtype=torch.float64),
        mask,
        torch.tensor(rollout_ids),
        torch.tensor(group_ids),
        eps=eps,
    )
    return _unpad(out, response_lengths)


def chain_split_samples(
    rewards, loss_masks, response_lengths, rollout_ids, segment_indices
) -> list[torch.Tensor]:
    mask = _pad(loss_masks, torch.bool)
    out = split_over_chains(
        torch.tensor(rewards, dtype=torch.float64), mask, torch.tensor(rollout_ids)
    )
    return _unpad(out, response_lengths)


def adaptive_lambda_samples(
    loss_masks, response_lengths, rollout_ids, trainable_counts, alpha, lambda_scope
) -> torch.Tensor:
    return adaptive_lambda(
        _pad(loss_masks, torch.bool), torch.tensor(rollout_ids), lambda_scope, alpha
    )


# --------------------------------------------------------------------------- loss matrix


def reduce_micro_batches(losses, masks, rollout_ids, mode) -> torch.Tensor:
    """Sum over micro-batches of ``aggregate`` with global denominators (what the update does):
    the mode's count and per-rollout figure over the whole batch (``LOSS_MODES[mode]``)."""
    whole_mask = torch.cat(masks)
    whole_ids = torch.cat(rollout_ids)
    spec = LOSS_MODES[mode]
    denominator = spec.count(whole_mask, whole_ids).to(torch.float64).clamp(min=1.0)
    figures = spec.rollout_figures(whole_mask, whole_ids) if spec.divides_by_rollout else None
    total = torch.zeros((), dtype=torch.float64)
    start = 0
    for loss, mask, rid in zip(losses, masks, rollout_ids, strict=True):
        rows = slice(start, start + len(loss))
        part = None if figures is None else figures[rows]
        total = total + aggregate(loss, mask, mode, rid, denominator, part)
        start += len(loss)
    return total


# --------------------------------------------------------------------------- row weights


def row_weights_micro_batches(masks, attention_masks, rollout_ids, rule) -> list[torch.Tensor]:
    """cxsim's per-row weight column (``cxsim.loss_weighting.row_weights``) over the whole
    batch, handed back cut into its micro-batches."""
    whole = row_weights(torch.cat(masks), torch.cat(rollout_ids), rule)
    return list(whole.split([len(m) for m in masks]))

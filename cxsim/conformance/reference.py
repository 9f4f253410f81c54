"""The reference each quantity is compared with: cxsim's own estimators and reduction in float64.

Every reference is a call into ``cxsim.advantages`` / ``cxsim.losses`` on a
canonical :class:`~cxsim.conformance.batches.Batch` (the GAE estimators with its step
rewards, as the trainer passes them), except ``chain-split``, the
credit rule of :func:`cxsim.conformance.rules.chain_split` (its estimator in
:mod:`cxsim.estimators` is tested against it). The one piece computed
here is the length-adaptive lambda fed to the GAE references: the same
formula as :func:`cxsim.advantages.adaptive_lambda` (``1 - 1/(alpha l)``, ``l``
trainable tokens only, clamped at 0) but in float64, because
``adaptive_lambda`` returns float32 and its rounding, raised to exponents in the
thousands, would otherwise dominate the comparison; the ``adaptive-lambda``
quantity is compared with the same float64 form (tests check that it agrees
with ``adaptive_lambda`` to float32 precision).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from cxsim.advantages import (
    cross_segment_gae,
    group_broadcast,
    segment_gae,
    stitched_gae,
)
from cxsim.conformance.batches import Batch
from cxsim.losses import aggregate
from cxsim.scans import per_group_sum

Reference = Callable[[Batch, "str | None"], torch.Tensor]
"""A quantity's reference: (batch, mode) -> the expected output in canonical form."""

GROUP_EPS = 1e-6
"""``eps`` of the group-broadcast reference (``(R - mean) / (std + eps)``)."""


def lambda_rows(
    batch: Batch,
    lengths: str = "trainable",
    scope: str | None = None,
    clamp: bool = True,
    cap: float | None = None,
) -> torch.Tensor:
    """(S,) float64 lambda of each segment: ``batch.lam``, or ``1 - 1/(alpha l)`` if adaptive.

    The keyword arguments describe wrong forms for the diagnosis: ``lengths="response"``
    counts observation tokens in ``l``, ``clamp=False`` lets lambda go negative,
    ``cap`` caps it, ``scope`` overrides ``batch.scope``.
    """
    if batch.lam is not None:
        return torch.full((batch.num_rows,), batch.lam, dtype=torch.float64)
    mask = batch.trainable if lengths == "trainable" else batch.response
    length = mask.sum(dim=1).to(torch.float64)
    if (scope or batch.scope) == "rollout":
        length = per_group_sum(length, batch.rollout_id)
    lam = 1.0 - 1.0 / (batch.alpha * length)
    if clamp:
        lam = lam.clamp(min=0.0)
    if cap is not None:
        lam = lam.clamp(max=cap)
    return lam


def _segmented(estimator: Callable[..., torch.Tensor]) -> Reference:
    def reference(batch: Batch, mode: str | None = None) -> torch.Tensor:
        return estimator(
            batch.values,
            batch.trainable,
            batch.rewards,
            batch.rollout_id,
            batch.segment_index,
            batch.gamma,
            lambda_rows(batch),
            step_rewards=batch.step_rewards,
            parent_index=batch.parent_index,
        )

    return reference


def local_gae(batch: Batch, mode: str | None = None) -> torch.Tensor:
    """``local-gae``: :func:`cxsim.advantages.segment_gae`, each segment on its own."""
    return segment_gae(
        batch.values,
        batch.trainable,
        batch.rewards,
        batch.gamma,
        lambda_rows(batch),
        step_rewards=batch.step_rewards,
    )


cross_segment = _segmented(cross_segment_gae)
"""``cross-segment-gae``: :func:`cxsim.advantages.cross_segment_gae`."""
stitched = _segmented(stitched_gae)
"""``stitched-gae``: :func:`cxsim.advantages.stitched_gae`."""


def broadcast(batch: Batch, mode: str | None = None) -> torch.Tensor:
    """``group-broadcast``: :func:`cxsim.advantages.group_broadcast` with :data:`GROUP_EPS`."""
    return group_broadcast(
        batch.rewards, batch.trainable, batch.rollout_id, batch.group_id, eps=GROUP_EPS
    )


def chain_split(batch: Batch, mode: str | None = None) -> torch.Tensor:
    """``chain-split``: the credit rule :func:`cxsim.conformance.rules.chain_split`."""
    from cxsim.conformance.rules import chain_split as rule

    return rule(batch.rewards, batch.trainable, batch.rollout_id)


def adaptive_lambda(batch: Batch, mode: str | None = None) -> torch.Tensor:
    """``adaptive-lambda``: the float64 form of ``adaptive_lambda`` (its float32 output agrees
    to 6e-8; tested)."""
    return lambda_rows(replace(batch, lam=None))


def loss_reduction(batch: Batch, mode: str | None) -> torch.Tensor:
    """``loss-reduction``: :func:`cxsim.losses.aggregate` under ``mode``, shape (1,)."""
    if mode is None:
        raise ValueError("loss-reduction needs a mode")
    return aggregate(batch.loss, batch.trainable, mode, batch.rollout_id).reshape(1)


def row_weights(batch: Batch, mode: str | None) -> torch.Tensor:
    """``row-weights``: the weighting rule ``mode``'s per-row weights."""
    from cxsim.conformance.weighting import WEIGHTING_RULES

    if mode not in WEIGHTING_RULES:
        raise ValueError(f"row-weights needs a rule, one of {', '.join(WEIGHTING_RULES)}")
    return WEIGHTING_RULES[mode].weights(batch.trainable, batch.rollout_id)

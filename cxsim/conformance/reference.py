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

GAE_QUANTITIES: tuple[str, ...] = ("local-gae", "cross-segment-gae", "stitched-gae")
QUANTITIES: tuple[str, ...] = (
    *GAE_QUANTITIES,
    "group-broadcast",
    "chain-split",
    "adaptive-lambda",
    "loss-reduction",
    "row-weights",
)
ESTIMATOR_QUANTITIES: dict[str, str] = {
    "local": "local-gae",
    "cross-segment": "cross-segment-gae",
    "stitched": "stitched-gae",
    "group-broadcast": "group-broadcast",
    "chain-split": "chain-split",
}
"""The quantity whose reference each estimator of cxsim's registry (cxsim/estimators.py)
answers to (``cxsim conform NAME``); a plug-in says its own with ``--quantity``."""
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


def _segmented(estimator: Callable[..., torch.Tensor]) -> Callable[[Batch], torch.Tensor]:
    def reference(batch: Batch) -> torch.Tensor:
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


def _local(batch: Batch) -> torch.Tensor:
    return segment_gae(
        batch.values,
        batch.trainable,
        batch.rewards,
        batch.gamma,
        lambda_rows(batch),
        step_rewards=batch.step_rewards,
    )


def _broadcast(batch: Batch) -> torch.Tensor:
    return group_broadcast(
        batch.rewards, batch.trainable, batch.rollout_id, batch.group_id, eps=GROUP_EPS
    )


def _chain_split(batch: Batch) -> torch.Tensor:
    from cxsim.conformance.rules import chain_split

    return chain_split(batch.rewards, batch.trainable, batch.rollout_id)


def _lambda(batch: Batch) -> torch.Tensor:
    # the float64 form of adaptive_lambda (its float32 output agrees to 6e-8; tested)
    return lambda_rows(replace(batch, lam=None))


_REFERENCES: dict[str, Callable[[Batch], torch.Tensor]] = {
    "local-gae": _local,
    "cross-segment-gae": _segmented(cross_segment_gae),
    "stitched-gae": _segmented(stitched_gae),
    "group-broadcast": _broadcast,
    "chain-split": _chain_split,
    "adaptive-lambda": _lambda,
}


def reference(batch: Batch, quantity: str, mode: str | None = None) -> torch.Tensor:
    """The expected output in canonical form: (S, T), (S,) for lambda, (1,) for a reduction."""
    if quantity == "loss-reduction":
        if mode is None:
            raise ValueError("loss-reduction needs a mode")
        return aggregate(batch.loss, batch.trainable, mode, batch.rollout_id).reshape(1)
    if quantity == "row-weights":
        from cxsim.conformance.weighting import WEIGHTING_RULES

        if mode not in WEIGHTING_RULES:
            raise ValueError(f"row-weights needs a rule, one of {', '.join(WEIGHTING_RULES)}")
        return WEIGHTING_RULES[mode].weights(batch.trainable, batch.rollout_id)
    return _REFERENCES[quantity](batch)


def compared_positions(batch: Batch, quantity: str) -> torch.Tensor:
    """Bool mask of the output entries that are compared (the ones a loss ever reads)."""
    if quantity in ("adaptive-lambda", "row-weights"):  # rows with a trainable token
        return batch.trainable.any(dim=1)
    if quantity == "loss-reduction":
        return torch.ones(1, dtype=torch.bool)
    return batch.trainable

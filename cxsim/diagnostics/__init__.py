"""Diagnostics of PPO with context compaction (docs/diagnostics.md).

Pure functions over ``SegmentBatch`` tensors and per-rollout records, each
returning a flat ``dict[str, float]`` whose keys are TensorBoard tags under a
few prefixes (``omission/``, ``survival/``, ``credit/``, ``critic/``, ``weights/``,
``horizon/``, ``gap/``, ``compute/``, ``figures/``). A key is left out when its number is undefined
for the batch (an empty group, a zero variance). Formulas and how to read
each number: ``docs/diagnostics.md``.

Records are ``cxsim.rollout_records.RolloutRecord`` objects or dicts with the same
keys; nothing here imports the runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from cxsim.advantages import cross_segment_gae, stitched_gae
from cxsim.diagnostics._common import as_records, explained_variance
from cxsim.diagnostics.calibration import critic_calibration, monte_carlo_returns
from cxsim.diagnostics.compute import COUNTERS, ComputeMeter
from cxsim.diagnostics.credit import (
    applied_discount,
    credit_decay,
    discount_by_segment,
    distance_edges,
    summary_ordinal,
)
from cxsim.diagnostics.estimator_gap import estimator_gap
from cxsim.diagnostics.figures import entropy_stats, rollout_figures
from cxsim.diagnostics.horizons import HorizonShares, horizon_shares, horizon_stats
from cxsim.diagnostics.omission import stated_ceiling, summary_omission
from cxsim.diagnostics.survival import fact_survival, survival_stats, survival_summary
from cxsim.diagnostics.weights import (
    SegmentWeights,
    gini,
    segment_weight_stats,
    segment_weights,
    token_weights,
    token_weights_autograd,
)
from cxsim.segments import SegmentBatch

__all__ = [
    "COUNTERS",
    "ComputeMeter",
    "HorizonShares",
    "SegmentWeights",
    "applied_discount",
    "credit_decay",
    "critic_calibration",
    "discount_by_segment",
    "distance_edges",
    "entropy_stats",
    "estimator_gap",
    "explained_variance",
    "fact_survival",
    "gini",
    "horizon_shares",
    "horizon_stats",
    "monte_carlo_returns",
    "rollout_figures",
    "segment_weight_stats",
    "segment_weights",
    "summarize_all",
    "summary_omission",
    "summary_ordinal",
    "survival_stats",
    "survival_summary",
    "token_weights",
    "token_weights_autograd",
]


def summarize_all(
    batch: SegmentBatch | None = None,
    records: Sequence[Any | Mapping] | None = None,
    *,
    advantages: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float | torch.Tensor | None = None,
    train_summaries: bool = True,
    modes: tuple[str, ...] | None = None,
    meter: ComputeMeter | None = None,
) -> dict[str, float]:
    """Every diagnostic the given inputs allow, merged into one flat dict.

    - ``records``: summary omission, fact survival by compaction round and the figures'
      per-rollout numbers;
    - ``batch``: segment weights under each of ``modes`` (every registered mode when None),
      and each horizon's (rollouts by window count) share of the gradient under them;
    - ``batch`` + ``advantages`` (S, T), the ones trained on: credit decay;
    - ``batch`` + ``lam``: the discount the cross-segment correction applies;
    - ``batch`` + ``values`` (S, T): critic calibration against the Monte Carlo
      return (``gamma^d R`` plus the discounted step rewards from the token on) at each
      segment's first trainable token;
    - ``batch`` + ``values`` + ``lam``: estimator gap, cross-segment GAE against
      stitched GAE recomputed here from the same values;
    - ``batch`` + ``entropy`` (S, T): policy entropy by role;
    - ``meter``: its totals and rates.

    Every batch quantity uses ``batch.policy_mask(train_summaries)``, the tokens
    the policy loss sees (they also define ``N_{>s}``).
    """
    out: dict[str, float] = {}
    if records is not None:
        out.update(summary_omission(records))
        out.update(stated_ceiling(as_records(records)))
        out.update(survival_stats(records))
        out.update(rollout_figures(records))
    if meter is not None:
        out.update(meter.as_dict())
    if batch is None:
        return out
    mask = batch.policy_mask(train_summaries)
    rid, seg, summ = batch.rollout_id, batch.segment_index, batch.is_summary
    out.update(segment_weight_stats(mask, rid, summ, seg, modes))
    out.update(horizon_stats(mask, rid, summ, modes))
    if advantages is not None:
        out.update(credit_decay(advantages, mask, summ, rid, seg))
    if lam is not None:
        out.update(discount_by_segment(mask, rid, seg, gamma, lam))
    if values is not None:
        steps = {"step_rewards": batch.step_rewards.to(values.dtype)}
        returns = monte_carlo_returns(
            batch.rewards.to(values.dtype), mask, rid, seg, gamma, **steps
        )
        out.update(critic_calibration(values, returns, mask, seg))
        if lam is not None:
            args = (values.detach(), mask, batch.rewards.to(values.dtype), rid, seg, gamma, lam)
            cross, stitched = cross_segment_gae(*args, **steps), stitched_gae(*args, **steps)
            out.update(estimator_gap(cross, stitched, mask, seg))
    if entropy is not None:
        out.update(entropy_stats(entropy, mask, summ))
    return out

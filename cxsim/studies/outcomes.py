"""A study's claims from plain results: each side's per-seed values (an evaluation metric
under the side's protocol, or a metric of its training history), the paired comparisons
(:func:`cxsim.studies.stats.compare`), and the page-level correction over them
(:mod:`cxsim.studies.correction`), as the page and its JSON show them."""

from __future__ import annotations

from typing import Any

from cxsim.studies.correction import corrected
from cxsim.studies.history import iterations_to, success_auc
from cxsim.studies.selection import Selection
from cxsim.studies.spec import BASE, Claim, Side, Study
from cxsim.studies.stats import (
    METRICS,
    THRESHOLD_METRIC,
    TRAINING_METRICS,
    Comparison,
    compare,
    diagnostic,
    interval,
)
from cxsim.tables import NAN_INTERVAL, Interval

Runs = dict[str, dict[str, list[dict[str, Any]]]]
"""``runs[setting][arm]``: one unit result per seed, in seed order (runner.run_unit's dicts)."""


def side_evaluations(runs: Runs, side: Side) -> list[dict[str, Any]]:
    """One side's evaluation result under its protocol (with its summarizer), per seed."""
    return [r["eval"][side.evaluation] for r in runs[side.setting][side.arm]]


def training_value(train: dict[str, Any] | None, metric: str, threshold: float | None) -> float:
    """A training metric of one run (:data:`cxsim.studies.stats.TRAINING_METRICS`) from its
    success curve (:func:`cxsim.studies.history.actor_reductions`); NaN for the base."""
    curve = (train or {}).get("success_curve", [])
    if metric == THRESHOLD_METRIC:
        if threshold is None:
            raise ValueError(f"{THRESHOLD_METRIC} needs a threshold")
        return iterations_to(curve, threshold)
    return success_auc(curve)


def side_results(runs: Runs, side: Side, claim: Claim) -> list[dict[str, Any]]:
    """One side's per-seed results for the claim's metric: its evaluation results, or for a
    training metric ``{metric: value}`` read from each seed's training."""
    if claim.metric not in TRAINING_METRICS:
        return side_evaluations(runs, side)
    return [
        {claim.metric: training_value(r["train"], claim.metric, claim.threshold)}
        for r in runs[side.setting][side.arm]
    ]


def comparison(runs: Runs, claim: Claim) -> Comparison:
    """The claim's two sides paired by seed, before any page-level correction."""
    treatment, reference = (side_results(runs, side, claim) for side in claim.sides)
    return compare(treatment, reference, claim.metric, claim.direction, claim.margin)


def claim_comparisons(
    study: Study, selection: Selection, runs: Runs
) -> dict[tuple[str, str], Comparison]:
    """Each selected claim's comparison, keyed ``(setting, name)``, with the study's
    ``correction`` applied over the page's claims (the verdicts the page shows)."""
    found = {(c.setting, c.name): comparison(runs, c) for c in selection.claims}
    return corrected(found, study.correction)


def side_value(runs: Runs, side: Side, key: str) -> Interval:
    """One side of a claim on a diagnostic: an evaluation metric under the side's protocol,
    or a training figure (each seed's ``final`` mean; the base trains nothing)."""
    if key in METRICS:
        return interval(side_evaluations(runs, side), key)
    if side.arm == BASE:
        return NAN_INTERVAL
    return diagnostic([r["train"]["final"] for r in runs[side.setting][side.arm]], key)

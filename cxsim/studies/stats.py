"""A study's numbers from per-seed results: paired intervals, verdicts, detectable effects.

Every interval and the power calculation are cxsim/tables.py's, as on the verdict page
(``cxsim verdicts``): the mean over seeds with a Student-t 95% interval (from 2 seeds),
differences paired by seed (each seed's arms start from its base and are evaluated on its
tasks), and the smallest true difference a two-sided paired t-test over these seeds detects
with 80% power. Pass@1 is a proportion over tasks: at one seed its interval is Wilson's over
tasks and a difference Newcombe's; other metrics have no interval at one seed.

The verdict of a claim (treatment ``higher`` or ``lower`` than the reference):
*reproduced* when the paired interval excludes 0 in the claim's direction, *contradicted*
when it excludes 0 the other way, *not resolved* when it covers 0. A claim that the arms
do not differ (``same``, with a margin m) is the verdict page's "does not change" rule
(experiments/verdicts_page.py ``verdict_of``): *reproduced* when the interval lies inside
[-m, +m], *contradicted* when it does not and excludes 0, *not resolved* otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cxsim.tables import (
    Interval,
    Proportion,
    detectable_difference,
    mean_interval,
    paired_difference,
    seed_interval,
)


@dataclass(frozen=True)
class Metric:
    """An evaluation figure a claim can compare (a key of one protocol's evaluation result)."""

    about: str
    bounds: tuple[float, float]
    """The range of one seed's value (its intervals are clipped to it)."""


METRICS: dict[str, Metric] = {
    "pass_at_1": Metric("Pass@1: the share of evaluation tasks solved", (0.0, 1.0)),
    "summary_recall": Metric(
        "the share of needed facts the summaries kept (none written: no value)", (0.0, 1.0)
    ),
    "truncated_rate": Metric("the share of episodes the runtime cut off", (0.0, 1.0)),
    "mean_compactions": Metric("compactions per episode", (0.0, math.inf)),
    "mean_turns": Metric("assistant turns per episode", (0.0, math.inf)),
    "tokens_processed": Metric(
        "tokens the agents encoded or generated per episode (prefill plus decoding, what a "
        "user pays for)",
        (0.0, math.inf),
    ),
    "model_calls": Metric("requests the agents answered per episode", (0.0, math.inf)),
}
"""The metrics a claim may name (cxsim/evaluation.py ``evaluate_protocol``'s result keys)."""


@dataclass(frozen=True)
class Comparison:
    """Two arms paired by seed on one metric."""

    treatment: Interval
    reference: Interval
    difference: Interval
    """treatment - reference, paired by seed."""
    per_seed: tuple[float, ...]
    """treatment - reference on each seed."""
    detectable: float
    """The smallest true difference the run would detect (80% power); NaN below 2 seeds."""
    verdict: str


def seed_values(results: Sequence[dict[str, Any]], metric: str) -> list[Any]:
    """One value per seed from each seed's evaluation result under one protocol: a
    :class:`Proportion` of tasks for Pass@1, a float (NaN when absent) otherwise."""
    if metric == "pass_at_1":
        return [
            Proportion(float(sum(r["per_task_success"])), len(r["per_task_success"]))
            for r in results
        ]
    values = [r.get(metric) for r in results]
    return [math.nan if v is None else float(v) for v in values]


def value_of(x: Any) -> float:
    return x.value if isinstance(x, Proportion) else float(x)


def interval(results: Sequence[dict[str, Any]], metric: str) -> Interval:
    """The mean over seeds of one arm's metric with its 95% interval."""
    values = seed_values(results, metric)
    if metric == "pass_at_1":
        return seed_interval(values)
    return mean_interval(values, METRICS[metric].bounds)


def compare(
    treatment: Sequence[dict[str, Any]],
    reference: Sequence[dict[str, Any]],
    metric: str,
    direction: str = "higher",
    margin: float | None = None,
) -> Comparison:
    """Treatment against reference on ``metric``, each a list of per-seed evaluation results
    (one protocol's) in the same seed order; ``margin``: a ``same`` claim's."""
    if len(treatment) != len(reference):
        raise ValueError(
            f"one result per seed on each side; got {len(treatment)} and {len(reference)}"
        )
    a, b = seed_values(treatment, metric), seed_values(reference, metric)
    per_seed = tuple(value_of(x) - value_of(y) for x, y in zip(a, b, strict=True))
    if metric == "pass_at_1":
        difference = paired_difference(a, b)
    else:
        low, high = METRICS[metric].bounds
        difference = mean_interval(list(per_seed), (low - high, high - low))
    return Comparison(
        treatment=interval(treatment, metric),
        reference=interval(reference, metric),
        difference=difference,
        per_seed=per_seed,
        detectable=detectable_difference(per_seed),
        verdict=verdict(difference, direction, margin),
    )


def verdict(difference: Interval, direction: str, margin: float | None = None) -> str:
    """``reproduced`` / ``contradicted`` / ``not resolved`` for a claim that the difference
    is ``higher`` (above 0), ``lower`` (below 0) or the ``same`` (within +/- ``margin``)."""
    if math.isnan(difference.mean):
        return "not measured"
    if math.isnan(difference.low):
        return "not resolved (one seed: no interval)"
    if direction == "same":
        if margin is None or margin <= 0:
            raise ValueError(f"a same claim needs a margin > 0; got {margin!r}")
        if -margin <= difference.low and difference.high <= margin:
            return "reproduced"
        return "contradicted" if difference.excludes_zero() else "not resolved"
    sign = 1.0 if direction == "higher" else -1.0
    low, high = sorted((sign * difference.low, sign * difference.high))
    if low > 0:
        return "reproduced"
    if high < 0:
        return "contradicted"
    return "not resolved"


def diagnostic(finals: Sequence[dict[str, Any]], key: str) -> Interval:
    """The mean over seeds of one training figure (each seed's mean over its last iterations,
    results.json ``final``) with a t interval; NaN where no seed recorded it."""
    return mean_interval([math.nan if f.get(key) is None else float(f[key]) for f in finals])

"""A study's numbers from per-seed results: paired intervals, verdicts, detectable effects.

Every interval and the power calculation are cxsim/tables.py's, as on the verdict page
(``cxsim verdicts``): the mean over seeds with a Student-t 95% interval (2 seeds or more),
differences paired by seed (each seed's arms start from its base and are evaluated on its
tasks), and the smallest true difference a two-sided paired t-test over these seeds detects
with 80% power. Pass@1 is a proportion over tasks: at one seed its interval is Wilson's over
tasks and a difference Newcombe's; other metrics have no interval at one seed.

The verdict of a claim (treatment ``higher`` or ``lower`` than the reference):
*reproduced* when the paired interval excludes 0 in the claim's direction, *contradicted*
when it excludes 0 the other way, *not resolved* when it covers 0. A claim that the arms
do not differ (``same``, with a margin m) is the verdict page's "does not change" rule
(cxsim/paper_tables/verdicts_page.py ``verdict_of``): *reproduced* when the interval lies inside
[-m, +m], *contradicted* when it does not and excludes 0, *not resolved* otherwise.

What the engine refuses (:func:`refusal`), before any of those verdicts: a claim with fewer
than :data:`MIN_SEEDS` paired seeds (*too few seeds*, with the count), and a *degenerate*
one, whose two arms sit at the metric's floor or ceiling on every seed (Pass@1 all 0 or all
1), are equal on every seed, or whose paired differences do not vary (a t interval of no
width, which would "reproduce" anything). Each tested claim carries the p-value of the test
its verdict rests on (:func:`p_value`), for a page-level correction
(:mod:`cxsim.studies.correction`). Intervals of bounded metrics are clipped to their range
(a difference of two such metrics to its own), training history keys included
(:func:`cxsim.studies.history.history_bounds`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cxsim.studies.history import history_bounds
from cxsim.tables import (
    Interval,
    Proportion,
    detectable_difference,
    mean_interval,
    paired_difference,
    seed_interval,
)

MIN_SEEDS = 3
"""The fewest paired seeds a claim gets a verdict from."""
TOLERANCE = 1e-9
"""Values closer than this count as equal (floating-point differences of equal shares)."""


@dataclass(frozen=True)
class Metric:
    """A figure a claim can compare: a key of one protocol's evaluation result
    (:data:`METRICS`) or one read from each run's training history
    (:data:`TRAINING_METRICS`)."""

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
    **{
        f"survival_round{k}": Metric(
            f"fact survival at compaction round {k}: the share of the needed facts shown before "
            f"summary {k} that it kept (docs/diagnostics.md; no fact counted there: no value)",
            (0.0, 1.0),
        )
        for k in (1, 2, 3)
    },
}
"""The evaluation metrics (cxsim/evaluation.py ``evaluate_protocol``'s result keys; the
``survival_round{k}`` ones read its ``survival`` entry's ``share``)."""
SURVIVAL_PREFIX = "survival_round"

THRESHOLD_METRIC = "iterations_to_success"
TRAINING_METRICS: dict[str, Metric] = {
    "train_success_auc": Metric(
        "the area under the training success curve: the mean of `charts/success_rate` over "
        "the run's actor (non-warm-up) iterations",
        (0.0, 1.0),
    ),
    THRESHOLD_METRIC: Metric(
        "the first actor iteration whose `charts/success_rate` reaches the claim's threshold "
        "(counted from 1; a run that never reaches it: its actor iterations + 1)",
        (1.0, math.inf),
    ),
}
"""Claim metrics from each run's training history (:mod:`cxsim.studies.history`): more
sensitive than one final Pass@1; the base trains nothing, so has none."""
CLAIM_METRICS: dict[str, Metric] = {**METRICS, **TRAINING_METRICS}
"""Every metric a claim may name."""


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
    paired: int = 0
    """Seeds on which both sides have a value."""
    p_value: float = math.nan
    """The p-value of the test the verdict rests on (:func:`p_value`); NaN when refused."""
    adjusted_p: float = math.nan
    """Its page-level adjustment (:mod:`cxsim.studies.correction`); NaN: none applied."""

    @property
    def tested(self) -> bool:
        """Whether the claim got a verdict from a test (not refused)."""
        return not math.isnan(self.p_value)


def seed_values(results: Sequence[dict[str, Any]], metric: str) -> list[Any]:
    """One value per seed from each seed's evaluation result under one protocol: a
    :class:`Proportion` of tasks for Pass@1, a float (NaN when absent) otherwise."""
    if metric == "pass_at_1":
        return [
            Proportion(float(sum(r["per_task_success"])), len(r["per_task_success"]))
            for r in results
        ]
    if metric.startswith(SURVIVAL_PREFIX):
        k = int(metric.removeprefix(SURVIVAL_PREFIX))
        shares = [(r.get("survival") or {}).get("share", []) for r in results]
        values = [s[k - 1] if len(s) >= k else None for s in shares]
    else:
        values = [r.get(metric) for r in results]
    return [math.nan if v is None else float(v) for v in values]


def value_of(x: Any) -> float:
    return x.value if isinstance(x, Proportion) else float(x)


def interval(results: Sequence[dict[str, Any]], metric: str) -> Interval:
    """The mean over seeds of one arm's metric with its 95% interval."""
    values = seed_values(results, metric)
    if metric == "pass_at_1":
        return seed_interval(values)
    return mean_interval(values, CLAIM_METRICS[metric].bounds)


def compare(
    treatment: Sequence[dict[str, Any]],
    reference: Sequence[dict[str, Any]],
    metric: str,
    direction: str = "higher",
    margin: float | None = None,
) -> Comparison:
    """Treatment against reference on ``metric``, each a list of per-seed results in the same
    seed order (one protocol's evaluation results; for a training metric, ``{metric: value}``
    per seed); ``margin``: a ``same`` claim's. A claim :func:`refusal` refuses gets that as
    its verdict; any other the interval's (:func:`verdict`) and its test's p-value."""
    if len(treatment) != len(reference):
        raise ValueError(
            f"one result per seed on each side; got {len(treatment)} and {len(reference)}"
        )
    a, b = seed_values(treatment, metric), seed_values(reference, metric)
    per_seed = tuple(value_of(x) - value_of(y) for x, y in zip(a, b, strict=True))
    bounds = CLAIM_METRICS[metric].bounds
    if metric == "pass_at_1":
        difference = paired_difference(a, b)
    else:
        difference = mean_interval(list(per_seed), (bounds[0] - bounds[1], bounds[1] - bounds[0]))
    pairs = [
        (value_of(x), value_of(y))
        for x, y in zip(a, b, strict=True)
        if not (math.isnan(value_of(x)) or math.isnan(value_of(y)))
    ]
    refused = refusal(pairs, bounds)
    said = refused or verdict(difference, direction, margin)
    diffs = [x - y for x, y in pairs]
    return Comparison(
        treatment=interval(treatment, metric),
        reference=interval(reference, metric),
        difference=difference,
        per_seed=per_seed,
        detectable=detectable_difference(per_seed),
        verdict=said,
        paired=len(pairs),
        p_value=math.nan if refused else p_value(diffs, direction, margin, said),
    )


def refusal(pairs: Sequence[tuple[float, float]], bounds: tuple[float, float]) -> str:
    """Why a claim gets no verdict from its (treatment, reference) values on the seeds where
    both have one, or empty: *not measured* (none), *too few seeds* (fewer than
    :data:`MIN_SEEDS`), or *degenerate*: both arms at the metric's floor or ceiling (a
    finite end of ``bounds``) on every seed, the arms equal on every seed, or differences
    that do not vary."""
    if not pairs:
        return "not measured"
    if len(pairs) < MIN_SEEDS:
        return f"too few seeds ({len(pairs)} paired; a verdict needs {MIN_SEEDS})"
    ends = [end for end in bounds if math.isfinite(end)]
    if ends and all(
        any(math.isclose(v, end, abs_tol=TOLERANCE) for end in ends) for pair in pairs for v in pair
    ):
        return "degenerate: both arms at the metric's floor or ceiling on every seed"
    if all(math.isclose(x, y, abs_tol=TOLERANCE) for x, y in pairs):
        return "degenerate: the two arms are equal on every seed"
    diffs = [x - y for x, y in pairs]
    if max(diffs) - min(diffs) <= TOLERANCE:
        return f"degenerate: the paired differences do not vary ({diffs[0]:+.3f} on every seed)"
    return ""


def p_value(diffs: Sequence[float], direction: str, margin: float | None, said: str) -> float:
    """The two-sided p-value of the paired t-test the verdict ``said`` rests on, over the
    per-seed differences ``diffs`` (at least 2, with some spread): for a ``higher`` or
    ``lower`` claim the test of a mean difference of 0 (the 95% interval excludes 0 exactly
    when it is below 0.05); for a ``same`` claim at margin m, *reproduced* rests on the two
    one-sided tests against -m and +m (twice the larger p: the interval lies inside [-m, +m]
    exactly when it is at most 0.05), *contradicted* on the test against 0, *not resolved*
    on the smaller of the two."""
    from scipy.stats import t as student_t

    k = len(diffs)
    mean = sum(diffs) / k
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (k - 1) / k)
    zero = min(1.0, 2.0 * float(student_t.sf(abs(mean) / se, k - 1)))
    if direction != "same":
        return zero
    m = float(margin or 0.0)
    one_sided = max(student_t.sf((mean + m) / se, k - 1), student_t.sf((m - mean) / se, k - 1))
    inside = min(1.0, 2.0 * float(one_sided))
    return {"reproduced": inside, "contradicted": zero}.get(said, min(inside, zero))


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
    results.json ``final``) with a t interval clipped to the key's range
    (:func:`~cxsim.studies.history.history_bounds`: [0, 1] for a fraction); NaN where no seed
    recorded it."""
    values = [math.nan if f.get(key) is None else float(f[key]) for f in finals]
    return mean_interval(values, history_bounds(key))

"""The math and bookkeeping behind ``cxsim tables``: intervals over seeds, Markdown, run caching.

**Which interval.** Every number in the tables is a mean over K training seeds.

- K >= 2: a Student-t 95% interval over the K per-seed values
  (``cxsim.evaluation.t_interval``). It counts the variance between training
  seeds, the variance that decides whether a method is better, and is wide for
  small K by design (t = 4.30 at K = 3; quantiles from ``scipy.stats``). It is
  clipped to [0, 1] (a difference to [-1, 1]): the normal-theory interval ignores
  that a proportion is bounded, and a page must not show a proportion below 0.
- K = 1: a Wilson score 95% interval over the pooled proportion (tasks for
  Pass@1, needed facts for summary omission). It counts only evaluation noise;
  for omission it is optimistic, because the facts of one rollout are not
  independent.

Differences between two rows (``paired_difference``) pair the rows by seed (each
seed's rows start from the same SFT base and are evaluated on the same tasks):
K >= 2, a t-interval over the K per-seed differences; K = 1, Newcombe's hybrid
score interval for a difference of two proportions (method 10 of Newcombe 1998,
built from the two Wilson intervals).

**Caching.** Each (row, seed) result is one JSON file; :func:`cached_json` reads
it if present and otherwise computes and writes it (atomically), so a killed
``cxsim tables`` resumes and a second table reuses the first one's runs.
:func:`config_tag` names the cache folder after a hash of the settings, so runs
made with different budgets never mix.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cxsim.evaluation import t_interval, wilson_interval
from cxsim.tracking import to_jsonable, write_json


@dataclass(frozen=True)
class Interval:
    """A mean with a 95% interval; ``method`` says which (``"t"``, ``"wilson"``, ``"newcombe"``)."""

    mean: float
    low: float
    high: float
    n: int
    """Seeds (t) or pooled trials (wilson, newcombe) the interval counts."""
    method: str

    def excludes_zero(self) -> bool:
        return not math.isnan(self.low) and (self.low > 0 or self.high < 0)


NAN_INTERVAL = Interval(math.nan, math.nan, math.nan, 0, "none")


@dataclass(frozen=True)
class Proportion:
    """One seed's proportion: ``successes / trials`` (successes may be fractional)."""

    successes: float
    trials: int

    @property
    def value(self) -> float:
        return self.successes / self.trials if self.trials else math.nan


def seed_interval(per_seed: Sequence[Proportion]) -> Interval:
    """Mean over seeds with a 95% interval: t over seeds (K >= 2), Wilson pooled (K = 1).

    Seeds without trials (e.g. no summary written) are left out; none left: NaN.
    """
    seeds = [p for p in per_seed if p.trials > 0]
    if not seeds:
        return NAN_INTERVAL
    if len(seeds) >= 2:
        values = [p.value for p in seeds]
        low, high = t_interval(values, bounds=(0.0, 1.0))
        return Interval(sum(values) / len(values), low, high, len(values), "t")
    (p,) = seeds
    low, high = wilson_interval(p.successes, p.trials)
    return Interval(p.value, low, high, p.trials, "wilson")


def paired_difference(a: Sequence[Proportion], b: Sequence[Proportion]) -> Interval:
    """``a - b`` paired by seed: t over per-seed differences (K >= 2), Newcombe (K = 1).

    Seeds where either side has no trials are left out.
    """
    if len(a) != len(b):
        raise ValueError(f"a and b need one entry per seed; got {len(a)} and {len(b)}")
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x.trials > 0 and y.trials > 0]
    if not pairs:
        return NAN_INTERVAL
    if len(pairs) >= 2:
        diffs = [x.value - y.value for x, y in pairs]
        low, high = t_interval(diffs, bounds=(-1.0, 1.0))
        return Interval(sum(diffs) / len(diffs), low, high, len(diffs), "t")
    ((x, y),) = pairs
    l1, u1 = wilson_interval(x.successes, x.trials)
    l2, u2 = wilson_interval(y.successes, y.trials)
    d = x.value - y.value
    low = d - math.sqrt((x.value - l1) ** 2 + (u2 - y.value) ** 2)
    high = d + math.sqrt((u1 - x.value) ** 2 + (y.value - l2) ** 2)
    return Interval(d, low, high, min(x.trials, y.trials), "newcombe")


def detectable_difference(diffs: Sequence[float], power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest true mean difference a two-sided paired t-test at level ``alpha`` over
    these seeds detects with probability ``power``, taking the standard deviation of the
    per-seed differences ``diffs`` as the truth (noncentral t, ``scipy.stats.nct``).

    0 when the differences do not vary (any shift would show); NaN below 2 seeds.
    """
    kept = [d for d in diffs if not math.isnan(d)]
    if len(kept) < 2:
        return math.nan
    from scipy.optimize import brentq
    from scipy.stats import nct
    from scipy.stats import t as student_t

    k, mean = len(kept), sum(kept) / len(kept)
    sd = math.sqrt(sum((d - mean) ** 2 for d in kept) / (k - 1))
    if sd == 0.0:
        return 0.0
    crit = float(student_t.ppf(1 - alpha / 2, k - 1))

    def shortfall(delta: float) -> float:
        nc = delta * math.sqrt(k) / sd
        detected = float(nct.sf(crit, k - 1, nc) + nct.cdf(-crit, k - 1, nc))
        return (1.0 if math.isnan(detected) else detected) - power  # NaN: far in the tail

    # the normal-theory shift is below this bound; far above it nct's tail is NaN
    high = 2.0 * (crit + float(student_t.ppf(power, k - 1)) + 1.0) * sd / math.sqrt(k)
    return float(brentq(shortfall, 0.0, high))


def mean_interval(
    values: Sequence[float], bounds: tuple[float, float] = (-math.inf, math.inf)
) -> Interval:
    """Mean of per-seed values (NaNs dropped) with a t-interval clipped to ``bounds``; K = 1:
    no interval."""
    kept = [v for v in values if not math.isnan(v)]
    if not kept:
        return NAN_INTERVAL
    low, high = t_interval(kept, bounds)
    return Interval(sum(kept) / len(kept), low, high, len(kept), "t")


def fmt(x: Interval, digits: int = 2, signed: bool = False) -> str:
    """``0.53 [0.41, 0.65]``; the mean alone without an interval; ``-`` for NaN."""
    if math.isnan(x.mean):
        return "-"
    spec = f"{'+' if signed else ''}.{digits}f"
    if math.isnan(x.low):
        return format(x.mean, spec)
    return f"{x.mean:{spec}} [{x.low:{spec}}, {x.high:{spec}}]"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table; every row must have as many cells as the header."""
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row {list(row)} has {len(row)} cells; the header has {len(header)}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(diff: Interval, higher: str, lower: str) -> str:
    """Words for a difference: ``higher`` / ``lower`` when the interval excludes 0."""
    if math.isnan(diff.mean):
        return "not measured"
    if math.isnan(diff.low):
        return f"{fmt(diff, signed=True)} (one seed, no interval)"
    if diff.low == diff.high == 0.0:
        return "equal on every seed (+0.00)"
    if diff.excludes_zero():
        return f"{higher if diff.mean > 0 else lower} ({fmt(diff, signed=True)})"
    return f"no detectable difference ({fmt(diff, signed=True)}, the interval covers 0)"


def config_tag(name: str, settings: Any) -> str:
    """``name-<8 hex>``: a cache folder name that changes whenever ``settings`` change."""
    text = json.dumps(to_jsonable(settings), sort_keys=True)
    return f"{name}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def cached_json(path: str | Path, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The JSON at ``path`` if it exists; else ``compute()``, written there, then read back.

    Reading back what was written makes a fresh result and a cached one identical
    (dataclasses and tuples become dicts and lists either way).
    """
    path = Path(path)
    if not path.is_file():
        write_json(path, compute())
    return json.loads(path.read_text())

"""A study's ``[[checks]]``: pass/fail thresholds on per-seed figures, from plain results.

A check reads one figure per seed for one arm of a setting (an evaluation metric under the
setting's first protocol, or a training history key reduced over the run: its ``final``
mean, or the ``max`` / ``mean`` over its actor iterations), optionally minus another arm's
figure on the same seed (a paired gain, as ``cxsim bench learning`` checks the gain over
the base), and passes when the mean over seeds reaches ``at_least``, every seed reaches
``each_at_least`` and every seed lies inside ``range`` (each that is given). NaN never
passes. ``cxsim study`` prints each check and exits 1 when one fails.
"""

from __future__ import annotations

import math
from typing import Any

from cxsim.studies.spec import BASE, Check, Selection, Study
from cxsim.studies.stats import METRICS, seed_values, value_of

Runs = dict[str, dict[str, list[dict[str, Any]]]]


def selected_checks(study: Study, selection: Selection) -> tuple[Check, ...]:
    """The checks whose arms this invocation ran (all of them without ``--only``)."""
    ran = set(selection.pairs)
    return tuple(
        c
        for c in study.checks
        if (c.setting, c.arm) in ran and (not c.minus or (c.setting, c.minus) in ran)
    )


def arm_figures(study: Study, runs: Runs, check: Check, arm: str) -> list[float]:
    """One value per seed of ``check.metric`` for ``arm`` (NaN where a run lacks it)."""
    results = runs[check.setting][arm]
    if check.metric in METRICS:
        protocol = study.setting(check.setting).eval.protocols[0]
        return [
            value_of(v) for v in seed_values([r["eval"][protocol] for r in results], check.metric)
        ]
    if arm == BASE:
        return [math.nan] * len(results)
    source = {"final": "final", "max": "actor_max", "mean": "actor_mean"}[check.over]
    return [float(r["train"][source].get(check.metric, math.nan)) for r in results]


def check_values(study: Study, runs: Runs, check: Check) -> list[float]:
    """The check's figure per seed: the arm's, minus ``minus``'s when it names one."""
    values = arm_figures(study, runs, check, check.arm)
    if check.minus:
        other = arm_figures(study, runs, check, check.minus)
        values = [a - b for a, b in zip(values, other, strict=True)]
    return values


def outcome(check: Check, values: list[float]) -> dict[str, Any]:
    """Each rule that is given, with what it measured and whether it held."""
    rules = []
    finite = [v for v in values if not math.isnan(v)]
    complete = bool(values) and len(finite) == len(values)
    if check.at_least is not None:
        mean = sum(values) / len(values) if complete else math.nan
        rules.append(("mean over seeds", mean, f">= {check.at_least:g}",
                      complete and mean >= check.at_least))  # fmt: skip
    if check.each_at_least is not None:
        low = min(values) if complete else math.nan
        rules.append(("smallest seed", low, f">= {check.each_at_least:g}",
                      complete and low >= check.each_at_least))  # fmt: skip
    if check.range is not None:
        low, high = check.range
        inside = complete and all(low <= v <= high for v in values)
        rules.append(("every seed", None, f"in [{low:g}, {high:g}]", inside))
    return {
        "name": check.name,
        "setting": check.setting,
        "figure": figure_name(check),
        "values": values,
        "rules": [
            {"rule": rule, "measured": measured, "allowed": allowed, "passed": passed}
            for rule, measured, allowed, passed in rules
        ],
        "passed": all(r[3] for r in rules),
    }


def figure_name(check: Check) -> str:
    """``compactionrl - base pass_at_1``, ``compactionrl losses/x (max)``."""
    over = f" ({check.over})" if check.metric not in METRICS else ""
    minus = f" - {check.minus}" if check.minus else ""
    return f"{check.arm}{minus} {check.metric}{over}"


def run_checks(study: Study, selection: Selection, runs: Runs) -> list[dict[str, Any]]:
    """Every selected check's outcome, in the file's order."""
    return [outcome(c, check_values(study, runs, c)) for c in selected_checks(study, selection)]


def check_lines(results: list[dict[str, Any]]) -> list[str]:
    """One line per check: ok or FAIL, the per-seed values and each rule."""
    lines = []
    for r in results:
        values = " ".join(f"{v:+.4g}" for v in r["values"])
        rules = "; ".join(
            f"{x['rule']}"
            + ("" if x["measured"] is None else f" {x['measured']:+.4g}")
            + f" {x['allowed']}"
            for x in r["rules"]
        )
        lines.append(
            f"{'ok  ' if r['passed'] else 'FAIL'} {r['name']} ({r['setting']}): "
            f"{r['figure']} per seed {values}; {rules}"
        )
    return lines

"""A study's ``[[checks]]``: the tables parsed and validated (:func:`parse_checks`), and
pass/fail thresholds on per-seed figures from plain results (:func:`run_checks`).

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

from cxsim.studies.selection import Selection
from cxsim.studies.spec import BASE, CHECK_OVER, Check, Setting, Study
from cxsim.studies.stats import METRICS, seed_values, value_of
from cxsim.studies.values import StudyError, check_keys, check_name, text_of

CHECK_KEYS = ("name", "setting", "arm", "metric", "minus", "over", "at_least",
              "each_at_least", "range", "about")  # fmt: skip


# -- the file's [[checks]] tables ----------------------------------------------------------


def parse_checks(raw: Any, settings: tuple[Setting, ...], where: str) -> tuple[Check, ...]:
    """``[[checks]]`` tables: each names an arm of a setting, a figure and at least one of
    ``at_least``, ``each_at_least``, ``range``."""
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise StudyError(f"{where}: checks are [[checks]] tables")
    names = [s.name for s in settings]
    checks: list[Check] = []
    for i, table in enumerate(raw, start=1):
        here = f"{where}: check {i}" + (f" ({table['name']})" if "name" in table else "")
        check_keys(table, CHECK_KEYS, here, "a check")
        name = text_of(table, "name", here, required=True)
        check_name(name, here)
        if any(c.name == name for c in checks):
            raise StudyError(f"{here}: another check is named {name!r}")
        default = names[0] if len(names) == 1 else ""
        setting_name = text_of(table, "setting", here, default=default)
        if setting_name not in names:
            raise StudyError(
                f"{here}: setting = {setting_name!r}; choose one of: {', '.join(names)}"
            )
        setting = next(s for s in settings if s.name == setting_name)
        arms = {}
        for key in ("arm", "minus"):
            value = text_of(table, key, here, required=key == "arm")
            if value and value not in (BASE, *setting.arms):
                raise StudyError(
                    f"{here}: {key} = {value!r} is not an arm of setting {setting.name}; "
                    f"choose one of: {', '.join((BASE, *setting.arms))}"
                )
            arms[key] = value
        metric = text_of(table, "metric", here, required=True)
        if metric not in METRICS and "/" not in metric:
            raise StudyError(
                f"{here}: metric = {metric!r}: an evaluation metric ({', '.join(METRICS)}) or "
                'a training history key such as "critic/explained_variance"'
            )
        if "/" in metric and BASE in (arms["arm"], arms["minus"]):
            raise StudyError(f"{here}: the base trains nothing, so it has no {metric!r}")
        over = text_of(table, "over", here, default="final")
        if over not in CHECK_OVER or (over != "final" and metric in METRICS):
            raise StudyError(
                f"{here}: over = {over!r}: for a training history key, one of "
                f"{', '.join(CHECK_OVER)} (evaluation metrics take none)"
            )
        bounds = {key: check_number(table, key, here) for key in ("at_least", "each_at_least")}
        span = table.get("range")
        if span is not None:
            if (
                not isinstance(span, list)
                or len(span) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in span)
                or span[0] > span[1]
            ):
                raise StudyError(f"{here}: range = {span!r}: write [low, high] with low <= high")
            span = (float(span[0]), float(span[1]))
        if span is None and all(v is None for v in bounds.values()):
            raise StudyError(f"{here}: give at_least, each_at_least or range (what passes)")
        checks.append(
            Check(
                name,
                setting.name,
                arms["arm"],
                metric,
                arms["minus"],
                over,
                bounds["at_least"],
                bounds["each_at_least"],
                span,
                text_of(table, "about", here),
            )
        )
    return tuple(checks)


def budget_checks(
    checks: tuple[Check, ...], chosen: dict[str, Any], budget: str | None, where: str
) -> tuple[Check, ...]:
    """The checks that hold under ``--budget``: those its ``checks`` list names (every check
    when it names none, or with no budget)."""
    names = chosen.get("checks")
    if names is None:
        return checks
    known = [c.name for c in checks]
    for name in names:
        if name not in known:
            raise StudyError(
                f"{where}: budgets.{budget}: checks names {name!r}, which is no check; checks: "
                + (", ".join(known) or "none")
            )
    return tuple(c for c in checks if c.name in names)


def check_number(table: dict[str, Any], key: str, where: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StudyError(f"{where}: {key} = {value!r} must be a number")
    return float(value)


# -- their outcomes, from plain results ----------------------------------------------------

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

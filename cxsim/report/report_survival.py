"""The fact-survival table of ``cxsim report``: the share of needed facts alive at each
compaction round and the first round below one half (``cxsim.diagnostics.survival``), for a
main job's evaluations (the base and each preset, the Compacted protocol, pooled over seeds)
and for each training run's last iterations. cxsim/report/report.py places it on the page.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cxsim.report.report_curves import BASE_LABEL
from cxsim.tables import markdown_table

MAX_ROUNDS = 8
"""Rounds shown as columns; deeper rounds are left off the table (they stay in the JSON)."""
COMPACTED = "compacted"
ROUND_TAG = re.compile(r"^survival/(?:(?P<type>[^/]+)/)?round(?P<k>\d+)$")

Curve = dict[int, float]
"""Round (1-based) -> survival share."""


def survival_section(
    results: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """Markdown: one row per evaluation and per training run that measured survival, and one
    per fact type under it when there is more than one type; None when nothing did."""
    # here, not at the top: cxsim.diagnostics imports torch, and `cxsim report --help` must not
    from cxsim.diagnostics.survival import CLIFF_SHARE

    rows: list[tuple[str, Curve]] = []
    if "table" in results:
        rows += evaluation_rows(BASE_LABEL, [results["base"]])
        for name, payloads in results.get("evaluations", {}).items():
            rows += evaluation_rows(name, payloads)
    for label, run in runs.items():
        rows += training_rows(label, run.get("final") or {})
    if not rows:
        return None
    deepest = min(MAX_ROUNDS, max(max(curve) for _, curve in rows))
    header = ["run", *(f"round {k}" for k in range(1, deepest + 1)), "cliff"]
    body = [
        [label, *(_cell(curve.get(k)) for k in range(1, deepest + 1)), _cliff(curve, CLIFF_SHARE)]
        for label, curve in rows
    ]
    return (
        "## Fact survival by compaction round\n\n"
        + markdown_table(header, body)
        + "\n\nThe share of needed facts, among those shown before the k-th summary was "
        "written, whose current value that summary holds (docs/diagnostics.md, `survival/`): "
        "the Compacted evaluation (pooled over seeds) and the training batches (mean of the "
        "last 5 post-warm-up iterations); a row per fact type (its type when the summary was "
        "written) where there is more than one. Cliff: the first round below "
        f"{CLIFF_SHARE:.1f} (- : none). - in a round: no fact counted there.\n"
    )


def evaluation_rows(label: str, payloads: Sequence[Mapping[str, Any]]) -> list[tuple[str, Curve]]:
    """The Compacted evaluations' survival of ``payloads`` (one per seed), pooled by fact
    counts: the row ``label (eval)`` and one per type when there are several."""
    entries = [
        r.get("survival") or {}
        for payload in payloads
        for r in payload["results"]
        if r["protocol"] == COMPACTED
    ]
    entries = [e for e in entries if e]
    if not entries:
        return []
    rows = [(f"{label} (eval)", _pooled(entries))]
    types = sorted({name for e in entries for name in e.get("by_type", {})})
    if len(types) > 1:
        for name in types:
            typed = [e["by_type"][name] for e in entries if name in e.get("by_type", {})]
            rows.append((f"{label} (eval): {name}", _pooled(typed)))
    return rows


def training_rows(label: str, final: Mapping[str, float]) -> list[tuple[str, Curve]]:
    """A training run's survival from its final metrics (``survival/round{k}``), and one
    row per fact type (``survival/{type}/round{k}``) when there are several."""
    curves: dict[str | None, Curve] = {}
    for key, value in final.items():
        match = ROUND_TAG.match(key)
        if match:
            curves.setdefault(match["type"], {})[int(match["k"])] = float(value)
    if None not in curves:
        return []
    rows = [(f"{label} (training)", curves.pop(None))]
    if len(curves) > 1:
        rows += [(f"{label} (training): {name}", curves[name]) for name in sorted(curves)]
    return rows


def _pooled(entries: Sequence[Mapping[str, Any]]) -> Curve:
    """Survival per round over several ``survival_summary`` entries, weighted by their facts."""
    alive: dict[int, float] = {}
    counted: dict[int, int] = {}
    for entry in entries:
        for k, (share, facts) in enumerate(zip(entry["share"], entry["facts"], strict=True), 1):
            if share is not None and facts:
                alive[k] = alive.get(k, 0.0) + share * facts
                counted[k] = counted.get(k, 0) + facts
    return {k: alive[k] / counted[k] for k in sorted(counted)}


def _cliff(curve: Curve, cliff_share: float) -> str:
    below = [k for k in sorted(curve) if curve[k] < cliff_share]
    return str(below[0]) if below else "-"


def _cell(share: float | None) -> str:
    return "-" if share is None else f"{share:.2f}"

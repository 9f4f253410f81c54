"""The page's claims: the table of verdicts (with what the engine refused and why, and the
page-level correction when the file asks for one), and the predictions written before the
run. The numbers: :mod:`cxsim.studies.outcomes`; :mod:`cxsim.studies.page` assembles the
page."""

from __future__ import annotations

import math
from typing import Any

from cxsim.studies.correction import FAMILY_ALPHA
from cxsim.studies.outcomes import Runs, claim_comparisons, side_value
from cxsim.studies.selection import Selection
from cxsim.studies.spec import Claim, Study
from cxsim.studies.stats import METRICS, MIN_SEEDS, TRAINING_METRICS, Comparison
from cxsim.tables import fmt, markdown_table

FINAL_ITERATIONS = 5
"""results.json ``final``: each metric's mean over a run's last 5 actor iterations
(cxsim/pipeline/training_run.py ``final_metrics``)."""


def claim_statement(claim: Claim) -> str:
    if claim.statement:
        return claim.statement
    treatment, reference = (claim.side_label(side) for side in claim.sides)
    if claim.direction == "same":
        return f"`{treatment}` within +/-{claim.margin:g} of `{reference}`"
    word = "above" if claim.direction == "higher" else "below"
    return f"`{treatment}` {word} `{reference}`"


def diagnostic_cells(runs: Runs, claim: Claim) -> str:
    """``key treatment vs reference`` for each of the claim's diagnostics."""
    cells = []
    for key in claim.diagnostics:
        digits = 2 if key in METRICS else 3
        pair = [fmt(side_value(runs, side, key), digits) for side in claim.sides]
        cells.append(f"`{key}` {pair[0]} vs {pair[1]}")
    return "; ".join(cells) or "-"


def metric_label(claim: Claim) -> str:
    if claim.metric in TRAINING_METRICS:
        reach = f" >= {claim.threshold:g}" if claim.threshold is not None else ""
        return f"{claim.metric}{reach} (training)"
    protocols = dict.fromkeys(side.protocol for side in claim.sides)
    return f"{claim.metric} ({' vs '.join(protocols)})"


def size_text(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}"


def powered(c: Comparison, claim: Claim) -> str:
    """Whether the run could detect the predicted size (80% power); for a ``same`` claim,
    a difference as large as its margin."""
    size = claim.margin if claim.direction == "same" else claim.predicted_size
    if size is None or math.isnan(c.detectable):
        return "-"
    return "yes" if c.detectable <= size else "no"


def predicted_text(claim: Claim) -> str:
    if claim.direction == "same":
        return f"within +/-{claim.margin:g}"
    return size_text(claim.predicted_size)


def verdict_cell(c: Comparison) -> str:
    return f"**{c.verdict}**" if c.verdict in ("reproduced", "contradicted") else c.verdict


def p_cell(c: Comparison) -> str:
    if not c.tested:
        return "-"
    return f"{c.p_value:.3f} / {c.adjusted_p:.3f}"


def claim_lines(study: Study, selection: Selection, runs: Runs) -> list[str]:
    if not selection.claims:
        return ["## Claims", "", "No claim's two arms were run in this invocation.", ""]
    with_diagnostics = any(c.diagnostics for c in selection.claims)
    holm = study.correction == "holm"
    comparisons = claim_comparisons(study, selection, runs)
    rows = [
        claim_row(claim, comparisons[(claim.setting, claim.name)], runs, holm, with_diagnostics)
        for claim in selection.claims
    ]
    return [
        "## Claims",
        "",
        markdown_table(claim_header(holm, with_diagnostics), rows),
        "",
        claims_reading(study, selection, comparisons, holm, with_diagnostics),
        "",
    ]


def claim_header(holm: bool, with_diagnostics: bool) -> list[str]:
    """The claims table's columns: the p-values with a Holm correction, the diagnostics when a
    claim names some."""
    return [
        "claim",
        "metric",
        "treatment",
        "reference",
        "paired difference",
        "verdict",
        *(["p / Holm-adjusted p"] if holm else []),
        "smallest detectable",
        "predicted size",
        "powered for it",
        *(["diagnostics"] if with_diagnostics else []),
    ]


def claim_row(
    claim: Claim, c: Comparison, runs: Runs, holm: bool, with_diagnostics: bool
) -> list[str]:
    """One claim's row of the claims table (:func:`claim_header`'s columns)."""
    return [
        f"**{claim.name}** ({claim.setting}): {claim_statement(claim)}",
        metric_label(claim),
        f"`{claim.side_label(claim.treatment_side)}` {fmt(c.treatment)}",
        f"`{claim.side_label(claim.reference_side)}` {fmt(c.reference)}",
        fmt(c.difference, signed=True),
        verdict_cell(c),
        *([p_cell(c)] if holm else []),
        size_text(c.detectable) if c.tested else "-",  # a refused claim has no test
        predicted_text(claim),
        powered(c, claim) if c.tested else "-",
        *([diagnostic_cells(runs, claim)] if with_diagnostics else []),
    ]


def claims_reading(
    study: Study,
    selection: Selection,
    comparisons: dict[tuple[str, str], Comparison],
    holm: bool,
    with_diagnostics: bool,
) -> str:
    """The paragraph under the claims table: how a cell, a difference and a verdict are
    computed, the refusals, and, where the page has them, ``same`` claims, the Holm
    correction, training metrics and diagnostics."""
    same = [c for c in selection.claims if c.direction == "same"]
    training = [c.metric for c in selection.claims if c.metric in TRAINING_METRICS]
    tested = sum(c.tested for c in comparisons.values())
    return (
        "Each cell: the mean over seeds with its 95% interval (Student t over the page's "
        f"{len(study.seeds)} seeds; Pass@1 at one seed: Wilson over tasks), clipped to the metric's range (a "
        "share to [0, 1], a difference of two to [-1, 1]). *Paired difference*: treatment - "
        "reference on each seed, then the same interval (Pass@1 at one seed: Newcombe's). "
        "*reproduced*: the interval excludes 0 in the claim's direction; *contradicted*: it "
        "excludes 0 the other way; *not resolved*: it covers 0. "
        + (
            "A claim that the arms do not differ (*within +/-m*) is *reproduced* when the "
            "interval lies inside [-m, +m], *contradicted* when it does not and excludes 0, "
            "*not resolved* otherwise (the verdict page's rule). "
            if same
            else ""
        )
        + f"No verdict is given from fewer than {MIN_SEEDS} paired seeds (*too few seeds*), "
        "nor for a *degenerate* claim: both arms at the metric's floor or ceiling on every "
        "seed (Pass@1 all 0 or all 1: the metric cannot show a change), the two arms equal on "
        "every seed, or paired differences that do not vary (an interval of no width). "
        + (
            f'**Holm-Bonferroni over the page** (`correction = "holm"`): the {tested} claims '
            "tested (not refused) are one family; each one's p-value (the paired t-test its "
            "verdict rests on: of a difference of 0, or for a *within* claim the two one-sided "
            "tests against the margin) is adjusted by Holm's step-down, and a claim stays "
            f"resolved only when its adjusted p-value is at most {FAMILY_ALPHA:g} (family-wise "
            "error); one whose own interval resolved it but that does not survive reads "
            "*not resolved after Holm*. The intervals are the claims' own, unadjusted. "
            if holm
            else ""
        )
        + "*Smallest detectable*: the true difference a two-sided paired t-test over these "
        "seeds detects with 80% power, at the spread of the per-seed differences measured "
        "here; *powered for it*: whether that is at most the predicted size"
        + (" (for a *within* claim, its margin)" if same else "")
        + "."
        + (
            " *Training metrics*: "
            + " ".join(f"`{m}`, {TRAINING_METRICS[m].about}." for m in dict.fromkeys(training))
            if training
            else ""
        )
        + (
            " *Diagnostics*: each side's value, an evaluation metric under the claim's "
            "protocol or a training figure (per seed the mean of the run's last "
            f"{FINAL_ITERATIONS} actor iterations), as mean [95% interval] over seeds."
            if with_diagnostics
            else ""
        )
    )


def prediction_lines(selection: Selection, predictions: dict[str, dict[str, Any]]) -> list[str]:
    if not selection.claims:
        return []
    rows = []
    for claim in selection.claims:
        seen = predictions.get(f"{claim.setting}:{claim.name}", {})
        when = seen.get("first_seen", "-")
        notes = []
        if seen.get("results_existed"):
            notes.append("first seen when results of its arms already existed")
        current = claim.commitments
        if seen and {k: seen.get(k) for k in current} != current:
            notes.append(
                f'changed since it was first seen, from "{seen["prediction"]}" '
                f"(size {size_text(seen['predicted_size'])})"
            )
        rows.append(
            [
                f"**{claim.name}**",
                claim.prediction,
                predicted_text(claim),
                when + (f" ({'; '.join(notes)})" if notes else ""),
            ]
        )
    return [
        "## Predictions, written before the run",
        "",
        "From the study file; `predictions.json` in the cache records each as first seen, "
        "before any of that invocation's runs, and any later change.",
        "",
        markdown_table(["claim", "prediction", "predicted size", "first seen"], rows),
        "",
    ]

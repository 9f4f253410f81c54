"""The learning-curve figures of ``cxsim report`` (``curves.png``) and of a main job's own
page (``learning_curves.png``): one panel per history key, one line per preset (the mean
over its seeds, shaded min-max), the value-only warm-up iterations shaded, and on the
success panel chance, the base's Compacted Pass@1 and each preset's after training, with
the gain in the title. cxsim/report/report.py writes the pages around them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cxsim.pipeline.run_table import chance_level
from cxsim.tables import Interval, Proportion, paired_difference

if TYPE_CHECKING:
    from matplotlib.figure import Figure

History = list[dict[str, Any]]

SUCCESS, RECALL = "charts/success_rate", "compaction/summary_recall"
BASE_LABEL = "base (SFT)"
"""The base's row label in a main job's table (``cxsim run``)."""
WARMUP_GREY = "0.88"
"""The shading of value-only warm-up iterations."""

CURVES: tuple[tuple[str, str], ...] = (
    (SUCCESS, "training success rate"),
    ("losses/policy", "policy loss"),
    ("losses/value", "value loss"),
    ("losses/approx_kl", "approx. KL"),
    ("losses/entropy", "entropy (nats/token)"),
    ("compaction/compactions_mean", "compactions per rollout"),
    (RECALL, "summary recall"),
    ("critic/explained_variance", "critic explained variance"),
)
"""(history key, panel title) of the full report's panels."""

RUN_CURVES: tuple[tuple[str, str], ...] = (
    (SUCCESS, "training success rate"),
    (RECALL, "summary recall"),
)
"""The panels of a main job's own page (``learning_curves.png``)."""

FRACTIONS: frozenset[str] = frozenset({SUCCESS, RECALL, "omission"})
"""Curves that are proportions: drawn on a fixed [0, 1] axis, so runs compare at a glance."""


@dataclass(frozen=True)
class Evaluations:
    """What a run's evaluations add to its learning curves (a main job's; a training run
    has chance at most)."""

    chance: float | None = None
    """Pass@1 of a uniform guess, where the task defines one."""
    base: dict[str, float] = field(default_factory=dict)
    """The base's Compacted evaluation: history key (success rate, summary recall) -> value."""
    trained: dict[str, dict[str, Interval]] = field(default_factory=dict)
    """Preset -> history key -> its Compacted evaluation after training (pooled over seeds;
    success with its 95% interval: Wilson over tasks for one seed, t over seeds from 2)."""
    gains: dict[str, Interval] = field(default_factory=dict)
    """Preset -> Compacted Pass@1 after training minus the base's, paired by seed
    (:func:`cxsim.tables.paired_difference`: Newcombe for one seed, t over seeds from 2)."""


def evaluations(results: dict[str, Any]) -> Evaluations:
    """Chance, the base's and each preset's Compacted evaluation, and the gains, from a
    run's results.json (a training run's: chance only)."""
    chance = chance_level(results["config"]["env"])
    if "table" not in results:
        return Evaluations(chance)
    rows = [r for r in results["table"] if r["protocol"] == "compacted"]
    base_row = next((r for r in rows if r["label"] == BASE_LABEL), None)
    if base_row is None:  # no Compacted evaluation: nothing to compare
        return Evaluations(chance)
    base = {SUCCESS: base_row["pass_at_1"], RECALL: float_or_nan(base_row["summary_recall"])}
    base_tasks = compacted_proportion(results["base"])
    trained: dict[str, dict[str, Interval]] = {}
    gains: dict[str, Interval] = {}
    for row in rows:
        if row["label"] == BASE_LABEL:
            continue
        name, pooled_seeds = row["label"], row["seeds"] >= 2
        low, high = (
            (row["seed_ci95_low"], row["seed_ci95_high"])
            if pooled_seeds
            else (row["ci95_low"], row["ci95_high"])
        )
        success = Interval(
            row["pass_at_1"], low, high, row["seeds"], "t" if pooled_seeds else "wilson"
        )
        recall = float_or_nan(row["summary_recall"])
        trained[name] = {SUCCESS: success, RECALL: Interval(recall, math.nan, math.nan, 0, "none")}
        per_seed = [compacted_proportion(e) for e in results["evaluations"].get(name, [])]
        if per_seed:
            gains[name] = paired_difference(per_seed, [base_tasks] * len(per_seed))
    return Evaluations(chance, base, trained, gains)


def compacted_proportion(evaluation: dict[str, Any]) -> Proportion:
    """An evaluation's Compacted successes over its tasks (each task's success averaged over
    its repeats)."""
    result = next(r for r in evaluation["results"] if r["protocol"] == "compacted")
    per_task = result["per_task_success"]
    return Proportion(float(sum(per_task)), len(per_task))


def gain_text(name: str, gain: Interval, marks: Evaluations) -> str:
    """``compactionrl: Compacted Pass@1 0.42 → 0.63, gain +0.20 (95% CI +0.05 to +0.35,
    Newcombe over 64 tasks)``."""
    how = {"t": f"t over {gain.n} seeds", "newcombe": f"Newcombe over {gain.n} tasks"}
    interval = (
        f"95% CI {gain.low:+.2f} to {gain.high:+.2f}, {how.get(gain.method, gain.method)}"
        if not math.isnan(gain.low)
        else "no interval"
    )
    before, after = marks.base[SUCCESS], marks.trained[name][SUCCESS].mean
    return (
        f"{name}: Compacted Pass@1 {before:.2f} → {after:.2f}, gain {gain.mean:+.2f} ({interval})"
    )


def series(history: History, key: str) -> tuple[list[float], list[float]]:
    """(iterations, values) of ``key``; ``omission`` is 1 - summary recall. Missing/NaN skipped."""
    xs, ys = [], []
    for h in history:
        raw = h.get(RECALL) if key == "omission" else h.get(key)
        if raw is None or (isinstance(raw, float) and math.isnan(raw)):
            continue
        xs.append(h["iteration"])
        ys.append(1.0 - raw if key == "omission" else raw)
    return xs, ys


def warmup_spans(runs: dict[str, Sequence[History]]) -> list[tuple[int, int]]:
    """(first, last) iteration of each block of value-only warm-up iterations, over all runs."""
    rows = [h for histories in runs.values() for history in histories for h in history]
    warm = sorted({h["iteration"] for h in rows if h.get("warmup")})
    spans: list[tuple[int, int]] = []
    for i in warm:
        if spans and i == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
    return spans


def curves_figure(
    runs: dict[str, Sequence[History]],
    curves: Sequence[tuple[str, str]] = CURVES,
    columns: int = 3,
    marks: Evaluations | None = None,
) -> tuple[Figure, list[str]]:
    """The learning-curve figure and the keys it plots: one panel per curve with data, one
    line per label (the mean over its runs, shaded min-max), the warm-up shaded, chance and
    the evaluations on the panels they measure, one legend, the gains in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    marks = marks or Evaluations()
    present = [
        (key, title)
        for key, title in curves
        if any(series(h, key)[1] for hs in runs.values() for h in hs)
    ]
    if not present:
        raise ValueError(f"no curve to plot: none of {[k for k, _ in curves]} is in the history")
    columns = min(columns, len(present))
    rows = math.ceil(len(present) / columns)
    title_lines = [gain_text(name, gain, marks) for name, gain in marks.gains.items()]
    height = 3.0 * rows + 0.9 + 0.25 * len(title_lines)  # panels, legend, title
    fig = plt.figure(figsize=(4.2 * columns, height), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    colors = {label: f"C{i % 10}" for i, label in enumerate(runs)}  # one colour per run everywhere
    spans = warmup_spans(runs)
    every = [h for histories in runs.values() for history in histories for h in history]
    after_x = max(h["iteration"] for h in every) + 1  # evaluations: after the last update
    legend: dict[str, Any] = {}  # one handle per label, in order of appearance
    for ax, (key, title) in zip(axes.flat, present, strict=False):
        for first, final in spans:
            ax.axvspan(first - 0.5, final + 0.5, color=WARMUP_GREY, zorder=0, lw=0, gid="warmup")
        for label, histories in runs.items():
            draw_runs(ax, key, label, histories, colors[label], legend)
            after = marks.trained.get(label, {}).get(key)
            if after is not None and not math.isnan(after.mean):
                draw_evaluation(ax, after_x, after, label, colors[label], legend)
        draw_references(ax, key, marks, legend)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.ticklabel_format(axis="y", useOffset=False)  # values as they are, not "1e-5 + 6.91"
        if key in FRACTIONS:
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    if spans:
        legend["warmup"] = Patch(
            color=WARMUP_GREY, label="value-only warm-up (the actor is not updated)"
        )
    fig.legend(
        handles=list(legend.values()),
        loc="outside lower center",
        ncol=min(len(legend), 2 if columns < 3 else 3),
        fontsize=8,
        frameon=False,
    )
    if title_lines:
        fig.suptitle("\n".join(title_lines), fontsize=10)
    return fig, [key for key, _ in present]


def draw_runs(
    ax: Any, key: str, label: str, histories: Sequence[History], color: str, legend: dict[str, Any]
) -> None:
    """One label's curve of ``key``: the mean over its runs, shaded min-max when several."""
    from matplotlib.lines import Line2D

    per_run = [dict(zip(*series(h, key), strict=True)) for h in histories]
    iters = sorted(set().union(*per_run))
    if not iters:
        return
    values = np.asarray([[r.get(i, math.nan) for i in iters] for r in per_run], dtype=float)
    marker = "o" if len(iters) < 12 else None  # a few points: show them
    ax.plot(iters, np.nanmean(values, axis=0), color=color, lw=1.3, marker=marker, markersize=3)
    if len(histories) > 1:
        ax.fill_between(
            iters, np.nanmin(values, axis=0), np.nanmax(values, axis=0), color=color, alpha=0.15
        )
    pooled = f"; mean of {len(histories)} runs, shaded min-max" if len(histories) > 1 else ""
    text = f"{label}: training batches{pooled}"
    legend.setdefault(label, Line2D([], [], color=color, label=text))


def draw_evaluation(
    ax: Any, x: float, value: Interval, label: str, color: str, legend: dict[str, Any]
) -> None:
    """A preset's evaluation after training, at ``x``, with its interval where it has one."""
    from matplotlib.lines import Line2D

    yerr = None
    if not math.isnan(value.low):
        yerr = [[value.mean - value.low], [value.high - value.mean]]
    bars = ax.errorbar(
        [x], [value.mean], yerr=yerr, color=color, marker="D", markersize=5, capsize=3, ls="none"
    )
    bars.lines[0].set_gid(f"trained:{label}")  # the point (its caps are lines too)
    text = f"{label}: Compacted evaluation after training (95% CI)"
    legend.setdefault(
        f"trained:{label}", Line2D([], [], color=color, marker="D", ls="none", label=text)
    )


def draw_references(ax: Any, key: str, marks: Evaluations, legend: dict[str, Any]) -> None:
    """Chance on the success panel, the base's evaluation on the panels it measures."""
    from matplotlib.lines import Line2D

    if key == SUCCESS and marks.chance is not None:
        ax.axhline(marks.chance, color="0.35", ls="--", lw=1, gid="chance")
        text = f"chance: {marks.chance:.2f} (a uniform guess)"
        legend.setdefault("chance", Line2D([], [], color="0.35", ls="--", label=text))
    base = marks.base.get(key)
    if base is not None and not math.isnan(base):
        ax.axhline(base, color="black", ls=":", lw=1.3, gid="base")
        text = f"{BASE_LABEL}: Compacted evaluation"
        legend.setdefault("base", Line2D([], [], color="black", ls=":", label=text))


def plot_curves(
    runs: dict[str, Sequence[History]],
    path: Path,
    curves: Sequence[tuple[str, str]] = CURVES,
    columns: int = 3,
    marks: Evaluations | None = None,
) -> list[str]:
    """:func:`curves_figure` saved as a PNG at ``path``; returns the keys plotted."""
    import matplotlib.pyplot as plt

    fig, plotted = curves_figure(runs, curves, columns, marks)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return plotted


def curves_caption(marks: Evaluations) -> str:
    """What the figure's lines and shading are, in words, with the gains."""
    said = [
        "Training batches per iteration (one line per preset: the mean over its seeds, "
        "shaded min-max); grey columns: value-only warm-up iterations (the actor is not updated)"
    ]
    if marks.chance is not None:
        said.append(f"dashed: chance ({marks.chance:.3f})")
    if marks.base:
        said.append("dotted: the base's Compacted evaluation")
    if marks.trained:
        said.append("diamonds after the last iteration: each preset's Compacted evaluation after "
                    "training, with its 95% interval")  # fmt: skip
    text = "; ".join(said) + "."
    gains = [gain_text(name, gain, marks) for name, gain in marks.gains.items()]
    return text + ("".join(f"\n\n- {g}" for g in gains) if gains else "")


def float_or_nan(x: float | None) -> float:
    """``x``, or NaN for a figure the run did not have (None in results.json)."""
    return math.nan if x is None else float(x)

"""``cxsim report RUN_DIR``: learning curves (PNG) and a Markdown report from a finished run.

RUN_DIR is either a training run (``cxsim train``: ``results.json`` with a
per-iteration ``history``) or a main-job run (``cxsim run``: ``results.json``
with the evaluation ``table``, and one training run per preset and seed under
``train/``). Reads the logs only; trains and evaluates nothing.

Writes ``report.md`` and ``curves.png`` to ``--out-dir`` (default
``RUN_DIR/report``): training success rate, losses, compactions, summary
recall and omission (1 - recall), critic explained variance per iteration, and
the final metrics (mean of the last five post-warm-up iterations, as
``cxsim train`` computes them).

    cxsim report runs/train
    cxsim report runs/main --out-dir docs/results/main
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro

from cxsim.tables import markdown_table

History = list[dict[str, Any]]

CURVES: tuple[tuple[str, str], ...] = (
    ("charts/success_rate", "training success rate"),
    ("losses/policy", "policy loss"),
    ("losses/value", "value loss"),
    ("losses/approx_kl", "approx. KL"),
    ("losses/entropy", "entropy (nats/token)"),
    ("compaction/compactions_mean", "compactions per rollout"),
    ("compaction/summary_recall", "summary recall"),
    ("omission", "summary omission (1 - recall)"),
    ("critic/explained_variance", "critic explained variance"),
)
"""(history key, panel title); ``omission`` is derived as 1 - summary recall."""

FRACTIONS: frozenset[str] = frozenset(
    {"charts/success_rate", "compaction/summary_recall", "omission"}
)
"""Curves that are proportions: drawn on a fixed [0, 1] axis, so runs compare at a glance."""

FINAL_KEYS: tuple[str, ...] = (
    "charts/success_rate",
    "compaction/compactions_mean",
    "compaction/summary_recall",
    "critic/explained_variance",
    "losses/policy",
    "losses/value",
    "losses/approx_kl",
    "losses/clip_fraction",
    "losses/entropy",
    "charts/turns_mean",
    "charts/iteration_seconds",
)


@dataclass(frozen=True)
class Config:
    """Plots and a Markdown report from a finished run directory."""

    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """A ``cxsim train`` or ``cxsim run`` output folder (it holds results.json)."""
    out_dir: str | None = None
    """Where report.md and curves.png go (default: RUN_DIR/report)."""


def series(history: History, key: str) -> tuple[list[float], list[float]]:
    """(iterations, values) of ``key``; ``omission`` is 1 - summary recall. Missing/NaN skipped."""
    xs, ys = [], []
    for h in history:
        raw = h.get("compaction/summary_recall") if key == "omission" else h.get(key)
        if raw is None or (isinstance(raw, float) and math.isnan(raw)):
            continue
        xs.append(h["iteration"])
        ys.append(1.0 - raw if key == "omission" else raw)
    return xs, ys


def plot_curves(
    runs: dict[str, Sequence[History]],
    path: Path,
    curves: Sequence[tuple[str, str]] = CURVES,
    columns: int = 3,
) -> list[str]:
    """One panel per curve; one line per label (the mean over its runs, shaded min-max).

    Panels with no data in any run are left out. Returns the keys plotted.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    present = [
        (key, title)
        for key, title in curves
        if any(series(h, key)[1] for hs in runs.values() for h in hs)
    ]
    if not present:
        raise ValueError(f"no curve to plot: none of {[k for k, _ in curves]} is in the history")
    rows = math.ceil(len(present) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    colors = {label: f"C{i % 10}" for i, label in enumerate(runs)}  # one colour per run everywhere
    for ax, (key, title) in zip(axes.flat, present, strict=False):
        for label, histories in runs.items():
            per_run = [dict(zip(*series(h, key), strict=True)) for h in histories]
            iters = sorted(set().union(*per_run))
            if not iters:
                continue
            stack = [[r.get(i, math.nan) for i in iters] for r in per_run]
            values = np.asarray(stack, dtype=float)
            mean = np.nanmean(values, axis=0)
            marker = "o" if len(iters) < 12 else None  # a few points: show them
            ax.plot(iters, mean, label=label, color=colors[label], linewidth=1.3, marker=marker,
                    markersize=3)  # fmt: skip
            if len(histories) > 1:
                low, high = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
                ax.fill_between(iters, low, high, color=colors[label], alpha=0.15)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if key in FRACTIONS:
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color=c, label=label) for label, c in colors.items()]
    axes.flat[0].legend(handles=handles, fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [key for key, _ in present]


def final_metrics_table(finals: dict[str, dict[str, float]]) -> str:
    """Markdown: one row per metric of FINAL_KEYS present in any run, one column per run."""
    labels = list(finals)
    rows = []
    for key in FINAL_KEYS:
        values = [finals[label].get(key) for label in labels]
        if all(v is None for v in values):
            continue
        rows.append([f"`{key}`", *("-" if v is None else f"{v:.3g}" for v in values)])
    return markdown_table(["metric", *labels], rows)


def train_runs(run_dir: Path, results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """label -> results.json of each training run a run directory holds."""
    if "history" in results:
        return {results["config"]["preset"]: results}
    if "table" in results:
        found = sorted((run_dir / "train").glob("*/results.json"))
        return {p.parent.name: json.loads(p.read_text()) for p in found}
    raise ValueError(
        f"{run_dir / 'results.json'} is neither a `cxsim train` run (no 'history') nor a "
        "`cxsim run` job (no 'table'); pass the folder one of them wrote"
    )


def write_report(cfg: Config) -> Path:
    """Writes curves.png and report.md; returns the report's path."""
    run_dir = Path(cfg.run_dir)
    path = run_dir / "results.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: pass a folder written by `cxsim train` or `cxsim run` "
            "(it must have finished)"
        )
    results = json.loads(path.read_text())
    out_dir = Path(cfg.out_dir) if cfg.out_dir else run_dir / "report"
    runs = train_runs(run_dir, results)
    sections = [f"# cxsim report: `{run_dir}`\n"]
    if "table" in results:
        rows = [r | {"summary_recall": _nan(r["summary_recall"])} for r in results["table"]]
        from cxsim.experiments.run import report_notes, report_table

        sections.append(f"## Evaluation\n\n{report_table(rows)}\n\n{report_notes(rows, results)}\n")
    if runs:
        by_preset: dict[str, list[History]] = {}  # one mean line and min-max band per preset
        for r in runs.values():
            by_preset.setdefault(r["config"]["preset"], []).append(r["history"])
        plotted = plot_curves(by_preset, out_dir / "curves.png")
        summary = [
            [label, str(r["iterations_done"]), f"{r['wall_time_s']:.0f}", r["config"]["preset"]]
            for label, r in runs.items()
        ]
        sections += [
            "## Training runs\n",
            markdown_table(["run", "iterations", "wall time (s)", "preset"], summary) + "\n",
            "## Final metrics (mean of the last 5 post-warm-up iterations)\n",
            final_metrics_table({label: r["final"] for label, r in runs.items()}) + "\n",
            f"## Learning curves\n\n![learning curves](curves.png)\n\nPanels: {', '.join(plotted)}; "
            "one line per preset (the mean over its seeds, shaded min-max).\n",
        ]
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.md"
    report.write_text("\n".join(sections))
    return report


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def main(argv: list[str] | None = None) -> None:
    report = write_report(tyro.cli(Config, args=argv))
    print(f"report at {report}")


if __name__ == "__main__":
    main()

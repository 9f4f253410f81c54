"""The PNG plots of ``cxsim tables``: omission by compaction index, Table 1's summarizers,
and the panels of the learning curves (drawn by ``cxsim.report.report.plot_curves``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from cxsim.paper_tables.tables_seeds import (
    ROW_LABELS,
    PageSetup,
    Seeds,
    omission_by_compaction,
    pass_interval,
)
from cxsim.tables import Interval

LEARNING_CURVES = (
    ("charts/success_rate", "training success rate"),
    ("omission", "summary omission (1 - recall)"),
    ("compaction/compactions_mean", "compactions per rollout"),
    ("critic/explained_variance", "critic explained variance"),
    ("losses/approx_kl", "approx. KL"),
    ("losses/entropy", "entropy (nats/token)"),
)


def error_bars(cells: list[Interval]) -> list[list[float]] | None:
    """Matplotlib ``yerr`` (below, above) of intervals; None when any has no interval."""
    if any(math.isnan(c.low) for c in cells):
        return None
    return [[c.mean - c.low for c in cells], [c.high - c.mean for c in cells]]


def style_unit_axes(ax: Any) -> None:
    """A y axis for fractions in [0, 1], a light grid and a small legend."""
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_omission(cfg: PageSetup, s: Seeds, path: Path) -> None:
    """Omission by compaction index: the trained rows and the base (Compacted evaluation), and
    the Table 1 summarizers with the oracle executor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = [("Compacted evaluation (policy summarizes itself)",
               {ROW_LABELS[r]: s.result(r, "compacted") for r in ("base", *cfg.rows)})]  # fmt: skip
    if 1 in cfg.tables:
        executor = cfg.executors[0]
        names = [f"scripted-{p:g}" for p in cfg.omission_rates] + ["compactionrl", "base"]
        panels.append((f"Table 1 summarizers ({executor} executor)",
                       {summarizer_label(n): s.external(f"{executor}+{n}") for n in names}))  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (title, series) in zip(axes.flat, panels, strict=True):
        for i, (label, results) in enumerate(series.items()):
            by_k = omission_by_compaction(results)
            if not by_k:
                continue
            ks = sorted(by_k)
            mean = [by_k[k].mean for k in ks]
            err = error_bars([by_k[k] for k in ks])
            dodge = 0.04 * (i - (len(series) - 1) / 2)  # keep overlapping error bars apart
            ax.errorbar([k + dodge for k in ks], mean, yerr=err, marker="o", capsize=3,
                        label=label, linewidth=1.2, color=f"C{i % 10}")  # fmt: skip
        ax.set_title(title, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("compaction index k (0: first summary)")
        ax.set_ylabel("fraction of needed facts missing")
        style_unit_axes(ax)
    save(fig, path)


def summarizer_label(name: str) -> str:
    if name.startswith("scripted-"):
        return f"scripted, omission {name.removeprefix('scripted-')}"
    return f"{ROW_LABELS[name]} summarizer"


def plot_summarizers(cfg: PageSetup, s: Seeds, path: Path) -> None:
    """Table 1: Pass@1 against the scripted summarizer's omission rate, per executor, with the
    trained and untrained policy summarizers as horizontal bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for executor in cfg.executors:
        cells = [
            pass_interval(s.external(f"{executor}+scripted-{p:g}")) for p in cfg.omission_rates
        ]
        err = error_bars(cells)
        (line,) = ax.plot([], [])
        ax.errorbar(cfg.omission_rates, [c.mean for c in cells], yerr=err, marker="o", capsize=3,
                    color=line.get_color(), label=f"{executor} executor, scripted summarizer")  # fmt: skip
        for name, style in (("compactionrl", "--"), ("base", ":")):
            cell = pass_interval(s.external(f"{executor}+{name}"))
            ax.axhline(cell.mean, linestyle=style, color=line.get_color(),
                       label=f"{executor} executor, {ROW_LABELS[name]} summarizer")  # fmt: skip
    ax.set_xlabel("scripted summarizer omission rate")
    ax.set_ylabel("Pass@1 (external-summarizer protocol)")
    style_unit_axes(ax)
    save(fig, path)

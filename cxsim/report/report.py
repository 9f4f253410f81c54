"""``cxsim report RUN_DIR``: learning curves (PNG) and a Markdown report from a finished run.

RUN_DIR (positional, or ``--run-dir``) is either a training run (``cxsim train``:
``results.json`` with a per-iteration ``history``) or a main-job run (``cxsim run``:
``results.json`` with the evaluation ``table``, and one training run per preset and
seed under ``train/``). Reads the files only; trains and evaluates nothing, so the
same folder gives the same pages.

Writes ``report.md`` and ``curves.png`` to ``--out-dir`` (default ``RUN_DIR/report``):
training success rate, losses, compactions, summary recall and critic explained
variance per iteration, the final metrics (mean of the last five post-warm-up
iterations, as ``cxsim train`` computes them) and fact survival by compaction round
(``report_survival``). For a main job without ``--out-dir``, also the run's own page,
``RUN_DIR/report.md`` and ``RUN_DIR/learning_curves.png``, exactly as ``cxsim run`` wrote
them (it calls this module).

Every figure has one legend for all its panels and shades the value-only warm-up
iterations (the actor is not updated); the success-rate panel draws chance (where the
task defines one) and, for a main job, the base's Compacted Pass@1 and each preset's
after training, with the gain (trained minus base, 95% interval) in the title.

    cxsim report runs/train
    cxsim report --run-dir runs/main
    cxsim report runs/main --out-dir docs/results/main
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import tyro

from cxsim.pipeline.run_table import report_notes, report_table
from cxsim.report.report_curves import (
    RUN_CURVES,
    Evaluations,
    curves_caption,
    evaluations,
    float_or_nan,
    plot_curves,
)
from cxsim.report.report_survival import survival_section
from cxsim.tables import markdown_table

if TYPE_CHECKING:
    pass

History = list[dict[str, Any]]

BASE_LABEL = "base (SFT)"
"""The base's row label in a main job's table (``cxsim run``)."""


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
    """Plots and a Markdown report from a finished run directory, given as RUN_DIR or as
    --run-dir RUN_DIR."""

    run_dir: Annotated[str | None, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")] = None
    """A ``cxsim train`` or ``cxsim run`` output folder (it holds results.json)."""
    run_dir_flag: Annotated[str | None, tyro.conf.arg(name="run-dir", metavar="RUN_DIR")] = None
    """The same folder, given as a flag (as ``cxsim run --run-dir`` names it)."""
    out_dir: str | None = None
    """Where report.md and curves.png go (default: RUN_DIR/report; then a main job's own
    report.md and learning_curves.png in RUN_DIR are rewritten too)."""

    def __post_init__(self) -> None:
        if (self.run_dir is None) == (self.run_dir_flag is None):
            raise ValueError(
                "pass the run folder once: `cxsim report RUN_DIR` or `cxsim report --run-dir "
                "RUN_DIR`"
            )

    @property
    def folder(self) -> Path:
        return Path(self.run_dir if self.run_dir is not None else str(self.run_dir_flag))


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


def critic_section(runs: dict[str, dict[str, Any]]) -> str | None:
    """Markdown: the critic at each run's last execution window against the outcome ceilings
    (:func:`cxsim.diagnostics.tracking.critic_tracking`); None when no run has a critic."""
    # here, not at the top: cxsim.diagnostics imports torch, and `cxsim report --help` must not
    from cxsim.diagnostics.tracking import (
        INFORMATIVE,
        TRACKING_EV,
        TRACKING_SHARE,
        critic_tracking,
    )

    rows = []
    for label, run in runs.items():
        t = critic_tracking(run["history"])
        if t:
            ceilings = (t["ceiling"], t["ceiling_online"], t["target"])
            ceilings += (t["ceiling_stated"], t["target_stated"])
            ceilings += (t["ceiling_stated_online"], t["target_stated_online"])
            rows.append(
                [label, str(int(t["window"])), _cell(t["ev"]), _cell(t["ece"], signed=False)]
                + [_cell(v) for v in ceilings]
                + [str(int(t["iterations"]))]
            )
    if not rows:
        return None
    header = ["run", "window", "EV", "ECE", "ceiling", "online ceiling", "target"]
    header += ["stated ceiling", "stated target", "stated online ceiling", "stated online target"]
    header += ["iterations"]
    lo, hi = INFORMATIVE
    return (
        "## The critic at the last window\n\n"
        + markdown_table(header, rows)
        + f"\n\nMeans over the post-warm-up iterations whose training success lies in "
        f"[{lo}, {hi}] (`iterations`), at the first token of the deepest execution window half of the "
        "rollouts reach (`window`, 0 = the first): the critic's explained variance of the "
        "outcome (EV) and its calibration error (ECE); what a value that knows only whether "
        "the last summary kept the needed facts explains, with the success rates fitted on "
        "the batch itself (ceiling) or learned from the run's earlier batches (online "
        "ceiling; docs/diagnostics.md); and the EV at which the critic counts as tracking, "
        f"each iteration's min({TRACKING_EV}, {TRACKING_SHARE} x ceiling), averaged (target); "
        "the same for a value that knows only whether the last summary states a value for "
        "each needed fact, right or wrong, which is all a reader of that summary can know "
        "(stated ceiling, stated target), and with its rates learned from the earlier batches, "
        "as a critic must (stated online ceiling and target: the bar the default critic is "
        "held to). - : undefined (no iteration with varying outcomes, "
        "or a task without needed facts).\n"
    )


def _cell(x: float, signed: bool = True) -> str:
    return "-" if math.isnan(x) else f"{x:+.2f}" if signed else f"{x:.2f}"


def train_runs(run_dir: Path, results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """label -> results.json of each training run a run directory holds: a training run
    itself, or a main job's runs of its presets and seeds (``train/<preset>-s<seed>``)."""
    if "history" in results:
        return {results["config"]["preset"]: results}
    if "table" in results:
        cfg = results["config"]
        names = [f"{preset}-s{seed}" for preset in cfg["presets"] for seed in cfg["seeds"]]
        found = [run_dir / "train" / name / "results.json" for name in names]
        return {p.parent.name: json.loads(p.read_text()) for p in found if p.is_file()}
    raise ValueError(
        f"{run_dir / 'results.json'} is neither a `cxsim train` run (no 'history') nor a "
        "`cxsim run` job (no 'table'); pass the folder one of them wrote"
    )


def by_preset(runs: dict[str, dict[str, Any]]) -> dict[str, list[History]]:
    """Each preset's histories (one mean line and min-max band per preset)."""
    grouped: dict[str, list[History]] = {}
    for r in runs.values():
        grouped.setdefault(r["config"]["preset"], []).append(r["history"])
    return grouped


def write_report(cfg: Config) -> Path:
    """Writes curves.png and report.md (and a main job's own page, see the module's
    docstring); returns the report's path."""
    run_dir = cfg.folder
    path = run_dir / "results.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: pass a folder written by `cxsim train` or `cxsim run` "
            "(it must have finished)"
        )
    results = json.loads(path.read_text())
    out_dir = Path(cfg.out_dir) if cfg.out_dir else run_dir / "report"
    runs = train_runs(run_dir, results)
    marks = evaluations(results)
    if "table" in results and cfg.out_dir is None:
        write_run_page(run_dir, results, runs, marks)
    sections = [f"# cxsim report: `{run_dir}`\n"]
    if "table" in results:
        rows = [r | {"summary_recall": float_or_nan(r["summary_recall"])} for r in results["table"]]
        sections.append(f"## Evaluation\n\n{report_table(rows)}\n\n{report_notes(rows, results)}\n")
    if runs:
        plotted = plot_curves(by_preset(runs), out_dir / "curves.png", marks=marks)
        summary = [
            [label, str(r["iterations_done"]), f"{r['wall_time_s']:.0f}", r["config"]["preset"]]
            for label, r in runs.items()
        ]
        sections += [
            "## Training runs\n",
            markdown_table(["run", "iterations", "wall time (s)", "preset"], summary) + "\n",
            "## Final metrics (mean of the last 5 post-warm-up iterations)\n",
            final_metrics_table({label: r["final"] for label, r in runs.items()}) + "\n",
            "## Learning curves\n\n![learning curves](curves.png)\n\n"
            f"Panels: {', '.join(plotted)}. {curves_caption(marks)}\n",
        ]
        critic = critic_section(runs)
        if critic is not None:
            sections.append(critic)
    survival = survival_section(results, runs)
    if survival is not None:
        sections.append(survival)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.md"
    report.write_text("\n".join(sections))
    return report


def write_run_page(
    run_dir: Path, results: dict[str, Any], runs: dict[str, dict[str, Any]], marks: Evaluations
) -> Path:
    """A main job's own ``report.md`` and ``learning_curves.png``, from its results.json:
    settings, the pooled table and its notes, the learning curves, one row per run, where
    the trained policy is, and the timings. Returns the page's path."""
    from cxsim.evaluation import format_table

    cfg = results["config"]
    rows = [r | {"summary_recall": float_or_nan(r["summary_recall"])} for r in results["table"]]
    base_eval, evals, final = results["base"], results["evaluations"], results["final_policy"]
    labelled = [(BASE_LABEL, base_eval)] + [
        (f"{name} s{seed}", e)
        for name, seed_evals in evals.items()
        for seed, e in zip(cfg["seeds"], seed_evals, strict=True)
    ]
    per_run = format_table([(label, r) for label, e in labelled for r in e["results"]])
    sized = base_eval["config"]["compaction"]  # the sizes the pre-flight derived and checked
    timings = ", ".join(f"{k} {v:.0f}s" for k, v in results["timings_s"].items())
    env, episodes = cfg["env"], cfg["eval"]
    curves = ""
    if runs:
        plot_curves(by_preset(runs), run_dir / "learning_curves.png", RUN_CURVES, 2, marks)
        curves = f"![learning curves](learning_curves.png)\n\n{curves_caption(marks)}\n\n"
    page = run_dir / "report.md"
    page.write_text(
        "# cxsim run report\n\n"
        f"Environment `{env['env_id']}` {env['kwargs'] or ''}; budget {sized['budget']}, "
        f"threshold {sized['threshold']}, at most {sized['max_compactions']} compactions. "
        f"Presets {', '.join(cfg['presets'])}; seeds {', '.join(map(str, cfg['seeds']))}; "
        f"{episodes['episodes']} evaluation tasks x {episodes['repeats']} repeats per protocol.\n\n"
        f"{report_table(rows)}\n\n{report_notes(rows, results)}\n\n"
        f"{curves}"
        "More plots (losses, compactions, summary recall, critic): "
        "[report/report.md](report/report.md).\n\n"
        f"Per run (Wilson interval over tasks):\n\n{per_run}\n\n"
        f"Trained policy: `{final}` (`cxsim eval --policy {final}`).\n\n"
        f"Wall time {results['wall_time_s']:.0f}s: {timings}\n"
    )
    return page


def main(argv: list[str] | None = None) -> None:
    cfg = tyro.cli(Config, args=argv)
    report = write_report(cfg)
    results = json.loads((cfg.folder / "results.json").read_text())
    if cfg.out_dir is None and "table" in results:  # a main job's own page, rewritten
        print(f"run page at {(cfg.folder / 'report.md').absolute()}")
    print(f"report at {report.absolute()}")


if __name__ == "__main__":
    main()

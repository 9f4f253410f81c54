"""``cxsim run``: the main job. SFT, then CompactionRL, then evaluation under both protocols.

Reads top to bottom:

1. SFT: behaviour cloning of the scripted agent whose summarizer drops the key
   with ``--sft.omission-rate`` (the imperfect base), saved under ``sft/``;
2. evaluation of the base under the Single and Compacted protocols;
3. for each preset (default: ``compactionrl``) and training seed: PPO from the
   base (``train/<preset>-s<seed>/``), then the same evaluation;
4. ``report.md`` (table + learning curves as PNG) and ``results.json``; the
   table is printed.

Every stage resumes: a finished SFT policy is reused, training runs continue
from their newest checkpoint, so re-running a killed job finishes it. The
learning study in docs/results.md is this command with several seeds and
presets:

    cxsim run
    cxsim run --seeds 0 1 2 --presets compactionrl no-summary-training --run-dir runs/study
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import tyro

from cxsim.compaction import CompactionConfig
from cxsim.config import (
    DEFAULT_COMPACTION,
    EnvConfig,
    EvalConfig,
    PPOConfig,
    SFTConfig,
)
from cxsim.evaluation import format_table, t_interval, wilson_interval
from cxsim.experiments import evaluate as evaluate_entry
from cxsim.experiments import sft as sft_entry
from cxsim.experiments import train as train_entry
from cxsim.experiments.presets import PRESETS, PresetName
from cxsim.tracking import write_json


@dataclass(frozen=True)
class Config:
    """The main job: SFT -> PPO (one or more presets and seeds) -> evaluation -> report."""

    run_dir: str = "runs/main"
    """Output folder: sft/, train/<preset>-s<seed>/, eval/, report.md, results.json, *.png."""
    presets: tuple[PresetName, ...] = ("compactionrl",)
    """PPO presets to train (experiments/presets.py); each applies its changes on top of --ppo.*."""
    seeds: tuple[int, ...] = (0,)
    """Training seeds (each preset is trained once per seed from the same SFT base)."""
    sft_seed: int = 0
    """Seed of the SFT base."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    sft: SFTConfig = field(default_factory=SFTConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    train_time_limit_s: float | None = None
    """Cap on each training run's wall time (it stops and checkpoints); None: all iterations."""
    threads: int = 1
    """torch intra-op threads for training (0: torch's default). 1 is the safe choice on shared
    cores: a second thread that must wait for a busy core made a tiny-model update 8x slower."""
    rollout_threads: int = 1
    """torch threads while sampling rollouts and evaluating (1: fastest for tiny models)."""
    progress_bar: bool = True
    """Show tqdm progress bars."""

    def __post_init__(self) -> None:
        if not self.presets or not self.seeds:
            raise ValueError("pass at least one --presets name and one --seeds value")
        for name in self.presets:
            if name not in PRESETS:
                raise ValueError(f"unknown preset {name!r}; choose from: {', '.join(PRESETS)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds has duplicates: {self.seeds}")
        # build every stage's config now, so that a bad combination fails before any work
        for name in self.presets:
            preset_ppo(self, name)


def preset_ppo(cfg: Config, name: str) -> PPOConfig:
    """``cfg.ppo`` with the preset's changes (its fields that differ from PPOConfig()) applied."""
    default, preset = PPOConfig(), PRESETS[name][1]
    changes = {
        f.name: getattr(preset, f.name)
        for f in fields(PPOConfig)
        if getattr(preset, f.name) != getattr(default, f.name)
    }
    return replace(cfg.ppo, **changes)


def sft_config(cfg: Config) -> sft_entry.Config:
    return sft_entry.Config(
        run_dir=str(Path(cfg.run_dir) / "sft"),
        seed=cfg.sft_seed,
        env=cfg.env,
        compaction=cfg.compaction,
        sft=cfg.sft,
        threads=cfg.threads,
        progress_bar=cfg.progress_bar,
    )


def train_config(cfg: Config, policy: str, name: str, seed: int) -> train_entry.Config:
    return train_entry.Config(
        preset=name,
        policy=policy,
        run_dir=str(Path(cfg.run_dir) / "train" / f"{name}-s{seed}"),
        seed=seed,
        env=cfg.env,
        compaction=cfg.compaction,
        ppo=preset_ppo(cfg, name),
        resume=True,
        time_limit_s=cfg.train_time_limit_s,
        threads=cfg.threads,
        rollout_threads=cfg.rollout_threads,
        progress_bar=cfg.progress_bar,
    )


def eval_config(cfg: Config, policy: str, out: Path) -> evaluate_entry.Config:
    return evaluate_entry.Config(
        policy=policy,
        env=cfg.env,
        compaction=cfg.compaction,
        eval=cfg.eval,
        out=str(out),
        threads=cfg.rollout_threads,
    )


def pooled(name: str, evals: list[dict[str, Any]], protocol: str) -> dict[str, Any]:
    """One row over training seeds: Wilson over all (seed, task) pairs, and a t-interval over seeds."""
    per_seed = [next(r for r in e["results"] if r["protocol"] == protocol) for e in evals]
    tasks = np.concatenate([r["per_task_success"] for r in per_seed])
    low, high = wilson_interval(float(tasks.sum()), len(tasks))
    seed_low, seed_high = t_interval([r["pass_at_1"] for r in per_seed])
    recalls = [r["summary_recall"] for r in per_seed if r["summary_recall"] is not None]
    recalls = [x for x in recalls if not np.isnan(x)]  # Single writes no summaries
    return {
        "label": name,
        "protocol": protocol,
        "seeds": len(per_seed),
        "pass_at_1": float(tasks.mean()),
        "ci95_low": low,
        "ci95_high": high,
        "seed_ci95_low": seed_low,
        "seed_ci95_high": seed_high,
        "per_seed_pass_at_1": [r["pass_at_1"] for r in per_seed],
        "mean_compactions": float(np.mean([r["mean_compactions"] for r in per_seed])),
        "summary_recall": float(np.mean(recalls)) if recalls else float("nan"),
        "runs": int(sum(r["runs"] for r in per_seed)),
    }


def report_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table: Pass@1 (Wilson CI over seed x task pairs; t-interval over seeds)."""
    lines = [
        "| model | protocol | seeds | Pass@1 | 95% CI (tasks) | 95% CI (seeds) | per seed | "
        "compactions | summary recall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seed_ci = (
            "-" if r["seeds"] < 2 else f"[{r['seed_ci95_low']:.3f}, {r['seed_ci95_high']:.3f}]"
        )
        recall = "-" if np.isnan(r["summary_recall"]) else f"{r['summary_recall']:.2f}"
        per_seed = " ".join(f"{p:.2f}" for p in r["per_seed_pass_at_1"])
        lines.append(
            f"| {r['label']} | {r['protocol']} | {r['seeds']} | {r['pass_at_1']:.3f} | "
            f"[{r['ci95_low']:.3f}, {r['ci95_high']:.3f}] | {seed_ci} | {per_seed} | "
            f"{r['mean_compactions']:.2f} | {recall} |"
        )
    return "\n".join(lines)


def plot_curves(curves: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Training success rate and summary recall per iteration, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [
        ("charts/success_rate", "training success rate"),
        ("compaction/summary_recall", "summary recall"),
    ]
    fig, axes = plt.subplots(1, len(keys), figsize=(11, 4))
    for ax, (key, title) in zip(axes, keys, strict=True):
        for label, history in curves.items():
            xs = [h["iteration"] for h in history]
            ys = [h[key] for h in history]
            ax.plot(xs, ys, label=label, linewidth=1.2)
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: Config) -> dict[str, Any]:
    began = time.perf_counter()
    run_dir = Path(cfg.run_dir)
    timings: dict[str, float] = {}

    # 1. SFT base (reused when a previous run of this job made it)
    sft_cfg = sft_config(cfg)
    base_policy = Path(sft_cfg.run_dir) / "policy"
    tick = time.perf_counter()
    if (base_policy / "config.json").is_file():
        print(f"[run] reusing the SFT base at {base_policy}", flush=True)
    else:
        print("[run] SFT", flush=True)
        sft_entry.run_sft(sft_cfg)
    timings["sft_s"] = time.perf_counter() - tick

    # 2. base evaluation
    tick = time.perf_counter()
    print("[run] evaluating the SFT base", flush=True)
    base_eval = evaluate_entry.evaluate(
        eval_config(cfg, str(base_policy), run_dir / "eval" / "base.json"), label="base (SFT)"
    )
    timings["eval_base_s"] = time.perf_counter() - tick

    # 3. PPO per preset and seed, each evaluated
    evals: dict[str, list[dict[str, Any]]] = {}
    curves: dict[str, list[dict[str, Any]]] = {}
    for name in cfg.presets:
        for seed in cfg.seeds:
            tick = time.perf_counter()
            print(f"[run] training {name} seed {seed}", flush=True)
            trained = train_entry.train(train_config(cfg, str(base_policy), name, seed))
            timings[f"train_{name}_s{seed}_s"] = time.perf_counter() - tick
            curves[f"{name} s{seed}"] = trained["history"]
            tick = time.perf_counter()
            out = run_dir / "eval" / f"{name}-s{seed}.json"
            evals.setdefault(name, []).append(
                evaluate_entry.evaluate(eval_config(cfg, trained["policy"], out), label=name)
            )
            timings[f"eval_{name}_s{seed}_s"] = time.perf_counter() - tick

    # 4. report
    rows = [pooled("base (SFT)", [base_eval], p) for p in cfg.eval.protocols]
    for name, seed_evals in evals.items():
        rows += [pooled(name, seed_evals, p) for p in cfg.eval.protocols]
    table = report_table(rows)
    plot_curves(curves, run_dir / "learning_curves.png")
    wall = time.perf_counter() - began
    results = {
        "table": rows,
        "base": base_eval,
        "evaluations": evals,
        "timings_s": timings,
        "wall_time_s": wall,
        "config": cfg,
    }
    write_json(run_dir / "results.json", results)
    labelled = [("base (SFT)", base_eval)] + [
        (f"{name} s{seed}", e)
        for name, seed_evals in evals.items()
        for seed, e in zip(cfg.seeds, seed_evals, strict=True)
    ]
    per_run = format_table([(label, r) for label, e in labelled for r in e["results"]])
    sized = base_eval["config"].compaction  # the sizes the pre-flight derived and checked
    (run_dir / "report.md").write_text(
        "# cxsim run report\n\n"
        f"Environment `{cfg.env.env_id}` {cfg.env.kwargs or ''}; budget {sized.budget}, "
        f"threshold {sized.threshold}, at most {sized.max_compactions} "
        f"compactions. Presets {', '.join(cfg.presets)}; seeds {', '.join(map(str, cfg.seeds))}; "
        f"{cfg.eval.episodes} evaluation tasks x {cfg.eval.repeats} repeats per protocol.\n\n"
        "Pass@1 with two 95% intervals: Wilson over all (training seed, task) pairs, and a "
        "Student-t interval over the per-seed Pass@1 values (from 2 seeds on).\n\n"
        f"{table}\n\n![learning curves](learning_curves.png)\n\n"
        f"Per run (Wilson interval over tasks):\n\n{per_run}\n\n"
        f"Wall time {wall:.0f}s: " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()) + "\n"
    )
    print(table)
    print(f"[run] {wall:.0f}s; report at {run_dir / 'report.md'}")
    return results


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

"""``cxsim run``: the main job. SFT, then CompactionRL, then evaluation under both protocols.

Reads top to bottom:

1. SFT from the shipped starting checkpoint (``--policy pretrained``: the tiny model
   that copies, cxsim/pretrained.py): behaviour cloning of the scripted agent whose
   summarizer drops the key with ``--sft.omission-rate`` (the imperfect base), saved
   under ``sft/``;
2. evaluation of the base under the Single and Compacted protocols;
3. for each preset (default: ``compactionrl``) and training seed: PPO from the
   base (``train/<preset>-s<seed>/``), then the same evaluation;
4. ``report.md`` (table, its footnotes, learning curves per preset as PNG),
   ``results.json``, the full report (``cxsim report``: ``report/``) and the
   trained policy in ``final/policy`` (first preset, first seed); the table is
   printed with where everything is.

Every stage resumes: a finished SFT policy is reused, training runs continue
from their newest checkpoint, so re-running a killed job finishes it. The run
folder records its settings (``settings.json``): a rerun with other settings
stops before any work and names them (``--overwrite`` starts the folder anew);
more ``--seeds`` or ``--presets`` in the same folder reuse what is there. The
seed of the SFT base and of the evaluation tasks default to the first training seed,
so ``cxsim run --seeds N`` is an independent replicate (its own base, training seed and
tasks). The learning study in docs/results.md is this command with several seeds and
presets:

    cxsim run
    cxsim run --seeds 3                          # an independent replicate
    cxsim run --seeds 0 1 2 --presets compactionrl no-summary-training --run-dir runs/study
    cxsim run --policy path/to/hf-model --device cuda --precision bf16   # SFT from that model
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tyro

from cxsim.compaction import CompactionConfig
from cxsim.compute import FLAT, Compute, ComputeFlags, SamplingCompute
from cxsim.config import (
    DEFAULT_COMPACTION,
    EnvConfig,
    EvalConfig,
    PPOConfig,
    SFTConfig,
)
from cxsim.model_group import Model, SavedModel
from cxsim.model_options import ChatOptions
from cxsim.pipeline.presets import PRESETS, PresetName
from cxsim.pipeline.run_table import pooled, report_notes, report_table
from cxsim.pipeline.sft import check_starting_policy
from cxsim.tracking import claim_run_dir, log_evaluation, say, write_json

if TYPE_CHECKING:  # the stages import torch; they are imported where they run (fast --help)
    from cxsim.pipeline import evaluate as evaluate_entry
    from cxsim.pipeline import sft as sft_entry
    from cxsim.pipeline import train as train_entry


@dataclass(frozen=True)
class Config:
    """The main job: SFT -> PPO (one or more presets and seeds) -> evaluation -> report."""

    run_dir: str = "runs/main"
    """Output folder: sft/, train/<preset>-s<seed>/, eval/, report.md, results.json, *.png."""
    presets: tuple[PresetName, ...] = ("compactionrl",)
    """PPO presets to train (cxsim/pipeline/presets.py); each applies its changes on top of
    --ppo.*."""
    seeds: tuple[int, ...] = (0,)
    """Training seeds (each preset is trained once per seed from the same SFT base)."""
    sft_seed: int | None = None
    """Seed of the SFT base; None: the first of ``--seeds``."""
    model: Model = field(default_factory=Model, metadata=FLAT)
    """What the SFT base starts from (``--policy``), and how its chat template renders
    turns."""
    compute: ComputeFlags[Compute] = field(default_factory=Compute, metadata=FLAT)
    """How every stage computes (``--threads``: SFT's and PPO's updates)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    sft: SFTConfig = field(default_factory=SFTConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    train_time_limit_s: float | None = None
    """Cap on each training run's wall time (it stops and checkpoints); None: all iterations."""
    rollout_threads: int = 1
    """torch threads while sampling rollouts and evaluating (1: fastest for tiny models)."""
    progress_bar: bool = True
    """Show progress (a bar on a terminal; a summary line every 30 s in a log)."""
    overwrite: bool = False
    """Delete ``--run-dir`` first when it holds a run made with other settings."""

    def __post_init__(self) -> None:
        if not self.presets or not self.seeds:
            raise ValueError("pass at least one --presets name and one --seeds value")
        for name in self.presets:
            if name not in PRESETS:
                raise ValueError(f"unknown preset {name!r}; choose from: {', '.join(PRESETS)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds has duplicates: {self.seeds}")
        check_starting_policy(self.model.policy, self.sft)
        if self.sft_seed is None:
            object.__setattr__(self, "sft_seed", self.seeds[0])
        object.__setattr__(self, "eval", self.eval.seeded(self.seeds[0]))
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


def recorded_settings(cfg: Config) -> dict[str, Any]:
    """What a run folder's results depend on (settings.json). Presets and seeds are left
    out (each has its own subfolder, so a rerun may add some), and so are evaluation,
    threads, device and progress (evaluation reruns every time; they change only speed)."""
    return {
        "env": cfg.env,
        "compaction": cfg.compaction,
        "sft": cfg.sft,
        "sft_seed": cfg.sft_seed,
        "ppo": cfg.ppo,
        "train_time_limit_s": cfg.train_time_limit_s,
        **model_settings(cfg),
    }


def model_settings(cfg: Config) -> dict[str, Any]:
    """The starting model and how it computes, where they differ from the defaults (so that
    folders recorded before these settings existed still match a run without them)."""
    given = {
        "policy": cfg.model.policy,
        "chat": cfg.model.chat if cfg.model.chat != ChatOptions() else None,
        "precision": cfg.compute.precision if cfg.compute.precision != "fp32" else None,
        "gradient_checkpointing": cfg.compute.gradient_checkpointing or None,
    }
    return {k: v for k, v in given.items() if v is not None}


def sft_config(cfg: Config) -> sft_entry.Config:
    from cxsim.pipeline import sft as sft_entry

    return sft_entry.Config(
        run_dir=str(Path(cfg.run_dir) / "sft"),
        seed=cfg.sft_seed,
        env=cfg.env,
        compaction=cfg.compaction,
        sft=cfg.sft,
        model=cfg.model,
        compute=cfg.compute,
        progress_bar=cfg.progress_bar,
    )


def train_config(cfg: Config, policy: str, name: str, seed: int) -> train_entry.Config:
    from cxsim.pipeline import train as train_entry

    return train_entry.Config(
        preset=name,
        model=SavedModel(policy, cfg.model.chat),
        run_dir=str(Path(cfg.run_dir) / "train" / f"{name}-s{seed}"),
        seed=seed,
        env=cfg.env,
        compaction=cfg.compaction,
        ppo=preset_ppo(cfg, name),
        resume=True,
        time_limit_s=cfg.train_time_limit_s,
        rollout_threads=cfg.rollout_threads,
        progress_bar=cfg.progress_bar,
        compute=cfg.compute,
    )


def eval_config(cfg: Config, policy: str, out: Path) -> evaluate_entry.Config:
    from cxsim.pipeline import evaluate as evaluate_entry

    return evaluate_entry.Config(
        model=Model(policy, cfg.model.chat),
        env=cfg.env,
        compaction=cfg.compaction,
        eval=cfg.eval,
        out=str(out),
        compute=SamplingCompute(
            device=cfg.compute.device, precision=cfg.compute.precision, threads=cfg.rollout_threads
        ),
    )


def run(cfg: Config) -> dict[str, Any]:
    began = time.perf_counter()
    run_dir = Path(cfg.run_dir)
    claim_run_dir(run_dir, recorded_settings(cfg), overwrite=cfg.overwrite)  # before any work

    from cxsim.pipeline import evaluate as evaluate_entry
    from cxsim.report.report import Config as ReportConfig
    from cxsim.report.report import write_report

    timings: dict[str, float] = {}
    announce = stage_announcer(2 + 2 * len(cfg.presets) * len(cfg.seeds), began)

    # 1. SFT base (reused when a previous run of this job made it)
    tick = time.perf_counter()
    base_policy = sft_base(cfg, announce)
    timings["sft_s"] = time.perf_counter() - tick

    # 2. base evaluation
    tick = time.perf_counter()
    announce("evaluating the SFT base")
    base_eval = evaluate_entry.evaluate(
        eval_config(cfg, str(base_policy), run_dir / "eval" / "base.json"), label="base (SFT)"
    )
    timings["eval_base_s"] = time.perf_counter() - tick

    # 3. PPO per preset and seed, each evaluated
    evals, policies = train_presets(cfg, base_policy, announce, timings)

    # 4. report
    results = write_results(cfg, base_eval, evals, policies[0], timings, began)
    notes = report_notes(results["table"], {"config": to_dict(cfg), "base": to_dict(base_eval)})
    # report.md, learning_curves.png and report/ from results.json, as `cxsim report` does
    full_report = write_report(ReportConfig(run_dir=str(run_dir)))
    say_where(run_dir, results, notes, full_report)
    return results


def stage_announcer(stages: int, began: float) -> Callable[[str], None]:
    """``announce(what)``: one line per stage, numbered, with the seconds since ``began``."""
    stage = iter(range(1, stages + 1))

    def announce(what: str) -> None:
        say(f"[run {next(stage)} of {stages}, {time.perf_counter() - began:.0f}s] {what}")

    return announce


def sft_base(cfg: Config, announce: Callable[[str], None]) -> Path:
    """The SFT base's policy folder: made by behaviour cloning, or reused when a previous run
    of this job made it."""
    from cxsim.pipeline import sft as sft_entry

    sft_cfg = sft_config(cfg)
    base_policy = Path(sft_cfg.run_dir) / "policy"
    if (base_policy / "config.json").is_file():
        announce(f"SFT: reusing the base at {base_policy}")
    else:
        announce("SFT: behaviour cloning of the scripted agent")
        sft_entry.run_sft(sft_cfg)
    return base_policy


def train_presets(
    cfg: Config, base_policy: Path, announce: Callable[[str], None], timings: dict[str, float]
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """PPO from the base per preset and seed, each evaluated (its time in ``timings``);
    returns each preset's evaluations in seed order, and the trained policies in order."""
    from cxsim.pipeline import evaluate as evaluate_entry
    from cxsim.pipeline import train as train_entry

    run_dir = Path(cfg.run_dir)
    evals: dict[str, list[dict[str, Any]]] = {}
    policies: list[str] = []
    for name in cfg.presets:
        for seed in cfg.seeds:
            tick = time.perf_counter()
            announce(f"training {name} seed {seed}")
            trained = train_entry.train(train_config(cfg, str(base_policy), name, seed))
            timings[f"train_{name}_s{seed}_s"] = time.perf_counter() - tick
            for note in train_entry.training_notes(trained):
                say(note)
            policies.append(trained["policy"])
            tick = time.perf_counter()
            announce(f"evaluating {name} seed {seed}")
            out = run_dir / "eval" / f"{name}-s{seed}.json"
            evaluated = evaluate_entry.evaluate(
                eval_config(cfg, trained["policy"], out), label=name
            )
            log_evaluation(
                train_config(cfg, "", name, seed).run_dir, evaluated, trained["iterations_done"]
            )
            evals.setdefault(name, []).append(evaluated)
            timings[f"eval_{name}_s{seed}_s"] = time.perf_counter() - tick
    return evals, policies


def write_results(
    cfg: Config,
    base_eval: dict[str, Any],
    evals: dict[str, list[dict[str, Any]]],
    final_policy: str,
    timings: dict[str, float],
    began: float,
) -> dict[str, Any]:
    """results.json: the table (the base and each preset under each protocol, pooled over
    seeds), the evaluations, timings and config; ``final_policy`` (the first preset's first
    seed) copied to ``final/policy``, ready for ``cxsim eval``."""
    run_dir = Path(cfg.run_dir)
    rows = [pooled("base (SFT)", [base_eval], p) for p in cfg.eval.protocols]
    for name, seed_evals in evals.items():
        rows += [pooled(name, seed_evals, p) for p in cfg.eval.protocols]
    final = run_dir / "final" / "policy"
    shutil.rmtree(final, ignore_errors=True)
    shutil.copytree(final_policy, final)
    results = {
        "table": rows,
        "base": base_eval,
        "evaluations": evals,
        "final_policy": str(final),
        "timings_s": timings,
        "wall_time_s": time.perf_counter() - began,
        "config": cfg,
    }
    write_json(run_dir / "results.json", results)
    return results


def say_where(run_dir: Path, results: dict[str, Any], notes: str, full_report: Path) -> None:
    """The table with its footnotes, then where the report, its plots, the trained policy and
    the TensorBoard logs are."""
    where = run_dir.absolute()  # the hints work from any folder
    tensorboard = Path(sys.executable).parent / "tensorboard"  # this environment's, if any
    say(f"{report_table(results['table'])}\n\n{notes}\n")
    say(f"[run] done in {results['wall_time_s']:.0f}s")
    say(f"[run] report: {where / 'report.md'} (plots: {where / 'learning_curves.png'})")
    say(f"[run] full report: {full_report.absolute()} (plots: {where / 'report' / 'curves.png'})")
    say(f"[run] trained policy: {Path(results['final_policy']).absolute()}")
    tensorboard_command = tensorboard if tensorboard.is_file() else "tensorboard"
    say(f"[run] TensorBoard: {tensorboard_command} --logdir {where}")


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config or payload as results.json stores it (what :func:`report_notes` reads)."""
    from cxsim.tracking import to_jsonable

    return to_jsonable(cfg)


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

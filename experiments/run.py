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
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from cxsim.experiments.presets import PRESETS, PresetName
from cxsim.experiments.sft import check_starting_policy
from cxsim.model_options import ChatOptions, Precision, check_device_name, check_precision
from cxsim.pretrained import PRETRAINED
from cxsim.tracking import claim_run_dir, log_evaluation, say, write_json

if TYPE_CHECKING:  # the stages import torch; they are imported where they run (fast --help)
    from cxsim.experiments import evaluate as evaluate_entry
    from cxsim.experiments import sft as sft_entry
    from cxsim.experiments import train as train_entry


@dataclass(frozen=True)
class Config:
    """The main job: SFT -> PPO (one or more presets and seeds) -> evaluation -> report."""

    run_dir: str = "runs/main"
    """Output folder: sft/, train/<preset>-s<seed>/, eval/, report.md, results.json, *.png."""
    presets: tuple[PresetName, ...] = ("compactionrl",)
    """PPO presets to train (experiments/presets.py); each applies its changes on top of --ppo.*."""
    seeds: tuple[int, ...] = (0,)
    """Training seeds (each preset is trained once per seed from the same SFT base)."""
    sft_seed: int | None = None
    """Seed of the SFT base; None: the first of ``--seeds``."""
    policy: str | None = PRETRAINED
    """What the SFT base starts from: ``pretrained`` (the shipped starting checkpoint, the
    tiny model that copies), a local Hugging Face causal-LM directory (model, tokenizer and
    chat template from it), or None: a fresh ``--sft.model`` preset over the word tokenizer
    (give it ``--sft.epochs 12`` or more)."""
    chat: ChatOptions = field(default_factory=ChatOptions)
    """How the policy's chat template renders turns (``--policy`` with a template only)."""
    device: str = "auto"
    """auto (CUDA when present), cpu, cuda or cuda:N: every stage's models and batches."""
    precision: Precision = "fp32"
    """fp32, or bf16: bfloat16 autocast, float32 weights and Adam state (every stage)."""
    gradient_checkpointing: bool = False
    """Recompute decoder activations in the backward pass of SFT and PPO (less memory)."""
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
        check_starting_policy(self.policy, self.sft)
        if self.sft_seed is None:
            object.__setattr__(self, "sft_seed", self.seeds[0])
        object.__setattr__(self, "eval", self.eval.seeded(self.seeds[0]))
        check_device_name(self.device)
        check_precision(self.precision)
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
        "policy": cfg.policy,
        "chat": cfg.chat if cfg.chat != ChatOptions() else None,
        "precision": cfg.precision if cfg.precision != "fp32" else None,
        "gradient_checkpointing": cfg.gradient_checkpointing or None,
    }
    return {k: v for k, v in given.items() if v is not None}


def sft_config(cfg: Config) -> sft_entry.Config:
    from cxsim.experiments import sft as sft_entry

    return sft_entry.Config(
        run_dir=str(Path(cfg.run_dir) / "sft"),
        seed=cfg.sft_seed,
        env=cfg.env,
        compaction=cfg.compaction,
        sft=cfg.sft,
        policy=cfg.policy,
        chat=cfg.chat,
        device=cfg.device,
        precision=cfg.precision,
        gradient_checkpointing=cfg.gradient_checkpointing,
        threads=cfg.threads,
        progress_bar=cfg.progress_bar,
    )


def train_config(cfg: Config, policy: str, name: str, seed: int) -> train_entry.Config:
    from cxsim.experiments import train as train_entry

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
        chat=cfg.chat,
        device=cfg.device,
        precision=cfg.precision,
        gradient_checkpointing=cfg.gradient_checkpointing,
    )


def eval_config(cfg: Config, policy: str, out: Path) -> evaluate_entry.Config:
    from cxsim.experiments import evaluate as evaluate_entry

    return evaluate_entry.Config(
        policy=policy,
        env=cfg.env,
        compaction=cfg.compaction,
        eval=cfg.eval,
        out=str(out),
        chat=cfg.chat,
        device=cfg.device,
        precision=cfg.precision,
        threads=cfg.rollout_threads,
    )


def pooled(name: str, evals: list[dict[str, Any]], protocol: str) -> dict[str, Any]:
    """One row over training seeds: Wilson over all (seed, task) pairs, and a t-interval over
    seeds clipped to [0, 1]."""
    from cxsim.evaluation import t_interval, wilson_interval

    per_seed = [next(r for r in e["results"] if r["protocol"] == protocol) for e in evals]
    tasks = np.concatenate([r["per_task_success"] for r in per_seed])
    low, high = wilson_interval(float(tasks.sum()), len(tasks))
    seed_low, seed_high = t_interval([r["pass_at_1"] for r in per_seed], bounds=(0.0, 1.0))
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
        "truncated_rate": float(np.mean([r.get("truncated_rate", 0.0) for r in per_seed])),
        "runs": int(sum(r["runs"] for r in per_seed)),
    }


def report_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table: Pass@1 (Wilson CI over seed x task pairs; t-interval over seeds and
    the per-seed values, columns only when some row has 2 seeds or more).
    :func:`report_notes` explains it."""
    with_seed_ci = any(r["seeds"] >= 2 for r in rows)
    header = "| model | protocol | seeds | Pass@1 | 95% CI (tasks) [1] | "
    header += "95% CI (seeds) [2] | " if with_seed_ci else ""
    header += "per seed | " if with_seed_ci else ""  # one seed: per seed = Pass@1
    first = 3 if with_seed_ci else 2  # footnotes are numbered as their columns appear
    header += f"compactions [{first}] | summary recall [{first + 1}] |"  # notes: report_notes
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        seed_ci = (
            "-" if r["seeds"] < 2 else f"[{r['seed_ci95_low']:.3f}, {r['seed_ci95_high']:.3f}]"
        )
        recall = "-" if np.isnan(r["summary_recall"]) else f"{r['summary_recall']:.2f}"
        per_seed = " ".join(f"{p:.2f}" for p in r["per_seed_pass_at_1"])
        seed_cell = f"{seed_ci} | {per_seed} | " if with_seed_ci else ""
        lines.append(
            f"| {r['label']} | {r['protocol']} | {r['seeds']} | {r['pass_at_1']:.3f} | "
            f"[{r['ci95_low']:.3f}, {r['ci95_high']:.3f}] | {seed_cell}"
            f"{r['mean_compactions']:.2f} | {recall} |"
        )
    return "\n".join(lines)


def chance_level(env: dict[str, Any] | EnvConfig) -> float | None:
    """Pass@1 of a uniform guess, where the task defines one: KeyRecall asks for one of
    ``num_values`` key values (1 / num_values); None for other tasks."""
    env_id = env["env_id"] if isinstance(env, dict) else env.env_id
    kwargs = env["kwargs"] if isinstance(env, dict) else env.kwargs
    if "KeyRecall" not in env_id:
        return None
    import gymnasium as gym

    import cxsim.envs  # noqa: F401  (registers the environments)

    made = gym.make(env_id, **(kwargs or {}))
    values = getattr(made.unwrapped, "num_values", None)
    made.close()
    return 1.0 / values if values else None


def report_notes(rows: list[dict[str, Any]], results: dict[str, Any]) -> str:
    """The table's footnotes: chance level, why Single is 0 when it is, the columns."""
    cfg = results["config"]
    budget = cfg["compaction"]["budget"]
    if budget is None:  # derived by the pre-flight: the base evaluation's config holds it
        budget = results["base"]["config"]["compaction"]["budget"]
    chance = chance_level(cfg["env"])
    notes = []
    if chance is not None:
        notes.append(f"Chance level: {chance:.3f} (a uniform guess among the key values).")
    single = [r for r in rows if r["protocol"] == "single"]
    zero = [r for r in single if r["pass_at_1"] == 0.0]
    if zero:
        who = "every model" if len(zero) == len(single) else ", ".join(r["label"] for r in zero)
        full = min(r.get("truncated_rate", 1.0) for r in zero)
        share = "all" if full == 1.0 else f"at least {full:.0%}"
        notes.append(
            f"Single is 0 for {who}: Single allows no compaction, and {share} of those "
            f"episodes filled the {budget}-token window before the answer was due "
            "(the default task is sized so that no episode fits in one window). Compacted "
            "is the protocol under which the task can be solved."
        )
    notes.append("[1] Wilson score interval over every (training seed, evaluation task) pair.")
    first = 2
    if any(r["seeds"] >= 2 for r in rows):
        notes.append(
            "[2] Student-t interval over the per-seed Pass@1 values, clipped to [0, 1]; it "
            "counts the variance between training seeds (shown from 2 seeds on)."
        )
        first = 3
    notes += [
        f"[{first}] Mean number of compactions per episode: times the window filled and the "
        "policy summarised its history into a fresh window.",
        f"[{first + 1}] Fraction of the facts the task needs later (the key's current value) "
        "that the summaries kept, over all summaries written and the facts shown before "
        "each was written (a fact not shown yet counts for no summary); - where none were "
        "written.",
    ]
    return "\n\n".join(notes)


def run(cfg: Config) -> dict[str, Any]:
    began = time.perf_counter()
    run_dir = Path(cfg.run_dir)
    claim_run_dir(run_dir, recorded_settings(cfg), overwrite=cfg.overwrite)  # before any work

    from cxsim.experiments import evaluate as evaluate_entry
    from cxsim.experiments import sft as sft_entry
    from cxsim.experiments import train as train_entry
    from cxsim.experiments.report import Config as ReportConfig
    from cxsim.experiments.report import write_report

    timings: dict[str, float] = {}
    stages = 2 + 2 * len(cfg.presets) * len(cfg.seeds)
    stage = iter(range(1, stages + 1))

    def announce(what: str) -> None:
        say(f"[run {next(stage)} of {stages}, {time.perf_counter() - began:.0f}s] {what}")

    # 1. SFT base (reused when a previous run of this job made it)
    sft_cfg = sft_config(cfg)
    base_policy = Path(sft_cfg.run_dir) / "policy"
    tick = time.perf_counter()
    if (base_policy / "config.json").is_file():
        announce(f"SFT: reusing the base at {base_policy}")
    else:
        announce("SFT: behaviour cloning of the scripted agent")
        sft_entry.run_sft(sft_cfg)
    timings["sft_s"] = time.perf_counter() - tick

    # 2. base evaluation
    tick = time.perf_counter()
    announce("evaluating the SFT base")
    base_eval = evaluate_entry.evaluate(
        eval_config(cfg, str(base_policy), run_dir / "eval" / "base.json"), label="base (SFT)"
    )
    timings["eval_base_s"] = time.perf_counter() - tick

    # 3. PPO per preset and seed, each evaluated
    evals: dict[str, list[dict[str, Any]]] = {}
    policies: list[str] = []
    for name in cfg.presets:
        for seed in cfg.seeds:
            tick = time.perf_counter()
            announce(f"training {name} seed {seed}")
            trained = train_entry.train(train_config(cfg, str(base_policy), name, seed))
            timings[f"train_{name}_s{seed}_s"] = time.perf_counter() - tick
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

    # 4. report
    rows = [pooled("base (SFT)", [base_eval], p) for p in cfg.eval.protocols]
    for name, seed_evals in evals.items():
        rows += [pooled(name, seed_evals, p) for p in cfg.eval.protocols]
    table = report_table(rows)
    final = run_dir / "final" / "policy"  # the first preset's first seed, ready for `cxsim eval`
    shutil.rmtree(final, ignore_errors=True)
    shutil.copytree(policies[0], final)
    wall = time.perf_counter() - began
    results = {
        "table": rows,
        "base": base_eval,
        "evaluations": evals,
        "final_policy": str(final),
        "timings_s": timings,
        "wall_time_s": wall,
        "config": cfg,
    }
    write_json(run_dir / "results.json", results)
    notes = report_notes(rows, {"config": to_dict(cfg), "base": to_dict(base_eval)})
    # report.md, learning_curves.png and report/ from results.json, as `cxsim report` does
    full_report = write_report(ReportConfig(run_dir=str(run_dir)))
    where = run_dir.absolute()  # the hints work from any folder
    tensorboard = Path(sys.executable).parent / "tensorboard"  # this environment's, if any
    say(f"{table}\n\n{notes}\n")
    say(f"[run] done in {wall:.0f}s")
    say(f"[run] report: {where / 'report.md'} (plots: {where / 'learning_curves.png'})")
    say(f"[run] full report: {full_report.absolute()} (plots: {where / 'report' / 'curves.png'})")
    say(f"[run] trained policy: {final.absolute()}")
    tensorboard_command = tensorboard if tensorboard.is_file() else "tensorboard"
    say(f"[run] TensorBoard: {tensorboard_command} --logdir {where}")
    return results


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config or payload as results.json stores it (what :func:`report_notes` reads)."""
    from cxsim.tracking import to_jsonable

    return to_jsonable(cfg)


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

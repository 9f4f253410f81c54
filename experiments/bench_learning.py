"""The learning regression check: does CompactionRL still learn, and do its diagnostics
still read as they did?

Run it after changing the trainer (an estimator, a loss, the log-prob computation, the
runtime). For each seed of ``--seeds``, in ``--jobs`` spawned single-threaded processes
(as ``cxsim verdicts`` runs seeds):

1. an SFT base of its own (seed s) from the shipped starting checkpoint, as ``cxsim run``
   makes it;
2. ``compactionrl`` PPO from that base (seed s), with the main job's budgets;
3. Compacted Pass@1 of the base and of the trained policy on the seed's own held-out
   tasks (``--eval.seed`` s).

Then two kinds of checks, every figure printed, exit status 1 if any fails:

- **learning**: the paired gain (trained minus base Compacted Pass@1, one per seed) must
  have a mean of at least ``min_mean`` and, on every seed, at least ``min_each``
  (:data:`GAIN_MARGIN`; the one-sided Student-t bound and p-value are printed too);
- **diagnostics**: each figure of :data:`RANGES` (first-step log ratio, critic explained
  variance and summary recall over the last iterations, the loss share of summary tokens)
  must lie in the range recorded for the setting (:data:`RECORDED_AT`).

The full mode is the main job at its defaults (``cxsim run --seeds s``) on seeds 0 and 1;
its margins and ranges were recorded on the main job's seeds (:data:`RECORDED_AT`).

    cxsim bench learning                 # the check: 2 seeds at once, under 5 minutes
    cxsim bench learning --mode reduced  # the pipeline in seconds (what the slow test runs)
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import tyro

from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, PPOConfig, SFTConfig
from cxsim.experiments.processes import map_in_processes
from cxsim.experiments.tables import SMOKE_ENV
from cxsim.pretrained import PRETRAINED
from cxsim.tracking import say

Mode = Literal["full", "reduced"]
PRESET = "compactionrl"


@dataclass(frozen=True)
class Setting:
    """The fixed small setting one mode trains (every field recorded with its ranges)."""

    env: EnvConfig
    sft: SFTConfig
    ppo: PPOConfig
    eval: EvalConfig
    budget: int | None = None
    """Compaction budget C; None: the pre-flight's size for the env."""
    policy: str | None = None
    """What every seed's SFT starts from (``pretrained``: the shipped starting checkpoint);
    None: a fresh model."""


SETTINGS: dict[str, Setting] = {
    "full": Setting(
        env=EnvConfig(), sft=SFTConfig(), ppo=PPOConfig(),
        eval=EvalConfig(episodes=128, protocols=("compacted",)), policy=PRETRAINED,
    ),
    "reduced": Setting(
        env=SMOKE_ENV,
        sft=SFTConfig(episodes=6, epochs=1, heldout_episodes=2, omission_rate=0.65),
        ppo=PPOConfig(rollouts_per_batch=4, iterations=2, critic_warmup=1, minibatches=1),
        eval=EvalConfig(episodes=4, protocols=("compacted",)),
        budget=160, policy=None,
    ),
}  # fmt: skip
"""``full``: the main job at its defaults (default KeyRecall task; per seed SFT 4
epochs at omission 0.5 from the shipped starting checkpoint, length-bucketed; 2 + 12 PPO
iterations, 4 minibatches each, in 16-row micro-batches), evaluated on 128 tasks per seed. ``reduced``: the entry points' smoke
task (5 steps, still two compactions at budget 160) with budgets so small that nothing
is learned: it checks the pipeline and the diagnostics that hold from the first step,
not learning."""

SEEDS: dict[str, tuple[int, ...]] = {"full": (0, 1), "reduced": (0,)}
"""Default seeds per mode (full: seeds 0 and 1 of the verdict run)."""
Range = tuple[float, float]

RANGES: dict[str, dict[str, Range]] = {
    "full": {
        "first_log_ratio_max": (0.0, 1e-4),
        "critic_explained_variance": (-3.0, 0.6),
        "train_summary_recall": (0.6, 1.0),
        "summary_loss_share": (0.55, 0.75),
    },
    "reduced": {
        "first_log_ratio_max": (0.0, 1e-4),
        "summary_loss_share": (0.05, 0.95),
    },
}
"""Recorded range of each diagnostic, per mode, over the seeds (every seed must fall
inside). ``first_log_ratio_max``: the largest |log ratio| at the first actor step of any
iteration (sampling and scoring agree up to float error); ``critic_explained_variance``
and ``train_summary_recall``: means over the last 5 iterations (``final`` of
results.json); ``summary_loss_share``: the token-mean loss's share on summary tokens,
mean over the actor iterations (0 when summaries are masked out of the loss). Full mode,
measured on the main job's seeds 0-7 at 4 minibatches (``cxsim run --seeds s``): below
1e-4; -2.64 to 0.47 (the critic explains little of a success rate near 1,
docs/results.md); 0.70 to 0.98; 0.626 to 0.664."""

RECORDED_AT = (
    "reduced: measured at the commit that added this module (seeds 0-3); full: on the main "
    "job's seeds 0-7 with the shipped starting checkpoint, 4 minibatches (docs/training.md)"
)

GAIN_MARGIN: dict[str, tuple[float, float] | None] = {"full": (0.20, 0.10), "reduced": None}
"""(min_mean, min_each) per mode: the mean paired gain must reach min_mean and every
seed's gain min_each; None: no learning check (reduced mode)."""


@dataclass(frozen=True)
class Config:
    """Learning regression check: CompactionRL over its SFT base, and diagnostic ranges."""

    mode: Mode = "full"
    """``full``: the check (2 seeds at once, under 5 minutes on 2 cores);
    ``reduced``: the pipeline on a tiny task in seconds, diagnostics only."""
    seeds: tuple[int, ...] | None = None
    """Seeds, each with its own SFT base and evaluation tasks; None: :data:`SEEDS` of the
    mode (the ranges and margins were recorded on them)."""
    jobs: int = 2
    """Seeds run at once, each in its own single-threaded process."""
    runs_dir: str | None = None
    """Where the runs go (emptied first: the check never reuses results); None: a
    temporary folder, deleted afterwards."""
    out: str | None = None
    """Write the figures and verdicts as JSON here."""
    device: str = "cpu"
    """Device of every run (the ranges were recorded on CPU)."""

    def __post_init__(self) -> None:
        if self.seeds is not None and len(self.seeds) < 2 and self.mode == "full":
            raise ValueError(f"--seeds {self.seeds}: the paired gain needs at least 2 seeds")
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds {self.seeds}: pass distinct seeds")
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")

    @property
    def seed_list(self) -> tuple[int, ...]:
        return self.seeds if self.seeds is not None else SEEDS[self.mode]


# -- one seed ---------------------------------------------------------------------------


def run_seed(cfg: Config, root: Path, seed: int, start: str | None = None) -> dict[str, Any]:
    """SFT base (from ``start``, else a fresh model), CompactionRL from it, both evaluated
    under Compacted on the seed's tasks; returns the seed's Pass@1 pair and diagnostics."""
    from cxsim.experiments import run as run_entry
    from cxsim.experiments import sft as sft_entry
    from cxsim.experiments import train as train_entry

    setting = SETTINGS[cfg.mode]
    compaction = DEFAULT_COMPACTION
    if setting.budget is not None:
        compaction = replace(DEFAULT_COMPACTION, budget=setting.budget)
    rc = run_entry.Config(
        run_dir=str(root / f"s{seed}"), presets=(PRESET,), seeds=(seed,), sft_seed=seed,
        env=setting.env, compaction=compaction, sft=setting.sft, ppo=setting.ppo,
        eval=replace(setting.eval, seed=seed), threads=1, progress_bar=False, device=cfg.device,
        policy=start,
    )  # fmt: skip
    began = time.perf_counter()
    sft = sft_entry.run_sft(run_entry.sft_config(rc))
    trained = train_entry.train(run_entry.train_config(rc, sft["policy"], PRESET, seed))
    base = compacted_pass_at_1(rc, sft["policy"])
    after = compacted_pass_at_1(rc, trained["policy"])
    say(f"[learning] seed {seed}: base {base:.3f} -> {PRESET} {after:.3f} "
        f"({time.perf_counter() - began:.0f}s)")  # fmt: skip
    return {
        "seed": seed,
        "base": base,
        "trained": after,
        "diagnostics": diagnostics_of(trained["history"], trained["final"]),
        "wall_time_s": time.perf_counter() - began,
    }


def compacted_pass_at_1(rc: Any, policy_dir: str) -> float:
    """Compacted Pass@1 of the policy saved at ``policy_dir`` on ``rc.eval``'s tasks."""
    from cxsim.agents.lm_agent import LMAgent
    from cxsim.agents.models import load_policy
    from cxsim.devices import resolve_device
    from cxsim.evaluation import evaluate_protocol
    from cxsim.generation import SamplingConfig
    from cxsim.preflight import preflight

    device = resolve_device(rc.device)
    policy, _, chat = load_policy(policy_dir, device, None)
    agent = LMAgent(policy, chat, SamplingConfig(temperature=rc.eval.temperature), device=device)
    compaction = preflight(rc.env, rc.compaction, chat)  # the sizes the runs trained with
    result, _ = evaluate_protocol(
        rc.env.env_id, rc.env.kwargs, agent, chat, compaction, "compacted",
        rc.eval.episodes, rc.eval.repeats, rc.eval.seed,
    )  # fmt: skip
    return float(result["pass_at_1"])


def diagnostics_of(history: list[dict[str, float]], final: dict[str, float]) -> dict[str, float]:
    """The figures :data:`RANGES` bounds, from a training run's history (NaN if absent)."""
    actor = [h for h in history if not h["warmup"]]
    nan = float("nan")
    ratios = [h["losses/first_log_ratio_max"] for h in actor if "losses/first_log_ratio_max" in h]
    shares = [h[SHARE_TAG] for h in actor if SHARE_TAG in h]
    return {
        "first_log_ratio_max": max(ratios) if ratios else nan,
        "critic_explained_variance": final.get("critic/explained_variance", nan),
        "train_summary_recall": final.get("compaction/summary_recall", nan),
        "summary_loss_share": sum(shares) / len(shares) if shares else nan,
    }


SHARE_TAG = "weights/token-mean/summary_share"


# -- the verdicts -----------------------------------------------------------------------


def paired_gain(base: list[float], trained: list[float]) -> dict[str, float]:
    """Mean of the per-seed gains ``trained - base``, its one-sided 95% Student-t lower
    bound and the one-sided p-value of "no gain" (``scipy.stats``)."""
    import numpy as np
    from scipy import stats

    gains = np.asarray(trained, dtype=float) - np.asarray(base, dtype=float)
    n = gains.size
    mean = float(gains.mean())
    if n < 2:
        return {"mean": mean, "lower95": float("nan"), "p_value": float("nan"), "seeds": n}
    sem = float(gains.std(ddof=1)) / n**0.5
    lower = mean - float(stats.t.ppf(0.95, n - 1)) * sem
    p = (
        float(stats.ttest_1samp(gains, 0.0, alternative="greater").pvalue)
        if sem > 0
        else nan_p(mean)
    )
    return {"mean": mean, "lower95": lower, "p_value": p, "seeds": n}


def nan_p(mean: float) -> float:
    """p-value of identical gains: 0 when they are all positive, 1 otherwise."""
    return 0.0 if mean > 0 else 1.0


def verdicts(mode: str, seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per check: name, measured figure(s), allowed range, passed."""
    out: list[dict[str, Any]] = []
    margin = GAIN_MARGIN[mode]
    if margin is not None:
        gains = [s["trained"] - s["base"] for s in seeds]
        gain = paired_gain([s["base"] for s in seeds], [s["trained"] for s in seeds])
        min_mean, min_each = margin
        out.append({"check": "mean paired gain", "value": gain["mean"],
                    "range": (min_mean, 1.0), "passed": gain["mean"] >= min_mean})  # fmt: skip
        out.append({"check": "smallest per-seed gain", "value": min(gains),
                    "range": (min_each, 1.0), "passed": min(gains) >= min_each})  # fmt: skip
    for name, (low, high) in RANGES[mode].items():
        values = [s["diagnostics"][name] for s in seeds]
        inside = all(low <= v <= high for v in values)  # NaN is outside every range
        out.append({"check": name, "value": values, "range": (low, high), "passed": inside})
    return out


def report(mode: str, seeds: list[dict[str, Any]], checks: list[dict[str, Any]]) -> str:
    """The figures and verdicts as text."""
    lines = [f"learning regression check ({mode} mode, {len(seeds)} seeds, {PRESET} vs its base)"]
    for s in seeds:
        lines.append(f"  seed {s['seed']}: base {s['base']:.3f}  trained {s['trained']:.3f}  "
                     f"gain {s['trained'] - s['base']:+.3f}  ({s['wall_time_s']:.0f}s)")  # fmt: skip
    if GAIN_MARGIN[mode] is not None and len(seeds) >= 2:
        gain = paired_gain([s["base"] for s in seeds], [s["trained"] for s in seeds])
        lines.append(f"  (not a check) one-sided 95% t lower bound of the mean gain "
                     f"{gain['lower95']:+.3f}, p = {gain['p_value']:.3g}")  # fmt: skip
    for c in checks:
        value = c["value"]
        shown = " ".join(f"{v:.3g}" for v in value) if isinstance(value, list) else f"{value:+.3f}"
        low, high = c["range"]
        lines.append(f"  {'ok  ' if c['passed'] else 'FAIL'} {c['check']}: {shown} "
                     f"(allowed [{low:g}, {high:g}])")  # fmt: skip
    return "\n".join(lines)


# -- the command ------------------------------------------------------------------------


def run_check(cfg: Config) -> dict[str, Any]:
    """Trains and evaluates every seed in a fresh folder; returns figures and verdicts."""
    import torch

    began = time.perf_counter()
    torch.set_num_threads(1)
    temporary = cfg.runs_dir is None
    root = Path(tempfile.mkdtemp(prefix="cxsim-learning-") if temporary else cfg.runs_dir)
    if not temporary:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    try:
        seeds = run_seeds(cfg, root, SETTINGS[cfg.mode].policy)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    checks = verdicts(cfg.mode, seeds)
    return {
        "mode": cfg.mode,
        "seeds": seeds,
        "checks": checks,
        "passed": all(c["passed"] for c in checks),
        "wall_time_s": time.perf_counter() - began,
        "ranges_recorded_at": RECORDED_AT,
    }


def run_seeds(cfg: Config, root: Path, start: str | None) -> list[dict[str, Any]]:
    """run_seed for each seed, ``cfg.jobs`` at a time in spawned processes; in order."""
    seeds = cfg.seed_list
    n = len(seeds)
    return map_in_processes(run_seed, cfg.jobs, [cfg] * n, [root] * n, seeds, [start] * n)


def main(argv: list[str] | None = None) -> None:
    cfg = tyro.cli(Config, args=list(sys.argv[1:] if argv is None else argv))
    result = run_check(cfg)
    print(report(cfg.mode, result["seeds"], result["checks"]))
    print(f"  {'passed' if result['passed'] else 'FAILED'} in {result['wall_time_s']:.0f}s")
    if cfg.out:
        Path(cfg.out).write_text(json.dumps(result, indent=2) + "\n")
    if not result["passed"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

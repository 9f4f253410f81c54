"""The learning regression check: does CompactionRL still learn, and do its diagnostics
still read as they did?

Run it after changing the trainer (an estimator, a loss, the log-prob computation, the
runtime). It is a small study (``cxsim/studies/learning.toml``, the study engine of
``cxsim study``) run on a fresh runs folder, never from a cache: for each seed, in
``--jobs`` spawned single-threaded processes,

1. an SFT base of its own (seed s) from the shipped starting checkpoint, as ``cxsim run``
   makes it;
2. ``compactionrl`` PPO from that base (seed s), with the main job's budgets;
3. Compacted Pass@1 of the base and of the trained policy on the seed's own held-out
   tasks (``--eval.seed`` s).

Then the file's ``[[checks]]``, every figure printed, exit status 1 if any fails:

- **learning**: the paired gain (trained minus base Compacted Pass@1, one per seed) must
  have a mean of at least 0.20 and, on every seed, at least 0.10 (the one-sided Student-t
  bound and p-value are printed too, not checked);
- **diagnostics**: first-step log ratio, critic explained variance and summary recall over
  the last iterations, the loss share of summary tokens, each in the range recorded on the
  main job's seeds (the file says where).

``--mode reduced`` is the file's ``reduced`` budget: a short task, one seed, only the checks
that hold before anything is learned (what the slow test runs).

    cxsim bench learning                 # the check: 2 seeds at once, under 5 minutes
    cxsim bench learning --mode reduced  # the pipeline in seconds
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

import cxsim.studies as studies_package
from cxsim.studies.checks import check_lines, run_checks
from cxsim.tracking import to_jsonable

Mode = Literal["full", "reduced"]
STUDY_FILE = Path(studies_package.__file__).parent / "learning.toml"
"""The check as a study file (shipped with the package: ``cxsim/studies/learning.toml``)."""
BUDGET: dict[str, str | None] = {"full": None, "reduced": "reduced"}
"""The file's budget per mode (full: the file as written)."""
SEEDS: dict[str, list[int]] = {"full": [0, 100], "reduced": [0]}
"""Default seeds per mode (full: seed 0, where the ranges were recorded, and seed 100, which no
choice of the recipe saw; docs/results/stability.md)."""
ARM = "compactionrl"


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
    """Runs at once, each in its own single-threaded process."""
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
        from cxsim.studies.spec import parse_seeds

        return self.seeds if self.seeds is not None else parse_seeds(SEEDS[self.mode])


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


def report(mode: str, seeds: list[dict[str, Any]], checks: list[dict[str, Any]]) -> str:
    """The figures and verdicts as text."""
    lines = [f"learning regression check ({mode} mode, {len(seeds)} seeds, {ARM} vs its base)"]
    for s in seeds:
        lines.append(f"  seed {s['seed']}: base {s['base']:.3f}  trained {s['trained']:.3f}  "
                     f"gain {s['trained'] - s['base']:+.3f}  ({s['wall_time_s']:.0f}s)")  # fmt: skip
    if mode == "full" and len(seeds) >= 2:
        gain = paired_gain([s["base"] for s in seeds], [s["trained"] for s in seeds])
        lines.append(f"  (not a check) one-sided 95% t lower bound of the mean gain "
                     f"{gain['lower95']:+.3f}, p = {gain['p_value']:.3g}")  # fmt: skip
    lines += [f"  {line}" for line in check_lines(checks)]
    return "\n".join(lines)


# -- the command ------------------------------------------------------------------------


def seed_rows(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per seed: the base's and the trained arm's Compacted Pass@1 and the seed's wall time."""
    (setting,) = runs.values()
    rows = []
    for base, trained in zip(setting["base"], setting[ARM], strict=True):
        rows.append(
            {
                "seed": trained["seed"],
                "base": float(base["eval"]["compacted"]["pass_at_1"]),
                "trained": float(trained["eval"]["compacted"]["pass_at_1"]),
                "wall_time_s": float(trained["sft"]["wall_time_s"])
                + float(trained["wall_time_s"])
                + float(base["eval_wall_time_s"]),
            }
        )
    return rows


def run_check(cfg: Config) -> dict[str, Any]:
    """The study file's runs in a fresh folder, then its checks; figures and verdicts."""
    import torch

    from cxsim.studies.load import load_study
    from cxsim.studies.runner import run_study
    from cxsim.studies.selection import select

    began = time.perf_counter()
    torch.set_num_threads(1)
    study = replace(load_study(STUDY_FILE, None, BUDGET[cfg.mode]), seeds=cfg.seed_list)
    selection = select(study)
    temporary = cfg.runs_dir is None
    root = Path(tempfile.mkdtemp(prefix="cxsim-learning-") if temporary else cfg.runs_dir)
    if not temporary:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    try:
        outcome = run_study(study, selection, str(root), cfg.device, jobs=cfg.jobs)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    checks = run_checks(study, selection, outcome["runs"])
    return {
        "mode": cfg.mode,
        "study": str(STUDY_FILE),
        "seeds": seed_rows(outcome["runs"]),
        "checks": checks,
        "passed": all(c["passed"] for c in checks),
        "wall_time_s": time.perf_counter() - began,
    }


def main(argv: list[str] | None = None) -> None:
    cfg = tyro.cli(Config, args=list(sys.argv[1:] if argv is None else argv))
    result = run_check(cfg)
    print(report(cfg.mode, result["seeds"], result["checks"]))
    print(f"  {'passed' if result['passed'] else 'FAILED'} in {result['wall_time_s']:.0f}s")
    if cfg.out:
        Path(cfg.out).write_text(json.dumps(to_jsonable(result), indent=2) + "\n")
    if not result["passed"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

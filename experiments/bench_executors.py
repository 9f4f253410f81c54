"""Benchmark: one small study on this machine's process pool and on a local Ray instance.

The same study (by default examples/my_study.toml at its ``smoke`` budget on seeds 0 and 1:
2 SFT bases, then the base and 2 arms per seed, 8 runs) is made from scratch once per
setup, each ``cxsim study`` command in a fresh process with an empty runs folder:

- ``local:1``: ``--executor local --jobs 1`` (the runs one after another in that process);
- ``local:2``: ``--executor local --jobs 2`` (two spawned single-threaded processes);
- ``ray:1`` / ``ray:2``: ``--executor ray --jobs N`` (a local Ray instance with N CPUs,
  started by the command: its start is part of the wall time).

Reported: each setup's wall time (the whole command: start, runs, page), its speed-up over
``local:1``, and Ray's overhead against the local pool at the same number of CPUs (the goal
is under 10%), with and without the time Ray takes to start and stop a local instance
(timed alone, in a process that does nothing else). On a machine whose cores other work
shares, the figures move from run to run: ``--repeats`` runs every setup in turn that many
times and keeps each one's fastest.

    cxsim bench executors
    cxsim bench executors --setups local:2 ray:2 --repeats 2
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

from cxsim.studies.executors import EXECUTORS

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "my_study.toml"
OVERHEAD_GOAL = 0.10
"""Ray's wall time over the local pool's at equal CPUs, minus 1: the goal stays below it."""


@dataclass(frozen=True)
class Config:
    """Wall time of one study on the local process pool and on a local Ray instance."""

    study: str | None = None
    """The study file (None: examples/my_study.toml of this repository)."""
    budget: str | None = "smoke"
    """A ``[budgets.NAME]`` of the file (None: the file's own settings)."""
    seeds: str = "0:2"
    """The study's seeds (``a:b``)."""
    setups: tuple[str, ...] = ("local:1", "local:2", "ray:1", "ray:2")
    """``EXECUTOR:CPUS`` to time; ratios are against ``local:1`` when it is among them."""
    repeats: int = 1
    """Times each setup runs (from an empty runs folder each time); the fastest counts."""
    keep: str | None = None
    """A folder to keep the runs and pages in (None: a temporary folder, deleted)."""

    def __post_init__(self) -> None:
        for setup in self.setups:
            parse_setup(setup)
        if self.repeats < 1:
            raise ValueError(f"--repeats {self.repeats}: pass at least 1")

    @property
    def study_file(self) -> Path:
        path = Path(self.study) if self.study is not None else EXAMPLE
        if not path.is_file():
            raise FileNotFoundError(f"no study file at {path}; pass --study FILE.toml")
        return path


def parse_setup(setup: str) -> tuple[str, int]:
    """``"ray:2"`` -> ``("ray", 2)``."""
    executor, _, cpus = setup.partition(":")
    if executor not in EXECUTORS or not cpus.isdigit() or int(cpus) < 1:
        raise ValueError(
            f"--setups {setup}: write EXECUTOR:CPUS with EXECUTOR one of "
            f"{', '.join(EXECUTORS)} and CPUS >= 1 (e.g. ray:2)"
        )
    return executor, int(cpus)


def time_study(cfg: Config, setup: str, folder: Path) -> float:
    """Seconds one ``cxsim study`` command takes on ``setup``, from an empty runs folder."""
    executor, cpus = parse_setup(setup)
    runs, out = folder / "runs", folder / "page"
    shutil.rmtree(folder, ignore_errors=True)
    command = [sys.executable, "-m", "cxsim.cli", "study", str(cfg.study_file), "--seeds",
               cfg.seeds, "--runs-dir", str(runs), "--out", str(out), "--executor", executor,
               "--jobs", str(cpus), "--quiet"]  # fmt: skip
    if cfg.budget is not None:
        command += ["--budget", cfg.budget]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise RuntimeError(f"{setup}: the study failed: {said[-1] if said else done.returncode}")
    return wall


def time_ray_start(cpus: int) -> float:
    """Seconds a process takes to start a local Ray instance with ``cpus`` CPUs (as
    ``--executor ray`` does) and stop it, less the same process's start without Ray."""
    start = "from cxsim.studies.executors import RayExecutor; RayExecutor('cpu', {}).close()"
    walls = []
    for code in ("import cxsim.studies.executors", start.format(cpus)):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        walls.append(time.perf_counter() - began)
    return walls[1] - walls[0]


def report(walls: dict[str, float], ray_starts: dict[int, float]) -> list[str]:
    """The table: wall time, speed-up over ``local:1``, Ray's overhead at equal CPUs with
    and without its start."""
    reference = walls.get("local:1")
    lines = [
        "| setup | wall (s) | speed-up over local:1 | Ray start + stop (s) "
        "| Ray over local, same CPUs | without Ray's start |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for setup, wall in walls.items():
        executor, cpus = parse_setup(setup)
        speedup = f"{reference / wall:.2f}x" if reference else "-"
        local = walls.get(f"local:{cpus}")
        started, overhead, net = "-", "-", "-"
        if executor == "ray":
            started = f"{ray_starts[cpus]:.1f}"
            if local:
                overhead = f"{wall / local - 1:+.1%}"
                net = f"{(wall - ray_starts[cpus]) / local - 1:+.1%}"
        lines.append(f"| {setup} | {wall:.1f} | {speedup} | {started} | {overhead} | {net} |")
    overheads = [
        walls[s] / walls[f"local:{parse_setup(s)[1]}"] - 1
        for s in walls
        if parse_setup(s)[0] == "ray" and f"local:{parse_setup(s)[1]}" in walls
    ]
    if overheads:
        worst = max(overheads)
        met = "met" if worst < OVERHEAD_GOAL else "not met"
        lines.append(
            f"\nRay's largest overhead: {worst:+.1%} (goal: under {OVERHEAD_GOAL:.0%}: {met})"
        )
    return lines


def run(cfg: Config) -> dict[str, float]:
    keep = cfg.keep is not None
    root = Path(cfg.keep) if keep else Path(tempfile.mkdtemp(prefix="cxsim-bench-executors-"))
    budget = f" --budget {cfg.budget}" if cfg.budget is not None else ""
    shown = os.path.relpath(cfg.study_file) if cfg.study is None else cfg.study
    print(f"cxsim study {shown}{budget} --seeds {cfg.seeds}, from scratch per setup")
    times: dict[str, list[float]] = {setup: [] for setup in cfg.setups}
    try:
        for repeat in range(cfg.repeats):  # round by round, so that the machine's load
            for setup in cfg.setups:  # drifting during the run weighs on every setup
                folder = root / f"{setup.replace(':', '-')}-{repeat}"
                times[setup].append(time_study(cfg, setup, folder))
                print(f"  {setup}: {times[setup][-1]:.1f}s", flush=True)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    cpus = sorted({parse_setup(s)[1] for s in cfg.setups if parse_setup(s)[0] == "ray"})
    ray_starts = {n: min(time_ray_start(n) for _ in range(cfg.repeats)) for n in cpus}
    for n, seconds in ray_starts.items():
        print(f"  Ray's start and stop on {n} CPU(s), alone: {seconds:.1f}s", flush=True)
    walls = {setup: min(seconds) for setup, seconds in times.items()}
    print("\n".join(report(walls, ray_starts)))
    return walls


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

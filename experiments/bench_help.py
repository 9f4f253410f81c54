"""Benchmark: how long ``cxsim CMD --help`` takes, and whether it imports torch.

Each command's ``--help`` runs ``repeats`` times in a fresh interpreter; the best
time is reported next to two baselines, a bare ``python -c pass`` and ``cxsim
--help`` (the dispatcher alone), and as a ratio to the latter, so that the figure
means the same on a loaded machine. A command that imports torch for its help
pays seconds of start-up (the target is under a second on an idle machine).

    cxsim bench help
    cxsim bench help --commands run eval --repeats 5
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass

import tyro

from cxsim.cli import COMMANDS

PROBE = (
    "import sys; from cxsim.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "print('torch' in sys.modules, file=sys.stderr)"
)
"""Runs the command's --help, then tells on stderr whether torch was imported."""


@dataclass(frozen=True)
class Config:
    commands: tuple[str, ...] = (*COMMANDS, "bench")
    """Commands whose ``--help`` to time."""
    repeats: int = 3
    """Fresh interpreters per command; the best time counts."""

    def __post_init__(self) -> None:
        unknown = [c for c in self.commands if c not in (*COMMANDS, "bench")]
        if unknown:
            raise ValueError(f"unknown commands {unknown}; choose from {[*COMMANDS, 'bench']}")
        if self.repeats < 1:
            raise ValueError(f"--repeats {self.repeats} must be at least 1")


def best_time(argv: list[str], repeats: int) -> tuple[float, bool]:
    """Best wall time of ``python -c PROBE argv`` over ``repeats`` runs, and whether the
    command imported torch."""
    times, torch_loaded = [], False
    for _ in range(repeats):
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True
        )
        times.append(time.perf_counter() - began)
        torch_loaded = done.stderr.strip().splitlines()[-1] == "True"
    return min(times), torch_loaded


def run(cfg: Config) -> dict[str, tuple[float, bool]]:
    began = time.perf_counter()
    bare = min(_timed([sys.executable, "-c", "pass"]) for _ in range(cfg.repeats))
    dispatcher, _ = best_time(["--help"], cfg.repeats)
    results = {cmd: best_time([cmd, "--help"], cfg.repeats) for cmd in cfg.commands}
    print(f"python -c pass: {bare:.2f} s; cxsim --help: {dispatcher:.2f} s")
    print("| command | --help (s) | / cxsim --help | imports torch |")
    print("|---|---|---|---|")
    for cmd, (secs, torch_loaded) in results.items():
        print(
            f"| {cmd} | {secs:.2f} | {secs / dispatcher:.1f}x | {'yes' if torch_loaded else 'no'} |"
        )
    print(f"(best of {cfg.repeats}; {time.perf_counter() - began:.0f} s in all)")
    return results


def _timed(argv: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

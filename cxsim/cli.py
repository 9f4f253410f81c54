"""The ``cxsim`` console command: dispatches to tyro entry points in ``cxsim.experiments``.

Each entry point is a module with ``main(argv: list[str] | None) -> None`` that
parses its own frozen-dataclass config with ``tyro.cli``. Modules are imported
lazily so that ``cxsim --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys

# command -> (module, one-line description); "bench" and others nest one level.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("cxsim.experiments.run", "the main job: SFT, CompactionRL, eval, report"),
    "sft": ("cxsim.experiments.sft", "behaviour cloning from oracle rollouts under compaction"),
    "train": (
        "cxsim.experiments.train",
        "PPO with context compaction (CompactionRL and ablations)",
    ),
    "eval": ("cxsim.experiments.evaluate", "Single and Compacted protocols, Pass@1 with 95% CI"),
    "tables": ("cxsim.experiments.tables", "the paper's tables in miniature, with seeds and CIs"),
    "report": ("cxsim.experiments.report", "plots and tables from a finished run directory"),
    "lab": ("cxsim.experiments.lab", "estimator lab: estimators against ground truth"),
}
BENCHMARKS: dict[str, tuple[str, str]] = {
    "advantages": ("cxsim.experiments.bench_advantages", "estimators against a time loop"),
    "envs": ("cxsim.experiments.bench_envs", "environment steps per second"),
    "rollout": ("cxsim.experiments.bench_rollout", "batched compaction rollouts vs a naive loop"),
    "distributed": ("cxsim.experiments.bench_distributed", "rollouts/s with 1 and 2 processes"),
    "memory": ("cxsim.experiments.bench_memory", "loss-head peak memory and time per token"),
}


def _usage(table: dict[str, tuple[str, str]], prefix: str) -> str:
    width = max(len(name) for name in table)
    lines = [f"usage: {prefix} COMMAND [--help]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {desc}" for name, (_, desc) in table.items()]
    return "\n".join(lines)


def _dispatch(table: dict[str, tuple[str, str]], argv: list[str], prefix: str) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(table, prefix))
        return
    name, rest = argv[0], argv[1:]
    if name not in table:
        sys.exit(f"{prefix}: unknown command {name!r}; choose one of: {', '.join(table)}")
    module = importlib.import_module(table[name][0])
    _set_threads()
    sys.argv[0] = f"{prefix} {name}"
    module.main(rest)


def _set_threads() -> None:
    """torch intra-op threads: ``CXSIM_THREADS`` (default 1).

    The models cxsim trains on a CPU are tiny; measured here, their ops ran
    10-100x slower with torch's default of one thread per core whenever another
    process shared the cores. Entry points
    with a ``--threads`` flag override this.
    """
    import torch

    torch.set_num_threads(int(os.environ.get("CXSIM_THREADS", "1")))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "bench":
        _dispatch(BENCHMARKS, argv[1:], "cxsim bench")
        return
    table = {**COMMANDS, "bench": ("", "benchmarks: " + ", ".join(BENCHMARKS))}
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(table, "cxsim"))
        return
    _dispatch(COMMANDS, argv, "cxsim")


if __name__ == "__main__":
    main()

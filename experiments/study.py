"""``cxsim study FILE.toml``: your own question on paired independent seeds, from one file.

Reads top to bottom: parse and validate the study file (cxsim/studies/load.py: every key
and name is checked before any run), pick what this invocation runs (``--only``,
``--seeds``), then either print the equivalent ``cxsim sft`` / ``train`` / ``eval`` commands
(``--print-commands``, cxsim/studies/commands.py), or run every (setting, seed, arm) unit
(cxsim/studies/runner.py, cached under ``--runs-dir``) on an executor
(cxsim/studies/executors.py: this machine's processes, or Ray with ``--executor ray``) and
write the page (cxsim/studies/page.py) to ``--out``. The file's keys:
docs/reference/study-files.md.

    cxsim study examples/my_study.toml                               # the study as written
    cxsim study examples/my_study.toml --budget smoke --seeds 0:2    # the pipeline, about a minute
    cxsim study examples/my_study.toml --only small:floor-helps
    cxsim study examples/my_study.toml --print-commands --seeds 3    # seed 3's runs, as commands
    cxsim study examples/my_study.toml --executor ray --ray-address head:6379 --runs-dir /shared/r
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from cxsim.model_options import check_device_name


@dataclass(frozen=True)
class Config:
    """Run a study file: its settings, arms and claims on paired independent seeds; one page."""

    file: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="FILE.toml")]
    """The study file (docs/reference/study-files.md)."""
    out_dir: Annotated[str | None, tyro.conf.arg(aliases=("--out",))] = None
    """Where ``<stem>.md`` and ``<stem>.json`` go (None: runs/studies/<stem>/page)."""
    runs_dir: str | None = None
    """The cache of runs, one folder per setting and seed (None: runs/studies/<stem>/runs);
    a rerun reads what is there and makes only what is new."""
    seeds: str | None = None
    """``a:b`` (seeds a to b-1) or one seed, instead of the file's ``seeds``."""
    only: tuple[str, ...] = ()
    """Run only these: ``SETTING`` (its base and arms), ``SETTING:CLAIM`` (that claim's two
    arms), ``arm:NAME`` (that arm in every setting that trains it); several add up."""
    budget: str | None = None
    """A ``[budgets.NAME]`` of the file, set over every setting (e.g. ``smoke``)."""
    jobs: int = 1
    """Units run at once, each in its own single-threaded process (with ``--executor ray``
    and no ``--ray-address``: the CPUs of the local Ray instance)."""
    device: str = "cpu"
    """Device of every run (cpu, cuda, cuda:N, auto); part of the cache's key. With
    ``--executor ray``: cpu, or cuda (one GPU per run)."""
    executor: Literal["local", "ray"] = "local"
    """Where units run: ``local`` (this machine's processes) or ``ray`` (one Ray task per
    unit; ``pip install 'cxsim[ray]'``); the runs folder must be one every worker shares."""
    ray_address: str | None = None
    """A running Ray cluster to join (``HOST:PORT``; with ``--executor ray``); None starts a
    local Ray instance with ``--jobs`` CPUs."""
    print_commands: bool = False
    """Print the ``cxsim sft`` / ``train`` / ``eval`` commands of each seed of ``--seeds``
    (without it, the file's first seed) instead of running."""

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")
        if self.executor == "ray":
            from cxsim.studies.executors import gpus_per_run

            gpus_per_run(self.device)  # cpu or cuda; the cluster's GPUs are asked at start
        else:
            if self.ray_address is not None:
                raise ValueError("--ray-address joins a Ray cluster: pass --executor ray too")
            check_device_name(self.device)

    @property
    def folder(self) -> Path:
        return Path("runs") / "studies" / Path(self.file).stem


def parse(argv: list[str]) -> Config:
    return tyro.cli(Config, args=argv)


def main(argv: list[str] | None = None) -> None:
    from cxsim.studies.load import load_study
    from cxsim.studies.selection import select

    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse(argv)
    began = time.perf_counter()
    study = load_study(cfg.file, cfg.seeds, cfg.budget)
    selection = select(study, cfg.only)
    runs_dir = cfg.runs_dir or str(cfg.folder / "runs")
    if cfg.print_commands:
        from cxsim.studies.commands import print_commands

        seeds = study.seeds if cfg.seeds is not None else study.seeds[:1]
        print(print_commands(study, selection, seeds, runs_dir, cfg.device), end="")
        return

    from cxsim.studies.selection import check_tuning_seeds

    check_tuning_seeds(study, selection)  # before the executor starts
    import torch

    from cxsim.experiments.verdicts_page import commit
    from cxsim.studies.calls import log
    from cxsim.studies.checks import check_lines, run_checks
    from cxsim.studies.executors import make_executor
    from cxsim.studies.page import summary, write_page
    from cxsim.studies.runner import run_study

    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy machine
    executor = make_executor(cfg.executor, cfg.jobs, cfg.device, cfg.ray_address)
    try:
        outcome = run_study(study, selection, runs_dir, cfg.device, executor=executor)
    finally:
        executor.close()
    made_by = {
        "command": shlex.join(["cxsim", "study", *argv]),
        "commit": commit(),
        "wall_time_s": time.perf_counter() - began,
        "runs_dir": runs_dir,
        "device": cfg.device,
        "executor": cfg.executor,
    }
    paths = write_page(cfg.out_dir or str(cfg.folder / "page"), study, selection, outcome, made_by)
    for claim in summary(study, selection, outcome["runs"])["claims"]:
        diff = claim["difference"]
        log(
            f"{claim['setting']}:{claim['name']}: {claim['verdict']} "
            f"({diff['mean']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}])"
        )
    made = ", ".join(f"{n} {stage}" for stage, n in outcome["made"].items())
    log(f"made now: {made}; wrote {paths['page']} ({made_by['wall_time_s']:.0f}s)")
    checks = run_checks(study, selection, outcome["runs"])
    for line in check_lines(checks):
        log(line)
    failed = [c["name"] for c in checks if not c["passed"]]
    if failed:
        raise SystemExit(f"{len(failed)} of {len(checks)} checks failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()

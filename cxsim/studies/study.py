"""``cxsim study FILE.toml``: your own question on paired independent seeds, from one file.

Reads top to bottom: parse and validate the study file (cxsim/studies/load.py: every key
and name is checked before any run), pick what this invocation runs (``--only``,
``--seeds``), then either print the equivalent ``cxsim sft`` / ``train`` / ``eval`` commands
(``--print-commands``, cxsim/studies/commands.py), or run every (setting, seed, arm) unit
(cxsim/studies/runner.py, cached under ``--runs-dir``) on an executor
(cxsim/studies/executors.py: this machine's processes, or Ray with ``--executor ray``) and
write the page (cxsim/studies/page.py) to ``--out``, with the artefact it is computed from
in its JSON (cxsim/studies/artefact.py); ``--render PAGE.json`` rebuilds the page from that
alone. The study's folder and the page's name: cxsim/studies/where.py (two files of the same
name never share a folder; a narrowed run's page sits beside the full one). The file's keys:
docs/reference/study-files.md.

    cxsim study examples/my_study.toml                               # the study as written
    cxsim study examples/my_study.toml --budget smoke --seeds 0:2    # the pipeline, 15 s
    cxsim study examples/my_study.toml --only small:floor-helps
    cxsim study examples/my_study.toml --print-commands --seeds 3    # seed 3's runs, as commands
    cxsim study examples/my_study.toml --executor ray --ray-address head:6379 --runs-dir /shared/r
    cxsim study --render docs/results/stability-credit.json --out /tmp/page   # no cache needed
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from cxsim.compute import FLAT, ComputeFlags, StudyCompute
from cxsim.model_options import check_device_name


@dataclass(frozen=True)
class Config:
    """Run a study file: its settings, arms and claims on paired independent seeds; one page."""

    file: Annotated[str | None, tyro.conf.Positional, tyro.conf.arg(metavar="FILE.toml")] = None
    """The study file (docs/reference/study-files.md); with ``--render``, optional: the
    artefact holds the file as run."""
    out_dir: Annotated[str | None, tyro.conf.arg(aliases=("--out",))] = None
    """Where ``<page>.md`` and ``<page>.json`` go (None: the study's folder's ``page``);
    ``<page>`` is the file's stem, and for a run narrowed by ``--seeds``, ``--only`` or
    ``--budget`` the stem with what narrowed it (``my_study.seeds-0-1``)."""
    runs_dir: str | None = None
    """The cache of runs, one folder per setting and seed (None: the study's folder's
    ``runs``: ``runs/studies/<stem>/``, or ``runs/studies/<stem>-<hash of the file's path>/``
    when another file of the same name holds that); a rerun reads what is there and makes
    only what is new."""
    render: str | None = None
    """A page's JSON (``<page>.json``, written with its inputs) to rebuild the page from,
    with no run cache: ``<page>.md`` and ``<page>.json`` go to ``--out`` (None: the
    artefact's own folder)."""
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
    compute: ComputeFlags[StudyCompute] = field(default_factory=StudyCompute, metadata=FLAT)
    """Where every run computes (``--device``); part of the cache's key. With ``--executor
    ray``: cpu, or cuda (one GPU per run)."""
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
        if self.file is None and self.render is None:
            raise ValueError("name the study file (or --render a page's JSON)")
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")
        if self.executor == "ray":
            from cxsim.studies.executors import gpus_per_run

            gpus_per_run(self.compute.device)  # cpu or cuda; the cluster's are asked at start
        else:
            if self.ray_address is not None:
                raise ValueError("--ray-address joins a Ray cluster: pass --executor ray too")
            check_device_name(self.compute.device)  # this machine has it

    @property
    def folder(self) -> Path:
        from cxsim.studies.where import study_folder

        assert self.file is not None
        return study_folder(self.file)


def parse(argv: list[str]) -> Config:
    return tyro.cli(Config, args=argv)


def shown_command(argv: list[str]) -> str:
    """The command as run, each absolute path as :func:`cxsim.studies.where.shown_path`
    writes it (no machine path on a page)."""
    from cxsim.studies.where import shown_path

    words = [shown_path(w) if w.startswith("/") else w for w in argv]
    return shlex.join(["cxsim", "study", *words])


def provenance(argv: list[str], runs_dir: str, cfg: Config, began: float) -> dict[str, Any]:
    """``made_by`` of a page: the command, the commit (or, outside a git checkout, the
    package's version), the wall time, the runs folder and where the runs ran."""
    from importlib.metadata import version

    from cxsim.provenance import commit
    from cxsim.studies.where import shown_path

    made_by = {
        "command": shown_command(argv),
        "commit": commit(),
        "wall_time_s": time.perf_counter() - began,
        "runs_dir": shown_path(runs_dir) if Path(runs_dir).is_absolute() else runs_dir,
        "device": cfg.compute.device,
        "executor": cfg.executor,
    }
    if made_by["commit"] == "unknown":
        made_by["version"] = version("cxsim")
    return made_by


def render_page(cfg: Config) -> None:
    """``--render``: the page and its JSON rebuilt from the JSON's inputs alone."""
    from cxsim.studies.artefact import dumps, write_text
    from cxsim.studies.calls import log
    from cxsim.studies.page import draw_figure
    from cxsim.studies.render import render_artefact

    assert cfg.render is not None
    rebuilt = render_artefact(cfg.render)
    if (
        cfg.file is not None
        and Path(cfg.file).read_text() != rebuilt["data"]["inputs"]["study_text"]
    ):
        raise ValueError(
            f"{cfg.file} differs from the study file {cfg.render} was made with; drop FILE to "
            "render the page as made, or rerun the study"
        )
    out = Path(cfg.out_dir) if cfg.out_dir else Path(cfg.render).parent
    out.mkdir(parents=True, exist_ok=True)
    page = out / f"{rebuilt['name']}.md"
    page.write_text(rebuilt["markdown"])
    write_text(out / f"{rebuilt['name']}.json", dumps(rebuilt["data"]))
    if rebuilt["figure"]:
        draw_figure(
            rebuilt["study"],
            rebuilt["selection"],
            rebuilt["outcome"]["runs"],
            out / rebuilt["figure"],
        )
    log(f"rendered {page} from {cfg.render} (no run cache read)")


def main(argv: list[str] | None = None) -> None:
    from cxsim.studies.load import load_study
    from cxsim.studies.selection import select

    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse(argv)
    if cfg.render is not None:
        render_page(cfg)
        return
    assert cfg.file is not None
    began = time.perf_counter()
    study = load_study(cfg.file, cfg.seeds, cfg.budget)
    selection = select(study, cfg.only)
    runs_dir = cfg.runs_dir or str(cfg.folder / "runs")
    if cfg.print_commands:
        from cxsim.studies.commands import print_commands

        seeds = study.seeds if cfg.seeds is not None else study.seeds[:1]
        print(print_commands(study, selection, seeds, runs_dir, cfg.compute.device), end="")
        return

    from cxsim.studies.selection import check_tuning_seeds

    check_tuning_seeds(study, selection)  # before the executor starts
    import torch

    from cxsim.studies.artefact import inputs
    from cxsim.studies.calls import log
    from cxsim.studies.checks import check_lines, run_checks
    from cxsim.studies.executors import make_executor
    from cxsim.studies.page import summary, write_page
    from cxsim.studies.runner import run_study
    from cxsim.studies.where import claim_folder, page_name

    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy machine
    executor = make_executor(cfg.executor, cfg.jobs, cfg.compute.device, cfg.ray_address)
    try:
        if cfg.runs_dir is None or cfg.out_dir is None:  # the study's folder, once it can run
            claim_folder(cfg.folder, cfg.file)
        outcome = run_study(study, selection, runs_dir, cfg.compute.device, executor=executor)
    finally:
        executor.close()
    made_by = provenance(argv, runs_dir, cfg, began)
    file_seeds = load_study(cfg.file, None, None).seeds if cfg.seeds is not None else study.seeds
    name = page_name(study.stem, study.seeds, file_seeds, cfg.only, cfg.budget)
    given = inputs(study, outcome, runs_dir, cfg.seeds, cfg.only, cfg.budget)
    out_dir = cfg.out_dir or str(cfg.folder / "page")
    paths = write_page(out_dir, study, selection, outcome, made_by, name, given)
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

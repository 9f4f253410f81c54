"""``cxsim verdicts``: a verdict on each claim of the paper, from runs sized to tell its
ablations apart (docs/results/verdicts.md).

Reads top to bottom. The verdict study file (cxsim/paper_tables/verdicts.toml, shipped with
the package) holds the settings, the arms (presets of cxsim/pipeline/presets.py) and every
claim, each with its prediction written before the runs; ``--preset`` names one of its
budgets (:func:`verdict_study`). The study engine then makes every run they need, cached per
unit under ``--runs-dir`` (cxsim/studies/runner.py ``run_study``), on this machine's
processes or on Ray (``--executor``), for the seeds of ``--seeds``, each with everything of
its own, as a new user's run would be:

0. (once, shared) the starting checkpoint every seed's SFT starts from, as every user of the
   paper's recipe starts from one pretrained LLM: a fresh model cloned from omission-0
   demonstrations of tasks no seed uses, the first of the stage 0's seeds that learns to
   copy the key;
1. an SFT base (the setting's SFT, seed s, its own demonstrations);
2. PPO from that base for every arm the claims compare, training seed s;
3. Compacted Pass@1 of the base and of every arm on the seed's own tasks (evaluation seed
   s: task seeds never shared between seeds), Single for the Table 2 claim, and the
   Table 1 swap: the base acting with another policy's summaries.

Then cxsim/paper_tables/verdicts_page.py pairs the claims' evaluations by seed (the mean
difference with its 95% Student-t interval, the verdict, the smallest effect the run could
have detected, the diagnostic that explains the row) from plain per-seed results
(:func:`page_runs`), the rows being the file's claims with what the page adds to them
(verdicts_claims.py). ``--only`` narrows the run as ``cxsim study --only`` does. A cache
made before the study engine ran this command (one folder per preset and setting, then per
seed) is adopted once into the engine's layout (verdicts_adopt.py), so its runs are read,
not made again. Another question, or other sizes: copy the file, change it and pass it
with ``--study`` (or run it with ``cxsim study``).

    cxsim verdicts                                    # smoke: the pipeline in a few minutes
    cxsim verdicts --preset full --out docs/results   # the committed page: 8 seeds, 2 at a time
    cxsim verdicts --preset full --seeds 20:24 --only credit:correction-fixed-lambda
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import tyro

from cxsim.compute import FLAT, ComputeFlags, StudyCompute
from cxsim.model_options import check_device_name
from cxsim.paper_tables.verdicts_adopt import adopt_old_runs
from cxsim.paper_tables.verdicts_claims import evaluation_side, page_claims
from cxsim.tracking import say

if TYPE_CHECKING:
    from cxsim.studies.spec import Study

STUDY_FILE = Path(__file__).with_name("verdicts.toml")
"""The verdict study file, shipped with the package."""
SMOKE_SEEDS = 2
"""Seeds of the smoke preset without ``--seeds``: the first two of the file's."""


@dataclass(frozen=True)
class Config:
    """Verdicts on the paper's claims: K independent seeds, paired intervals, one page."""

    preset: str = "smoke"
    """The study file's budget: ``smoke`` (a short task and tiny budgets, 2 seeds: checks the
    pipeline, its numbers mean nothing) or ``full`` (the committed page: the main job's
    settings, 8 seeds two at a time); any ``[budgets.NAME]`` of ``--study``."""
    seeds: str | None = None
    """The independent seeds, each with its own SFT base and evaluation tasks: ``K`` (seeds
    0 to K-1) or ``a:b`` (seeds a to b-1); at least 2. None: the file's (``0:8``), the
    smoke preset's first two."""
    only: tuple[str, ...] = ()
    """Run only these, as ``cxsim study --only``: ``SETTING`` (``main``, ``credit``,
    ``credit-critic``: its base and arms), ``SETTING:CLAIM`` (that claim's evaluations and
    what they need, e.g. ``credit:correction-fixed-lambda``), ``arm:NAME``; several add up.
    The page then shows the claims whose evaluations were made."""
    out_dir: Annotated[str, tyro.conf.arg(aliases=("--out",))] = "runs/verdicts/page"
    """Where verdicts.md and its figures go (``docs/results`` for the committed page)."""
    runs_dir: str = "runs/verdicts"
    """The cache of runs (the study engine's: one folder per setting, then per seed); a
    rerun reads what is there and makes only what is new."""
    study: str = str(STUDY_FILE)
    """The verdict study file: the shipped one, or a copy with other settings (every claim
    needs a ``verdicts_claims.PAGE_NOTES`` entry)."""
    jobs: int = 2
    """Runs at once, each in its own single-threaded process (with ``--executor ray`` and no
    ``--ray-address``: the CPUs of the local Ray instance)."""
    executor: Literal["local", "ray"] = "local"
    """Where runs execute: ``local`` (this machine's processes) or ``ray`` (one Ray task per
    run; ``pip install 'cxsim[ray]'``), as ``cxsim study --executor``."""
    ray_address: str | None = None
    """A running Ray cluster to join (``HOST:PORT``; with ``--executor ray``)."""
    compute: ComputeFlags[StudyCompute] = field(default_factory=StudyCompute, metadata=FLAT)
    """Where every run computes (``--device``); part of the cache's key. With ``--executor
    ray``: cpu, or cuda (one GPU per run)."""

    def __post_init__(self) -> None:
        if len(self.seed_list) < 2:
            raise ValueError(f"--seeds {self.seeds}: a paired interval needs at least 2 seeds")
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")
        if self.executor == "ray":
            from cxsim.studies.executors import gpus_per_run

            gpus_per_run(self.compute.device)
        else:
            if self.ray_address is not None:
                raise ValueError("--ray-address joins a Ray cluster: pass --executor ray too")
            check_device_name(self.compute.device)
        page_claims(verdict_study(self))  # the file, its budget and its claims, before any work

    @property
    def seed_list(self) -> tuple[int, ...]:
        """``--seeds``: ``K`` is seeds 0..K-1 (the count), ``a:b`` seeds a..b-1; without it
        the file's seeds (the smoke preset: the first two)."""
        from cxsim.studies.load import read_toml
        from cxsim.studies.spec import parse_seeds

        if self.seeds is None:
            seeds = parse_seeds(read_toml(Path(self.study).absolute())["seeds"])
            return seeds[:SMOKE_SEEDS] if self.preset == "smoke" else seeds
        text = self.seeds.strip()
        return tuple(range(int(text))) if text.isdigit() else parse_seeds(text, "--seeds")


def verdict_study(cfg: Config) -> Study:
    """The study file at the preset's budget, on ``--seeds``: every setting, arm, stage 0
    and claim checked by the study engine's loader."""
    from cxsim.studies.load import load_study

    return replace(load_study(cfg.study, budget=cfg.preset), seeds=cfg.seed_list)


# -- the run ------------------------------------------------------------------------------


def run_verdicts(cfg: Config, command: str) -> dict[str, Any]:
    """Every run the selected claims need, through the study engine (cached), then
    verdicts.md and its figures from their plain results."""
    import torch

    from cxsim.paper_tables.verdicts_page import render_page
    from cxsim.studies.executors import make_executor
    from cxsim.studies.runner import run_study
    from cxsim.studies.selection import select
    from cxsim.studies.unit_files import setting_folder

    began = time.perf_counter()
    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy 2-core box
    study = verdict_study(cfg)
    selection = select(study, cfg.only)
    adopted = adopt_old_runs(study, cfg.preset, Path(cfg.runs_dir), cfg.compute.device)
    if adopted:
        log(f"adopted {adopted} result files of the cache's older layout under {cfg.runs_dir}")
    executor = make_executor(cfg.executor, cfg.jobs, cfg.compute.device, cfg.ray_address)
    try:
        outcome = run_study(study, selection, cfg.runs_dir, cfg.compute.device, executor=executor)
    finally:
        executor.close()
    made = ", ".join(f"{n} {stage}" for stage, n in outcome["made"].items())
    log(f"made now: {made}")
    folder = setting_folder(cfg.runs_dir, study.settings[0], cfg.compute.device)
    invocations = record_invocation(folder, command, time.perf_counter() - began)
    chosen = next(iter(outcome["stage0"].values()), None)
    page = render_page(
        {s.name: s for s in study.settings},
        page_runs(study, outcome["runs"]),
        [
            row
            for row, c in zip(page_claims(study), study.claims, strict=True)
            if c in selection.claims
        ],
        command,
        invocations,
        cfg.jobs,
        Path(cfg.out_dir),
        (study.stage0[0], chosen) if chosen is not None else None,
    )
    log(f"wrote {page} ({invocations[-1]['wall_time_s']:.0f}s)")
    return {"page": page, "outcome": outcome, "cache": folder, "invocations": invocations}


def page_runs(study: Study, runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, list]:
    """The study's unit results as the page reads them: per setting, one dict per seed with
    its evaluations by the claims' names (``arm``, ``arm@single``, ``t1:summarizer``: each
    ``{"results": {protocol: result}}``), each trained arm's ``final`` figures and history
    (read from the run's results.json), and the process-seconds of the stages it made
    itself (those of a base made by another setting counted there)."""
    from cxsim.paper_tables.verdicts_claims import evaluation_name
    from cxsim.studies.spec import BASE

    pages = {}
    for setting in study.settings:
        by_arm = runs.get(setting.name)
        if not by_arm:
            continue
        seeds = []
        for index, seed in enumerate(study.seeds):
            run: dict[str, Any] = {"seed": seed, "eval": {}, "train": {}, "seconds": 0.0}
            for arm, results in by_arm.items():
                unit = results[index]
                own = arm != BASE or not setting.bases_from
                for key, result in unit["eval"].items():
                    protocol, _, summarizer = key.partition("+")
                    name = evaluation_name(arm, protocol, summarizer)
                    run["eval"][name] = {"results": {protocol: result}}
                if own:
                    run["seconds"] += float(unit["eval_wall_time_s"])
                if unit["train"] is not None:
                    trained = json.loads(
                        (Path(unit["train"]["run_dir"]) / "results.json").read_text()
                    )
                    run["train"][arm] = {
                        "final": unit["train"]["final"],
                        "history": trained["history"],
                    }
                    run["seconds"] += float(unit["train"]["wall_time_s"])
            if not setting.bases_from:  # the seed's SFT base, made for this setting
                run["seconds"] += float(next(iter(by_arm.values()))[index]["sft"]["wall_time_s"])
            run["eval"] = dict(sorted(run["eval"].items(), key=lambda i: page_order(i[0])))
            seeds.append(run)
        pages[setting.name] = seeds
    return pages


def page_order(name: str) -> int:
    """Where an evaluation goes on the page: Compacted first, other protocols, then swaps."""
    _, protocol, summarizer = evaluation_side(name)
    return 2 if summarizer else int(protocol != "compacted")


def log(message: str) -> None:
    say(f"[verdicts {time.strftime('%H:%M:%S')}] {message}")


def record_invocation(cache: Path, command: str, wall_s: float) -> list[dict[str, Any]]:
    """Append this invocation (commit, command, wall seconds) to ``invocations.json`` in the
    main setting's cache folder and return them all: the page adds up the wall time of the
    invocations that made the runs, which a rerun that only reads them barely moves."""
    from cxsim.provenance import commit
    from cxsim.tracking import write_json

    path = cache / "invocations.json"
    made = json.loads(path.read_text())["invocations"] if path.is_file() else []
    made.append({"commit": commit(), "command": command, "wall_time_s": wall_s})
    write_json(path, {"invocations": made})
    return made


def parse(argv: list[str]) -> Config:
    """The flags as a :class:`Config` (checked: the study file loads at the preset's budget)."""
    return tyro.cli(Config, args=list(argv))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_verdicts(parse(argv), shlex.join(["cxsim", "verdicts", *argv]))


if __name__ == "__main__":
    main()

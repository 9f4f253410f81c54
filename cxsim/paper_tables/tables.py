"""``cxsim tables``: the paper's Tables 1 to 4 in miniature, K training seeds each, 95% intervals.

Reads top to bottom. The tables are a study file, cxsim/paper_tables/tables.toml (``--study``), run at
the budget ``--preset`` names on the study engine (cxsim/studies/runner.py ``run_study``),
as ``cxsim verdicts`` is: for each seed s (one SFT base per seed, shared by every row of
that seed),

1. the SFT base, as ``cxsim run`` makes it;
2. PPO from the base for each row the chosen tables need (the study's arms, presets of
   cxsim/pipeline/presets.py);
3. evaluation of the base and of every trained row under Compacted and Single, each with
   its summary omission (``cxsim.diagnostics.summary_omission``);
4. Table 1: a fixed executor (the env's oracle, ``oracle``, or the SFT base) with swapped
   summarizers under the ``external-summarizer`` protocol: scripted at several omission
   rates (``scripted:P``), the trained CompactionRL policy, the untrained SFT base; and
   Table 2's last column: the same policies under Single on the one-window task.

The file's settings are the preset's (tests/test_study_tables.py checks that they are the
same); a flag that differs from the preset's default changes them, ``--tables``,
``--omission-rates`` and ``--executors`` keep a subset of its rows and cells
(cxsim/paper_tables/tables_study.py). Every run is cached in the study engine's layout under
``--runs-dir`` (cxsim/studies/unit_files.py): a rerun or another table reuses it, a killed
run resumes; the runs go through the study engine's executors (``--jobs`` spawned
single-threaded processes, or Ray tasks with ``--executor ray``). Then ``tables.md`` (mean
over seeds with a 95% interval, the findings, the exact command, the runtime) and PNG plots
go to ``--out-dir``, written by cxsim/paper_tables/tables_page.py (plots: tables_plots.py)
from the per-seed results (:func:`cxsim.paper_tables.tables_study.page_runs`) and a plain
:class:`~cxsim.paper_tables.tables_seeds.PageSetup`, its intervals by cxsim/tables.py.

    cxsim tables                                   # smoke: half a minute, under runs/tables/page
    cxsim tables --preset full --out docs/results  # the committed page: 5 seeds, ~1 hour
    cxsim tables --policy path/to/hf-model --device cuda  # every SFT base starts from that model
    cxsim tables --preset full --seeds 5:8 --executor ray --device cpu  # three more seeds on Ray
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from cxsim.compaction import CompactionConfig
from cxsim.compute import FLAT, ComputeFlags, OneThreadCompute
from cxsim.config import (
    DEFAULT_COMPACTION,
    EnvConfig,
    EnvKwargs,
    EvalConfig,
    PPOConfig,
    SFTConfig,
)
from cxsim.model_group import Model
from cxsim.model_options import check_device_name
from cxsim.paper_tables.tables_page import render
from cxsim.paper_tables.tables_seeds import ROW_LABELS, ROWS, Seeds
from cxsim.pipeline import run as run_entry
from cxsim.pipeline.presets import PUBLISHED_CRITIC, PUBLISHED_RECIPE, cli_with_budget
from cxsim.tracking import say

BudgetName = Literal["smoke", "full"]
STUDY_FILE = Path(__file__).with_name("tables.toml")
"""The tables as a study file, shipped with the package."""
Executor = Literal["oracle", "base"]
TableId = Literal[1, 2, 3, 4]


@dataclass(frozen=True)
class Config:
    """Tables 1-4 of the paper in miniature: K seeds per row, 95% intervals, Markdown + PNG."""

    preset: BudgetName = "smoke"
    """Budget preset, resolved first (other flags override it): ``smoke`` (about a minute,
    a short task and tiny budgets: checks the pipeline, its numbers mean little) or
    ``full`` (the committed page: the main job's budgets, 5 seeds, 2 at a time, about an
    hour on 2 cores; ``cxsim tables --preset full --out docs/results``)."""
    seeds: str = "3"
    """The training seeds, each with its own SFT base: ``K`` (seeds 0 to K-1) or ``a:b``
    (seeds a to b-1)."""
    tables: tuple[TableId, ...] = (1, 2, 3, 4)
    """Which tables to build (the runs they share are made once): the study's rows and cells
    they need."""
    out_dir: Annotated[str, tyro.conf.arg(aliases=("--out",))] = "runs/tables/page"
    """Where tables.md and the tables_*.png plots go (``docs/results`` for the committed page)."""
    runs_dir: str = "runs/tables"
    """Cache of runs and evaluations, the study engine's: one folder per setting hash, then per
    seed (cxsim/studies/unit_files.py)."""
    study: str = str(STUDY_FILE)
    """The study file of the tables (its settings are the presets'; a copy with other rows,
    cells or settings runs the same way)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    sft: SFTConfig = field(default_factory=SFTConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings every row starts from; each row's preset applies its changes on top.
    These groups' defaults are the study file's at the preset's budget; one that differs
    changes the file's setting."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    one_window_kwargs: EnvKwargs = field(default_factory=lambda: {"memory_length": 4})
    """Table 2: env kwargs set over ``--env.kwargs`` for a shorter task whose episodes fit
    in one window (the default task never does), where Single can succeed (the study file's
    ``[eval_envs.one-window]``); empty: skip."""
    omission_rates: tuple[float, ...] = (0.0, 0.3, 0.6, 1.0)
    """Table 1: omission rates of the scripted summarizer (of those the study file evaluates)."""
    executors: tuple[Executor, ...] = ("oracle", "base")
    """Table 1: fixed executors (the oracle, grounded in its context; the SFT base policy)."""
    jobs: int = 1
    """Runs at once (SFT bases, trained rows, evaluations), each in its own single-threaded
    process (2 on a 2-core machine; with ``--executor ray`` and no ``--ray-address``: the CPUs
    of the local Ray instance)."""
    executor: Literal["local", "ray"] = "local"
    """Where the runs execute: ``local`` (this machine's processes) or ``ray`` (one Ray task
    per run; ``pip install 'cxsim[ray]'``), as ``cxsim study --executor``."""
    ray_address: str | None = None
    """A running Ray cluster to join (``HOST:PORT``; with ``--executor ray``)."""
    model: Model = field(default_factory=lambda: Model(policy=None), metadata=FLAT)
    """What every seed's SFT base starts from (``--policy``; None: a fresh ``--sft.model``
    preset), and how its chat template renders turns."""
    compute: ComputeFlags[OneThreadCompute] = field(default_factory=OneThreadCompute, metadata=FLAT)
    """How every run computes."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval", self.eval.seeded(0))
        if not self.seed_list:
            raise ValueError(f"--seeds {self.seeds}: pass at least one seed")
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")
        if self.executor == "ray":
            from cxsim.studies.executors import gpus_per_run

            gpus_per_run(self.compute.device)  # the cluster's GPUs: this machine may have none
        elif self.ray_address is not None:
            raise ValueError("--ray-address joins a Ray cluster: pass --executor ray too")
        else:
            check_device_name(self.compute.device)
        if not self.tables or len(set(self.tables)) != len(self.tables):
            raise ValueError(f"--tables {self.tables}: pass distinct table numbers from 1-4")
        if any(not 0.0 <= p <= 1.0 for p in self.omission_rates):
            raise ValueError(f"--omission-rates {self.omission_rates} must lie in [0, 1]")
        if "compacted" not in self.eval.protocols:
            raise ValueError("--eval.protocols must include compacted (every table reads it)")
        if 2 in self.tables and "single" not in self.eval.protocols:
            raise ValueError("Table 2 compares protocols: --eval.protocols must include single")
        here = "cpu" if self.executor == "ray" else None  # the runs' device is checked above
        self.run_config(Path(self.runs_dir), 0, here)  # the main job's checks (--policy, ...)

    @property
    def seed_list(self) -> tuple[int, ...]:
        """``--seeds``: ``K`` is seeds 0..K-1 (the count, also as an int), ``a:b`` seeds
        a..b-1."""
        from cxsim.studies.spec import parse_seeds

        text = str(self.seeds).strip()
        return tuple(range(int(text))) if text.isdigit() else parse_seeds(text, "--seeds")

    @property
    def rows(self) -> tuple[str, ...]:
        """The presets to train, in first-needed order."""
        return tuple(dict.fromkeys(r for t in sorted(self.tables) for r in ROWS[t]))

    def run_config(self, seed_dir: Path, seed: int, device: str | None = None) -> run_entry.Config:
        """The main job's config for one seed: its stage configs are the ones used here
        (``device``: another than ``--device``)."""
        return run_entry.Config(
            run_dir=str(seed_dir), presets=self.rows, seeds=(seed,), sft_seed=seed,
            env=self.env, compaction=self.compaction, sft=self.sft, ppo=self.ppo,
            eval=self.eval, progress_bar=False, model=self.model,
            compute=self.compute.per_run(device),
        )  # fmt: skip


SMOKE_ENV = EnvConfig(
    kwargs={"memory_length": 5, "obs_words_mean": 6.0, "obs_words_std": 1.0, "num_values": 4}
)
"""A short KeyRecall that still compacts twice per episode (with budget 160): as the entry-point
smoke tests."""

BUDGETS: dict[str, Config] = {
    "smoke": Config(
        preset="smoke", seeds="1", env=SMOKE_ENV,
        compaction=replace(DEFAULT_COMPACTION, budget=160), one_window_kwargs={"memory_length": 2},
        sft=SFTConfig(episodes=6, epochs=1, heldout_episodes=2),
        ppo=PPOConfig(rollouts_per_batch=4, iterations=1, critic_warmup=1, minibatches=1, epochs=1),
        eval=EvalConfig(episodes=3),
    ),
    "full": Config(
        preset="full", seeds="5", jobs=2,
        sft=SFTConfig(episodes=512, epochs=12, bucket_by_length=False),
        ppo=PPOConfig(
            iterations=24, micro_batch_rows=64, minibatches=2, **PUBLISHED_CRITIC,
            **PUBLISHED_RECIPE,
        ),
    ),
}  # fmt: skip
"""``full``: the settings docs/results/tables.md was made with (the main job's env,
compaction, model and evaluation; every SFT base from a fresh model, 12 shuffled epochs;
2 + 24 PPO iterations, the critic and recipe the page was made with,
``PUBLISHED_CRITIC`` and ``PUBLISHED_RECIPE``), 5 seeds two
at a time; tables.md gives the runtime."""


def log(message: str) -> None:
    say(f"[tables {time.strftime('%H:%M:%S')}] {message}")


def run_tables(cfg: Config, command: str) -> dict[str, Any]:
    """Every run the tables need, through the study engine (cached), then tables.md and the
    plots from their plain per-seed results; returns the paths."""
    import torch

    from cxsim.paper_tables.tables_plots import LEARNING_CURVES, plot_omission, plot_summarizers
    from cxsim.paper_tables.tables_study import SETTING, page_runs, page_setup, tables_study
    from cxsim.report.report_curves import plot_curves
    from cxsim.studies.executors import make_executor
    from cxsim.studies.runner import run_study
    from cxsim.studies.selection import select
    from cxsim.studies.unit_files import setting_folder

    began = time.perf_counter()
    torch.set_num_threads(1)  # tiny models: one thread is 10-100x faster on a busy 2-core box
    study = tables_study(cfg, BUDGETS[cfg.preset])
    device = cfg.compute.device
    executor = make_executor(cfg.executor, cfg.jobs, device, cfg.ray_address)
    try:
        outcome = run_study(study, select(study), cfg.runs_dir, device, executor=executor)
    finally:
        executor.close()
    log("made now: " + ", ".join(f"{n} {stage}" for stage, n in outcome["made"].items()))
    seeds = Seeds(page_runs(study, outcome["runs"]))
    setup = page_setup(cfg, study, outcome["runs"])
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"curves": out / "tables_learning_curves.png", "omission": out / "tables_omission.png"}
    plot_curves({ROW_LABELS[r]: seeds.histories(r) for r in cfg.rows}, paths["curves"],
                LEARNING_CURVES)  # fmt: skip
    plot_omission(setup, seeds, paths["omission"])
    if 1 in cfg.tables:
        paths["summarizers"] = out / "tables_summarizers.png"
        plot_summarizers(setup, seeds, paths["summarizers"])
    paths["page"] = out / "tables.md"
    wall = time.perf_counter() - began
    cache = setting_folder(cfg.runs_dir, study.setting(SETTING), device)
    paths["page"].write_text(render(setup, seeds, command, wall, cache) + "\n")
    log(f"wrote {paths['page']} ({wall:.0f}s)")
    return {"paths": paths, "seeds": seeds, "cache": cache, "wall_time_s": wall, "study": study}


def parse(argv: list[str]) -> Config:
    """``--preset`` picks the defaults (BUDGETS); the other flags override them."""
    return cli_with_budget(Config, BUDGETS, argv)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_tables(parse(argv), shlex.join(["cxsim", "tables", *argv]))


if __name__ == "__main__":
    main()

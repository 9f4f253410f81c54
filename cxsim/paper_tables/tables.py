"""``cxsim tables``: the paper's Tables 1 to 4 in miniature, K training seeds each, 95% intervals.

Reads top to bottom. For each seed s (one SFT base per seed, shared by every row
of that seed):

1. SFT base (``s{s}/sft``), as ``cxsim run`` makes it;
2. PPO from the base for each row the chosen tables need
   (``s{s}/train/<preset>-s{s}``, the presets of cxsim/pipeline/presets.py);
3. evaluation of the base and of every trained row under Single and Compacted,
   with summary omission computed from the evaluation records
   (``cxsim.diagnostics.summary_omission``);
4. Table 1: a fixed executor (the oracle and/or the SFT base) with swapped
   summarizers under the ``external-summarizer`` protocol: scripted at several
   omission rates, the trained CompactionRL policy, the untrained SFT base.

Then ``tables.md`` (mean over seeds with a 95% interval, the findings, the exact
command, the runtime) and PNG plots go to ``--out-dir``. Every (row, seed)
result is cached under ``--runs-dir/<preset>-<hash of the settings>/``: a rerun
or another table reuses it, a killed run resumes. The seeds run on the study engine's
executors (cxsim/studies/executors.py): ``--jobs`` spawned single-threaded processes, or
one Ray task per seed with ``--executor ray``. The page is written by
cxsim/paper_tables/tables_page.py (plots: tables_plots.py) from the per-seed results and a
plain :class:`~cxsim.paper_tables.tables_seeds.PageSetup`, its intervals by cxsim/tables.py.

    cxsim tables                                   # smoke: a minute, under runs/tables/page
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
from typing import TYPE_CHECKING, Annotated, Any, Literal

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
from cxsim.evaluation import evaluate_protocol
from cxsim.model_group import Model
from cxsim.paper_tables.tables_page import ONE_WINDOW, render
from cxsim.paper_tables.tables_seeds import ROW_LABELS, ROWS, PageSetup, Seeds
from cxsim.pipeline import run as run_entry
from cxsim.pipeline.presets import PUBLISHED_CRITIC, PUBLISHED_RECIPE, cli_with_budget
from cxsim.tables import cached_json, config_tag
from cxsim.tracking import say

if TYPE_CHECKING:  # torch-heavy modules load where they run, so that --help is fast
    from cxsim.agent_api import Agent
    from cxsim.agents.lm_agent import LMAgent

BudgetName = Literal["smoke", "full"]
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
    """Which tables to build (the runs they share are made once)."""
    out_dir: Annotated[str, tyro.conf.arg(aliases=("--out",))] = "runs/tables/page"
    """Where tables.md and the tables_*.png plots go (``docs/results`` for the committed page)."""
    runs_dir: str = "runs/tables"
    """Cache of runs and evaluations, one folder per settings hash, then per seed."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    sft: SFTConfig = field(default_factory=SFTConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings every row starts from; each row's preset applies its changes on top."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    one_window_kwargs: EnvKwargs = field(default_factory=lambda: {"memory_length": 4})
    """Table 2: env kwargs set over ``--env.kwargs`` for a shorter task whose episodes fit
    in one window (the default task never does), where Single can succeed; empty: skip."""
    omission_rates: tuple[float, ...] = (0.0, 0.3, 0.6, 1.0)
    """Table 1: omission rates of the scripted summarizer."""
    executors: tuple[Executor, ...] = ("oracle", "base")
    """Table 1: fixed executors (the oracle, grounded in its context; the SFT base policy)."""
    train_time_limit_s: float | None = None
    """Cap on each training run's wall time (it stops and checkpoints); None: all iterations."""
    progress_bar: bool = False
    """Show tqdm bars of the training runs."""
    jobs: int = 1
    """Seeds run at once, each in its own single-threaded process (2 on a 2-core machine;
    with ``--executor ray`` and no ``--ray-address``: the CPUs of the local Ray instance)."""
    executor: Literal["local", "ray"] = "local"
    """Where the seeds run: ``local`` (this machine's processes) or ``ray`` (one Ray task per
    seed; ``pip install 'cxsim[ray]'``), as ``cxsim study --executor``."""
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

            gpus_per_run(self.compute.device)
        elif self.ray_address is not None:
            raise ValueError("--ray-address joins a Ray cluster: pass --executor ray too")
        if not self.tables or len(set(self.tables)) != len(self.tables):
            raise ValueError(f"--tables {self.tables}: pass distinct table numbers from 1-4")
        if any(not 0.0 <= p <= 1.0 for p in self.omission_rates):
            raise ValueError(f"--omission-rates {self.omission_rates} must lie in [0, 1]")
        if "compacted" not in self.eval.protocols:
            raise ValueError("--eval.protocols must include compacted (every table reads it)")
        if 2 in self.tables and "single" not in self.eval.protocols:
            raise ValueError("Table 2 compares protocols: --eval.protocols must include single")
        self.run_config(Path(self.runs_dir), 0)  # the main job's checks (--policy, --device)

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

    def run_config(self, seed_dir: Path, seed: int) -> run_entry.Config:
        """The main job's config for one seed: its stage configs are the ones used here."""
        return run_entry.Config(
            run_dir=str(seed_dir), presets=self.rows, seeds=(seed,), sft_seed=seed,
            env=self.env, compaction=self.compaction, sft=self.sft, ppo=self.ppo,
            eval=self.eval, train_time_limit_s=self.train_time_limit_s,
            progress_bar=self.progress_bar, model=self.model,
            compute=self.compute.per_run(),
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


# -- evaluation -------------------------------------------------------------------------


def lm_agent(policy_dir: str, cfg: Config) -> tuple[LMAgent, Any]:
    from cxsim.agents.lm_agent import LMAgent
    from cxsim.agents.models import load_policy
    from cxsim.devices import resolve_device
    from cxsim.generation import SamplingConfig
    from cxsim.pipeline.evaluate import chat_options_given

    device = resolve_device(cfg.compute.device)
    policy, _, chat = load_policy(policy_dir, device, chat_options_given(cfg.model.chat))
    sampling = SamplingConfig(temperature=cfg.eval.temperature)
    return LMAgent(policy, chat, sampling, device=device, precision=cfg.compute.precision), chat


def with_omission(result: dict[str, Any], records: list) -> dict[str, Any]:
    """An evaluation result plus the omission and figure diagnostics of its records."""
    from cxsim.diagnostics import rollout_figures, summary_omission

    return result | {"omission": summary_omission(records), "figures": rollout_figures(records)}


def evaluate_policy(
    cfg: Config,
    policy_dir: str,
    label: str,
    env_kwargs: dict[str, Any] | None = None,
    protocols: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """:func:`evaluate_agent` of the policy saved at ``policy_dir``."""
    agent, chat = lm_agent(policy_dir, cfg)
    return evaluate_agent(cfg, agent, chat, label, env_kwargs, protocols) | {"policy": policy_dir}


def evaluate_agent(
    cfg: Config,
    agent: Agent,
    chat: Any,
    label: str,
    env_kwargs: dict[str, Any] | None = None,
    protocols: tuple[str, ...] | None = None,
    summarizer: Agent | None = None,
) -> dict[str, Any]:
    """Pass@1 (Wilson over tasks) and diagnostics under each protocol (``cfg.eval``'s by
    default), on ``cfg.env`` or on its kwargs updated with ``env_kwargs``; ``summarizer``
    writes the summaries under ``external-summarizer`` (Table 1). Every call runs the same
    tasks and repeat seeds."""
    from cxsim.preflight import preflight

    began = time.perf_counter()
    kwargs = cfg.env.kwargs | (env_kwargs or {})
    compaction = preflight(cfg.env, cfg.compaction, chat)  # the sizes the runs were trained with
    results = {}
    for protocol in protocols or cfg.eval.protocols:
        result, records = evaluate_protocol(
            cfg.env.env_id, kwargs, agent, chat, compaction, protocol,
            cfg.eval.episodes, cfg.eval.repeats, cfg.eval.seed, summarizer_agent=summarizer,
        )  # fmt: skip
        results[protocol] = with_omission(result, records)
    return {"label": label, "results": results, "wall_time_s": time.perf_counter() - began}


def agent_by_name(name: str, cfg: Config, seed: int, policies: dict[str, str]) -> tuple[Agent, Any]:
    """An agent of the tables by name: ``oracle``, ``scripted-<p>``, a row's policy."""
    from cxsim.agents.scripted import ScriptedAgent

    if name == "oracle" or name.startswith("scripted-"):
        _, chat = lm_agent(policies["base"], cfg)  # the same word chat format as the policies
        rate = float(name.split("-", 1)[1]) if name.startswith("scripted-") else 0.0
        return ScriptedAgent(cfg.env.env_id, chat, omission_rate=rate, seed=seed), chat
    return lm_agent(policies[name], cfg)


# -- one seed ---------------------------------------------------------------------------


def run_seed(cfg: Config, seed_dir: Path, seed: int) -> dict[str, Any]:
    """SFT, PPO rows, evaluations and Table 1 for one seed; every stage cached on disk."""
    from cxsim.pipeline import sft as sft_entry
    from cxsim.pipeline import train as train_entry

    rc = cfg.run_config(seed_dir, seed)
    sft_cfg = run_entry.sft_config(rc)
    tick = time.perf_counter()
    sft = cached_json(Path(sft_cfg.run_dir) / "results.json", lambda: sft_entry.run_sft(sft_cfg))
    seeds = cfg.seed_list
    where = f"seed {seed} ({seeds.index(seed) + 1} of {len(seeds)})"
    log(f"{where}: SFT base ready ({time.perf_counter() - tick:.0f}s)")
    policies = {"base": sft["policy"]}
    trained: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(cfg.rows, start=1):
        tick = time.perf_counter()
        train_cfg = run_entry.train_config(rc, sft["policy"], row, seed)
        result = cached_json(
            Path(train_cfg.run_dir) / "results.json", lambda c=train_cfg: train_entry.train(c)
        )
        trained[row] = result
        policies[row] = result["policy"]
        log(
            f"{where}: row {i} of {len(cfg.rows)}, {row}, trained "
            f"({time.perf_counter() - tick:.0f}s)"
        )
    evals = {}
    for row, policy in policies.items():
        evals[row] = cached_json(
            seed_dir / "tables" / f"eval-{row}.json",
            lambda r=row, p=policy: evaluate_policy(cfg, p, r),
        )
    log(f"{where}: {len(evals)} policies evaluated")
    if 2 in cfg.tables and cfg.one_window_kwargs:
        tag = config_tag("one-window", cfg.one_window_kwargs)
        for row in ("oracle", "base", *ROWS[2]):

            def one_window(r: str = row) -> dict[str, Any]:
                agent, chat = agent_by_name(r, cfg, seed, policies)
                return evaluate_agent(cfg, agent, chat, r, cfg.one_window_kwargs, ("single",))

            evals[f"{row}/{ONE_WINDOW}"] = cached_json(
                seed_dir / "tables" / f"eval-{row}-{tag}.json", one_window
            )
        log(f"{where}: Table 2 one-window task evaluated ({cfg.one_window_kwargs})")
    external = {}
    if 1 in cfg.tables:
        summarizers = [f"scripted-{p:g}" for p in cfg.omission_rates] + ["compactionrl", "base"]
        for executor in cfg.executors:
            for summarizer in summarizers:

                def compute(e: str = executor, s: str = summarizer) -> dict[str, Any]:
                    ex, chat = agent_by_name(e, cfg, seed, policies)
                    su, _ = agent_by_name(s, cfg, seed, policies)
                    return evaluate_agent(cfg, ex, chat, f"{e} + {s}",
                                          protocols=("external-summarizer",), summarizer=su)  # fmt: skip

                key = f"{executor}+{summarizer}"
                external[key] = cached_json(seed_dir / "tables" / f"t1-{key}.json", compute)
        log(f"{where}: Table 1 evaluated ({len(external)} executor/summarizer pairs)")
    return {"sft": sft, "train": trained, "eval": evals, "external": external}


def run_seeds(cfg: Config, cache: Path) -> list[dict[str, Any]]:
    """run_seed for every seed of ``--seeds`` on the study engine's executor (``--jobs``
    spawned processes, or Ray tasks); in seed order.

    Each seed writes only under its own folder, so the workers share nothing; a seed that
    fails stops the tables with its error, and what the others finished stays cached.
    """
    from cxsim.studies.executors import make_executor

    calls = [(cfg, cache / f"s{seed}", seed) for seed in cfg.seed_list]
    results: list[dict[str, Any]] = [{} for _ in calls]
    executor = make_executor(cfg.executor, cfg.jobs, cfg.compute.device, cfg.ray_address)
    try:
        for index, result in executor.map(run_seed, calls):
            results[index] = result
    finally:
        executor.close()
    return results


def page_setup(cfg: Config) -> PageSetup:
    """What the page says about this run, as plain settings."""
    return PageSetup(
        preset=cfg.preset, seeds=cfg.seed_list, tables=cfg.tables, rows=cfg.rows, env=cfg.env,
        compaction=cfg.compaction, sft=cfg.sft, ppo=cfg.ppo, eval=cfg.eval,
        one_window_kwargs=dict(cfg.one_window_kwargs), omission_rates=cfg.omission_rates,
        executors=cfg.executors, jobs=cfg.jobs,
    )  # fmt: skip


def log(message: str) -> None:
    say(f"[tables {time.strftime('%H:%M:%S')}] {message}")


def run_tables(cfg: Config, command: str) -> dict[str, Any]:
    """Every run the tables need (cached), then tables.md and the plots; returns the paths."""
    import torch

    from cxsim.paper_tables.tables_plots import LEARNING_CURVES, plot_omission, plot_summarizers
    from cxsim.report.report_curves import plot_curves

    began = time.perf_counter()
    torch.set_num_threads(1)  # tiny models: one thread is 10-100x faster on a busy 2-core box
    settings = {  # what changes a run's result; seeds, tables and paths do not
        "env": cfg.env, "compaction": cfg.compaction, "sft": cfg.sft, "ppo": cfg.ppo,
        "eval": cfg.eval, "train_time_limit_s": cfg.train_time_limit_s,
        **run_entry.model_settings(cfg.run_config(Path(), 0)),  # only what differs from defaults
    }  # fmt: skip
    cache = Path(cfg.runs_dir) / config_tag(cfg.preset, settings)
    cached_json(cache / "settings.json", lambda: settings)  # what the hash stands for
    seeds = Seeds(run_seeds(cfg, cache))
    setup = page_setup(cfg)
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
    paths["page"].write_text(render(setup, seeds, command, wall, cache) + "\n")
    log(f"wrote {paths['page']} ({wall:.0f}s)")
    return {"paths": paths, "seeds": seeds, "cache": cache, "wall_time_s": wall}


def parse(argv: list[str]) -> Config:
    """``--preset`` picks the defaults (BUDGETS); the other flags override them."""
    return cli_with_budget(Config, BUDGETS, argv)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_tables(parse(argv), shlex.join(["cxsim", "tables", *argv]))


if __name__ == "__main__":
    main()

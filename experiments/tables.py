"""``cxsim tables``: the paper's Tables 1 to 4 in miniature, K training seeds each, 95% intervals.

Reads top to bottom. For each seed s (one SFT base per seed, shared by every row
of that seed):

1. SFT base (``s{s}/sft``), as ``cxsim run`` makes it;
2. PPO from the base for each row the chosen tables need
   (``s{s}/train/<preset>-s{s}``, the presets of experiments/presets.py);
3. evaluation of the base and of every trained row under Single and Compacted,
   with summary omission computed from the evaluation records
   (``cxsim.diagnostics.summary_omission``);
4. Table 1: a fixed executor (the oracle and/or the SFT base) with swapped
   summarizers under the ``external-summarizer`` protocol: scripted at several
   omission rates, the trained CompactionRL policy, the untrained SFT base.

Then ``tables.md`` (mean over seeds with a 95% interval, the findings, the exact
command, the runtime) and PNG plots go to ``--out-dir``. Every (row, seed)
result is cached under ``--runs-dir/<preset>-<hash of the settings>/``: a rerun
or another table reuses it, a killed run resumes. Intervals: cxsim/tables.py.

    cxsim tables --preset smoke --out-dir /tmp/tables
    cxsim tables --preset full --seeds 3
"""

from __future__ import annotations

import math
import multiprocessing
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import tyro

from cxsim.agent_api import Agent
from cxsim.agents.lm_agent import LMAgent
from cxsim.agents.models import load_policy
from cxsim.agents.scripted import ScriptedAgent
from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, PPOConfig, SFTConfig
from cxsim.diagnostics import rollout_figures, summary_omission
from cxsim.evaluation import EVAL_SEED_OFFSET, evaluate_protocol, pass_at_1
from cxsim.experiments import run as run_entry
from cxsim.experiments import sft as sft_entry
from cxsim.experiments import train as train_entry
from cxsim.experiments.presets import preset_from_argv
from cxsim.experiments.report import plot_curves
from cxsim.generation import SamplingConfig
from cxsim.runtime import collect_rollouts
from cxsim.tables import (
    Interval,
    Proportion,
    cached_json,
    config_tag,
    fmt,
    markdown_table,
    mean_interval,
    paired_difference,
    seed_interval,
    verdict,
)

BudgetName = Literal["smoke", "full"]
Executor = Literal["oracle", "base"]
TableId = Literal[1, 2, 3, 4]

ROWS: dict[int, tuple[str, ...]] = {
    1: ("compactionrl",),
    2: ("ppo-single", "compactionrl"),
    3: ("no-summary-training", "compactionrl"),
    4: ("compactionrl", "segment-mean-loss", "no-cross-segment", "stitched", "supo"),
}
"""PPO presets each table trains (Table 1 uses the trained CompactionRL policy as a summarizer)."""
ROW_LABELS = {
    "base": "base (SFT)",
    "compactionrl": "CompactionRL",
    "ppo-single": "PPO w/o compaction",
    "no-summary-training": "w/o summary training",
    "segment-mean-loss": "w/o token-level loss",
    "no-cross-segment": "w/o cross-segment correction",
    "stitched": "stitched GAE (not in the paper)",
    "supo": "group broadcast, SUPO-like (not in the paper)",
}


@dataclass(frozen=True)
class Config:
    """Tables 1-4 of the paper in miniature: K seeds per row, 95% intervals, Markdown + PNG."""

    preset: BudgetName = "full"
    """Budget preset: ``smoke`` (seconds; for tests) or ``full`` (the committed page);
    resolved first, other flags override it."""
    seeds: int = 3
    """K: training seeds per row (seeds 0..K-1, each with its own SFT base)."""
    tables: tuple[TableId, ...] = (1, 2, 3, 4)
    """Which tables to build (the runs they share are made once)."""
    out_dir: str = "docs/results"
    """Where tables.md and the tables_*.png plots go."""
    runs_dir: str = "runs/tables"
    """Cache of runs and evaluations, one folder per settings hash, then per seed."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    sft: SFTConfig = field(default_factory=SFTConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings every row starts from; each row's preset applies its changes on top."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    omission_rates: tuple[float, ...] = (0.0, 0.3, 0.6, 1.0)
    """Table 1: omission rates of the scripted summarizer."""
    executors: tuple[Executor, ...] = ("oracle", "base")
    """Table 1: fixed executors (the oracle, grounded in its context; the SFT base policy)."""
    train_time_limit_s: float | None = None
    """Cap on each training run's wall time (it stops and checkpoints); None: all iterations."""
    progress_bar: bool = False
    """Show tqdm bars of the training runs."""
    jobs: int = 1
    """Seeds run at once, each in its own single-threaded process (2 on a 2-core machine)."""

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ValueError(f"--seeds {self.seeds}: pass at least one seed")
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")
        if not self.tables or len(set(self.tables)) != len(self.tables):
            raise ValueError(f"--tables {self.tables}: pass distinct table numbers from 1-4")
        if any(not 0.0 <= p <= 1.0 for p in self.omission_rates):
            raise ValueError(f"--omission-rates {self.omission_rates} must lie in [0, 1]")
        if "compacted" not in self.eval.protocols:
            raise ValueError("--eval.protocols must include compacted (every table reads it)")
        if 2 in self.tables and "single" not in self.eval.protocols:
            raise ValueError("Table 2 compares protocols: --eval.protocols must include single")

    @property
    def rows(self) -> tuple[str, ...]:
        """The presets to train, in first-needed order."""
        return tuple(dict.fromkeys(r for t in sorted(self.tables) for r in ROWS[t]))

    def run_config(self, seed_dir: Path, seed: int) -> run_entry.Config:
        """The main job's config for one seed: its stage configs are the ones used here."""
        return run_entry.Config(
            run_dir=str(seed_dir), presets=self.rows, seeds=(seed,), sft_seed=seed,
            env=self.env, compaction=self.compaction, sft=self.sft, ppo=self.ppo,
            eval=self.eval, train_time_limit_s=self.train_time_limit_s, threads=1,
            progress_bar=self.progress_bar,
        )  # fmt: skip


SMOKE_ENV = EnvConfig(
    kwargs={"memory_length": 5, "obs_words_mean": 6.0, "obs_words_std": 1.0, "num_values": 4}
)
"""A short KeyRecall that still compacts twice per episode (with budget 160): as the entry-point
smoke tests."""

BUDGETS: dict[str, Config] = {
    "smoke": Config(
        preset="smoke", seeds=1, env=SMOKE_ENV,
        compaction=replace(DEFAULT_COMPACTION, budget=160),
        sft=SFTConfig(episodes=6, epochs=1, heldout_episodes=2),
        ppo=PPOConfig(rollouts_per_batch=4, iterations=1, critic_warmup=1, minibatches=1, epochs=1),
        eval=EvalConfig(episodes=3),
    ),
    "full": Config(preset="full", seeds=3),
}  # fmt: skip
"""``full``: the main job's defaults (cxsim/config.py: env, compaction, model, SFT, PPO and
evaluation budgets, sized for 2 shared cores), 3 seeds; tables.md gives the runtime."""


# -- evaluation -------------------------------------------------------------------------


def lm_agent(policy_dir: str, cfg: Config) -> tuple[LMAgent, Any]:
    policy, _, chat = load_policy(policy_dir)
    return LMAgent(policy, chat, SamplingConfig(temperature=cfg.eval.temperature)), chat


def with_omission(result: dict[str, Any], records: list) -> dict[str, Any]:
    """An evaluation result plus the omission and figure diagnostics of its records."""
    return result | {"omission": summary_omission(records), "figures": rollout_figures(records)}


def evaluate_policy(cfg: Config, policy_dir: str, label: str) -> dict[str, Any]:
    """Pass@1 (Wilson over tasks) and diagnostics under each protocol of ``cfg.eval``."""
    began = time.perf_counter()
    agent, chat = lm_agent(policy_dir, cfg)
    results = {}
    for protocol in cfg.eval.protocols:
        result, records = evaluate_protocol(
            cfg.env.env_id, cfg.env.kwargs, agent, chat, cfg.compaction, protocol,
            cfg.eval.episodes, cfg.eval.repeats, cfg.eval.seed,
        )  # fmt: skip
        results[protocol] = with_omission(result, records)
    return {"label": label, "policy": policy_dir, "results": results,
            "wall_time_s": time.perf_counter() - began}  # fmt: skip


def evaluate_external(
    cfg: Config, executor: Agent, summarizer: Agent, chat: Any, label: str
) -> dict[str, Any]:
    """Pass@1 under ``external-summarizer``: the same tasks and repeat seeds as evaluate_protocol."""
    began = time.perf_counter()
    runtime = replace(cfg.compaction, protocol="external-summarizer")
    n, m = cfg.eval.episodes, cfg.eval.repeats
    task_seeds = [EVAL_SEED_OFFSET + cfg.eval.seed * 10_000 + i for i in range(n)]
    success = np.zeros((n, m))
    records = []
    for r in range(m):
        torch.manual_seed(cfg.eval.seed * 1000 + r)
        for start in range(0, n, 64):
            with torch.no_grad():
                batch = collect_rollouts(
                    cfg.env.env_id, cfg.env.kwargs, executor, runtime,
                    task_seeds[start : start + 64], chat, summarizer_agent=summarizer,
                )  # fmt: skip
            success[start : start + len(batch.records), r] = [x.success for x in batch.records]
            records += batch.records
    stats = pass_at_1(success)
    result = {
        "protocol": "external-summarizer", "pass_at_1": stats.mean, "ci95_low": stats.low,
        "ci95_high": stats.high, "per_task_success": success.mean(axis=1).tolist(),
        "mean_compactions": float(np.mean([x.compactions for x in records])),
    }  # fmt: skip
    return {"label": label, "results": {"external-summarizer": with_omission(result, records)},
            "wall_time_s": time.perf_counter() - began}  # fmt: skip


def table1_agent(name: str, cfg: Config, seed: int, policies: dict[str, str]) -> tuple[Agent, Any]:
    """An executor or summarizer of Table 1 by name: ``oracle``, ``scripted-<p>``, a row's policy."""
    if name == "oracle" or name.startswith("scripted-"):
        _, chat = lm_agent(policies["base"], cfg)  # the same word chat format as the policies
        rate = float(name.split("-", 1)[1]) if name.startswith("scripted-") else 0.0
        return ScriptedAgent(cfg.env.env_id, chat, omission_rate=rate, seed=seed), chat
    return lm_agent(policies[name], cfg)


# -- one seed ---------------------------------------------------------------------------


def run_seed(cfg: Config, seed_dir: Path, seed: int) -> dict[str, Any]:
    """SFT, PPO rows, evaluations and Table 1 for one seed; every stage cached on disk."""
    rc = cfg.run_config(seed_dir, seed)
    sft_cfg = run_entry.sft_config(rc)
    tick = time.perf_counter()
    sft = cached_json(Path(sft_cfg.run_dir) / "results.json", lambda: sft_entry.run_sft(sft_cfg))
    log(f"seed {seed}: SFT base ready ({time.perf_counter() - tick:.0f}s)")
    policies = {"base": sft["policy"]}
    trained: dict[str, dict[str, Any]] = {}
    for row in cfg.rows:
        tick = time.perf_counter()
        train_cfg = run_entry.train_config(rc, sft["policy"], row, seed)
        result = cached_json(
            Path(train_cfg.run_dir) / "results.json", lambda c=train_cfg: train_entry.train(c)
        )
        trained[row] = result
        policies[row] = result["policy"]
        log(f"seed {seed}: {row} trained ({time.perf_counter() - tick:.0f}s)")
    evals = {}
    for row, policy in policies.items():
        evals[row] = cached_json(
            seed_dir / "tables" / f"eval-{row}.json",
            lambda r=row, p=policy: evaluate_policy(cfg, p, r),
        )
    log(f"seed {seed}: {len(evals)} policies evaluated")
    external = {}
    if 1 in cfg.tables:
        summarizers = [f"scripted-{p:g}" for p in cfg.omission_rates] + ["compactionrl", "base"]
        for executor in cfg.executors:
            for summarizer in summarizers:

                def compute(e: str = executor, s: str = summarizer) -> dict[str, Any]:
                    ex, chat = table1_agent(e, cfg, seed, policies)
                    su, _ = table1_agent(s, cfg, seed, policies)
                    return evaluate_external(cfg, ex, su, chat, f"{e} + {s}")

                key = f"{executor}+{summarizer}"
                external[key] = cached_json(seed_dir / "tables" / f"t1-{key}.json", compute)
        log(f"seed {seed}: Table 1 evaluated ({len(external)} executor/summarizer pairs)")
    return {"sft": sft, "train": trained, "eval": evals, "external": external}


def run_seeds(cfg: Config, cache: Path) -> list[dict[str, Any]]:
    """run_seed for seeds 0..K-1, ``cfg.jobs`` at a time in spawned processes; in seed order.

    Each seed writes only under its own folder, so the processes share nothing; a seed that
    fails stops the tables with its error, and what the others finished stays cached.
    """
    dirs = [cache / f"s{seed}" for seed in range(cfg.seeds)]
    if cfg.jobs == 1:
        return [run_seed(cfg, d, seed) for seed, d in enumerate(dirs)]
    spawn = multiprocessing.get_context("spawn")  # fork would copy torch's thread pools
    workers = min(cfg.jobs, cfg.seeds)
    with ProcessPoolExecutor(workers, mp_context=spawn, initializer=torch.set_num_threads,
                             initargs=(1,)) as pool:  # fmt: skip
        return list(pool.map(run_seed, [cfg] * cfg.seeds, dirs, range(cfg.seeds)))


def log(message: str) -> None:
    print(f"[tables {time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- per-seed numbers -> intervals ------------------------------------------------------


def pass_prop(result: dict[str, Any]) -> Proportion:
    tasks = result["per_task_success"]
    return Proportion(float(sum(tasks)), len(tasks))


def omission_prop(result: dict[str, Any]) -> Proportion:
    om = result["omission"]
    if "omission/overall" not in om:
        return Proportion(0.0, 0)
    facts = int(om["omission/num_facts"])
    return Proportion(om["omission/overall"] * facts, facts)


def recall_prop(result: dict[str, Any]) -> Proportion:
    om = omission_prop(result)
    return Proportion(om.trials - om.successes, om.trials)


@dataclass(frozen=True)
class Seeds:
    """Per-seed results of every run, with accessors returning one value per seed."""

    runs: list[dict[str, Any]]

    def result(self, row: str, protocol: str) -> list[dict[str, Any]]:
        return [s["eval"][row]["results"][protocol] for s in self.runs]

    def external(self, key: str) -> list[dict[str, Any]]:
        return [s["external"][key]["results"]["external-summarizer"] for s in self.runs]

    def final(self, row: str, key: str) -> list[float]:
        values = [s["train"][row]["final"].get(key) for s in self.runs]
        return [math.nan if v is None else float(v) for v in values]

    def histories(self, row: str) -> list[list[dict[str, Any]]]:
        return [s["train"][row]["history"] for s in self.runs]


def pass_interval(results: list[dict[str, Any]]) -> Interval:
    return seed_interval([pass_prop(r) for r in results])


def omission_interval(results: list[dict[str, Any]]) -> Interval:
    return seed_interval([omission_prop(r) for r in results])


def recall_interval(results: list[dict[str, Any]]) -> Interval:
    return seed_interval([recall_prop(r) for r in results])


def omission_by_compaction(results: list[dict[str, Any]]) -> dict[int, Interval]:
    """k -> mean over seeds of ``omission/compaction{k}`` (t over seeds; K = 1: no interval)."""
    ks = sorted(
        {int(k.removeprefix("omission/compaction")) for r in results for k in r["omission"]
         if k.startswith("omission/compaction")}
    )  # fmt: skip
    return {
        k: mean_interval(
            [r["omission"].get(f"omission/compaction{k}", math.nan) for r in results], (0.0, 1.0)
        )
        for k in ks
    }


# -- the page ---------------------------------------------------------------------------


def table1(cfg: Config, s: Seeds) -> str:
    rows = []
    for executor in cfg.executors:
        for rate in cfg.omission_rates:
            rows.append((executor, f"scripted, omission {rate:g}", f"{executor}+scripted-{rate:g}"))
        rows.append((executor, "CompactionRL (trained)", f"{executor}+compactionrl"))
        rows.append((executor, "SFT base (untrained)", f"{executor}+base"))
    body = []
    for executor, name, key in rows:
        res = s.external(key)
        by_k = omission_by_compaction(res)
        body.append([
            "oracle" if executor == "oracle" else "SFT base", name, fmt(pass_interval(res)),
            fmt(recall_interval(res)), fmt(by_k[0]) if 0 in by_k else "-",
            fmt(by_k[max(by_k)]) + f" (k={max(by_k)})" if by_k else "-",
        ])  # fmt: skip
    header = ["executor", "summarizer", "Pass@1", "summary recall", "omission, 1st summary",
              "omission, last summary"]  # fmt: skip
    return markdown_table(header, body)


def table2(s: Seeds) -> str:
    body = []
    for row in ("base", "ppo-single", "compactionrl"):
        single, compacted = s.result(row, "single"), s.result(row, "compacted")
        gain = paired_difference([pass_prop(r) for r in compacted], [pass_prop(r) for r in single])
        body.append([ROW_LABELS[row], fmt(pass_interval(single)), fmt(pass_interval(compacted)),
                     fmt(gain, signed=True)])  # fmt: skip
    return markdown_table(
        ["model", "Single Pass@1", "Compacted Pass@1", "Compacted - Single"], body
    )


def table3(s: Seeds) -> str:
    body = []
    for row in ("base", "no-summary-training", "compactionrl"):
        res = s.result(row, "compacted")
        by_k = omission_by_compaction(res)
        body.append([
            ROW_LABELS[row], fmt(pass_interval(res)), fmt(omission_interval(res)),
            " / ".join(fmt(by_k[k]) for k in sorted(by_k)) or "-",
        ])  # fmt: skip
    header = [
        "model",
        "Compacted Pass@1",
        "summary omission",
        "omission by compaction k = 0 / 1 / ...",
    ]
    return markdown_table(header, body)


TRAIN_DIAGNOSTICS = (
    ("critic/explained_variance", "critic EV"),
    ("critic/ece", "critic ECE"),
    ("gap/rel_err", "gap to stitched GAE (rel. err.)"),
    ("credit/summary_first_over_last", "credit, 1st / last summary"),
)
"""Training diagnostics shown in Table 4 when the trainer's ``final`` metrics carry them."""


def table4(cfg: Config, s: Seeds) -> str:
    single = "single" in cfg.eval.protocols
    diagnostics = [
        (key, name) for key, name in TRAIN_DIAGNOSTICS
        if any(not math.isnan(v) for row in ROWS[4] for v in s.final(row, key))
    ]  # fmt: skip
    body = []
    ref = [pass_prop(r) for r in s.result("compactionrl", "compacted")]
    for row in ROWS[4]:
        res = s.result(row, "compacted")
        props = [pass_prop(r) for r in res]
        delta = "-" if row == "compactionrl" else fmt(paired_difference(props, ref), signed=True)
        body.append([
            ROW_LABELS[row], fmt(pass_interval(res)), delta,
            fmt(pass_interval(s.result(row, "single"))) if single else "-",
            fmt(omission_interval(res)),
            fmt(mean_interval(s.final(row, "charts/success_rate"))),
            *(fmt(mean_interval(s.final(row, key)), digits=3) for key, _ in diagnostics),
        ])  # fmt: skip
    header = ["model", "Compacted Pass@1", "- CompactionRL (paired)", "Single Pass@1",
              "summary omission", "train success (last 5 it.)",
              *(f"{name} (last 5 it.)" for _, name in diagnostics)]  # fmt: skip
    return markdown_table(header, body)


def findings(cfg: Config, s: Seeds) -> list[str]:
    """One sentence per question, each from a paired interval."""

    def passes(row: str, protocol: str = "compacted") -> list[Proportion]:
        return [pass_prop(r) for r in s.result(row, protocol)]

    out = []
    rows = set(cfg.rows)
    if {"no-summary-training", "compactionrl"} <= rows:
        om = paired_difference(
            [omission_prop(r) for r in s.result("compactionrl", "compacted")],
            [omission_prop(r) for r in s.result("no-summary-training", "compacted")],
        )
        base = paired_difference(
            [omission_prop(r) for r in s.result("compactionrl", "compacted")],
            [omission_prop(r) for r in s.result("base", "compacted")],
        )
        out.append(
            "**Does summary training reduce omission?** Summary omission of CompactionRL minus "
            f"w/o summary training: {verdict(om, 'higher with summary training', 'lower with summary training')}; "
            f"CompactionRL minus the SFT base: {verdict(base, 'higher after training', 'lower after training')}."
        )
    if {"no-cross-segment", "stitched", "compactionrl"} <= rows:
        vs_local = paired_difference(passes("compactionrl"), passes("no-cross-segment"))
        vs_stitched = paired_difference(passes("compactionrl"), passes("stitched"))
        out.append(
            "**Does the cross-segment correction change success?** Compacted Pass@1 of "
            "CompactionRL minus w/o correction (local GAE): "
            f"{verdict(vs_local, 'higher with the correction', 'lower with the correction')}; "
            f"minus stitched GAE: {verdict(vs_stitched, 'higher than stitched', 'lower than stitched')}."
        )
    if "single" in cfg.eval.protocols and {"compactionrl", "ppo-single"} <= rows:
        crl = paired_difference(passes("compactionrl", "single"), passes("base", "single"))
        ppo = paired_difference(passes("ppo-single", "single"), passes("base", "single"))
        rows_single = [passes(r, "single") for r in ("base", "compactionrl", "ppo-single")]
        never = all(p.successes == 0 for seeds in rows_single for p in seeds)
        default = cfg.env == EnvConfig() and cfg.compaction == DEFAULT_COMPACTION
        out.append(
            "**Does Single-window success improve?** Single Pass@1 of CompactionRL minus the SFT "
            f"base: {verdict(crl, 'improves', 'drops')}; PPO w/o compaction minus the base: "
            f"{verdict(ppo, 'improves', 'drops')}."
            + (
                " No model solved a task within one window (Single Pass@1 = 0 for every model "
                "and seed)."
                if never
                else ""
            )
            + (
                " The default task is sized so that no episode fits in one window "
                "(cxsim/config.py), so Single cannot improve on it."
                if never and default
                else ""
            )
        )
    if 1 in cfg.tables:
        lo, hi = min(cfg.omission_rates), max(cfg.omission_rates)
        parts = []
        for executor in cfg.executors:

            def diff(a: str, b: str, e: str = executor) -> Interval:
                return paired_difference(
                    [pass_prop(r) for r in s.external(f"{e}+{a}")],
                    [pass_prop(r) for r in s.external(f"{e}+{b}")],
                )

            name = "the oracle" if executor == "oracle" else "the SFT base"
            spread = diff(f"scripted-{lo:g}", f"scripted-{hi:g}")
            trained = diff("compactionrl", "base")
            parts.append(
                f"with {name} as executor, Pass@1 with the scripted summarizer at omission "
                f"{lo:g} minus at {hi:g}: {verdict(spread, 'higher', 'lower')}, and with the "
                f"trained CompactionRL summarizer minus the untrained SFT base: "
                f"{verdict(trained, 'higher', 'lower')}"
            )
        text = "; ".join(parts)
        out.append(f"**Does the summarizer matter (Table 1)?** {text[0].upper()}{text[1:]}.")
    return out


def plot_omission(cfg: Config, s: Seeds, path: Path) -> None:
    """Omission by compaction index: the trained rows and the base (Compacted evaluation), and
    the Table 1 summarizers with the oracle executor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = [("Compacted evaluation (policy summarizes itself)",
               {ROW_LABELS[r]: s.result(r, "compacted") for r in ("base", *cfg.rows)})]  # fmt: skip
    if 1 in cfg.tables:
        executor = cfg.executors[0]
        names = [f"scripted-{p:g}" for p in cfg.omission_rates] + ["compactionrl", "base"]
        panels.append((f"Table 1 summarizers ({executor} executor)",
                       {summarizer_label(n): s.external(f"{executor}+{n}") for n in names}))  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (title, series) in zip(axes.flat, panels, strict=True):
        for i, (label, results) in enumerate(series.items()):
            by_k = omission_by_compaction(results)
            if not by_k:
                continue
            ks = sorted(by_k)
            mean = [by_k[k].mean for k in ks]
            err = None
            if not any(math.isnan(by_k[k].low) for k in ks):
                err = [[by_k[k].mean - by_k[k].low for k in ks],
                       [by_k[k].high - by_k[k].mean for k in ks]]  # fmt: skip
            dodge = 0.04 * (i - (len(series) - 1) / 2)  # keep overlapping error bars apart
            ax.errorbar([k + dodge for k in ks], mean, yerr=err, marker="o", capsize=3,
                        label=label, linewidth=1.2, color=f"C{i % 10}")  # fmt: skip
        ax.set_title(title, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("compaction index k (0: first summary)")
        ax.set_ylabel("fraction of needed facts missing")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summarizer_label(name: str) -> str:
    if name.startswith("scripted-"):
        return f"scripted, omission {name.removeprefix('scripted-')}"
    return f"{ROW_LABELS[name]} summarizer"


def plot_summarizers(cfg: Config, s: Seeds, path: Path) -> None:
    """Table 1: Pass@1 against the scripted summarizer's omission rate, per executor, with the
    trained and untrained policy summarizers as horizontal bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for executor in cfg.executors:
        cells = [
            pass_interval(s.external(f"{executor}+scripted-{p:g}")) for p in cfg.omission_rates
        ]
        err = None
        if not any(math.isnan(c.low) for c in cells):
            err = [[c.mean - c.low for c in cells], [c.high - c.mean for c in cells]]
        (line,) = ax.plot([], [])
        ax.errorbar(cfg.omission_rates, [c.mean for c in cells], yerr=err, marker="o", capsize=3,
                    color=line.get_color(), label=f"{executor} executor, scripted summarizer")  # fmt: skip
        for name, style in (("compactionrl", "--"), ("base", ":")):
            cell = pass_interval(s.external(f"{executor}+{name}"))
            ax.axhline(cell.mean, linestyle=style, color=line.get_color(),
                       label=f"{executor} executor, {ROW_LABELS[name]} summarizer")  # fmt: skip
    ax.set_xlabel("scripted summarizer omission rate")
    ax.set_ylabel("Pass@1 (external-summarizer protocol)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


LEARNING_CURVES = (
    ("charts/success_rate", "training success rate"),
    ("omission", "summary omission (1 - recall)"),
    ("compaction/compactions_mean", "compactions per rollout"),
    ("critic/explained_variance", "critic explained variance"),
    ("losses/approx_kl", "approx. KL"),
    ("losses/entropy", "entropy (nats/token)"),
)


def compute_seconds(s: Seeds) -> float:
    """Wall time of every cached stage this page reads (SFT, training, evaluations)."""
    total = 0.0
    for run in s.runs:
        total += run["sft"]["wall_time_s"]
        total += sum(r["wall_time_s"] for r in run["train"].values())
        total += sum(e["wall_time_s"] for e in run["eval"].values())
        total += sum(e["wall_time_s"] for e in run["external"].values())
    return total


def render(cfg: Config, s: Seeds, command: str, wall_s: float, cache: Path) -> str:
    k = cfg.seeds
    method = (
        f"mean over K = {k} training seeds with a Student-t 95% interval over the per-seed values"
        if k >= 2
        else "one training seed: a Wilson 95% interval over the pooled proportion (tasks for "
        "Pass@1, needed facts for omission and recall); it counts evaluation noise only"
    )
    ppo = cfg.ppo
    lines = [
        "# The paper's tables in miniature",
        "",
        f"Made by `{command}` ({cfg.preset} preset). Environment `{cfg.env.env_id}` "
        f"{cfg.env.kwargs}; budget C = {cfg.compaction.budget}, T_comp = "
        f"{cfg.compaction.threshold}, at most {cfg.compaction.max_compactions} compactions; "
        f"`{cfg.sft.model}` policy. Per seed: one SFT base ({cfg.sft.episodes} demonstrations "
        f"x {cfg.sft.epochs} epochs, summarizer omission {cfg.sft.omission_rate:g}); each row "
        f"trained from it for {ppo.critic_warmup} critic warm-up + {ppo.iterations} PPO "
        f"iterations of {ppo.rollouts_per_batch} rollouts; evaluation on {cfg.eval.episodes} "
        f"held-out tasks x {cfg.eval.repeats} sample(s), the same tasks for every row.",
        "",
        f'**Intervals**: {method}. Differences ("paired") pair rows by seed (same SFT base, '
        "same tasks). Formulas: `cxsim/tables.py`. Omission = fraction of the needed facts "
        "(current values) a summary misses, from the evaluation records "
        "(`cxsim.diagnostics.summary_omission`); summary recall = 1 - omission.",
        "",
        f"**Runtime**: {compute_seconds(s) / 60:.1f} min of compute in the runs this page "
        f"reads (SFT, training, evaluation), measured when each ran; this invocation took "
        f"{wall_s / 60:.1f} min (runs found in the cache `{cache}` are read, not rerun).",
        "",
        "## Findings",
        "",
        *[f"- {sentence}" for sentence in findings(cfg, s)],
        "",
        f"An interval that covers 0 says that this budget ({k} seed(s), {ppo.iterations} PPO "
        "iterations per row) cannot tell the two rows apart, not that they do not differ.",
        "",
    ]
    if 1 in cfg.tables:
        lines += [
            "## Table 1: fixed executor, swapped summarizers",
            "",
            "Protocol `external-summarizer`: the executor acts, another agent writes every "
            "summary. The oracle executor acts from what its context holds (a lost fact costs a "
            "guess), so its Pass@1 measures the summaries alone.",
            "",
            table1(cfg, s),
            "",
            "![Table 1](tables_summarizers.png)",
            "",
        ]
    if 2 in cfg.tables:
        lines += ["## Table 2: Single and Compacted evaluation", "", table2(s), ""]
    if 3 in cfg.tables:
        lines += ["## Table 3: summary training", "", table3(s), ""]
    if 4 in cfg.tables:
        lines += [
            "## Table 4: ablations of the estimator and the loss",
            "",
            "Train success and critic explained variance are the training diagnostics of the "
            "last five iterations (`results.json` `final`).",
            "",
            table4(cfg, s),
            "",
        ]
    lines += [
        "## Plots",
        "",
        "![learning curves](tables_learning_curves.png)",
        "",
        "Learning curves: mean over seeds, shaded min-max.",
        "",
        "![omission by compaction](tables_omission.png)",
        "",
    ]
    return "\n".join(lines)


def run_tables(cfg: Config, command: str) -> dict[str, Any]:
    """Every run the tables need (cached), then tables.md and the plots; returns the paths."""
    began = time.perf_counter()
    torch.set_num_threads(1)  # tiny models: one thread is 10-100x faster on a busy 2-core box
    settings = {  # what changes a run's result; seeds, tables and paths do not
        "env": cfg.env, "compaction": cfg.compaction, "sft": cfg.sft, "ppo": cfg.ppo,
        "eval": cfg.eval, "train_time_limit_s": cfg.train_time_limit_s,
    }  # fmt: skip
    cache = Path(cfg.runs_dir) / config_tag(cfg.preset, settings)
    cached_json(cache / "settings.json", lambda: settings)  # what the hash stands for
    seeds = Seeds(run_seeds(cfg, cache))
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"curves": out / "tables_learning_curves.png", "omission": out / "tables_omission.png"}
    plot_curves({ROW_LABELS[r]: seeds.histories(r) for r in cfg.rows}, paths["curves"],
                LEARNING_CURVES)  # fmt: skip
    plot_omission(cfg, seeds, paths["omission"])
    if 1 in cfg.tables:
        paths["summarizers"] = out / "tables_summarizers.png"
        plot_summarizers(cfg, seeds, paths["summarizers"])
    paths["page"] = out / "tables.md"
    wall = time.perf_counter() - began
    paths["page"].write_text(render(cfg, seeds, command, wall, cache) + "\n")
    log(f"wrote {paths['page']} ({wall:.0f}s)")
    return {"paths": paths, "seeds": seeds, "cache": cache, "wall_time_s": wall}


def parse(argv: list[str]) -> Config:
    """``--preset`` picks the defaults (BUDGETS); the other flags override them."""
    name = preset_from_argv(argv, default="full")
    if name not in BUDGETS:
        raise SystemExit(f"unknown preset {name!r}; choose one of: {', '.join(BUDGETS)}")
    return tyro.cli(Config, args=argv, default=BUDGETS[name])


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_tables(parse(argv), shlex.join(["cxsim", "tables", *argv]))


if __name__ == "__main__":
    main()

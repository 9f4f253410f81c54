"""What ``cxsim tables`` reads its page from: the tables' rows and labels, the run's plain
settings (:class:`PageSetup`), the per-seed results (:class:`Seeds`) and their intervals
(Pass@1, summary omission and recall, omission by compaction index). The page
(``tables_page.py``) and the plots (``tables_plots.py``) take these; the interval math
lives in ``cxsim/tables.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cxsim.compaction import CompactionConfig
from cxsim.config import EnvConfig, EvalConfig, PPOConfig, SFTConfig
from cxsim.tables import Interval, Proportion, mean_interval, seed_interval

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
class PageSetup:
    """What the page says about the run: its settings, seeds and tables (plain values)."""

    preset: str
    seeds: tuple[int, ...]
    """The training seeds, in the order of the per-seed results."""
    tables: tuple[int, ...]
    rows: tuple[str, ...]
    """The PPO presets trained, in first-needed order."""
    env: EnvConfig
    compaction: CompactionConfig
    sft: SFTConfig
    ppo: PPOConfig
    eval: EvalConfig
    one_window_kwargs: dict[str, Any]
    omission_rates: tuple[float, ...]
    executors: tuple[str, ...]
    jobs: int


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

    def passes(self, row: str, protocol: str = "compacted") -> list[Proportion]:
        """Pass@1 of ``row`` under ``protocol``, one proportion per seed."""
        return [pass_prop(r) for r in self.result(row, protocol)]

    def omissions(self, row: str) -> list[Proportion]:
        """Summary omission of ``row`` under Compacted, one proportion per seed."""
        return [omission_prop(r) for r in self.result(row, "compacted")]

    def external_passes(self, key: str) -> list[Proportion]:
        return [pass_prop(r) for r in self.external(key)]


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

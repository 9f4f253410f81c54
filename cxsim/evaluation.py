"""Evaluation under the Single and Compacted protocols: Pass@1 with a 95% interval.

Protocols (docs/method.md, "Protocols"): **Compacted** runs the compaction runtime as
configured; **Single** is the same runtime with no compaction allowed, so an
episode whose context fills up fails. :func:`evaluate_protocol` runs any context
strategy by name (``cxsim.strategies.STRATEGIES``, a plug-in's ``module:name`` too), e.g.
``external-summarizer`` (a fixed executor with another agent writing the summaries:
``cxsim tables``' Table 1) or ``observation-masking``.

Pass@1 over N tasks (episode seeds) x M repeats (independent samples of the
agent on the same task) is the mean success over all N*M runs. Its 95%
interval is a **Wilson score interval over the N tasks**: each task
contributes its success rate over the M repeats (a fractional success), and
the effective sample size is N. Repeats of one task are correlated (same
task, same policy), so counting N*M independent trials would overstate the
precision; counting N is conservative when repeats carry extra information
and exact when M = 1. Wilson rather than the normal approximation because
Pass@1 sits near 0 or 1 for easy and hard settings, where the normal
interval leaves [0, 1] and under-covers.

Across training seeds, :func:`t_interval` gives a Student-t interval over the
per-seed Pass@1 values (wide with 3 seeds, by design: it counts seed variance),
clipped to the range a proportion can take. Quantiles and the integer-count Wilson
interval come from ``scipy.stats``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cxsim.compaction import CompactionConfig
from cxsim.compaction import Protocol as RuntimeProtocol

if TYPE_CHECKING:  # torch and the runtime load where used: the interval maths stays light
    from cxsim.agent_api import Agent
    from cxsim.agents.chat import ChatFormat
    from cxsim.rollout_records import RolloutRecord

Protocol = RuntimeProtocol
"""A context strategy's name (``cxsim.strategies.STRATEGIES``) or a plug-in's module:name."""
PROTOCOLS: tuple[Protocol, ...] = ("single", "compacted")
"""The protocols the paper evaluates (``cxsim eval``'s default pair)."""
EVAL_SEED_OFFSET = 1_000_000_000
"""Evaluation task seeds start here; training seeds count up from 0, so they never meet."""
Z95 = 1.959963984540054
"""The normal 0.975 quantile (two-sided 95%)."""


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Runs the block with ``n`` torch threads (0: leave as is), then restores the count.

    Sampling from a tiny model is a long chain of tiny ops: one thread is fastest, and a
    second one spin-waits badly when the cores are shared (measured 21 us vs 2.7 ms per
    (4, 64) x (64, 256) linear on a loaded 2-core machine). Updates are large ops and
    gain from the threads.
    """
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n``.

    Integer counts: ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")``.
    ``successes`` may be fractional (a sum of per-task success rates), which binomtest
    does not take; then the same formula, written out:
    ``(p + z^2/2n -/+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)``.
    """
    if n <= 0:
        raise ValueError(f"n must be positive; got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n={n}]; got {successes}")
    if float(successes).is_integer() and z == Z95:
        from scipy.stats import binomtest

        ci = binomtest(round(successes), n).proportion_ci(0.95, method="wilson")
        return float(ci.low), float(ci.high)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # exact ends at p = 0 and p = 1 (the formula gives them up to rounding)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def t_interval(
    values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf)
) -> tuple[float, float]:
    """Student-t 95% interval of the mean of ``values`` (e.g. Pass@1 per training seed),
    clipped to ``bounds`` ((0, 1) for a proportion, (-1, 1) for a difference of two).
    Fewer than 2 values: (nan, nan)."""
    if len(values) < 2:
        return (float("nan"), float("nan"))
    from scipy.stats import t as student_t

    x = np.asarray(values, dtype=np.float64)
    half = float(student_t.ppf(0.975, len(x) - 1)) * x.std(ddof=1) / math.sqrt(len(x))
    return max(float(x.mean() - half), bounds[0]), min(float(x.mean() + half), bounds[1])


@dataclass(frozen=True)
class PassAt1:
    mean: float
    low: float
    high: float
    tasks: int
    runs: int


def pass_at_1(success: np.ndarray) -> PassAt1:
    """Pass@1 and its Wilson interval over tasks from a (N tasks, M repeats) success array."""
    success = np.asarray(success, dtype=np.float64)
    if success.ndim != 2 or success.size == 0:
        raise ValueError(f"success must be a non-empty (tasks, repeats) array; got {success.shape}")
    per_task = success.mean(axis=1)
    low, high = wilson_interval(float(per_task.sum()), len(per_task))
    return PassAt1(float(per_task.mean()), low, high, len(per_task), int(success.size))


def protocol_config(compaction: CompactionConfig, protocol: RuntimeProtocol) -> CompactionConfig:
    """The runtime config of a protocol (Single: no compaction, same budget); any context
    strategy's name, a plug-in's too (an unknown one raises the registry's one-line error)."""
    return compaction.for_protocol(protocol)


def summary_recall(records: list[RolloutRecord]) -> float:
    """Fraction of needed facts kept (current value) over every summary written; nan if none."""
    kept = [ok for rec in records for recall in rec.summary_recall for ok in recall.values()]
    return float(np.mean(kept)) if kept else float("nan")


def rollout_metrics(records: list[RolloutRecord]) -> dict[str, float]:
    """Batch statistics of rollouts, keyed for TensorBoard (``charts/``, ``compaction/``)."""
    n = len(records)
    return {
        "charts/success_rate": sum(r.success for r in records) / n,
        "charts/reward_mean": sum(r.reward for r in records) / n,
        "charts/turns_mean": sum(r.turns for r in records) / n,
        "charts/tokens_generated": float(sum(r.tokens_generated for r in records)),
        "charts/tokens_prefilled": float(sum(r.tokens_prefilled for r in records)),
        "compaction/compactions_mean": sum(r.compactions for r in records) / n,
        "compaction/summary_recall": summary_recall(records),
        "compaction/truncated_rate": sum(r.truncated for r in records) / n,
        "compaction/tokens_summarised": float(sum(r.tokens_summarised for r in records)),
        "compaction/peak_context_mean": sum(r.peak_context for r in records) / n,
    }


def evaluate_protocol(
    env_id: str,
    env_kwargs: dict[str, Any],
    agent: Agent,
    chat: ChatFormat,
    compaction: CompactionConfig,
    protocol: RuntimeProtocol,
    episodes: int,
    repeats: int = 1,
    seed: int = 0,
    batch_size: int = 64,
    threads: int = 1,
    summarizer_agent: Agent | None = None,
) -> tuple[dict[str, Any], list[RolloutRecord]]:
    """Runs ``episodes`` tasks x ``repeats`` samples under one protocol.

    Task seeds are ``EVAL_SEED_OFFSET + seed * 10_000 + i``; repeat ``r`` reseeds
    torch's RNG (which LM sampling draws from) with ``seed * 1000 + r``. Rollouts run
    with ``threads`` torch threads (see :func:`torch_threads`). ``summarizer_agent``
    writes the summaries under ``external-summarizer`` (and is needed there only).
    Returns the JSON-ready summary and the records; its ``survival`` is the share of needed
    facts alive at each compaction round, overall and per fact type, and the first round below
    one half (``cxsim.diagnostics.survival.survival_summary``; ``{}`` without summaries).
    """
    import torch

    from cxsim.diagnostics.survival import survival_summary
    from cxsim.runtime import collect_rollouts

    if episodes < 1 or repeats < 1:
        raise ValueError(f"episodes and repeats must be >= 1; got {episodes} and {repeats}")
    runtime = protocol_config(compaction, protocol)
    task_seeds = [EVAL_SEED_OFFSET + seed * 10_000 + i for i in range(episodes)]
    success = np.zeros((episodes, repeats))
    records: list[RolloutRecord] = []
    for r in range(repeats):
        torch.manual_seed(seed * 1000 + r)
        for start in range(0, episodes, batch_size):
            chunk = task_seeds[start : start + batch_size]
            with torch.no_grad(), torch_threads(threads):
                batch = collect_rollouts(
                    env_id, env_kwargs, agent, runtime, chunk, chat,
                    summarizer_agent=summarizer_agent, rollout_id_start=len(records),
                )  # fmt: skip
            for i, rec in enumerate(batch.records):
                success[start + i, r] = float(rec.success)
            records.extend(batch.records)
    stats = pass_at_1(success)
    result = {
        "protocol": protocol,
        "episodes": episodes,
        "repeats": repeats,
        "runs": stats.runs,
        "pass_at_1": stats.mean,
        "ci95_low": stats.low,
        "ci95_high": stats.high,
        "ci_method": "wilson over tasks (per-task success averaged over repeats)",
        "mean_compactions": float(np.mean([rec.compactions for rec in records])),
        "summary_recall": summary_recall(records),
        "survival": survival_summary(records),
        "mean_turns": float(np.mean([rec.turns for rec in records])),
        "truncated_rate": float(np.mean([rec.truncated for rec in records])),
        "tokens_generated": int(sum(rec.tokens_generated for rec in records)),
        "tokens_processed": float(
            np.mean([rec.tokens_prefilled + rec.tokens_generated for rec in records])
        ),
        "model_calls": float(np.mean([rec.model_calls for rec in records])),
        "per_task_success": success.mean(axis=1).tolist(),
    }
    return result, records


def format_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """A Markdown table of ``(label, evaluation result)`` pairs."""
    lines = [
        "| model | protocol | Pass@1 | 95% CI | compactions | summary recall | runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in rows:
        recall = r["summary_recall"]
        recall_text = "-" if recall is None or math.isnan(recall) else f"{recall:.2f}"
        lines.append(
            f"| {label} | {r['protocol']} | {r['pass_at_1']:.3f} | "
            f"[{r['ci95_low']:.3f}, {r['ci95_high']:.3f}] | {r['mean_compactions']:.2f} | "
            f"{recall_text} | {r['runs']} |"
        )
    return "\n".join(lines)

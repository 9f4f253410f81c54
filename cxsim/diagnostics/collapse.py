"""Did a training run keep what it learned? Per-run collapse figures from its history.

A run's *drop* is its best training success (over the actor iterations) minus the mean
training success of its last three iterations: one batch of 32 rollouts has a standard
error of about 0.07 near 0.8, so the last three are the least a fall can be read from. A
run *collapsed* when its drop exceeds ``COLLAPSE_DROP`` (0.2) or its final Compacted
Pass@1 ends below its base's. The *fall* is the largest one-iteration fall in training
success; the figures of the update that preceded it (its raw advantage spread, the
critic's explained variance, how far the next batch's policy had moved from the
reference) are what docs/results/stability.md reads the mechanism from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

COLLAPSE_DROP = 0.2
"""Training success lost from the best iteration beyond which a run collapsed."""
LAST = 3
"""Iterations the end of a run is averaged over."""
EVIDENCE_KEYS: tuple[str, ...] = (
    "stability/advantage_std",
    "critic/explained_variance",
    "losses/approx_kl",
    "losses/entropy_action",
    "stability/kl_to_reference_action",
    "stability/kl_to_reference_summary",
    "compaction/summary_recall",
)


@dataclass(frozen=True)
class RunCollapse:
    """One run's figures (training success per actor iteration, from its history)."""

    best: float
    """Best training success over the actor iterations."""
    best_iteration: int
    last: float
    """Mean training success of the last ``LAST`` actor iterations."""
    drop: float
    """``best - last``."""
    fall: float
    """Largest one-iteration fall in training success (>= 0)."""
    fall_iteration: int
    """The iteration after that fall (its batch was sampled by the updated policy); -1: none."""
    before_fall: dict[str, float]
    """``EVIDENCE_KEYS`` at the iteration whose update preceded the fall (NaN if unlogged)."""
    after_fall: dict[str, float]
    """The same at the iteration after the fall."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_collapse(history: Sequence[dict[str, float]]) -> RunCollapse:
    """The collapse figures of one run's history (``results.json``'s ``history``)."""
    rows = [h for h in history if not h.get("warmup")]
    if not rows:
        raise ValueError("the history has no actor iteration: nothing to read a collapse from")
    success = [float(h["charts/success_rate"]) for h in rows]
    best = max(success)
    best_at = success.index(best)
    last = sum(success[-LAST:]) / len(success[-LAST:])
    falls = [success[k - 1] - success[k] for k in range(1, len(success))]
    fall = max(falls, default=0.0)
    at = falls.index(fall) + 1 if falls and fall > 0 else -1

    def figures(k: int) -> dict[str, float]:
        if k < 0:
            return dict.fromkeys(EVIDENCE_KEYS, math.nan)
        got = {key: rows[k].get(key) for key in EVIDENCE_KEYS}  # NaN is saved as null
        return {key: math.nan if x is None else float(x) for key, x in got.items()}

    return RunCollapse(
        best=best,
        best_iteration=int(rows[best_at]["iteration"]),
        last=last,
        drop=best - last,
        fall=max(fall, 0.0),
        fall_iteration=int(rows[at]["iteration"]) if at > 0 else -1,
        before_fall=figures(at - 1 if at > 0 else -1),
        after_fall=figures(at),
    )


def collapsed(run: RunCollapse, final: float, base: float) -> bool:
    """The run lost what it learned: a drop beyond ``COLLAPSE_DROP``, or a final Pass@1
    below its base's."""
    return run.drop > COLLAPSE_DROP or final < base

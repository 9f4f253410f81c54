"""What a study reads from a training run's history (results.json ``history``: one row per PPO
iteration, ``warmup`` 1 for the critic's value-only warm-up iterations).

- :func:`actor_reductions`: each key's max and mean over the run's actor iterations (the
  ``[[checks]]`` with ``over = "max"`` or ``"mean"``), and the training success curve
  (``charts/success_rate`` per actor iteration), kept in each unit's result;
- the two claim metrics read from that curve, more sensitive than one final Pass@1:
  :func:`success_auc` (the area under it: its mean) and :func:`iterations_to` (the first
  actor iteration whose success reaches a threshold; never: the iterations + 1);
- :func:`history_bounds`: the range a history key's values lie in (the keys whose unit
  docs/tensorboard.md gives as a fraction lie in [0, 1]), to which the page clips its
  intervals over seeds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

SUCCESS_KEY = "charts/success_rate"
"""The training success rate of one iteration's rollouts (docs/tensorboard.md)."""

FRACTIONS = (
    "charts/success_rate",
    "losses/clip_fraction",
    "compaction/summary_recall",
    "compaction/truncated_rate",
    "omission/overall",
    "omission/overall_se",
    "omission/per_summary_mean",
    "omission/any",
    "omission/compaction{k}",
    "omission/success_if_omitted",
    "omission/success_if_complete",
    "omission/success_if_uncompacted",
    "weights/{mode}/max_share",
    "weights/{mode}/summary_share",
    "weights/{mode}/share_seg{k}",
    "weights/{mode}/hist_{r}",
    "horizon/rollout_share_k{k}",
    "horizon/{mode}/grad_share_k{k}",
    "gap/sign_agree",
    "gap/sign_agree_seg{k}",
    "figures/compactions_eq{k}",
    "eval/{protocol}/pass_at_1",
    "eval/{protocol}/ci95_low",
    "eval/{protocol}/ci95_high",
    "eval/{protocol}/summary_recall",
    "survival/round{k}",
    "survival/{type}/round{k}",
    "eval/{protocol}/survival/round{k}",
    "eval/{protocol}/survival/{type}/round{k}",
)
"""The history keys that lie in [0, 1]: every tag docs/tensorboard.md gives the unit
"fraction", except ``omission/success_gap`` (a difference of two: [-1, 1])."""
SIGNED_FRACTIONS = ("omission/success_gap",)
"""History keys that are a difference of two fractions: [-1, 1]."""


def _pattern(templates: Sequence[str]) -> re.Pattern[str]:
    parts = [re.escape(t) for t in templates]
    parts = [re.sub(r"\\\{[a-z]+\\\}", "[^/]+", p) for p in parts]
    return re.compile("|".join(f"(?:{p})" for p in parts))


_UNIT = _pattern(FRACTIONS)
_SIGNED = _pattern(SIGNED_FRACTIONS)


def history_bounds(key: str) -> tuple[float, float]:
    """The range of a history key's values: [0, 1] for a fraction, [-1, 1] for a difference of
    two, unbounded otherwise."""
    if _UNIT.fullmatch(key):
        return (0.0, 1.0)
    if _SIGNED.fullmatch(key):
        return (-1.0, 1.0)
    return (-math.inf, math.inf)


def actor_reductions(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Each history key's ``actor_max`` and ``actor_mean`` over the run's actor iterations
    (value-only warm-up iterations left out), for ``[[checks]]`` with ``over = "max"`` or
    ``"mean"``; and ``success_curve``: ``charts/success_rate`` on each actor iteration, in
    order, for the claim metrics of :func:`success_auc` and :func:`iterations_to`."""
    actor = [h for h in history if not h.get("warmup")]
    keys = dict.fromkeys(k for h in actor for k, v in h.items() if isinstance(v, (int, float)))
    top: dict[str, float] = {}
    mean: dict[str, float] = {}
    for key in keys:
        values = [float(h[key]) for h in actor if key in h and isinstance(h[key], (int, float))]
        top[key], mean[key] = max(values), sum(values) / len(values)
    curve = [float(h[SUCCESS_KEY]) for h in actor if isinstance(h.get(SUCCESS_KEY), (int, float))]
    return {"actor_max": top, "actor_mean": mean, "success_curve": curve}


def success_auc(curve: Sequence[float]) -> float:
    """The area under the training success curve, per iteration: the mean training success
    rate over the actor iterations (NaN without any)."""
    return sum(curve) / len(curve) if curve else math.nan


def iterations_to(curve: Sequence[float], threshold: float) -> float:
    """The first actor iteration (counted from 1) whose training success rate reaches
    ``threshold``; a run that never reaches it counts as its actor iterations + 1 (NaN
    without any)."""
    if not curve:
        return math.nan
    for i, rate in enumerate(curve, start=1):
        if rate >= threshold:
            return float(i)
    return float(len(curve) + 1)

"""Does the critic track the outcome: its explained variance at a rollout's last execution
window over a run's history, beside what a value could explain there (docs/diagnostics.md,
"What the last window's ev can reach").

Reads the per-iteration dicts a training run keeps (``results.json``'s ``history``), so it
works on any finished run: the critic figures by segment (``critic/mc_ev_seg{k}``,
``critic/ece_seg{k}``, ``critic/count_seg{k}``) and the outcome ceilings
(:mod:`cxsim.diagnostics.omission`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

History = Sequence[Mapping[str, float]]

INFORMATIVE = (0.1, 0.9)
"""Training success rates between which an iteration's outcomes vary enough for the
critic's explained variance to mean something (at 0 or 1 success it is undefined)."""

TRACKING_SHARE = 0.8
"""A critic tracks when its explained variance reaches this share of each iteration's
in-batch ceiling (or ``TRACKING_EV``, whichever is lower), on average."""
TRACKING_EV = 0.5


def informative_rows(history: History) -> list[Mapping[str, float]]:
    """The actor iterations (value-only warm-up left out) whose training success lies in
    INFORMATIVE."""
    lo, hi = INFORMATIVE
    return [
        h for h in history
        if not h.get("warmup", False) and lo <= h.get("charts/success_rate", math.nan) <= hi
    ]  # fmt: skip


def defined(h: Mapping[str, float], key: str) -> bool:
    return h.get(key) is not None and not math.isnan(float(h[key]))


def mean_of(rows: Sequence[Mapping[str, float]], key: str) -> float:
    """Mean of ``key`` over the rows where it is defined; NaN when none has it."""
    values = [float(h[key]) for h in rows if defined(h, key)]
    return sum(values) / len(values) if values else math.nan


def informative_mean(history: History, key: str) -> float:
    """Mean of ``key`` over :func:`informative_rows` where it is defined."""
    return mean_of(informative_rows(history), key)


def last_window(history: History) -> int | None:
    """Segment index of the deepest execution window (even index) that at least half of the
    rollouts reach, by the mean ``critic/count_seg{k}`` over the history against window 0's;
    None without critic figures."""

    def mean_count(k: int) -> float:
        counts = [float(h[f"critic/count_seg{k}"]) for h in history if f"critic/count_seg{k}" in h]
        return sum(counts) / len(counts) if counts else 0.0

    first = mean_count(0)
    if first == 0.0:
        return None
    k = 0
    while mean_count(k + 2) >= 0.5 * first:
        k += 2
    return k


def critic_tracking(history: History) -> dict[str, float]:
    """At :func:`last_window`, means over the informative iterations where the critic's
    explained variance there is defined: that explained variance (``ev``) and the
    calibration error (``ece``) at the segment's first token, the in-batch, online and
    stated outcome ceilings (``ceiling``, ``ceiling_online``, ``ceiling_stated``,
    ``ceiling_stated_online``), the tracking target, each iteration's ``min(TRACKING_EV,
    TRACKING_SHARE x ceiling)`` (``target``), the same against the stated ceiling, what a
    reader of the last summary can know (``target_stated``), and against its online form,
    what such a reader can know from the earlier batches (``target_stated_online``), the
    window's number (``window``, 0 = the first) and how many
    iterations count (``iterations``). Empty without critic figures."""
    k = last_window(history)
    if k is None:
        return {}
    ev_key = f"critic/mc_ev_seg{k}"
    rows = [h for h in informative_rows(history) if defined(h, ev_key)]
    return {
        "window": float(k // 2),
        "ev": mean_of(rows, ev_key),
        "ece": mean_of(rows, f"critic/ece_seg{k}"),
        "ceiling": mean_of(rows, "critic/ev_ceiling"),
        "ceiling_online": mean_of(rows, "critic/ev_ceiling_online"),
        "ceiling_stated": mean_of(rows, "critic/ev_ceiling_stated"),
        "ceiling_stated_online": mean_of(rows, "critic/ev_ceiling_stated_online"),
        "target": tracking_target(rows, "critic/ev_ceiling"),
        "target_stated": tracking_target(rows, "critic/ev_ceiling_stated"),
        "target_stated_online": tracking_target(rows, "critic/ev_ceiling_stated_online"),
        "iterations": float(len(rows)),
    }


def tracking_target(rows: Sequence[Mapping[str, float]], ceiling: str) -> float:
    """Mean over ``rows`` (where ``ceiling`` is defined) of ``min(TRACKING_EV, TRACKING_SHARE x
    ceiling)``; NaN when no row has it."""
    targets = [
        min(TRACKING_EV, TRACKING_SHARE * float(h[ceiling])) for h in rows if defined(h, ceiling)
    ]
    return sum(targets) / len(targets) if targets else math.nan

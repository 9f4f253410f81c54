"""Fact survival by compaction round, per fact type (docs/diagnostics.md).

Round ``k`` (k = 1, 2, ...) is a rollout's k-th summary with recall (the k-th entry of
``summary_recall``: a rebuild that writes no summary is no round). A needed fact is
**counted** at round k when the episode had shown it before summary k was written (the
facts of that summary's recall dict: ``cxsim.envs.scripted.shown_facts``), and is **alive**
there when summary k holds its value of that moment (a revised fact must carry the new value).
Each round is scored on its own: a fact lost at round 2 and written again at round 3 (read
again from the task or the environment) is alive at round 3. The survival of round k is
``alive_k / counted_k`` pooled over the rollouts; its **cliff** is the first round whose
survival falls below one half (None when none does). By type, a fact counts under the type
it had when summary k was written (``summary_fact_types``, the environment's
``fact_types(info)``: KeyRecall's key is ``key`` until a revision changes it, ``revised``
after); a record without types gives every fact the type ``fact``.

Input per rollout (``cxsim.rollout_records.RolloutRecord`` or a dict with these keys):
``summary_recall: list[dict[str, bool]]`` and, optionally, ``summary_fact_types:
list[dict[str, str]]`` (one dict per summary with recall).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cxsim.diagnostics._common import as_records

UNTYPED = "fact"
"""The type of a fact whose environment says none (no ``fact_types`` method)."""
CLIFF_SHARE = 0.5
"""A round whose survival is below this share is a cliff."""


@dataclass
class RoundSurvival:
    """Facts counted and alive at each compaction round (index 0: round 1)."""

    counted: list[int] = field(default_factory=list)
    alive: list[int] = field(default_factory=list)

    def add(self, round_index: int, kept: bool) -> None:
        """One fact counted at round ``round_index + 1``, alive when ``kept``."""
        while len(self.counted) <= round_index:
            self.counted.append(0)
            self.alive.append(0)
        self.counted[round_index] += 1
        self.alive[round_index] += int(kept)

    def shares(self) -> list[float | None]:
        """Survival of each round, ``alive / counted`` (None for a round that counted none)."""
        return [a / n if n else None for a, n in zip(self.alive, self.counted, strict=True)]

    def cliff_round(self) -> int | None:
        """The first round (1-based) whose survival is below :data:`CLIFF_SHARE`; None if none."""
        for k, share in enumerate(self.shares(), start=1):
            if share is not None and share < CLIFF_SHARE:
                return k
        return None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``share`` and ``facts`` per round, and ``cliff_round``."""
        return {
            "share": self.shares(),
            "facts": list(self.counted),
            "cliff_round": self.cliff_round(),
        }


@dataclass
class FactSurvival:
    """Survival by round of every counted fact, and of each fact type on its own."""

    overall: RoundSurvival = field(default_factory=RoundSurvival)
    by_type: dict[str, RoundSurvival] = field(default_factory=dict)

    def add(self, round_index: int, fact_type: str, kept: bool) -> None:
        """One fact of ``fact_type`` counted at round ``round_index + 1``, alive when ``kept``."""
        self.overall.add(round_index, kept)
        self.by_type.setdefault(fact_type, RoundSurvival()).add(round_index, kept)


def fact_survival(records: Sequence[Any | Mapping]) -> FactSurvival:
    """Counted and alive facts per round, overall and per type (see the module docstring)."""
    out = FactSurvival()
    for rec in as_records(records):
        types = getattr(rec, "summary_fact_types", None) or []
        for k, recall in enumerate(rec.summary_recall):
            typed = types[k] if k < len(types) else {}
            for name, kept in recall.items():
                out.add(k, typed.get(name, UNTYPED), bool(kept))
    return out


def survival_stats(records: Sequence[Any | Mapping]) -> dict[str, float]:
    """TensorBoard tags (``survival/``): ``survival/round{k}`` and ``survival/cliff_round``
    over every counted fact, ``survival/{type}/round{k}`` and ``survival/{type}/cliff_round``
    per fact type (:func:`summary_tags`), ``survival/facts_round{k}`` the facts counted at
    round k; nothing at all without a summary that counted a fact."""
    summary = survival_summary(records)
    if not summary:
        return {}
    out = summary_tags(summary, "survival/")
    return out | {f"survival/facts_round{k}": float(n) for k, n in enumerate(summary["facts"], 1)}


def summary_tags(summary: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The tags of a :func:`survival_summary` entry under ``prefix``: ``round{k}`` and
    ``cliff_round``, and the same under ``{type}/`` for each fact type. A round that counted
    no fact, and a cliff that never came, are left out."""
    out = _tags(summary, prefix)
    for fact_type, entry in summary.get("by_type", {}).items():
        out |= _tags(entry, f"{prefix}{fact_type}/")
    return out


def _tags(entry: Mapping[str, Any], prefix: str) -> dict[str, float]:
    out = {f"{prefix}round{k}": s for k, s in enumerate(entry["share"], 1) if s is not None}
    if entry["cliff_round"] is not None:
        out[f"{prefix}cliff_round"] = float(entry["cliff_round"])
    return out


def survival_summary(records: Sequence[Any | Mapping]) -> dict[str, Any]:
    """JSON-ready survival of an evaluation: :meth:`RoundSurvival.as_dict` over every counted
    fact, with ``by_type`` holding the same per fact type; ``{}`` without a summary that
    counted a fact (the Single protocol, a task without ground truth)."""
    survival = fact_survival(records)
    if not any(survival.overall.counted):
        return {}
    by_type = {name: r.as_dict() for name, r in sorted(survival.by_type.items())}
    return survival.overall.as_dict() | {"by_type": by_type}

"""The search of ``cxsim calibrate``: candidate env settings, their scores, and the pick.

A calibration looks for env dials (and the SFT summarizer's omission rate) at which a model
recipe's SFT base lands in a target band of Pass@1, so that PPO has something to learn
and strategies can differ. This module holds the search alone, free of torch and of how a
candidate is scored:

- :func:`parse_dial` (``NAME=v1,v2,...``) and :func:`parse_band` (``0.2:0.6``), checked
  before any work by :func:`check_search` (an unknown dial fails with the close-match line
  of :mod:`cxsim.env_kwargs`);
- :func:`grid`: every combination, in the order given (the first dial varies slowest, the
  omission rates fastest);
- :func:`run_search`: ``grid`` scores every candidate; ``bisect`` (one searched axis only)
  assumes the mean Pass@1 moves one way along the listed values and bisects for the two
  neighbours around the band's middle, scoring about log2(n) + 2 of n candidates;
- :func:`pick`: among the scored candidates whose mean over seeds lies inside the band
  (ends included), the one closest to the band's middle; a tie goes to the candidate listed
  first.

The scoring is injected (:data:`Evaluate`): ``cxsim calibrate`` (cxsim/studies/calibrate.py)
makes each seed's SFT base through the study engine and evaluates it; the tests pass a fake.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from cxsim.env_kwargs import check_env_kwargs, parse_scalar

DialValue = int | float | bool
SearchMode = Literal["grid", "bisect"]
SEARCH_MODES: tuple[str, ...] = ("grid", "bisect")
OMISSION_RATE = "omission_rate"
"""The name the SFT omission rate goes by among the searched axes."""
PICK_RULE = (
    "the candidate whose mean Pass@1 over the seeds lies inside the band (ends included) and "
    "closest to its middle; a tie goes to the candidate listed first (the first dial varies "
    "slowest, the omission rates fastest)"
)
BISECT_NOTE = (
    "bisect: assumes the mean Pass@1 moves one way along the listed values of the one searched "
    "axis; scores both ends, then halves the interval around the band's middle until the two "
    "neighbours are scored; the candidates not scored were skipped on that assumption"
)


@dataclass(frozen=True)
class Dial:
    """One searched env keyword and its values, in the order given."""

    name: str
    values: tuple[DialValue, ...]


@dataclass(frozen=True)
class Band:
    """The target band of mean Pass@1, ends included."""

    low: float
    high: float

    @property
    def middle(self) -> float:
        return (self.low + self.high) / 2

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True)
class Candidate:
    """One setting tried: the dials' values (env keywords over the starting kwargs) and the
    SFT omission rate; ``index``: its place in the grid's order (ties go to the lower)."""

    index: int
    dials: tuple[tuple[str, DialValue], ...]
    omission_rate: float

    @property
    def label(self) -> str:
        """``num_facts=2 omission_rate=0.5``: how log lines and the record name it."""
        parts = [f"{k}={v}" for k, v in self.dials] + [f"{OMISSION_RATE}={self.omission_rate}"]
        return " ".join(parts)

    @property
    def folder_name(self) -> str:
        """The label as a folder-safe name: ``num_facts-2_omission_rate-0.5``."""
        parts = [*self.dials, (OMISSION_RATE, self.omission_rate)]
        return "_".join(f"{k}-{v}" for k, v in parts)


@dataclass(frozen=True)
class Scored:
    """A candidate's scores on each seed (in seed order), and what scoring it cost."""

    candidate: Candidate
    pass_at_1: tuple[float, ...]
    summary_recall: tuple[float, ...] = ()
    wall_time_s: float = 0.0
    """Seconds its units took, summed over seeds (process time, not elapsed)."""
    made: tuple[str, ...] = ()
    """The stages made now (``sft``, ``eval``); the rest were read from the runs folder."""

    @property
    def mean(self) -> float:
        return sum(self.pass_at_1) / len(self.pass_at_1)


Evaluate = Callable[[Sequence[Candidate]], list[Scored]]
"""Scores each candidate on every seed of the calibration, in the order given."""


@dataclass(frozen=True)
class SearchOutcome:
    """What a search scored (in the order it scored them) and the candidate it picked
    (None: no mean fell inside the band)."""

    mode: str
    scored: tuple[Scored, ...]
    candidates: int
    """How many candidates the grid holds (a bisection scores fewer)."""
    chosen: Scored | None

    def nearest(self, band: Band) -> Scored:
        """The scored candidate closest to the band's middle, in the band or not."""
        return min(self.scored, key=lambda s: (abs(s.mean - band.middle), s.candidate.index))


# -- input ----------------------------------------------------------------------------------


def parse_value(text: str, where: str) -> DialValue:
    """A dial value as ``--env.kwargs`` reads it: true/false, an int, else a float."""
    try:
        return parse_scalar(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number or true/false") from None


def parse_dial(text: str) -> Dial:
    """``NAME=v1,v2,...`` as a :class:`Dial`; one line naming what is wrong otherwise."""
    name, equals, values = text.partition("=")
    name = name.strip()
    if not equals or not name:
        raise ValueError(f"--dials {text!r}: write NAME=v1,v2,... (e.g. num_facts=1,2,3)")
    words = [w.strip() for w in values.split(",") if w.strip()]
    if not words:
        raise ValueError(f"--dials {text!r}: the grid of {name} is empty; list its values")
    parsed = tuple(parse_value(w, f"--dials {name}") for w in words)
    if len(set(parsed)) != len(parsed):
        raise ValueError(f"--dials {text!r}: a value of {name} is listed twice")
    return Dial(name, parsed)


def parse_band(text: str) -> Band:
    """``low:high`` within [0, 1], low < high."""
    low_text, colon, high_text = text.partition(":")
    try:
        low, high = float(low_text), float(high_text)
    except ValueError:
        low = high = math.nan
    if not colon or math.isnan(low) or math.isnan(high):
        raise ValueError(f"--target {text!r}: write low:high, e.g. 0.2:0.6")
    if not 0.0 <= low < high <= 1.0:
        raise ValueError(
            f"--target {text!r}: the band of Pass@1 lies within [0, 1] with low < high"
        )
    return Band(low, high)


def check_search(
    env_id: str, dials: Sequence[Dial], omission_rates: Sequence[float], mode: str
) -> None:
    """Every check that needs no env built: dial names against the env's constructor (the
    close-match line), no dial twice, omission rates in [0, 1], a known mode, and for
    ``bisect`` at most one axis with two or more values."""
    names = [d.name for d in dials]
    check_env_kwargs(env_id, dict.fromkeys(names, 0), "--dials")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--dials: {twice[0]} is given twice; list all its values in one")
    if not omission_rates:
        raise ValueError("--omission-rates: the grid is empty; list at least one rate")
    for rate in omission_rates:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"--omission-rates: {rate} must lie in [0, 1]")
    if len(set(omission_rates)) != len(omission_rates):
        raise ValueError("--omission-rates: a rate is listed twice")
    if mode not in SEARCH_MODES:
        raise ValueError(f"--search {mode!r}: choose one of {', '.join(SEARCH_MODES)}")
    if mode == "bisect":
        axes = [d.name for d in dials if len(d.values) > 1]
        axes += [OMISSION_RATE] if len(omission_rates) > 1 else []
        if len(axes) > 1:
            raise ValueError(
                f"--search bisect searches one axis (one dial, or the omission rates, with two "
                f"or more values, the rest fixed); this search varies: {', '.join(axes)}"
            )


def grid(dials: Sequence[Dial], omission_rates: Sequence[float]) -> list[Candidate]:
    """Every combination of the dials' values and the omission rates, in the order given."""
    axes = [[(d.name, v) for v in d.values] for d in dials]
    combos = itertools.product(*axes, omission_rates)
    return [
        Candidate(index, tuple(combo[:-1]), float(combo[-1])) for index, combo in enumerate(combos)
    ]


# -- the search -----------------------------------------------------------------------------


def pick(scored: Sequence[Scored], band: Band) -> Scored | None:
    """The rule :data:`PICK_RULE`: in the band, closest to its middle, ties to the first."""
    inside = [s for s in scored if band.holds(s.mean)]
    if not inside:
        return None
    return min(inside, key=lambda s: (abs(s.mean - band.middle), s.candidate.index))


def run_search(
    candidates: Sequence[Candidate], band: Band, evaluate: Evaluate, mode: str = "grid"
) -> SearchOutcome:
    """Scores the candidates as ``mode`` says (``grid``: all of them at once, so an executor
    can run them side by side; ``bisect``: :func:`bisected`) and picks one (:func:`pick`)."""
    if not candidates:
        raise ValueError("the search has no candidate")
    if mode == "bisect":
        scored = bisected(list(candidates), band, evaluate)
    else:
        scored = evaluate(list(candidates))
    ordered = tuple(sorted(scored, key=lambda s: s.candidate.index))
    return SearchOutcome(mode, ordered, len(candidates), pick(ordered, band))


def bisected(candidates: list[Candidate], band: Band, evaluate: Evaluate) -> list[Scored]:
    """Both ends scored, then the interval around the band's middle halved until its ends
    are neighbours (or a mean hits the middle): every candidate scored, in scoring order."""
    if len(candidates) == 1:
        return evaluate(candidates)
    first, last = evaluate([candidates[0], candidates[-1]])
    scored = {0: first, len(candidates) - 1: last}  # by place in the list

    def side(place: int) -> int:  # -1 below the middle, 0 on it, 1 above
        gap = scored[place].mean - band.middle
        return (gap > 0) - (gap < 0)

    low, high = 0, len(candidates) - 1
    if side(low) * side(high) > 0:  # both on one side: the middle lies beyond an end
        return [first, last]
    while high - low > 1 and side(low) != 0 and side(high) != 0:
        middle = (low + high) // 2
        scored[middle] = evaluate([candidates[middle]])[0]
        if side(middle) == side(low):
            low = middle
        else:
            high = middle
    return list(scored.values())

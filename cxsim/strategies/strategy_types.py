"""What a context strategy's decisions take and return (``cxsim.strategies.base``): the
values the runtime (``cxsim.runtime``), the sizing (``cxsim.compaction``) and a strategy
exchange, and the compaction rule they all read.

- what a row does next (``Trigger``) and from what (:class:`TurnState`);
- who writes a summary (``SummaryAuthor``), and a response that opens or closes a child
  window (``BranchMove``);
- what a rebuilt window holds before its steps (:class:`RebuiltWindow`), what each step
  costs (:class:`StepCost`) and which steps it copies (``KeptStep``);
- a note the policy kept (:class:`Note`), and how the sizing counts tokens
  (:class:`TokenCount`);
- the compaction rule, ``C - |h| < T_comp`` (the window is full): :func:`window_full`.

Plain types only: this module imports nothing of cxsim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

Trigger = Literal["act", "summarize", "rebuild", "end"]
"""What a row does before its next response: respond, have its window summarized, rebuild
its window without a summary, or end (the window is full and nothing is left to do)."""
SummaryAuthor = Literal["policy", "summarizer"]
"""Who writes a summary: the acting policy (a trainable summary segment) or another agent."""
SUMMARY_AUTHORS: tuple[SummaryAuthor, ...] = ("policy", "summarizer")
BranchMove = Literal["branch", "return"]
"""A response that opens a child window (``branch``) or closes the current child window
(``return``) instead of acting on the environment (:meth:`ContextStrategy.branch_move`)."""


def window_full(budget: int, threshold: int, length: int) -> bool:
    """The compaction rule (docs/method.md): a window of ``length`` tokens is full when
    ``budget - length < threshold``; a response is asked for only in a window that is not."""
    return budget - length < threshold


@dataclass(frozen=True)
class RebuiltWindow:
    """What a rebuilt window holds after the system prompt and before the last k steps."""

    task: bool
    """The task u."""
    summary: bool
    """The resume turn u_resume(S) that carries the summary."""


class TurnState(NamedTuple):
    """What the runtime knows of a row before its next response (:meth:`ContextStrategy.turn_trigger`)."""

    length: int
    """Tokens in the window."""
    compactions: int
    """Windows rebuilt so far in the episode (with or without a summary)."""
    new_steps: int
    """Steps (response + observation) taken since the window was built or rebuilt."""
    asked: bool = False
    """The policy's last response asked for a compaction (:meth:`ContextStrategy.requests_compaction`)."""
    seed: int | None = None
    """The row's task seed (rows of one task group share it); None where no row is meant
    (the sizing's replay)."""
    depth: int = 0
    """Child windows open above the current one (0: the episode's own window)."""
    branches: int = 0
    """Child windows opened so far in the episode (:meth:`ContextStrategy.branch_move`)."""


class StepCost(NamedTuple):
    """One step of a full window, in tokens (:meth:`ContextStrategy.rebuilt_steps`)."""

    full: int
    """As the window holds it: assistant header, response, end token, observation turn."""
    masked: int
    """With its observation turn replaced by the strategy's ``placeholder`` (``full`` when
    the strategy has none)."""


class Note(NamedTuple):
    """A note the policy kept (:meth:`ContextStrategy.keeps_note`), as the runtime records it."""

    text: str
    """Its words, the word that marks a note left out."""
    step: int
    """Environment steps taken in the episode before it was written."""
    segment: int = -1
    """``segment_index`` of the window segment it was written in (-1: that window is still
    open, or was not recorded)."""
    start: int = 0
    """Where its response tokens start in that window segment (after the assistant header)."""
    end: int = 0
    """Where they end (exclusive: the end token included)."""


KeptStep = tuple[int, bool]
"""A step a rebuilt window copies: its index in the full window's steps, and whether its
observation is replaced by the strategy's ``placeholder`` (masked)."""


class TokenCount(Protocol):
    """``count(piece, *texts)``: ``len(chat.<piece>(*texts))`` (measured once per text)."""

    def __call__(self, piece: str, *texts: str) -> int: ...

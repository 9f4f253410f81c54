"""What a context strategy's decisions take and return (``cxsim.strategies.base``): the
values the runtime (``cxsim.runtime``), the sizing (``cxsim.compaction``) and a strategy
exchange, and the compaction rule they all read.

- what a row does next (``Trigger``) and from what (:class:`TurnState`);
- who writes a summary (``SummaryAuthor``), and what a response is (:class:`ResponseMove`:
  an action, a request to compact, a child window opened or closed, a note kept);
- what each step of a full window costs (:class:`StepCost`) and which steps its rebuilt
  window copies (``KeptStep``);
- a note the policy kept (:class:`Note`), and how the sizing counts tokens
  (:class:`TokenCount`);
- the compaction rule, ``C - |h| < T_comp`` (the window is full): :func:`window_full`.

Plain types only: this module imports nothing of cxsim.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol

Trigger = Literal["act", "summarize", "rebuild", "end"]
"""What a row does before its next response: respond, have its window summarized, rebuild
its window without a summary, or end (the window is full and nothing is left to do)."""
SummaryAuthor = Literal["policy", "summarizer"]
"""Who writes a summary: the acting policy (a trainable summary segment) or another agent."""
SUMMARY_AUTHORS: tuple[SummaryAuthor, ...] = ("policy", "summarizer")
ResponseKind = Literal["act", "compact", "branch", "return", "note"]
"""What a response is (:meth:`ContextStrategy.response_move`): an action for the environment
(``act``), the policy's request to compact (``compact``), one that opens a child window
(``branch``) or closes the current one (``return``), or a note to keep (``note``)."""


def window_full(budget: int, threshold: int, length: int) -> bool:
    """The compaction rule (docs/method.md): a window of ``length`` tokens is full when
    ``budget - length < threshold``; a response is asked for only in a window that is not."""
    return budget - length < threshold


class TurnState(NamedTuple):
    """What the runtime knows of a row before its next response (:meth:`ContextStrategy.turn_trigger`)."""

    length: int
    """Tokens in the window."""
    compactions: int
    """Windows rebuilt so far in the episode (with or without a summary)."""
    new_steps: int
    """Steps (response + observation) taken since the window was built or rebuilt."""
    asked: bool = False
    """The policy's last response asked for a compaction (a ``compact`` :class:`ResponseMove`)."""
    seed: int | None = None
    """The row's task seed (rows of one task group share it); None where no row is meant
    (the sizing's replay)."""
    depth: int = 0
    """Child windows open above the current one (0: the episode's own window)."""
    branches: int = 0
    """Child windows opened so far in the episode (each a ``branch`` move)."""
    env_steps: int = 0
    """Environment steps taken in the episode."""
    notes: int = 0
    """Notes kept so far in the episode (each a ``note`` move)."""


class ResponseMove(NamedTuple):
    """What a response is, as the strategy reads it (:meth:`ContextStrategy.response_move`);
    the runtime executes it."""

    kind: ResponseKind = "act"
    """``act``: the environment steps on it; ``compact``: no step, :class:`TurnState`'s
    ``asked`` is set (honoured while a compaction is left, else an action); ``branch`` /
    ``return``: a child window opens / the current one closes; ``note``: kept, no step."""
    note: str = ""
    """The note's words (``note`` only)."""


class StepCost(NamedTuple):
    """One step of a full window, in tokens (``RebuiltWindow.steps``)."""

    full: int
    """As the window holds it: assistant header, response, end token, observation turn."""
    masked: int
    """With its observation turn replaced by the rebuilt window's ``placeholder`` (``full`` when
    the strategy has none)."""


class Note(NamedTuple):
    """A note the policy kept (a ``note`` :class:`ResponseMove`), as the runtime records it."""

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
observation is replaced by the rebuilt window's ``placeholder`` (masked)."""


class TokenCount(Protocol):
    """``count(piece, *texts)``: ``len(chat.<piece>(*texts))`` (measured once per text)."""

    def __call__(self, piece: str, *texts: str) -> int: ...

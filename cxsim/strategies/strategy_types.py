"""What a context strategy's decisions take and return (``cxsim.strategies.base``): the
values the runtime (``cxsim.runtime``), the sizing (``cxsim.compaction``) and a strategy
exchange, and the compaction rule they all read.

- what a row does next (``Trigger``) and from what (:class:`TurnState`);
- who writes a summary (``SummaryAuthor``), and what a response is (:class:`ResponseMove`:
  an action, a request to compact, a child window opened or closed, a note kept);
- what each step of a full window costs (:class:`StepCost`) and which steps its rebuilt
  window copies (``KeptStep``);
- how the sizing counts tokens (:class:`TokenCount`);
- the compaction rule, ``C - |h| < T_comp`` (the window is full): :func:`window_full`.

Plain types only: this module imports nothing of cxsim (but names the strategy's own row
state, ``cxsim.strategies.parts.RowState``, for the type checker).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

if TYPE_CHECKING:
    from cxsim.strategies.parts import RowState

Trigger = Literal["act", "summarize", "rebuild", "end"]
"""What a row does before its next response: respond, have its window summarized, rebuild
its window without a summary, or end (the window is full and nothing is left to do)."""
SummaryAuthor = Literal["policy", "summarizer"]
"""Who writes a summary: the acting policy (a trainable summary segment) or another agent."""
SUMMARY_AUTHORS: tuple[SummaryAuthor, ...] = ("policy", "summarizer")
ResponseKind = Literal["act", "compact", "branch", "return", "note"]
"""What a response is (``RowState.response_move``): an action for the environment
(``act``), the policy's request to compact (``compact``), one that opens a child window
(``branch``) or closes the current one (``return``), or a note to keep (``note``): the
runtime's whole set of moves, with ``end`` (``Trigger``)."""


def window_full(budget: int, threshold: int, length: int) -> bool:
    """The compaction rule (docs/method.md): a window of ``length`` tokens is full when
    ``budget - length < threshold``; a response is asked for only in a window that is not."""
    return budget - length < threshold


class TurnState(NamedTuple):
    """What the runtime knows of a row before its next response (:meth:`ContextStrategy.turn_trigger`),
    with what the strategy keeps of it (``row``)."""

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
    row: RowState | None = None
    """What the strategy keeps of the row (its ``row_state``: folding's child windows,
    memory-notes' notes); None where no row is meant (the sizing's replay)."""


class ResponseMove(NamedTuple):
    """What a response is, as the strategy reads it (``RowState.response_move``); the runtime
    executes it."""

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


KeptStep = tuple[int, bool]
"""A step a rebuilt window copies: its index in the full window's steps, and whether its
observation is replaced by the rebuilt window's ``placeholder`` (masked)."""


class TokenCount(Protocol):
    """``count(piece, *texts)``: ``len(chat.<piece>(*texts))`` (measured once per text)."""

    def __call__(self, piece: str, *texts: str) -> int: ...

"""What a context strategy's grouped members return (``cxsim.strategies.base``), one small
record each, bound to the config they were asked under (frozen, but for the row state):

- :class:`SummaryPlan` (``ContextStrategy.summary``): the summary prompt q_sum, the
  summary's token cap and when the room for one is kept free in a window;
- :class:`RebuiltWindow` (``ContextStrategy.rebuild``): what a full window is rebuilt as:
  its prefix (system prompt, task and / or resume turn with the summary, what it carries of
  the notes) and the steps it copies, each verbatim or with its observation replaced by the
  ``placeholder``;
- :class:`SegmentRecorder` (``ContextStrategy.segments``): the segment a closed window
  yields, the one a summary yields, and a rollout's segments once its episode ended;
- :class:`RowState` (``ContextStrategy.row_state``), the one that is not frozen: what the
  strategy keeps of one row (one per row, for its episode): what a response is, given what
  it kept, and what it keeps of the moves the runtime executed.

A strategy that differs in one of them returns its own subclass, defined in its module (as
it returns its own ``StrategySizing``): folding's ``FoldingRow`` keeps the parent windows
set aside, memory-notes' ``NotesRow`` the notes.

Like ``base.py``, this module imports neither torch nor the agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cxsim.strategies.strategy_types import KeptStep, ResponseMove, StepCost, TurnState

if TYPE_CHECKING:
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig
    from cxsim.segments import Segment


@dataclass(frozen=True)
class SummaryPlan:
    """A strategy's summaries under ``config``: what asks for one, how long it may be, and
    when the room for it (the summary reserve) stays free. The defaults: no summary."""

    config: CompactionConfig
    instruction: str | None = None
    """The summary instruction q_sum carries (``chat.summary_request``); None: no q_sum."""
    max_tokens: int = 0
    """The most tokens a summary may take (0: no summary)."""

    def prompt(self, chat: ChatFormat) -> list[int]:
        """q_sum: the tokens appended to a full window to ask for a summary ([]: none)."""
        return [] if self.instruction is None else chat.summary_request(self.instruction)

    def reserve(self, chat: ChatFormat) -> int:
        """The summary reserve: ``|q_sum| + max_tokens`` (0 without a summary)."""
        return len(self.prompt(chat)) + self.max_tokens

    def kept_free(self, turn: TurnState) -> bool:
        """Whether the summary reserve stays free in the window of ``turn``: while a
        compaction is left (``CompactionConfig.compactions_left``)."""
        return self.config.compactions_left(turn.compactions)


@dataclass(frozen=True)
class RebuiltWindow:
    """What a full window is rebuilt as under ``config``: the system prompt, then the task
    (``task``) and / or the resume turn with the summary (``summary``), then the steps it
    copies (:meth:`steps`). The defaults: the task and the last ``keep_last`` steps that fit."""

    config: CompactionConfig
    task: bool = True
    """It holds the task u."""
    summary: bool = False
    """It holds the resume turn u_resume(S) that carries the summary."""
    placeholder: str | None = None
    """The text that stands in for a masked observation (its words must be in a word-level
    tokenizer: ``cxsim.envs.vocab``); None: observations are never masked."""

    def __post_init__(self) -> None:
        if self.placeholder is not None and not isinstance(self.placeholder, str):
            raise ValueError(f"placeholder={self.placeholder!r}: it must be None or a str")

    def prefix(
        self,
        chat: ChatFormat,
        system: list[int],
        task: list[int],
        summary: str | None,
        row: RowState | None = None,
    ) -> list[int]:
        """Its tokens before the steps: ``(s) [+ u] [+ u_resume(S)]``, then what it carries of
        what the strategy kept of the row (``row``, its :class:`RowState`: memory-notes' notes;
        untrainable; by default nothing)."""
        tokens = list(system)
        if self.task:
            tokens += task
        if self.summary and summary is not None:
            tokens += chat.resume(self.config.resume_instruction, summary)
        return tokens

    def steps(self, prefix: int, steps: Sequence[StepCost]) -> list[KeptStep] | None:
        """The steps of the full window (``steps``, oldest first) it copies after ``prefix``
        tokens, oldest first, each verbatim or masked; None when no choice leaves it not full
        (the episode ends, ``window_full``). By default the last ``keep_last`` steps
        verbatim, fewer until the window is not full."""
        config = self.config
        sizes = [step.full for step in steps]
        for k in range(min(config.keep_last, len(steps)), -1, -1):
            if not config.full(prefix + sum(sizes[len(sizes) - k :])):
                return [(i, False) for i in range(len(steps) - k, len(steps))]
        return None


@dataclass(frozen=True)
class SegmentRecorder:
    """What a strategy records under ``config``: the segment a closed window yields
    (:meth:`window`), the one a summary yields (:meth:`summary`), and a rollout's segments
    once its episode ended (:meth:`finished`)."""

    config: CompactionConfig

    def window(
        self,
        tokens: list[int],
        trainable: list[bool],
        logprobs: list[float],
        step_rewards: list[float],
        rollout_id: int,
        index: int,
    ) -> Segment | None:
        """The segment a closed window yields: an execution segment whose trainable tokens
        are the ones sampled in it; None when nothing was generated in it."""
        if not any(trainable):
            return None
        from cxsim.segments import Segment

        return Segment(
            role="execution", token_ids=list(tokens), trainable=list(trainable),
            logprobs=list(logprobs), rollout_id=rollout_id, segment_index=index,
            step_rewards=list(step_rewards),
        )  # fmt: skip

    def summary(
        self,
        prompt: list[int],
        summary: list[int],
        logprobs: list[float],
        rollout_id: int,
        index: int,
    ) -> Segment | None:
        """The segment a summary yields (``prompt`` = window + q_sum); None: not recorded
        (the default)."""
        return None

    def finished(
        self, segments: list[Segment], row: RowState, final_action: str | None
    ) -> list[Segment]:
        """A rollout's recorded segments once its episode ended, before the runtime sets their
        rewards, group and end (``row``: what the strategy kept of the row, its
        :class:`RowState`; ``final_action``: the response whose environment step terminated
        the episode, None when it did not terminate); a recorder may rearrange them (indices
        from 0 in time order, each parent earlier). By default unchanged."""
        return segments


class RowState:
    """What a strategy keeps of one row (``ContextStrategy.row_state``, one per row, made when
    its episode starts): the runtime holds it, hands it back to the strategy's decisions
    (``TurnState.row``, ``RebuiltWindow.prefix``, ``SegmentRecorder.finished``) and tells it
    of each move it executed (:meth:`moved`, :meth:`recorded`, :meth:`branch`). The defaults
    keep nothing: every response is an action, no window is ever set aside."""

    depth: int = 0
    """Child windows open above the row's window (each request carries it,
    ``TurnRequest.depth``); a row state that keeps parent windows (:meth:`branch`) counts them."""
    branches: int = 0
    """Child windows opened so far in the episode (``RolloutRecord.branches``)."""

    def __init__(self, config: CompactionConfig) -> None:
        self.config = config

    def response_move(self, chat: ChatFormat, text: str, turn: TurnState) -> ResponseMove:
        """What a response (its text), given in ``turn`` (its ``length``: the window with the
        response), is: by default an action for the environment (``act``). The runtime
        executes the move; every kind but ``act`` steps no environment and counts as a turn.

        - ``compact``: the policy's request to compact; its tokens stay in the window,
          trainable, and ``turn_trigger`` sees ``asked``. Honoured while a compaction is left
          (``CompactionConfig.compactions_left``), else the response is an action.
        - ``branch``: the runtime records the window as a segment, sets it aside (gives it to
          :meth:`branch`) and starts a child window, ``(s) + (u) +`` the branching response
          (assistant header, response, end token; untrainable in the child), whose segments
          name that one as their parent.
        - ``return``: the strategy's ``turn_trigger`` asks for the child's summary next, which
          the policy writes as it writes a compaction's (``h + q_sum``, a summary segment);
          the child is recorded and closed, and its parent (:meth:`resume`) continues with its
          branching response followed by an observation turn with the child's summary, as one
          step.
        - ``note``: a note to keep (``ResponseMove.note``, its words); its tokens stay in the
          window, trainable, and :meth:`moved` is told where."""
        return ResponseMove()

    def moved(self, move: ResponseMove, start: int, end: int) -> None:
        """The runtime executed ``move`` (an ``act`` once the environment stepped on it; a
        ``compact`` only when honoured); its response's tokens are ``start:end`` of the
        window (after the assistant header, the end token included). By default nothing."""

    def recorded(self, segment: int) -> None:
        """The row's window was closed and recorded as the segment with ``segment_index``
        ``segment`` (-1: not recorded). By default nothing."""

    def branch(self, parent: Any) -> None:
        """Keep ``parent`` aside, what the runtime needs to resume the window that opened a
        child (:meth:`resume` gives it back, innermost first). By default refused: a strategy
        that opens child windows keeps them in its own row state."""
        name = self.config.protocol
        raise ValueError(
            f"context strategy {name!r} opened a child window but its row_state keeps no parent "
            "window: return a RowState whose branch and resume keep and give it back"
        )

    def resume(self) -> Any:
        """The parent window (kept by :meth:`branch`) that the summary just written returns
        to, now the child is closed; None when the summary is a compaction's (the default)."""
        return None

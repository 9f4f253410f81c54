"""What a context strategy's grouped members return (``cxsim.strategies.base``), one small
frozen record each, bound to the config they were asked under:

- :class:`SummaryPlan` (``ContextStrategy.summary``): the summary prompt q_sum, the
  summary's token cap and when the room for one is kept free in a window;
- :class:`RebuiltWindow` (``ContextStrategy.rebuild``): what a full window is rebuilt as:
  its prefix (system prompt, task and / or resume turn with the summary, what it carries of
  the notes) and the steps it copies, each verbatim or with its observation replaced by the
  ``placeholder``;
- :class:`SegmentRecorder` (``ContextStrategy.segments``): the segment a closed window
  yields, the one a summary yields, and a rollout's segments once its episode ended.

A strategy that differs in one of them returns its own subclass, defined in its module (as
it returns its own ``StrategySizing``).

Like ``base.py``, this module imports neither torch nor the agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cxsim.strategies.strategy_types import KeptStep, Note, StepCost, TurnState

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
        notes: Sequence[Note] = (),
    ) -> list[int]:
        """Its tokens before the steps: ``(s) [+ u] [+ u_resume(S)]``, then what it carries of
        the episode's ``notes`` (untrainable; by default nothing)."""
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
        self, segments: list[Segment], notes: Sequence[Note], final_action: str | None
    ) -> list[Segment]:
        """A rollout's recorded segments once its episode ended, before the runtime sets their
        rewards, group and end (``final_action``: the response whose environment step
        terminated the episode, None when it did not terminate); a recorder may rearrange
        them (indices from 0 in time order, each parent earlier). By default unchanged."""
        return segments

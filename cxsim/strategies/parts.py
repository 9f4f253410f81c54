"""What a context strategy's grouped members return (``cxsim.strategies.base``), one small
frozen record each, bound to the config they were asked under:

- :class:`SummaryPlan` (``ContextStrategy.summary``): the summary prompt q_sum, the
  summary's token cap and when the room for one is kept free in a window;

A strategy that differs in one of them returns its own subclass, defined in its module (as
it returns its own ``StrategySizing``).

Like ``base.py``, this module imports neither torch nor the agents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cxsim.strategies.strategy_types import TurnState

if TYPE_CHECKING:
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig


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

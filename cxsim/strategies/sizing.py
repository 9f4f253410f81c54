"""What the sizing (``cxsim.compaction.fit_sizes``) asks a context strategy, behind one entry
point: :meth:`ContextStrategy.sizing <cxsim.strategies.base.ContextStrategy.sizing>` gives a
:class:`StrategySizing` for a config and a token count, and the sizing reads only that.

A strategy whose windows are sized differently (its own responses, room it keeps free in
every window, its own chains of windows, its scripted oracle's own compaction decisions)
returns a subclass from its ``sizing``, defined in its own module.

This module imports neither torch nor the agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cxsim.strategies.strategy_types import StepCost, TokenCount, TurnState

if TYPE_CHECKING:
    from cxsim.compaction import CompactionConfig
    from cxsim.envs.defaults import EpisodeText
    from cxsim.strategies.base import ContextStrategy


@dataclass(frozen=True)
class StrategySizing:
    """A strategy's window sizes under ``config``, in the tokens ``count`` measures."""

    strategy: ContextStrategy
    config: CompactionConfig
    count: TokenCount

    def response_floor(self) -> int:
        """The fewest tokens the response cap must hold for the strategy's own responses
        (``fit_sizes`` derives ``max_response_tokens`` at least this); 0 by default."""
        return 0

    def rebuilt_floor(self, system: int) -> int:
        """The smallest rebuilt window any episode gets: the system prompt (``system``
        tokens) and, when it carries a summary, the resume turn with a summary of
        ``max_summary_tokens`` (a task kept with ``keep_task`` varies per episode and is
        left out)."""
        config = self.config
        rebuilt = self.strategy.rebuild(config)
        if rebuilt is None or not rebuilt.summary:
            return system
        resume = self.count("resume", config.resume_instruction, "")
        return system + resume + self.strategy.summary(config).max_tokens

    def rebuilt_size(self, system: int, task: int, summaries: Sequence[str]) -> int:
        """One episode's rebuilt window before its steps, with its longest summary."""
        config = self.config
        rebuilt = self.strategy.rebuild(config)
        if rebuilt is None:  # never rebuilt: the size is never read
            return system + task
        size = system + (task if rebuilt.task else 0)
        if rebuilt.summary:
            size += max(self.count("resume", config.resume_instruction, s) for s in summaries)
        return size

    def windows(
        self, first: int, steps: list[StepCost], episode: EpisodeText
    ) -> list[tuple[int, list[StepCost]]]:
        """The oracle episode's chains of windows as the sizing replays them, in the order
        the runtime plays them: each (its first window's fixed part, the steps taken in it
        and its rebuilt windows); the compactions add up across them. By default one: the
        episode's first window (``first`` = system prompt + task) and every step."""
        return [(first, steps)]

    def oracle_compacts(self, reserve: int, turn: TurnState) -> bool:
        """Whether the scripted oracle asks to compact before its response in ``turn`` (the
        sizing replays it; ``reserve``: the summary reserve). By default never: it leaves
        compaction to the strategy's trigger."""
        return False

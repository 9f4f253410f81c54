"""``sliding-window``: compaction without a summary (a baseline).

A full window is rebuilt as ``(s) + (u) + last k steps``: the task is always kept, since no
summary carries it, and nothing is reserved for a summary. Rebuilds count as compactions
(bounded by ``max_compactions``). Every window is an execution segment (trainable: its
responses); there is no summary segment. The scripted oracle only acts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cxsim.strategies.base import ContextStrategy
from cxsim.strategies.parts import RebuiltWindow

if TYPE_CHECKING:
    from cxsim.compaction import CompactionConfig


class SlidingWindow(ContextStrategy):
    """A full window keeps the system prompt, the task and the last k steps."""

    name = "sliding-window"
    help = "a full window keeps the system prompt, the task and the last k steps (no summary)"

    def rebuild(self, config: CompactionConfig) -> RebuiltWindow:
        return RebuiltWindow(config, task=True, summary=False)


SLIDING_WINDOW = SlidingWindow()

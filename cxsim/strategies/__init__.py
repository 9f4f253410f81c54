"""Context strategies: one module per protocol, one registry (docs/architecture.md).

``STRATEGIES[name]`` is the :class:`~cxsim.strategies.base.ContextStrategy` that
``--compaction.protocol name`` selects; ``CompactionConfig.strategy`` resolves it, and the
runtime, the configuration checks and the sizing ask it every protocol decision. The
registry is a :class:`cxsim.plugins.Registry`: a strategy can also come from outside cxsim,
a ``ContextStrategy`` instance in the user's module (``--compaction.protocol
my_module:strategy``) or an installed package's entry point in group ``cxsim.strategies``
(docs/training.md, "Your own context strategy"). Adding one to cxsim is one module here
(a subclass and its instance), one entry below, and its test.
"""

from __future__ import annotations

import inspect
from typing import Any

from cxsim.plugins import PluginError, Registry
from cxsim.strategies.base import ContextStrategy
from cxsim.strategies.compacted import COMPACTED
from cxsim.strategies.external_summarizer import EXTERNAL_SUMMARIZER
from cxsim.strategies.folding import FOLDING
from cxsim.strategies.memory_notes import MEMORY_NOTES, Note
from cxsim.strategies.memory_state import MEMORY_STATE
from cxsim.strategies.observation_masking import OBSERVATION_MASKING
from cxsim.strategies.parts import RebuiltWindow, RowState, SegmentRecorder, SummaryPlan
from cxsim.strategies.rollout_agents import RolloutAgents, ScriptedOptions
from cxsim.strategies.self_compaction import SELF_COMPACTION, SELF_COMPACTION_DRAWN
from cxsim.strategies.single import SINGLE
from cxsim.strategies.sizing import StrategySizing
from cxsim.strategies.sliding_window import SLIDING_WINDOW
from cxsim.strategies.strategy_types import (
    SUMMARY_AUTHORS,
    KeptStep,
    ResponseMove,
    StepCost,
    Trigger,
    TurnState,
    window_full,
)

__all__ = [
    "STRATEGIES",
    "ContextStrategy",
    "KeptStep",
    "Note",
    "RebuiltWindow",
    "ResponseMove",
    "RolloutAgents",
    "RowState",
    "ScriptedOptions",
    "SegmentRecorder",
    "StepCost",
    "StrategyRegistry",
    "StrategySizing",
    "SummaryPlan",
    "Trigger",
    "TurnState",
    "window_full",
]


RENAMED: dict[str, str] = {
    "compactions_left": "turn_trigger (the bound itself: CompactionConfig.compactions_left)",
    "reserves_summary": "summary (its SummaryPlan.kept_free)",
    "summary_prompt": "summary (its SummaryPlan.instruction / prompt)",
    "summary_tokens": "summary (its SummaryPlan.max_tokens)",
    "validate": "check (with chat and system_prompt)",
    "compacts": "rebuild (None: a full window is never rebuilt)",
    "layout": "rebuild (its RebuiltWindow's task and summary)",
    "placeholder": "rebuild (its RebuiltWindow's placeholder)",
    "rebuilt_prefix": "rebuild (its RebuiltWindow.prefix)",
    "rebuilt_steps": "rebuild (its RebuiltWindow.steps)",
    "window_segment": "segments (its SegmentRecorder.window)",
    "summary_segment": "segments (its SegmentRecorder.summary)",
    "finished_segments": "segments (its SegmentRecorder.finished)",
    "scripted_agents_for": "scripted_agents (with config=)",
    "response_move": "row_state (its RowState.response_move)",
}
"""Members ``ContextStrategy`` no longer has (issue #38), each with the one that took it over:
a plug-in that still defines one fails in one line naming it."""


class StrategyRegistry(Registry[ContextStrategy]):
    """A :class:`~cxsim.plugins.Registry` whose entries are ``ContextStrategy`` instances
    (a strategy is a class with methods, not a dataclass of functions)."""

    def _unknown(self, field: str, name: str) -> str:
        flag = field if field.startswith("--") else "--compaction.protocol"  # the flag checked
        return (
            f"protocol {name!r} is unknown: set {flag} to one of "
            f"{', '.join(self.choices())}, or module:name for your own {self.kind} "
            "(docs/training.md)"
        )

    def _declared(self, where: str, found: Any, target: str) -> ContextStrategy:
        """``found`` if it is a well-formed strategy instance; else a one-line PluginError."""
        module, _, attribute = target.rpartition(":")
        if isinstance(found, type) and issubclass(found, ContextStrategy):
            raise PluginError(
                f"{where} is the class {found.__name__}, not an instance: declare it in "
                f"{module} as `{attribute} = {found.__name__}()`"
            )
        if not isinstance(found, ContextStrategy):
            raise PluginError(
                f"{where} is a {type(found).__name__}, not a "
                f"cxsim.strategies.ContextStrategy; declare it in {module} as "
                f"`{attribute} = {self.declaration}`"
            )
        for old, new in RENAMED.items():
            if hasattr(found, old):
                raise PluginError(
                    f"{where} defines {old}, which ContextStrategy no longer has: define {new} "
                    'instead (docs/training.md, "Your own context strategy")'
                )
        if "config" not in inspect.signature(found.scripted_agents).parameters:
            raise PluginError(
                f"{where}'s scripted_agents takes no config: define it as scripted_agents(env_id, "
                'chat, options, config=None) (docs/training.md, "Your own context strategy")'
            )
        for name, kind, ok in (
            ("name", "a str", isinstance(found.name, str)),
            ("help", "a str", isinstance(found.help, str)),
            ("summary_by", f"None or one of {SUMMARY_AUTHORS}", found.summary_by in
             (None, *SUMMARY_AUTHORS)),
        ):  # fmt: skip
            if not ok:
                raise PluginError(
                    f"{where} declares {name}={getattr(found, name)!r}: it must be {kind}"
                )
        return found


BUILT_IN: tuple[ContextStrategy, ...] = (
    COMPACTED,
    SINGLE,
    SLIDING_WINDOW,
    EXTERNAL_SUMMARIZER,
    OBSERVATION_MASKING,
    MEMORY_STATE,
    SELF_COMPACTION,
    SELF_COMPACTION_DRAWN,
    FOLDING,
    MEMORY_NOTES,
)
"""cxsim's own strategies, in the registry's order (the first is the default)."""

STRATEGIES = StrategyRegistry(
    {s.name: s for s in BUILT_IN},
    entry_type=ContextStrategy,
    kind="context strategy",
    group="cxsim.strategies",
    declaration="MyStrategy() with class MyStrategy(ContextStrategy)",
)
"""Every context strategy by its ``--compaction.protocol`` name; the first is the default."""

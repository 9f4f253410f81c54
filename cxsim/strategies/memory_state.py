"""``memory-state``: the policy rewrites a bounded state after every step (MEM1-like).

After each step (response + observation), before its next response, the policy is given
its window and the summary prompt q_sum and writes the state S (at most
``max_summary_tokens`` tokens); the window is then rebuilt as ``(s) + (u) + u_resume(S) +``
the latest step, so the policy always acts from the system prompt, the task, its state and
the latest observation (with the response that caused it). The first response, with no
step yet, is made from ``(s) + (u)``. A rebuilt window that is full with the latest step
ends the episode (``window_full``): the latest step is never dropped, and the sizing
(``fit_sizes``) derives a budget under which the oracle's episodes never get there.
``keep_last`` has no effect (one step), and neither has ``max_compactions``: a state is
written after every step, as many as ``max_turns`` allows, with the summary reserve always
free. Each rewrite counts as a compaction in the records.

**Where the state tokens are trained: a summary segment per state.** Each state is written
in one context (the window + q_sum) and the response that follows is sampled in another
(the rebuilt window around the state), so the two cannot share one token sequence whose
every trainable token is conditioned on exactly what the policy saw; the state is
therefore recorded as ``compacted`` records a summary: the window ``h + q_sum + S``,
trainable on S only, after the window's own execution segment (trainable: its response).
That keeps the segment model's roles meaning what they mean everywhere: ``is_summary``
rows hold the state, so ``--ppo.train-summaries False`` (the state untrained), SFT's
held-out summary loss, summary recall and the summary loss share read the states with no
change, and cross-segment credit counts each state as the boundary it is (two segments per
step; the length-adaptive lambda sees each segment's own trainable tokens).

The scripted oracle acts and writes its states as the scripted summarizer writes a
summary: the needed facts its context still holds, each dropped with the omission rate,
then the goal (``cxsim.envs.scripted.ScriptedSummarizer``); the agents are compacted's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cxsim.strategies.compacted import Compacted
from cxsim.strategies.parts import RebuiltWindow, SummaryPlan
from cxsim.strategies.strategy_types import KeptStep, StepCost, Trigger, TurnState

if TYPE_CHECKING:
    from cxsim.compaction import CompactionConfig

LATEST_STEPS = 1
"""Steps a rebuilt window copies after the state: the latest one."""


class MemoryState(Compacted):
    """After every step the policy rewrites its state; the window is rebuilt around it."""

    name = "memory-state"
    help = (
        "after every step the policy rewrites a bounded state; it acts from the system "
        "prompt, the task, the state and the latest step (MEM1-like)"
    )

    def summary(self, config: CompactionConfig) -> SummaryPlan:
        plan = super().summary(config)
        return StateSummary(plan.config, plan.instruction, plan.max_tokens)

    def turn_trigger(self, config: CompactionConfig, turn: TurnState) -> Trigger:
        """A new step: rewrite the state first; else act, unless the window is full."""
        if turn.new_steps > 0:
            return "summarize"
        return "end" if config.full(turn.length) else "act"

    def rebuild(self, config: CompactionConfig) -> StateWindow:
        return StateWindow(config, task=True, summary=True)


class StateWindow(RebuiltWindow):
    """Memory-state's rebuilt window: ``(s) + (u) + u_resume(S) +`` the latest step."""

    def steps(self, prefix: int, steps: Sequence[StepCost]) -> list[KeptStep] | None:
        """The latest step, verbatim; None when that leaves the window full (the episode
        ends)."""
        k = min(LATEST_STEPS, len(steps))
        if self.config.full(prefix + sum(step.full for step in steps[len(steps) - k :])):
            return None
        return [(i, False) for i in range(len(steps) - k, len(steps))]


class StateSummary(SummaryPlan):
    """Memory-state's states: the summary reserve always stays free (a state is written after
    every step, as many as ``max_turns`` allows: ``max_compactions`` does not bound them)."""

    def kept_free(self, turn: TurnState) -> bool:
        return True


MEMORY_STATE = MemoryState()

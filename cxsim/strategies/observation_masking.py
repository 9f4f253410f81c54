"""``observation-masking``: a full window keeps every action and masks old observations.

A full window (``C - |h_t| < T_comp``) is rebuilt as ``(s) + (u) +`` every step of the
window, in order: each step's assistant header and response verbatim, and its observation
turn verbatim for the last k steps (``keep_last``) and replaced by :data:`PLACEHOLDER`
(``( truncated )``, words every cxsim tokenizer holds: ``cxsim.envs.vocab``) for the older
ones. Masking happens where the other strategies compact, when the window is full, so a
window grows by whole steps between rebuilds and each window is one execution segment
(the policy's KV cache carries over inside it). k is not lowered (the latest observations
are what the policy acts on): a rebuilt window that is still full (the actions and the
last k observations fill it) ends the episode as any full window does (``window_full``),
and the sizing (``fit_sizes``) derives a budget under which the oracle's episodes never
get there.

No summary is written and nothing is reserved for one; rebuilds count as compactions
(bounded by ``max_compactions``). Segments: every window is an execution segment whose
trainable tokens are its responses. The scripted oracle only acts (from the context it
still holds: a fact whose observation was masked is guessed), so its demonstrations are the
masked windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cxsim.envs.vocab import OBSERVATION_PLACEHOLDER
from cxsim.strategies.base import ContextStrategy
from cxsim.strategies.parts import RebuiltWindow
from cxsim.strategies.strategy_types import KeptStep, StepCost

if TYPE_CHECKING:
    from cxsim.compaction import CompactionConfig

PLACEHOLDER = OBSERVATION_PLACEHOLDER
"""What a masked observation turn says."""


class ObservationMasking(ContextStrategy):
    """A full window keeps the system prompt, the task, every action and the last k
    observations; older observations become a placeholder."""

    name = "observation-masking"
    help = (
        "a full window keeps the system prompt, the task, every action and the last k "
        "observations; older observations become a placeholder (no summary)"
    )

    def rebuild(self, config: CompactionConfig) -> MaskedWindow:
        return MaskedWindow(config, task=True, summary=False, placeholder=PLACEHOLDER)


class MaskedWindow(RebuiltWindow):
    """Observation-masking's rebuilt window: the system prompt, the task and every step."""

    def steps(self, prefix: int, steps: Sequence[StepCost]) -> list[KeptStep] | None:
        """Every step, the observations of all but the last k (``keep_last``) masked; None
        when that leaves the window full."""
        config = self.config
        verbatim = len(steps) - min(config.keep_last, len(steps))  # the first verbatim step
        kept = [(i, i < verbatim) for i in range(len(steps))]
        size = (
            prefix + sum(s.masked for s in steps[:verbatim]) + sum(s.full for s in steps[verbatim:])
        )
        return None if config.full(size) else kept


OBSERVATION_MASKING = ObservationMasking()

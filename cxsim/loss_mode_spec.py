"""The entry type of the loss-mode registry, :class:`LossModeSpec`, and the per-rollout token
counts a mode that divides by its rollouts' tokens is given.

It sits below :mod:`cxsim.loss_modes` (the registry, which re-exports it),
:mod:`cxsim.loss_weighting` (whose ``summary_loss_mode`` makes one) and :mod:`cxsim.losses`
(which re-exports ``rollout_token_counts``), so none of them imports another back. torch is
imported when a count runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

Reduce = Callable[..., "torch.Tensor"]
"""``(loss, mask, rollout_id, denominator, rollout_tokens) -> scalar``."""


@dataclass(frozen=True)
class LossModeSpec:
    """One policy-loss reduction: its sum, its denominator and its gradient weights."""

    reduce: Reduce
    """Reduces (S, T) over the mask; divides by ``denominator`` when given (else the local count)."""
    count: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """``(mask, rollout_id) -> 0-dim`` local count that ``reduce`` divides by."""
    weights: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """``(mask, rollout_id) -> (S, T)`` float64: ``d reduce / d l``, zero off the mask."""
    help: str
    """One line for ``--ppo.loss-mode``'s help."""
    needs_rollout_tokens: bool = False
    """Also divides by each rollout's token count: micro-batches that split a rollout must
    pass ``rollout_tokens`` counted over the whole minibatch."""
    rollout_stat: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    """``(mask, rollout_id) -> (S,)``: the per-rollout figure it divides by, counted over the
    whole minibatch and passed as ``rollout_tokens`` (None: each rollout's tokens when
    ``needs_rollout_tokens``)."""
    reads_summary: bool = False
    """Its ``reduce``, ``count`` and ``weights`` take ``is_summary=`` (S,) bool."""

    @property
    def divides_by_rollout(self) -> bool:
        """It needs a per-rollout figure counted over the whole minibatch."""
        return self.needs_rollout_tokens or self.rollout_stat is not None

    def rollout_figures(self, mask: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
        """(S,) the per-rollout figure ``reduce`` takes as ``rollout_tokens``."""
        if self.rollout_stat is not None:
            return self.rollout_stat(mask, rollout_id)
        return rollout_token_counts(mask, rollout_id)


def rollout_token_counts(mask: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S,): for each row, the masked tokens of its whole rollout in ``mask`` (S, T)."""
    import torch

    from cxsim.scans import per_group_sum

    return per_group_sum(mask.sum(dim=1).to(torch.float32), rollout_id)

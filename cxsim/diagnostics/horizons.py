"""Gradient share by horizon: how much of the policy gradient rollouts of each length get.

A batch can mix short and long rollouts (KeyRecall's horizon dial, docs/environments.md):
one that fits in one window and one that takes six. Each loss mode
(``cxsim.loss_modes.LOSS_MODES``) gives every token a gradient weight ``w_{s,t}``
(:func:`cxsim.diagnostics.weights.token_weights`, the same weights as the ``weights/``
tags). Grouping rollouts by their number of windows K (execution segments, the rows that
are not summaries: a rollout of K windows made K - 1 compactions), this reports per group

- ``horizon/rollout_share_k{K}``: the share of the batch's rollouts that have K windows;
- ``horizon/{mode}/grad_share_k{K}``: the share of the total gradient weight
  ``sum w_{s,t}`` that their tokens carry under ``mode``.

``HorizonShares.summary_share`` (not a tag: ``weights/{mode}/summary_share`` logs the same)
is the summary tokens' share of the whole batch's gradient weight under each mode, which
``cxsim bench horizons`` reports.

A loss mode weighs rollouts evenly when the two shares agree at every K (``rollout-mean``
does by construction); a grad share above the rollout share means that mode over-weights
rollouts of that length. Only the K present in the batch get tags.

Shapes: S segments, T tokens; ``mask`` (S, T) bool (the policy mask).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cxsim.diagnostics._common import check_per_row, group_sums, safe_div, to_floats
from cxsim.diagnostics.weights import token_weights
from cxsim.loss_modes import LOSS_MODES


@dataclass
class HorizonShares:
    """Rollouts grouped by their number of windows, with each group's shares."""

    windows: torch.Tensor
    """(G,) long: the window counts present in the batch, ascending."""
    rollouts: torch.Tensor
    """(G,) long: how many rollouts have that many windows."""
    tokens: torch.Tensor
    """(G,) float64: mean masked (policy) tokens per rollout of the group."""
    rollout_share: torch.Tensor
    """(G,) float64: ``rollouts / sum(rollouts)``."""
    grad_share: dict[str, torch.Tensor]
    """mode -> (G,) float64: the group's share of the gradient weight under that mode."""
    summary_share: dict[str, float]
    """mode -> the summary tokens' share of the batch's gradient weight under that mode."""

    def as_dict(self) -> dict[str, float]:
        """TensorBoard tags: ``horizon/rollout_share_k{K}`` and
        ``horizon/{mode}/grad_share_k{K}``."""
        stats: dict[str, torch.Tensor] = {}
        for i, k in enumerate(self.windows.tolist()):
            stats[f"horizon/rollout_share_k{k}"] = self.rollout_share[i]
        for mode, shares in self.grad_share.items():
            for i, k in enumerate(self.windows.tolist()):
                stats[f"horizon/{mode}/grad_share_k{k}"] = shares[i]
        return to_floats(stats)


def windows_per_rollout(
    rollout_id: torch.Tensor, is_summary: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rollouts (R,), windows (R,), row_to_rollout (S,))``: the batch's rollout ids
    (ascending), each one's number of windows (rows that are not summaries), and the
    position of each row's rollout in the first."""
    rollouts, row_to_rollout = torch.unique(rollout_id, return_inverse=True)
    is_window = (~is_summary).to(torch.long)
    windows = group_sums(is_window, row_to_rollout, len(rollouts))
    return rollouts, windows, row_to_rollout


def horizon_shares(
    mask: torch.Tensor,
    rollout_id: torch.Tensor,
    is_summary: torch.Tensor,
    modes: tuple[str, ...] | None = None,
) -> HorizonShares:
    """Rollouts grouped by their number of windows; per group, the share of rollouts and
    the share of the gradient weight under each of ``modes`` (every registered mode when
    None). A rollout counts in its group's rollout share even when none of its tokens is
    masked (it then carries no weight)."""
    check_per_row("rollout_id", rollout_id, mask)
    check_per_row("is_summary", is_summary, mask)
    if mask.shape[0] == 0:
        raise ValueError("the batch has no rows: no rollout to group")
    _, windows, row_to_rollout = windows_per_rollout(rollout_id, is_summary)
    present, group_of_rollout = torch.unique(windows, return_inverse=True)
    groups = len(present)
    ones = torch.ones(len(windows), dtype=torch.float64, device=mask.device)
    rollouts = group_sums(ones, group_of_rollout, groups)
    row_group = group_of_rollout[row_to_rollout]  # (S,) each row's group
    tokens = group_sums(mask.sum(dim=1).to(torch.float64), row_group, groups)
    grad_share, summary_share = {}, {}
    for mode in LOSS_MODES if modes is None else modes:
        per_row = token_weights(mask, mode, rollout_id, is_summary).sum(dim=1)  # (S,)
        by_group = group_sums(per_row, row_group, groups)
        grad_share[mode] = safe_div(by_group, by_group.sum())
        summary_share[mode] = float(safe_div(per_row[is_summary].sum(), per_row.sum()))
    return HorizonShares(
        windows=present,
        rollouts=rollouts.to(torch.long),
        tokens=tokens / rollouts,
        rollout_share=rollouts / rollouts.sum(),
        grad_share=grad_share,
        summary_share=summary_share,
    )


def horizon_stats(
    mask: torch.Tensor,
    rollout_id: torch.Tensor,
    is_summary: torch.Tensor,
    modes: tuple[str, ...] | None = None,
) -> dict[str, float]:
    """:func:`horizon_shares` as TensorBoard tags (``horizon/...``)."""
    return horizon_shares(mask, rollout_id, is_summary, modes).as_dict()

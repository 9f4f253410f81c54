"""Loss modes that weigh the rows of a logical rollout, and the separate summary loss.

The functions behind four entries of :data:`cxsim.loss_modes.LOSS_MODES` (the registry holds
their :class:`~cxsim.loss_modes.LossModeSpec`); their float64 references, plain loops over
logical rollouts, are in :mod:`cxsim.conformance.weighting` (tested to agree), their sources
in docs/conformance.md, "Weighting per logical rollout".

Each weighting rule is a per-row weight ``w_s`` on the seq-mean-token-mean base
``L = 1/S' sum_s w_s mean_{M_s} l``, the weights renormalised once over the whole batch to a
mean of 1 over its ``S'`` voting rows (rows with a masked token). With ``N_tau`` the voting
rows of rollout ``tau``, ``n_s`` the masked tokens of row s, ``R'`` the voting rollouts:

- ``session-equal``: ``w_s = 1/N_tau`` renormalised, so
  ``L = 1/R' sum_tau 1/N_tau sum_{s in tau} mean_{M_s} l``: each session (logical rollout)
  one vote, shared equally by the rows it was cut into.
- ``partition-preserving``: ``w_s = n_s / mean_s n_s``, so ``L = sum_M l / |M|``: the
  token-mean, whatever rows a session is cut into (identical to ``token-mean``, tested).
- ``thread-mean``: ``w_s = (n_s / n_tau) S'/R'``, so ``L = 1/R' sum_tau mean_{M_tau} l``: equal
  total weight per compaction thread (a rollout's chain of windows); the critic's
  per-thread loss weight (``--ppo.critic-loss-mode thread-mean``); numerically
  ``rollout-mean``, whose functions it shares.

``summary-loss`` is not a row weighting: the summary tokens are normalised on their own,
``L = sum_{M \\ Sigma} l / |M \\ Sigma| + c sum_{M & Sigma} l / |M & Sigma|`` with ``Sigma`` the
tokens of summary rows and ``c`` the summary loss weight (1 in the registry's entry;
:func:`summary_loss_mode` makes another), so the summary tokens, about a tenth of a batch,
are not diluted by the action tokens. Its count is a pair (action tokens, summary tokens),
summed over micro-batches and ranks like every count.

torch is imported when a mode runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def _row_sums(loss: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    picked = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    return picked.sum(dim=1), mask.sum(dim=1).to(loss.dtype)


def rollout_row_counts(mask: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S,) float32: for each row, the voting rows (with a masked token) of its rollout."""
    import torch

    from cxsim.scans import per_group_sum

    return per_group_sum(mask.any(dim=1).to(torch.float32), rollout_id)


# --------------------------------------------------------------------------- session-equal


def session_equal(loss, mask, rollout_id=None, denominator=None, rollout_rows=None):
    """``1/R' sum_tau 1/N_tau sum_{s in tau} mean_{M_s} l``; ``rollout_rows`` (S,): each row's
    ``N_tau`` over the whole batch when a micro-batch may split a rollout."""
    from cxsim.scans import first_in_group, per_group_sum

    if rollout_id is None:
        raise ValueError("rollout_id is required for mode 'session-equal'")
    row_sum, row_count = _row_sums(loss, mask)
    if rollout_rows is None:
        rollout_rows = rollout_row_counts(mask, rollout_id)
    row_mean = row_sum / row_count.clamp(min=1)
    shares = row_mean / rollout_rows.to(loss.dtype).clamp(min=1)
    if denominator is None:
        votes = first_in_group(rollout_id) & (per_group_sum(row_count, rollout_id) > 0)
        return shares.sum() / votes.sum().clamp(min=1)
    return shares.sum() / denominator


def session_equal_weights(mask: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S, T) float64 gradient weights ``1/(R' N_tau n_s)`` on the mask."""
    import torch

    m = mask.to(torch.float64)
    voting = mask.any(dim=1)
    rollouts = len(torch.unique(rollout_id[voting])) if bool(voting.any()) else 1
    n_rows = rollout_row_counts(mask, rollout_id).to(torch.float64).clamp(min=1)
    per_row = voting.to(torch.float64) / (m.sum(dim=1).clamp(min=1) * n_rows * rollouts)
    return m * per_row[:, None]


# --------------------------------------------------------------------------- summary loss


def _split(mask: torch.Tensor, is_summary: torch.Tensor | None):
    import torch

    if is_summary is None:
        is_summary = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)
    summary = mask & is_summary[:, None]
    return mask & ~summary, summary


def summary_loss_count(mask, rollout_id=None, is_summary=None):
    """(2,): the masked action tokens and the masked summary tokens."""
    import torch

    action, summary = _split(mask, is_summary)
    return torch.stack([action.sum(), summary.sum()])


def summary_loss_mode(weight: float = 1.0):
    """The ``summary-loss`` reduction with summary loss weight ``weight`` (``c``): a
    :class:`~cxsim.loss_modes.LossModeSpec` for ``--ppo.loss-mode my_module:name``."""
    from cxsim.loss_mode_spec import LossModeSpec

    if not weight >= 0:
        raise ValueError(f"the summary loss weight must be >= 0, got {weight}")

    def reduce(loss, mask, rollout_id=None, denominator=None, rollout_tokens=None, is_summary=None):
        action, summary = _split(mask, is_summary)
        action_sum = _row_sums(loss, action)[0].sum()
        summary_sum = _row_sums(loss, summary)[0].sum()
        counts = summary_loss_count(mask, rollout_id, is_summary) if denominator is None else None
        denom = counts.to(loss.dtype).clamp(min=1) if counts is not None else denominator
        return action_sum / denom[0] + weight * summary_sum / denom[1]

    def weights(mask, rollout_id=None, is_summary=None):
        import torch

        action, summary = _split(mask, is_summary)
        a, s = action.to(torch.float64), summary.to(torch.float64)
        return a / a.sum().clamp(min=1) + weight * s / s.sum().clamp(min=1)

    return LossModeSpec(
        reduce,
        summary_loss_count,
        weights,
        f"summary tokens normalised on their own, weight {weight:g}",
        reads_summary=True,
    )


# --------------------------------------------------------------------------- row weights

ROW_WEIGHT_RULES: tuple[str, ...] = (
    "session-equal",
    "partition-preserving",
    "one-reward-per-rollout",
    "thread-mean",
)
"""The per-row weight columns :func:`row_weights` computes (docs/conformance.md)."""


def row_weights(mask: torch.Tensor, rollout_id: torch.Tensor, rule: str) -> torch.Tensor:
    """(S,) float64: each row's weight under ``rule`` (one of :data:`ROW_WEIGHT_RULES`), the
    column a framework that cuts sessions into rows carries; 0 on rows without a masked token.

    With ``n_s`` each row's masked tokens, ``N_tau`` / ``n_tau`` its rollout's voting rows and
    tokens, ``S'`` / ``R'`` the batch's voting rows and rollouts: session-equal
    ``S' / (R' N_tau)``; partition-preserving ``n_s S' / sum n``; one-reward-per-rollout
    ``1 / N_tau``; thread-mean ``n_s S' / (n_tau R')``.
    """
    import torch

    from cxsim.scans import per_group_sum

    if rule not in ROW_WEIGHT_RULES:
        raise ValueError(f"rule must be one of {', '.join(ROW_WEIGHT_RULES)}, got {rule!r}")
    n = mask.sum(dim=1).to(torch.float64)
    voting = (n > 0).to(torch.float64)
    rows = voting.sum().clamp(min=1)
    rollouts = float(len(torch.unique(rollout_id[n > 0]))) if bool(voting.any()) else 1.0
    per_rollout_rows = per_group_sum(voting, rollout_id).clamp(min=1)
    if rule == "session-equal":
        return voting * rows / (rollouts * per_rollout_rows)
    if rule == "partition-preserving":
        return n * rows / n.sum().clamp(min=1)
    if rule == "one-reward-per-rollout":
        return voting / per_rollout_rows
    return n * rows / (per_group_sum(n, rollout_id).clamp(min=1) * rollouts)

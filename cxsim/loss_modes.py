"""Policy-loss reductions, one registry keyed by name (docs/method.md section 4).

``LOSS_MODES[name]`` is a :class:`LossModeSpec` holding, in one place, the three
things a reduction is: how a per-token loss (S, T) is reduced over the mask
(``reduce``), the count it divides by when a minibatch is split into
micro-batches or ranks (``count``, summed over them: the global denominator),
and the closed-form gradient weight of each token (``weights``, what
``cxsim.diagnostics.weights`` reports). ``cxsim.losses.aggregate``,
``cxsim.ppo.loss_denominator``, the segment-weight diagnostics and
``PPOConfig.loss_mode`` (choices, help, validation) all read this registry, so a
new mode is one entry here (and its test). It is a :class:`cxsim.plugins.Registry`: a
mode can also come from outside cxsim, a ``LossModeSpec`` in the user's module
(``--ppo.loss-mode my_module:my_mode``) or an installed package's entry point in group
``cxsim.loss_modes`` (docs/training.md). torch is imported when a mode runs.

With ``M`` the masked tokens, ``M_s`` those of segment s, ``M_tau`` those of
rollout tau, and only segments/rollouts with a masked token voting (``S'``, ``R'``):

- ``token-mean``: ``sum_M l / |M|`` (the paper): every token weighs the same.
- ``segment-mean``: ``1/S' sum_s mean_{M_s} l``: each segment one vote.
- ``rollout-mean``: ``1/R' sum_tau mean_{M_tau} l``: each rollout one vote.
- ``seq-mean-token-sum``: ``1/S' sum_s sum_{M_s} l``: per-segment token sums, averaged.
- ``session-equal``, ``partition-preserving``, ``thread-mean``: weighting per logical rollout,
  and ``summary-loss``: the summary tokens normalised on their own (``cxsim.loss_weighting``).

A mode that reads each row's role declares ``reads_summary`` (its ``reduce``, ``count`` and
``weights`` then take ``is_summary=`` (S,) bool; None: no summary rows); one that divides by
a per-rollout figure counted over the whole minibatch declares ``rollout_stat`` (the trainer
passes it as ``rollout_tokens``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cxsim.loss_mode_spec import LossModeSpec
from cxsim.loss_weighting import (
    rollout_row_counts,
    session_equal,
    session_equal_weights,
    summary_loss_mode,
)
from cxsim.plugins import Registry

if TYPE_CHECKING:
    import torch


def role_keywords(spec: LossModeSpec, is_summary: torch.Tensor | None) -> dict:
    """``{"is_summary": is_summary}`` for a mode that reads each row's role, else nothing."""
    return {"is_summary": is_summary} if spec.reads_summary else {}


def _row_sums(loss: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row masked token sum and token count, both (S,) in loss's dtype."""
    import torch

    picked = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    return picked.sum(dim=1), mask.sum(dim=1).to(loss.dtype)


def _divide(total, local_count, denominator):
    if denominator is None:
        return total / local_count.clamp(min=1)
    return total / denominator


def _voting_rows(mask: torch.Tensor) -> torch.Tensor:
    import torch

    return mask.any(dim=1).to(torch.float64)


# --------------------------------------------------------------------------- token-mean


def _token_mean(loss, mask, rollout_id=None, denominator=None, rollout_tokens=None):
    row_sum, row_count = _row_sums(loss, mask)
    return _divide(row_sum.sum(), row_count.sum(), denominator)


def _token_count(mask, rollout_id):
    return mask.sum()


def _token_weights(mask, rollout_id):
    import torch

    m = mask.to(torch.float64)
    return m / m.sum().clamp(min=1)


# --------------------------------------------------------------------------- segment-mean


def _segment_mean(loss, mask, rollout_id=None, denominator=None, rollout_tokens=None):
    row_sum, row_count = _row_sums(loss, mask)
    row_mean = row_sum / row_count.clamp(min=1)
    return _divide(row_mean.sum(), (row_count > 0).sum(), denominator)


def _segment_count(mask, rollout_id):
    return mask.any(dim=1).sum()


def _segment_weights(mask, rollout_id):
    import torch

    m = mask.to(torch.float64)
    voting = _voting_rows(mask)
    per_row = voting / (m.sum(dim=1).clamp(min=1) * voting.sum().clamp(min=1))
    return m * per_row[:, None]


# --------------------------------------------------------------------------- rollout-mean


def _check_rollout_id(loss, rollout_id):
    if rollout_id is None:
        raise ValueError("rollout_id is required for mode 'rollout-mean'")
    rows = (loss.shape[0],)
    if tuple(rollout_id.shape) != rows:
        raise ValueError(f"rollout_id must have shape {rows}, got {tuple(rollout_id.shape)}")


def _rollout_mean(loss, mask, rollout_id=None, denominator=None, rollout_tokens=None):
    from cxsim.scans import first_in_group, per_group_sum

    _check_rollout_id(loss, rollout_id)
    row_sum, row_count = _row_sums(loss, mask)
    tokens_here = per_group_sum(row_count, rollout_id)
    if rollout_tokens is None:  # every rollout lies whole in this batch
        rollout_tokens = tokens_here
    elif tuple(rollout_tokens.shape) != (loss.shape[0],):
        raise ValueError(
            f"rollout_tokens must have shape {(loss.shape[0],)}, got {tuple(rollout_tokens.shape)}"
        )
    # each row adds its share of its rollout's mean; one row per rollout casts the vote
    shares = row_sum / rollout_tokens.to(loss.dtype).clamp(min=1)
    votes = first_in_group(rollout_id) & (tokens_here > 0)
    return _divide(shares.sum(), votes.sum(), denominator)


def _rollout_count(mask, rollout_id):
    import torch

    return torch.tensor(len(torch.unique(rollout_id[mask.any(dim=1)])))


def _rollout_weights(mask, rollout_id):
    import torch

    from cxsim.scans import per_group_sum

    m = mask.to(torch.float64)
    n_tau = per_group_sum(m.sum(dim=1), rollout_id)
    num_rollouts = _rollout_count(mask, rollout_id).clamp(min=1)
    per_row = _voting_rows(mask) / (n_tau.clamp(min=1) * num_rollouts)
    return m * per_row[:, None]


# --------------------------------------------------------------------------- seq-mean-token-sum


def _seq_mean_token_sum(loss, mask, rollout_id=None, denominator=None, rollout_tokens=None):
    row_sum, row_count = _row_sums(loss, mask)
    return _divide(row_sum.sum(), (row_count > 0).sum(), denominator)


def _seq_weights(mask, rollout_id):
    import torch

    voting = _voting_rows(mask)
    return mask.to(torch.float64) * (voting / voting.sum().clamp(min=1))[:, None]


LOSS_MODES: Registry[LossModeSpec] = Registry(
    {
        "token-mean": LossModeSpec(
            _token_mean, _token_count, _token_weights, "the paper: one global token count"
        ),
        "segment-mean": LossModeSpec(
            _segment_mean, _segment_count, _segment_weights, "each segment one vote"
        ),
        "rollout-mean": LossModeSpec(
            _rollout_mean, _rollout_count, _rollout_weights, "each rollout one vote", True
        ),
        "seq-mean-token-sum": LossModeSpec(
            _seq_mean_token_sum, _segment_count, _seq_weights, "per-segment token sums, averaged"
        ),
        "session-equal": LossModeSpec(
            session_equal,
            _rollout_count,
            session_equal_weights,
            "each session one vote, shared equally by its rows (weights 1/N)",
            rollout_stat=rollout_row_counts,
        ),
        "partition-preserving": LossModeSpec(
            _token_mean,
            _token_count,
            _token_weights,
            "each row weighted by its tokens over the mean row's (= token-mean)",
        ),
        "thread-mean": LossModeSpec(
            _rollout_mean,
            _rollout_count,
            _rollout_weights,
            "each compaction thread the same total weight (the critic's per-thread weight)",
            True,
        ),
        "summary-loss": summary_loss_mode(1.0),
    },
    entry_type=LossModeSpec,
    kind="loss mode",
    group="cxsim.loss_modes",
    declaration="reduce=<function>, count=<function>, weights=<function>, help='one line'",
)
"""Every policy-loss reduction by name; the first is the default. A name it does not hold is
looked up as a plug-in (``module:name`` or an entry point of group ``cxsim.loss_modes``)."""

"""Per-token PPO losses and their one reduction, :func:`aggregate` (docs/method.md section 4).

Loss functions return per-token ``(S, T)`` tensors and never reduce; masks are
applied only in :func:`aggregate` (or :func:`masked_mean`). ``S`` segments,
``T`` tokens, ``V`` vocabulary. "Without summary training" is a mask choice
(``SegmentBatch.policy_mask(train_summaries=False)``), nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch

from cxsim.scans import first_in_group, per_group_sum

LossMode = Literal["token-mean", "segment-mean", "rollout-mean", "seq-mean-token-sum"]
LOSS_MODES: tuple[LossMode, ...] = get_args(LossMode)


def _same_shape(**tensors: torch.Tensor) -> None:
    names = list(tensors)
    shape = tensors[names[0]].shape
    for name in names[1:]:
        if tensors[name].shape != shape:
            raise ValueError(
                f"{name} must have the shape of {names[0]} {tuple(shape)}, "
                f"got {tuple(tensors[name].shape)}"
            )


def masked_mean(
    x: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """``sum(x * mask) / sum(mask)`` over ``dim`` (all dims if None); 0 where the mask is empty.

    Unmasked entries never enter, even if they are inf or NaN.
    """
    _same_shape(x=x, mask=mask)
    picked = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    if dim is None:
        return picked.sum() / mask.sum().clamp(min=1)
    return picked.sum(dim=dim) / mask.sum(dim=dim).clamp(min=1)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped PPO surrogate (Schulman et al. 2017).

    ``rho = exp(logp - logp_old)``,
    ``l = -min(rho A, clip(rho, 1 - eps, 1 + eps) A)``.

    Args:
        logprobs: (S, T) log-probs under the current policy (with grad).
        old_logprobs: (S, T) behaviour log-probs.
        advantages: (S, T).
        clip_eps: ``eps`` > 0.

    Returns:
        ``(loss, stats)``: loss (S, T); stats (detached, each (S, T)):
        ``ratio`` = rho; ``clipped`` = 1.0 where the clipped term is the one
        taken (its gradient is zero); ``approx_kl`` = the k3 estimator of
        ``KL(pi_old || pi)`` from samples of pi_old, ``(rho - 1) - log rho``
        (non-negative, unbiased; Schulman, "Approximating KL divergence", 2020).
    """
    _same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    if not clip_eps > 0:
        raise ValueError(f"clip_eps must be > 0, got {clip_eps}")
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    loss = torch.maximum(unclipped, clipped)
    with torch.no_grad():
        stats = {
            "ratio": ratio.detach(),
            "clipped": (clipped > unclipped).to(logprobs.dtype),
            "approx_kl": (ratio - 1.0) - log_ratio,
        }
    return loss, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_eps: float | None,
) -> torch.Tensor:
    """Per-token critic loss ``0.5 (V - G)^2``, optionally PPO-clipped.

    With ``clip_eps``: ``V_clip = V_old + clip(V - V_old, -eps, eps)`` and
    ``l = 0.5 max((V - G)^2, (V_clip - G)^2)``. All tensors (S, T).
    """
    _same_shape(values=values, old_values=old_values, returns=returns)
    error = (values - returns) ** 2
    if clip_eps is None:
        return 0.5 * error
    if not clip_eps > 0:
        raise ValueError(f"clip_eps must be > 0 or None, got {clip_eps}")
    values_clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    return 0.5 * torch.maximum(error, (values_clipped - returns) ** 2)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax at each position: (S, T, V) -> (S, T).

    ``H = logsumexp(z) - sum_v softmax(z)_v z_v``.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be (S, T, V), got shape {tuple(logits.shape)}")
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


# --------------------------------------------------------------------------- aggregation


def _masked_rows(loss: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row masked token sum and token count, both (S,) in loss's dtype."""
    picked = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    return picked.sum(dim=1), mask.sum(dim=1).to(loss.dtype)


def _divide(total: torch.Tensor, local_count: torch.Tensor, denominator) -> torch.Tensor:
    if denominator is None:
        return total / local_count.clamp(min=1)
    return total / denominator


def _token_mean(loss, mask, rollout_id, denominator):
    row_sum, row_count = _masked_rows(loss, mask)
    return _divide(row_sum.sum(), row_count.sum(), denominator)


def _segment_mean(loss, mask, rollout_id, denominator):
    row_sum, row_count = _masked_rows(loss, mask)
    votes = row_count > 0
    row_mean = row_sum / row_count.clamp(min=1)
    return _divide(row_mean.sum(), votes.sum(), denominator)


def _seq_mean_token_sum(loss, mask, rollout_id, denominator):
    row_sum, row_count = _masked_rows(loss, mask)
    return _divide(row_sum.sum(), (row_count > 0).sum(), denominator)


def _rollout_mean(loss, mask, rollout_id, denominator, rollout_tokens=None):
    if rollout_id is None:
        raise ValueError("rollout_id is required for mode 'rollout-mean'")
    rows = (loss.shape[0],)
    if tuple(rollout_id.shape) != rows:
        raise ValueError(f"rollout_id must have shape {rows}, got {tuple(rollout_id.shape)}")
    row_sum, row_count = _masked_rows(loss, mask)
    tokens_here = per_group_sum(row_count, rollout_id)
    if rollout_tokens is None:  # every rollout lies whole in this batch
        rollout_tokens = tokens_here
    elif tuple(rollout_tokens.shape) != rows:
        raise ValueError(
            f"rollout_tokens must have shape {rows}, got {tuple(rollout_tokens.shape)}"
        )
    # each row adds its share of its rollout's mean; one row per rollout casts the vote
    shares = row_sum / rollout_tokens.to(loss.dtype).clamp(min=1)
    votes = first_in_group(rollout_id) & (tokens_here > 0)
    return _divide(shares.sum(), votes.sum(), denominator)


_AGGREGATORS: dict[LossMode, Callable[..., torch.Tensor]] = {
    "token-mean": _token_mean,
    "segment-mean": _segment_mean,
    "rollout-mean": _rollout_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
}


def aggregate(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: LossMode,
    rollout_id: torch.Tensor | None = None,
    denominator: float | torch.Tensor | None = None,
    rollout_tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduces a per-token loss (S, T) over ``mask`` (S, T) bool to a scalar.

    With ``M`` the masked tokens, ``M_s`` those of segment s, ``M_tau`` those of
    rollout tau (over all its segments), and only segments/rollouts with at
    least one masked token voting:

    - ``token-mean``: ``sum_{(s,t) in M} l_{s,t} / |M|`` (the paper). Every
      token weighs the same, whatever its segment's length.
    - ``segment-mean``: ``1/S' sum_s (sum_{t in M_s} l_{s,t} / |M_s|)``; each
      segment one vote (the "w/o token-level loss" ablation).
    - ``rollout-mean``: ``1/R' sum_tau (sum_{(s,t) in M_tau} l_{s,t} / |M_tau|)``;
      each rollout one vote. Needs ``rollout_id`` (S,).
    - ``seq-mean-token-sum``: ``1/S' sum_s sum_{t in M_s} l_{s,t}``; per-segment
      token sums, averaged over segments (as in common RLHF frameworks).

    ``denominator`` replaces the local count in the final division (``|M|``,
    ``S'`` or ``R'``) with one counted over all micro-batches, accumulation steps
    and ranks: summing ``aggregate(...)`` over micro-batches with the global
    count then equals the aggregate over the whole batch. ``rollout-mean`` also
    divides by each rollout's token count ``|M_tau|``: a micro-batch holding part
    of a rollout passes ``rollout_tokens`` (S,), each row's ``|M_tau|`` counted over
    the whole batch (:func:`rollout_token_counts`); without it every rollout must
    lie whole in ``loss``. A batch with an empty mask gives 0 (never NaN).
    """
    _same_shape(loss=loss, mask=mask)
    if loss.dim() != 2:
        raise ValueError(f"loss must be (S, T), got shape {tuple(loss.shape)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got dtype {mask.dtype}")
    if mode not in _AGGREGATORS:
        raise ValueError(f"mode must be one of {LOSS_MODES}, got {mode!r}")
    if mode == "rollout-mean":
        return _rollout_mean(loss, mask, rollout_id, denominator, rollout_tokens)
    return _AGGREGATORS[mode](loss, mask, rollout_id, denominator)


def rollout_token_counts(mask: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S,): for each row, the masked tokens of its whole rollout in ``mask`` (S, T)."""
    return per_group_sum(mask.sum(dim=1).to(torch.float32), rollout_id)

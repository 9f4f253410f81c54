"""Per-token PPO losses and their one reduction, :func:`aggregate` (docs/method.md section 4).

Loss functions return per-token ``(S, T)`` tensors and never reduce; masks are
applied only in :func:`aggregate` (or :func:`masked_mean`). ``S`` segments,
``T`` tokens, ``V`` vocabulary. "Without summary training" is a mask choice
(``SegmentBatch.policy_mask(train_summaries=False)``), nothing here.
"""

from __future__ import annotations

import torch

from cxsim.loss_mode_spec import rollout_token_counts
from cxsim.loss_modes import LOSS_MODES, role_keywords

__all__ = [
    "LOSS_MODES",
    "aggregate",
    "entropy_from_logits",
    "histogram_edges",
    "hl_gauss_loss",
    "hl_gauss_target",
    "masked_mean",
    "policy_loss",
    "rollout_token_counts",
    "value_loss",
]


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


def histogram_edges(
    low: float, high: float, bins: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """(K + 1,) float32 edges of ``bins`` equal bins on ``[low, high]``."""
    if bins < 1 or not low < high:
        raise ValueError(f"need bins >= 1 and low < high, got bins={bins}, [{low}, {high}]")
    return torch.linspace(low, high, bins + 1, dtype=torch.float32, device=device)


def hl_gauss_target(returns: torch.Tensor, edges: torch.Tensor, sigma: float) -> torch.Tensor:
    """HL-Gauss target distribution: (...) returns -> (..., K) bin probabilities.

    The return ``G``, clamped to ``[edges[0], edges[-1]]``, is smeared as a Gaussian
    ``N(G, sigma^2)``; bin k gets its mass between its edges, ``Phi((e_{k+1} - G) / sigma) -
    Phi((e_k - G) / sigma)``, divided by the mass on the whole range so the K entries sum to
    1 (a return at an edge loses the half outside). Computed in float64, returned in float32.
    """
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if edges.dim() != 1 or edges.numel() < 2:
        raise ValueError(
            f"edges must be a 1-D tensor of K + 1 >= 2 values, got {tuple(edges.shape)}"
        )
    e = edges.to(torch.float64)
    g = returns.to(torch.float64).clamp(float(e[0]), float(e[-1]))[..., None]
    cdf = torch.special.ndtr((e - g) / sigma)  # (..., K + 1)
    mass = cdf[..., 1:] - cdf[..., :-1]
    return (mass / (cdf[..., -1:] - cdf[..., :1])).to(torch.float32)


def hl_gauss_loss(
    logits: torch.Tensor, returns: torch.Tensor, edges: torch.Tensor, sigma: float
) -> torch.Tensor:
    """Per-token histogram loss: the cross-entropy ``-sum_k p_k log softmax(z)_k`` of the
    head's logits z (S, T, K) to :func:`hl_gauss_target` of the returns (S, T); (S, T)."""
    if logits.dim() != 3 or logits.shape[:2] != returns.shape:
        raise ValueError(
            f"logits must be (S, T, K) with (S, T) = returns' {tuple(returns.shape)}, "
            f"got {tuple(logits.shape)}"
        )
    if logits.shape[-1] != edges.numel() - 1:
        raise ValueError(f"logits have {logits.shape[-1]} bins and edges {edges.numel() - 1}")
    target = hl_gauss_target(returns.detach(), edges, sigma)
    return -(target * torch.log_softmax(logits.float(), dim=-1)).sum(dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax at each position: (S, T, V) -> (S, T).

    ``H = logsumexp(z) - sum_v softmax(z)_v z_v``.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be (S, T, V), got shape {tuple(logits.shape)}")
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def aggregate(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    rollout_id: torch.Tensor | None = None,
    denominator: float | torch.Tensor | None = None,
    rollout_tokens: torch.Tensor | None = None,
    is_summary: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduces a per-token loss (S, T) over ``mask`` (S, T) bool to a scalar, as the loss
    mode ``mode`` of :data:`cxsim.loss_modes.LOSS_MODES` defines (its docstring lists them).

    ``denominator`` replaces the local count in the final division (``|M|``,
    ``S'`` or ``R'``) with one counted over all micro-batches, accumulation steps
    and ranks: summing ``aggregate(...)`` over micro-batches with the global
    count then equals the aggregate over the whole batch. ``rollout-mean`` also
    divides by each rollout's token count ``|M_tau|``: a micro-batch holding part
    of a rollout passes ``rollout_tokens`` (S,), each row's ``|M_tau|`` counted over
    the whole batch (:func:`rollout_token_counts`; a mode's own per-rollout figure,
    ``LossModeSpec.rollout_figures``); without it every rollout must lie whole in ``loss``.
    ``is_summary`` (S,) bool: each row's role, for the modes that read it (``summary-loss``;
    None: no summary rows). A batch with an empty mask gives 0 (never NaN).
    """
    _same_shape(loss=loss, mask=mask)
    if loss.dim() != 2:
        raise ValueError(f"loss must be (S, T), got shape {tuple(loss.shape)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got dtype {mask.dtype}")
    if mode not in LOSS_MODES:
        raise ValueError(f"mode must be one of {tuple(LOSS_MODES)}, got {mode!r}")
    spec = LOSS_MODES[mode]
    role = role_keywords(spec, is_summary)
    return spec.reduce(loss, mask, rollout_id, denominator, rollout_tokens, **role)

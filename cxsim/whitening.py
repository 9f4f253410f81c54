"""Whitening of advantages over the policy tokens: ``(A - mean) / std``, with a floor under
the std (``--ppo.whiten-std-floor``) so that advantages which barely differ are not scaled
up to unit variance (docs/training.md, "Stability"). The all-rank version is
``cxsim.distributed.global_whiten``."""

from __future__ import annotations

from collections.abc import Callable

import torch


def whiten(
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 1e-8,
    std_floor: float = 0.0,
    global_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Masked whitening ``(A - mean_M) / max(sqrt(var_M + eps), std_floor)``, 0 outside the mask.

    Mean and (Bessel-corrected) variance over the masked entries of the whole
    tensor, and of every rank's with ``global_sum`` (an all-reduce of the sums;
    ``cxsim.distributed.global_whiten``). An empty mask gives zeros. ``std_floor`` > 0 keeps
    advantages that barely differ (an all-success batch: the critic's errors) from being
    scaled up to unit variance (``--ppo.whiten-std-floor``). Shapes: (S, T) -> (S, T).
    """
    if advantages.shape != mask.shape:
        raise ValueError(f"mask must have shape {tuple(advantages.shape)}, got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got dtype {mask.dtype}")
    total = global_sum or (lambda t: t)
    zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
    x = torch.where(mask, advantages, zero)
    moments = total(torch.stack([x.sum(), mask.sum().to(advantages.dtype)]))
    count = moments[1]
    mean = moments[0] / count.clamp(min=1)
    centred = torch.where(mask, advantages - mean, zero)
    var = total((centred**2).sum()) / (count - 1).clamp(min=1)
    return centred * whiten_scale(var, eps, std_floor)


def whiten_scale(var: torch.Tensor, eps: float, std_floor: float = 0.0) -> torch.Tensor:
    """Whitening's scale ``1 / max(sqrt(var + eps), std_floor)``: at most ``1 / std_floor``."""
    if std_floor > 0:
        return 1.0 / torch.clamp(torch.sqrt(var + eps), min=std_floor)
    return torch.rsqrt(var + eps)

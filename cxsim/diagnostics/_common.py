"""Helpers shared by the diagnostics: grouping, rollout structure, record access.

Every diagnostic builds its numbers as 0-dim tensors and converts them to
Python floats once, at the end, with :func:`to_floats`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from cxsim.advantages import tokens_after


def check_per_token(name: str, x: torch.Tensor, mask: torch.Tensor) -> None:
    """Raises ValueError unless ``x`` has the (S, T) shape of ``mask``."""
    if x.shape != mask.shape:
        raise ValueError(
            f"{name} must have shape {tuple(mask.shape)} (mask's), got {tuple(x.shape)}"
        )


def check_per_row(name: str, x: torch.Tensor, mask: torch.Tensor) -> None:
    """Raises ValueError unless ``x`` has shape (S,) for a (S, T) ``mask``."""
    if x.shape != mask.shape[:1]:
        raise ValueError(f"{name} must have shape ({mask.shape[0]},), got {tuple(x.shape)}")


def to_floats(stats: Mapping[str, torch.Tensor | float]) -> dict[str, float]:
    """Converts 0-dim tensors (one device) to floats in one transfer; drops NaN.

    A NaN marks a number that is undefined for this batch (an empty group, a
    zero variance), so its key is left out rather than logged.
    """
    if not stats:
        return {}
    tensors = [torch.as_tensor(v).detach().to(torch.float64).reshape(()) for v in stats.values()]
    device = next((t.device for t in tensors if t.device.type != "cpu"), torch.device("cpu"))
    values = torch.stack([t.to(device) for t in tensors]).tolist()
    return {k: v for k, v in zip(stats, values, strict=True) if not math.isnan(v)}


def safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` with NaN where ``den == 0`` (an undefined mean)."""
    return torch.where(den != 0, num / torch.where(den != 0, den, 1), torch.nan)


CONSTANT_SPREAD = 1e-6
"""Values whose standard deviation is at most this share of their largest magnitude count as
constant (:func:`is_constant`): float32 rounding, not an outcome that varies."""


def is_constant(x: torch.Tensor) -> bool:
    """``x`` holds one value up to rounding (its spread at most :data:`CONSTANT_SPREAD` of its
    largest magnitude, or of 1)."""
    scale = max(1.0, float(x.abs().max())) if x.numel() else 1.0
    return float(x.double().std(unbiased=False)) <= CONSTANT_SPREAD * scale


def explained_variance(pred: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """``1 - Var(real - pred) / Var(real)`` (population variances); NaN when ``real`` is
    empty or constant (up to rounding, :func:`is_constant`)."""
    if real.numel() == 0 or is_constant(real):
        return torch.tensor(torch.nan, dtype=real.dtype if real.is_floating_point() else None)
    var_real = real.var(unbiased=False)
    var_err = (real - pred).var(unbiased=False)
    return 1 - safe_div(var_err, var_real)


def group_sums(
    x: torch.Tensor, group: torch.Tensor, num_groups: int
) -> torch.Tensor:  # (num_groups,)
    """Sum of ``x`` (N,) over each group id in ``group`` (N,) long, ids in [0, num_groups)."""
    out = torch.zeros(num_groups, dtype=x.dtype, device=x.device)
    return out.index_add_(0, group, x)


def segment_counts(mask: torch.Tensor) -> torch.Tensor:  # (S,) long
    """Number of masked (trainable) tokens per row: ``n_s``."""
    return mask.sum(dim=1)


def same_rollout(rollout_id: torch.Tensor) -> torch.Tensor:  # (S, S) bool
    return rollout_id[:, None] == rollout_id[None, :]


def token_distance(
    mask: torch.Tensor, rollout_id: torch.Tensor, segment_index: torch.Tensor
) -> torch.Tensor:  # (S, T) long
    """Trainable-token distance to the end of the rollout: masked tokens strictly after.

    The last trainable token of a rollout has distance 0. This is the exponent
    ``N_{>s} + n_s - i`` (i counted from 1) that the terminal reward carries
    under the cross-segment correction. Meaningless where ``mask`` is False.
    """
    m = mask.long()
    after_in_row = m.flip(1).cumsum(1).flip(1) - m
    return after_in_row + tokens_after(mask, rollout_id, segment_index)[:, None]


def last_segment(
    mask: torch.Tensor, rollout_id: torch.Tensor, segment_index: torch.Tensor
) -> torch.Tensor:  # (S,) bool
    """True for the last segment of each rollout that has a masked token."""
    has_tokens = mask.any(dim=1)
    later_with_tokens = (
        same_rollout(rollout_id)
        & (segment_index[None, :] > segment_index[:, None])
        & has_tokens[None, :]
    )
    return has_tokens & ~later_with_tokens.any(dim=1)


def as_records(records: Sequence[Any]) -> list[Any]:
    """Lets plain dicts stand in for rollout records (attribute access over keys).

    Objects with the documented attributes (``cxsim.rollout_records.RolloutRecord``)
    pass through unchanged; a missing key surfaces as ``AttributeError`` where
    it is read.
    """
    return [SimpleNamespace(**r) if isinstance(r, Mapping) else r for r in records]

"""Argument checks shared by the advantage estimators (``cxsim.advantages``) and the
segment-tree paths (``cxsim.segment_trees``).

Shapes, dtypes and plain-number ranges raise ValueError at once, naming the argument. Checks
that read tensor values (NaN or inf, a lambda outside [0, 1], two rows with the same
``(rollout_id, segment_index)``) are ``(flag, message)`` pairs: a caller gathers its flags
and raises them together with :func:`_raise_if_any`, one host synchronisation per call.
"""

from __future__ import annotations

import torch

Checks = list[tuple[torch.Tensor, str]]

Lam = float | torch.Tensor


def _raise_if_any(checks: list[tuple[torch.Tensor, str]]) -> None:
    """Raises ValueError with the message of the first true flag.

    All flags are reduced on their device and read back with a single host
    synchronisation, so a valid call pays for one sync however many checks run.
    """
    if not checks:
        return
    flags = torch.stack([flag.reshape(()).to(torch.bool) for flag, _ in checks])
    if bool(flags.any()):
        first = int(flags.to(torch.int8).argmax())
        raise ValueError(checks[first][1])


def _check_tokens(values: torch.Tensor, trainable: torch.Tensor) -> tuple[int, int]:
    if values.dim() != 2 or not values.is_floating_point():
        raise ValueError(
            f"values must be a (S, T) float tensor, got shape {tuple(values.shape)} "
            f"and dtype {values.dtype}"
        )
    _check_mask(trainable, values.shape)
    return values.shape[0], values.shape[1]


def _check_mask(trainable: torch.Tensor, shape: torch.Size | tuple[int, ...]) -> None:
    if trainable.dtype != torch.bool:
        raise ValueError(f"trainable must be a bool tensor, got dtype {trainable.dtype}")
    if tuple(trainable.shape) != tuple(shape):
        raise ValueError(f"trainable must have shape {tuple(shape)}, got {tuple(trainable.shape)}")


def _check_rows(name: str, x: torch.Tensor, num_rows: int, integer: bool) -> None:
    if tuple(x.shape) != (num_rows,):
        raise ValueError(f"{name} must have shape ({num_rows},), got {tuple(x.shape)}")
    if integer and (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool):
        raise ValueError(f"{name} must be an integer tensor, got dtype {x.dtype}")
    if not integer and not x.is_floating_point():
        raise ValueError(f"{name} must be a float tensor, got dtype {x.dtype}")


def _check_gamma(gamma: float) -> None:
    if not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")


def _lam_rows(lam: Lam, num_rows: int, like: torch.Tensor) -> tuple[torch.Tensor, list]:
    """``lam`` as an (S,) tensor of ``like``'s dtype/device, plus its deferred checks."""
    if isinstance(lam, torch.Tensor):
        if tuple(lam.shape) != (num_rows,):
            raise ValueError(
                f"lam must be a float or an ({num_rows},) tensor, got shape {tuple(lam.shape)}"
            )
        lam_t = lam.to(device=like.device, dtype=like.dtype)
        bad = torch.isnan(lam_t).any() | (lam_t < 0).any() | (lam_t > 1).any()
        return lam_t, [(bad, "lam must lie in [0, 1] (and not be NaN) for every segment")]
    if not 0.0 <= float(lam) <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    return torch.full((num_rows,), float(lam), dtype=like.dtype, device=like.device), []


def _nan_check(name: str, x: torch.Tensor, where: torch.Tensor | None = None):
    bad = ~torch.isfinite(x)
    if where is not None:
        bad = bad & where
    return bad.any(), f"{name} contains NaN or inf" + (
        " at a trainable position" if where is not None else ""
    )


def _duplicate_check(rollout_id, segment_index, order):
    rid, seg = rollout_id[order], segment_index[order]
    dup = ((rid[1:] == rid[:-1]) & (seg[1:] == seg[:-1])).any()
    return dup, (
        "rollout_id/segment_index: two rows share the same (rollout_id, segment_index); "
        "each pair must be unique"
    )


def _step_checks(step_rewards: torch.Tensor | None, values: torch.Tensor) -> list:
    """The optional ``step_rewards``: its shape and dtype (those of ``values``, float) raise at
    once; its NaN or inf is a flag."""
    if step_rewards is None:
        return []
    if step_rewards.shape != values.shape or not step_rewards.is_floating_point():
        raise ValueError(
            f"step_rewards must be a float tensor of shape {tuple(values.shape)}, got "
            f"{tuple(step_rewards.shape)} {step_rewards.dtype}"
        )
    return [_nan_check("step_rewards", step_rewards)]

"""The first-ratio check: before the first actor step the policy has not moved since it
sampled, so every |log ratio| must be about 0; a larger one means sampling and scoring
disagree (another temperature, say) and training stops on every rank together
(``--ppo.ratio-check-atol``; ``cxsim.ppo.actor_update`` calls it)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from cxsim.devices import Precision

BF16_RATIO_ATOL = 0.1
"""The least first-ratio tolerance under bf16: sampling with the KV cache and scoring with a full
forward round differently in bfloat16 (max |log ratio| 0.017 measured on the tiny preset)."""


def ratio_tolerance(atol: float, precision: Precision) -> float:
    """The first-ratio check's tolerance: ``atol``, at least ``BF16_RATIO_ATOL`` under bf16."""
    return max(atol, BF16_RATIO_ATOL) if precision == "bf16" else atol


class RatioCheckError(RuntimeError):
    """The first actor pass found ratios away from 1: sampling and scoring disagree."""


def check_first_ratio(
    worst: float,
    atol: float,
    sampled: float | None,
    scored: float,
    global_sum: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """Raises :class:`RatioCheckError` when any rank's largest masked |log ratio| before the
    first step (``worst`` here) exceeds ``atol``; every rank takes part, so all stop together."""
    flagged = global_sum(torch.tensor(float(worst > atol)))  # a host scalar: once per update
    if float(flagged) > 0:
        said = "an unrecorded temperature" if sampled is None else f"temperature {sampled:g}"
        raise RatioCheckError(
            f"before any update the policy ratio is exp(+-{worst:.3g}), not 1: the rollouts were "
            f"sampled at {said} and are scored at temperature {scored:g} (--ppo.temperature); "
            "sample and score at the same temperature"
        )

"""What keeps PPO from breaking what it learned: a KL penalty to the reference policy,
early stopping at a target KL, a floor under whitening, a learning-rate schedule, and
the per-iteration figures that show a collapse coming (docs/training.md, "Stability").

Each stabiliser is one ``--ppo.*`` flag (cxsim/config.py, ``PPOConfig``), checked when the
config is built (``cxsim.stability_settings``, which imports no torch):

- ``--ppo.kl-coef`` with ``--ppo.kl-estimator`` (k1, k2, k3) and ``--ppo.kl-in`` (loss or
  reward): a penalty on the distance from the reference policy, the policy training
  started from (the SFT base), as InstructGPT (in the reward) and GRPO (k3, in the loss);
- ``--ppo.target-kl``: an iteration's actor steps stop once a minibatch's approximate KL
  to the sampling policy exceeds it, before that step (as Stable-Baselines3);
- ``--ppo.whiten-std-floor``: whitening divides by ``max(std, floor)``, so a batch whose
  advantages barely differ (every rollout succeeded: the critic's errors are all that is
  left) is centred, not blown up to unit variance;
- ``--ppo.skip-uniform-batches``: no actor step from a batch whose rollouts all ended
  alike (nothing to learn from);
- ``--ppo.lr-schedule linear``: the actor's rate falls linearly to ``actor_lr / iterations``
  at the last iteration (cleanrl's annealing);
- ``--ppo.keep-best``: the run ends with the policy version its own batches scored best
  (``cxsim.best_policy``; it changes no update).

Shapes: S segments (rows), T padded tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from cxsim.agents.models import token_logprobs_at
from cxsim.devices import Precision, autocast
from cxsim.minibatches import micro_batch_spans
from cxsim.segments import SegmentBatch
from cxsim.stability_settings import KL_ESTIMATORS

if TYPE_CHECKING:
    from cxsim.config import PPOConfig


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of ``KL(pi || ref)`` at tokens sampled from pi, (S, T).

    With ``d = log ref - log pi``: ``k1 = -d`` (unbiased, can be negative), ``k2 = d^2 / 2``,
    ``k3 = exp(d) - 1 - d`` (unbiased and never negative; Schulman, "Approximating KL
    divergence", 2020). The gradient flows through ``logprobs``; ``ref_logprobs`` is a
    constant.
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"ref_logprobs must have shape {tuple(logprobs.shape)}, got {tuple(ref_logprobs.shape)}"
        )
    d = ref_logprobs.detach() - logprobs
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d**2
    if estimator == "k3":
        return torch.expm1(d) - d
    raise ValueError(
        f"unknown KL estimator {estimator!r}; choose one of: {', '.join(KL_ESTIMATORS)}"
    )


def kl_reward(
    step_rewards: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
) -> torch.Tensor:
    """Step rewards with ``coef * (log pi - log ref)`` (k1 of the sampling policy) taken off
    at every policy token (``mask``), where the estimators read per-token rewards. (S, T)."""
    penalty = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
    return step_rewards - coef * penalty


def linear_lr(base: float, schedule: str, ppo_iteration: int, iterations: int) -> float:
    """The actor's rate at PPO iteration ``ppo_iteration`` (0 = the first after the warm-up):
    ``base`` (constant) or ``base * (1 - ppo_iteration / iterations)`` (linear)."""
    if schedule == "constant" or iterations <= 0:
        return base
    return base * (1.0 - min(ppo_iteration, iterations - 1) / iterations)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every parameter group of ``optimizer`` at rate ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def rollout_outcomes(rewards: torch.Tensor, rollout_id: torch.Tensor) -> dict[int, float]:
    """Each rollout's terminal reward, from a batch's rows ((S,) each)."""
    return {int(r): float(x) for r, x in zip(rollout_id.tolist(), rewards.tolist(), strict=True)}


def outcome_spread(
    rewards: torch.Tensor, rollout_id: torch.Tensor, group_id: torch.Tensor
) -> dict[str, float]:
    """What a batch has to learn from: the share of task groups whose rollouts all
    succeeded (reward > 0) or all failed, the standard deviation of the rollouts' terminal
    rewards, and whether every rollout ended alike (``stability/uniform_batch``)."""
    outcomes = rollout_outcomes(rewards, rollout_id)
    groups: dict[int, list[float]] = {}
    for rid, gid in zip(rollout_id.tolist(), group_id.tolist(), strict=True):
        if rid in outcomes:
            groups.setdefault(int(gid), []).append(outcomes.pop(rid))
    won = [[x > 0 for x in g] for g in groups.values()]
    values = torch.tensor([x for g in groups.values() for x in g], dtype=torch.float64)
    n = max(len(won), 1)
    return {
        "stability/groups_all_success": sum(all(g) for g in won) / n,
        "stability/groups_all_failure": sum(not any(g) for g in won) / n,
        "stability/outcome_std": float(values.std(unbiased=False)) if len(values) else 0.0,
        "stability/uniform_batch": float(len(values) > 0 and bool((values == values[0]).all())),
    }


def reference_kl(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, is_summary: torch.Tensor
) -> dict[str, float]:
    """How far the sampling policy has moved from the reference: the k3 estimate of
    ``KL(pi || ref)`` per token at its own samples (``logprobs``, (S, T)), averaged over
    ``mask``, over the action rows and over the summary rows (``is_summary``, (S,))."""
    k3 = kl_penalty(logprobs, ref_logprobs, "k3")
    summary = mask & is_summary[:, None]
    out = {}
    for name, where in (("", mask), ("_action", mask & ~summary), ("_summary", summary)):
        count = int(where.sum())
        out[f"stability/kl_to_reference{name}"] = float(k3[where].sum()) / count if count else 0.0
    return out


def uniform_outcomes(
    rewards: torch.Tensor,
    rollout_id: torch.Tensor,
    global_sum: Callable[[torch.Tensor], torch.Tensor],
) -> bool:
    """True when every rollout of the batch (every rank's shard, through ``global_sum``) has
    the same terminal reward: nothing for the actor to learn from."""
    outcomes = torch.tensor(
        list(rollout_outcomes(rewards, rollout_id).values()), dtype=torch.float64
    )
    moments = torch.stack([outcomes.sum(), (outcomes**2).sum(), torch.tensor(len(outcomes))])
    total, squares, count = global_sum(moments.to(rewards.device)).tolist()
    return count > 0 and squares - total**2 / count <= 1e-9 * max(count, 1.0)


def beyond_target_kl(
    kl: torch.Tensor, target: float | None, global_sum: Callable[[torch.Tensor], torch.Tensor]
) -> bool:
    """``--ppo.target-kl``: the minibatch's mean approximate KL (``kl``: its sum and token
    count, summed over ranks, so every rank answers alike) exceeds ``target``."""
    if target is None:
        return False
    total, count = global_sum(kl).tolist()
    return total / max(count, 1.0) > target


@torch.no_grad()
def reference_logprobs(
    reference: Any, batch: SegmentBatch, cfg: PPOConfig, precision: Precision = "fp32"
) -> torch.Tensor:
    """The reference policy's log-probs of the batch's trainable tokens at
    ``cfg.temperature``, (S, T) float32 on the batch's device, 0 elsewhere; micro-batches as
    the critic's (``micro_batch_rows``, ``micro_batch_tokens``)."""
    device = batch.token_ids.device
    out = torch.zeros(batch.token_ids.shape, dtype=torch.float32, device=device)
    spans = micro_batch_spans(batch.lengths.tolist(), cfg.micro_batch_rows, cfg.micro_batch_tokens)
    for start, stop in spans:
        width = int(batch.lengths[start:stop].max())
        rows = slice(start, stop), slice(0, width)
        with autocast(precision, device):
            logprobs = token_logprobs_at(
                reference, batch.token_ids[rows], batch.attention[rows], batch.trainable[rows],
                cfg.temperature,
            )  # fmt: skip
        out[rows] = logprobs.float()
    return out

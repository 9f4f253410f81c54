"""PPO on a batch of compaction segments: scoring, critic update, actor update.

Three functions, each taking the batch and returning ``dict[str, float]``
(docs/method.md sections 3-5):

- :func:`score_batch`: critic values (no grad), advantages of the configured
  estimator, critic targets, whitening. Results go into ``batch.extras``.
- :func:`critic_update`: value-loss passes over the batch.
- :func:`actor_update`: clipped-PPO passes over the batch.

Rollout collection stays outside (the runtime), so a data-parallel version can
collect and score its shard and call the same updates with a ``global_sum``
that all-reduces the loss denominators.

Masks (docs/CONTRACTS.md; one mask, one meaning): ``policy_mask`` = trainable tokens that enter the policy
loss under the config (summary rows dropped for "w/o summary training"); it is
also the mask the estimators step over, so ``N_{>s}`` and the adaptive
lambda's length count exactly the tokens that are trained. ``attention`` is
padding only. Rewards are terminal; a rollout truncated by an exhausted
context carries reward 0 from the runtime and is never bootstrapped.

Loss denominators: each optimiser step (a minibatch) divides by its count over
the *whole* minibatch, whatever the micro-batching (token-mean: ``|M|`` of the
minibatch, not a mean of micro-batch means), see :func:`loss_denominator`.

Shapes: S segments (rows), T padded tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from transformers import PreTrainedModel

from cxsim.advantages import (
    adaptive_lambda,
    critic_returns,
    cross_segment_gae,
    group_broadcast,
    segment_gae,
    stitched_gae,
    whiten,
)
from cxsim.agents.models import sequence_logprobs
from cxsim.config import PPOConfig
from cxsim.losses import aggregate, masked_mean, policy_loss, rollout_token_counts, value_loss
from cxsim.segments import SegmentBatch

GlobalSum = Callable[[torch.Tensor], torch.Tensor]
"""Sums a local count over data-parallel ranks (identity on one process)."""
SyncGrads = Callable[[torch.nn.Module], None]
"""Sums a model's gradients over data-parallel ranks, in place (nothing on one process)."""
Whiten = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""Whitens (S, T) advantages over a (S, T) mask: ``whiten``, or its all-rank version."""


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _no_sync(model: torch.nn.Module) -> None:
    return None


# --------------------------------------------------------------------------- batching


def micro_batches(batch: SegmentBatch, rows: int) -> Iterator[SegmentBatch]:
    """Consecutive chunks of ``rows`` segments, each trimmed to its longest real length."""
    for start in range(0, len(batch), rows):
        chunk = batch.select(list(range(start, min(start + rows, len(batch)))))
        width = int(chunk.lengths.max())
        yield trim(chunk, width)


def trim(batch: SegmentBatch, width: int) -> SegmentBatch:
    """The batch cut to its first ``width`` positions (padding beyond is dropped)."""
    cut = {
        name: getattr(batch, name)[:, :width]
        for name in ("token_ids", "trainable", "attention", "logprobs")
    }
    extras = {k: (v[:, :width] if v.dim() == 2 else v) for k, v in batch.extras.items()}
    return SegmentBatch(
        **cut,
        is_summary=batch.is_summary,
        rollout_id=batch.rollout_id,
        segment_index=batch.segment_index,
        rewards=batch.rewards,
        group_id=batch.group_id,
        extras=extras,
    )


def minibatch_rows(batch: SegmentBatch, minibatches: int) -> list[torch.Tensor]:
    """Row indices of ``minibatches`` minibatches; whole rollouts, shuffled (torch's RNG).

    Rows inside a minibatch are sorted by length so micro-batches trim well.
    """
    rollouts = torch.unique(batch.rollout_id)
    order = rollouts[torch.randperm(len(rollouts))]
    lengths = batch.lengths
    out = []
    for part in torch.tensor_split(order, minibatches):
        rows = torch.nonzero(torch.isin(batch.rollout_id, part)).squeeze(1)
        out.append(rows[torch.argsort(lengths[rows], descending=True, stable=True)])
    return out


def loss_denominator(
    mask: torch.Tensor, mode: str, rollout_id: torch.Tensor, global_sum: GlobalSum = _identity
) -> torch.Tensor:
    """The count a minibatch's loss is divided by (see ``cxsim.losses.aggregate``).

    token-mean: masked tokens; segment-mean and seq-mean-token-sum: segments with
    a masked token; rollout-mean: rollouts with a masked token. Counted over the
    whole minibatch and summed over ranks by ``global_sum``; at least 1.
    """
    rows_with_tokens = mask.any(dim=1)
    if mode == "token-mean":
        count = mask.sum()
    elif mode in ("segment-mean", "seq-mean-token-sum"):
        count = rows_with_tokens.sum()
    elif mode == "rollout-mean":
        count = torch.tensor(len(torch.unique(rollout_id[rows_with_tokens])))
    else:
        raise ValueError(f"unknown loss mode {mode!r}")
    return global_sum(count.to(torch.float32)).clamp(min=1.0)


# --------------------------------------------------------------------------- scoring


@torch.no_grad()
def critic_values(critic: torch.nn.Module, batch: SegmentBatch, rows: int) -> torch.Tensor:
    """V(tokens_<t) at every position, (S, T); 0 at padding."""
    values = torch.zeros(batch.token_ids.shape, dtype=torch.float32)
    for start in range(0, len(batch), rows):
        chunk = batch.select(list(range(start, min(start + rows, len(batch)))))
        width = int(chunk.lengths.max())
        out = critic(chunk.token_ids[:, :width], chunk.attention[:, :width])
        values[start : start + len(chunk), :width] = out.float() * chunk.attention[:, :width]
    return values


def score_batch(
    batch: SegmentBatch,
    critic: torch.nn.Module | None,
    cfg: PPOConfig,
    whiten_fn: Whiten = whiten,
) -> tuple[SegmentBatch, dict[str, float]]:
    """Adds ``values``, ``advantages`` (as trained), ``returns``, ``policy_mask`` and the
    per-row ``lam`` (S,) to extras.

    Advantages per ``cfg.estimator`` on ``policy_mask``; lambda fixed or length-
    adaptive (``cfg.lambda_scope``); critic targets ``A + V`` from the corrected or
    the local advantages (``cfg.returns_from``); whitening last, if on.
    """
    mask = batch.policy_mask(cfg.train_summaries)  # (S, T)
    if critic is not None:
        values = critic_values(critic, batch, cfg.micro_batch_rows)
    else:
        values = torch.zeros(batch.token_ids.shape, dtype=torch.float32)
    if cfg.lambda_scope == "fixed":
        lam: float | torch.Tensor = cfg.lam
    else:
        lam = adaptive_lambda(mask, batch.rollout_id, cfg.lambda_scope, cfg.alpha)  # (S,)
    args = (batch.rollout_id, batch.segment_index, cfg.gamma, lam)
    local = segment_gae(values, mask, batch.rewards, cfg.gamma, lam)
    if cfg.estimator == "local":
        advantages = local
    elif cfg.estimator == "cross-segment":
        advantages = cross_segment_gae(values, mask, batch.rewards, *args)
    elif cfg.estimator == "stitched":
        advantages = stitched_gae(values, mask, batch.rewards, *args)
    else:  # group-broadcast: no critic, no lambda
        advantages = group_broadcast(batch.rewards, mask, batch.rollout_id, batch.group_id)
    target_adv = advantages if cfg.returns_from == "corrected" else local
    returns = critic_returns(target_adv, values, mask)
    trained = whiten_fn(advantages, mask) if cfg.whiten else advantages

    summary_rows = batch.is_summary[:, None] & mask
    exec_rows = ~batch.is_summary[:, None] & mask
    lam_mean = float(lam.mean()) if isinstance(lam, torch.Tensor) else lam
    stats = {
        "critic/value_mean": float(masked_mean(values, mask)),
        "critic/return_mean": float(masked_mean(returns, mask)),
        "critic/explained_variance": explained_variance(values, returns, mask),
        "charts/advantage_abs_execution": float(masked_mean(advantages.abs(), exec_rows)),
        "charts/advantage_abs_summary": float(masked_mean(advantages.abs(), summary_rows)),
        "charts/lambda_mean": lam_mean,
        "charts/policy_tokens": float(mask.sum()),
    }
    lam_rows = torch.as_tensor(lam, dtype=torch.float32).expand(len(batch))  # (S,)
    batch = batch.with_extras(
        values=values, advantages=trained, returns=returns, policy_mask=mask, lam=lam_rows
    )
    return batch, stats


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var(G - V) / Var(G)`` over the masked tokens (nan when G is constant)."""
    g, v = returns[mask].double(), values[mask].double()
    if g.numel() < 2 or float(g.var()) == 0.0:
        return float("nan")
    return float(1.0 - (g - v).var() / g.var())


# --------------------------------------------------------------------------- updates


def critic_update(
    critic: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: SegmentBatch,
    cfg: PPOConfig,
    passes: int,
    global_sum: GlobalSum = _identity,
    sync_grads: SyncGrads = _no_sync,
) -> dict[str, float]:
    """``passes`` passes of ``cfg.minibatches`` steps on the token-mean value loss.

    Needs ``values``, ``returns`` and ``policy_mask`` in ``batch.extras`` (from
    :func:`score_batch`).
    """
    losses, norms = [], []
    for _ in range(passes):
        for rows in minibatch_rows(batch, cfg.minibatches):
            minibatch = batch.select(rows)
            mask = minibatch.extras["policy_mask"]
            denom = loss_denominator(mask, "token-mean", minibatch.rollout_id, global_sum)
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for micro in micro_batches(minibatch, cfg.micro_batch_rows):
                values = critic(micro.token_ids, micro.attention)  # (s, t)
                per_token = value_loss(
                    values, micro.extras["values"], micro.extras["returns"], cfg.value_clip_eps
                )
                loss = aggregate(per_token, micro.extras["policy_mask"], "token-mean", None, denom)
                loss.backward()
                total += float(loss.detach())
            sync_grads(critic)  # summed over ranks: with the global denominator, the full gradient
            norms.append(
                float(torch.nn.utils.clip_grad_norm_(critic.parameters(), cfg.max_grad_norm))
            )
            optimizer.step()
            losses.append(total)
    return {
        "losses/value": sum(losses) / len(losses),
        "critic/grad_norm": sum(norms) / len(norms),
    }


def actor_update(
    policy: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    batch: SegmentBatch,
    cfg: PPOConfig,
    global_sum: GlobalSum = _identity,
    sync_grads: SyncGrads = _no_sync,
) -> dict[str, float]:
    """``cfg.epochs`` passes of ``cfg.minibatches`` clipped-PPO steps.

    Loss per step: ``aggregate(policy_loss, policy_mask, cfg.loss_mode)`` minus
    ``entropy_coef`` times the same reduction of the entropy, with the
    minibatch's global denominator. Needs ``advantages`` and ``policy_mask``
    in ``batch.extras``.
    """
    sums = {"loss": 0.0, "kl": 0.0, "clipped": 0.0, "entropy": 0.0, "ratio_max": 0.0}
    tokens, steps, norms = 0.0, 0, []
    for _ in range(cfg.epochs):
        for rows in minibatch_rows(batch, cfg.minibatches):
            minibatch = batch.select(rows)
            denom = loss_denominator(
                minibatch.extras["policy_mask"], cfg.loss_mode, minibatch.rollout_id, global_sum
            )
            if cfg.loss_mode == "rollout-mean":  # micro-batches may split a rollout
                minibatch.extras["rollout_tokens"] = rollout_token_counts(
                    minibatch.extras["policy_mask"], minibatch.rollout_id
                )
            optimizer.zero_grad(set_to_none=True)
            for micro in micro_batches(minibatch, cfg.micro_batch_rows):
                mask = micro.extras["policy_mask"]
                per_rollout = micro.extras.get("rollout_tokens")
                logprobs, entropy = sequence_logprobs(
                    policy, micro.token_ids, micro.attention, cfg.temperature, return_entropy=True
                )
                per_token, stats = policy_loss(
                    logprobs, micro.logprobs, micro.extras["advantages"], cfg.clip_eps
                )
                loss = aggregate(
                    per_token, mask, cfg.loss_mode, micro.rollout_id, denom, per_rollout
                )
                if cfg.entropy_coef:
                    bonus = aggregate(
                        entropy, mask, cfg.loss_mode, micro.rollout_id, denom, per_rollout
                    )
                    loss = loss - cfg.entropy_coef * bonus
                loss.backward()
                n = float(mask.sum())
                tokens += n
                sums["loss"] += float(loss.detach())
                sums["kl"] += float(masked_mean(stats["approx_kl"], mask)) * n
                sums["clipped"] += float(masked_mean(stats["clipped"], mask)) * n
                sums["entropy"] += float(masked_mean(entropy.detach(), mask)) * n
                if n:
                    sums["ratio_max"] = max(sums["ratio_max"], float(stats["ratio"][mask].max()))
            sync_grads(policy)  # summed over ranks: with the global denominator, the full gradient
            norms.append(
                float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
            )
            optimizer.step()
            steps += 1
    tokens = max(tokens, 1.0)
    return {
        "losses/policy": sums["loss"] / steps,
        "losses/approx_kl": sums["kl"] / tokens,
        "losses/clip_fraction": sums["clipped"] / tokens,
        "losses/entropy": sums["entropy"] / tokens,
        "losses/ratio_max": sums["ratio_max"],
        "losses/actor_grad_norm": sum(norms) / len(norms),
    }

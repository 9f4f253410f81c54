"""PPO on a batch of compaction segments: scoring, critic update, actor update.

Three functions (docs/method.md sections 3-5):

- :func:`score_batch`: critic values (no grad), advantages of the configured
  estimator (``cxsim.estimators.ESTIMATORS``), critic targets, whitening; returns
  a :class:`ScoredBatch` and its statistics.
- :func:`critic_update`: value-loss passes over the scored batch (the loss of
  ``cxsim.critics.VALUE_LOSSES``; a histogram loss reads the critic's logits).
- :func:`actor_update`: clipped-PPO passes over the scored batch. Before its first
  step it checks that the ratio is 1 (the policy has not moved since it sampled),
  naming the sampling and the scoring temperature when it is not.

Rollout collection stays outside (the runtime), so a data-parallel version can
collect and score its shard and call the same updates with a ``global_sum``
that all-reduces the loss denominators.

Masks (docs/CONTRACTS.md; one mask, one meaning): ``policy_mask`` = trainable tokens that enter the policy
loss under the config (summary rows dropped for "w/o summary training"); it is
also the mask the estimators step over, so ``N_{>s}`` and the adaptive
lambda's length count exactly the tokens that are trained. ``attention`` is
padding only. The terminal reward ``R`` sits where the method puts it; step
rewards at their own tokens; an episode the environment truncated is
bootstrapped only with ``bootstrap_truncated`` (default: a failure, as the method).

Minibatches, micro-batches and the loss denominators (a minibatch's whole count,
whatever the micro-batching): cxsim/minibatches.py. The first-ratio check:
cxsim/ratio_check.py. The stabilisers' pieces: cxsim/stabilisers.py.

Device and precision: every tensor is created on the batch's device (the models'
one; ``SegmentBatch.to``), and ``precision="bf16"`` runs the model forwards under
bfloat16 autocast (``cxsim.devices.autocast``) while losses, log-probs and values
stay float32, as do the weights and optimizer states. Memory: the actor's LM
head runs only at the policy-mask positions, in chunks
(``cxsim.agents.models.token_logprobs_at``), and micro-batches can be sized by a
token budget (``micro_batch_tokens``).

Shapes: S segments (rows), T padded tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from transformers import PreTrainedModel

from cxsim.advantages import adaptive_lambda, bootstrapped_rewards, critic_returns
from cxsim.agents.models import token_logprobs_at
from cxsim.config import PPOConfig
from cxsim.critics import VALUE_HEADS, VALUE_LOSSES, ValueLossInputs
from cxsim.devices import Precision, autocast
from cxsim.diagnostics._common import explained_variance as explained_variance_of
from cxsim.estimators import ESTIMATORS, EstimatorInputs
from cxsim.loss_modes import LOSS_MODES
from cxsim.losses import aggregate, masked_mean, policy_loss
from cxsim.minibatches import (
    GlobalSum,
    _identity,
    loss_denominator,
    micro_batch_spans,
    micro_batches,
    minibatch_rows,
)
from cxsim.plugin_checks import check_advantages
from cxsim.ratio_check import check_first_ratio, ratio_tolerance
from cxsim.segments import OPENING_CONTEXT, SegmentBatch
from cxsim.stabilisers import (
    beyond_target_kl,
    kl_penalty,
    kl_reward,
    outcome_spread,
    reference_kl,
)
from cxsim.whitening import whiten

SyncGrads = Callable[[torch.nn.Module], None]
"""Sums a model's gradients over data-parallel ranks, in place (nothing on one process)."""
Whiten = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
"""Whitens (S, T) advantages over a (S, T) mask, a floor under the spread (or all ranks')."""


def _no_sync(model: torch.nn.Module) -> None:
    """Nothing to sum on one process."""


@dataclass(frozen=True)
class ScoredBatch:
    """A segment batch with what :func:`score_batch` computed for it. All (S, T) unless noted."""

    batch: SegmentBatch
    values: torch.Tensor
    """Critic values at scoring time (zeros without a critic); the value clip's old values."""
    advantages: torch.Tensor
    """Advantages as trained (whitened when the config says so); 0 off ``policy_mask``."""
    returns: torch.Tensor
    """Critic targets ``G = A + V`` from the estimator's unwhitened advantages."""
    policy_mask: torch.Tensor
    """bool: tokens in the policy loss, the value loss and the estimator."""
    lam: torch.Tensor
    """(S,) the lambda each row's GAE used."""
    rollout_tokens: torch.Tensor | None = None
    """(S,) each row's rollout's policy tokens in the minibatch (loss modes that need it)."""
    ref_logprobs: torch.Tensor | None = None
    """Log-probs of the reference policy at the policy tokens (``--ppo.kl-coef`` in the
    loss); None without one."""

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def lengths(self) -> torch.Tensor:  # (S,)
        return self.batch.lengths

    def select(self, rows: torch.Tensor | Sequence[int]) -> ScoredBatch:
        """The given rows (a minibatch)."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.values.device)
        pick = self.rollout_tokens[idx] if self.rollout_tokens is not None else None
        ref = self.ref_logprobs[idx] if self.ref_logprobs is not None else None
        return ScoredBatch(
            self.batch.select(idx), self.values[idx], self.advantages[idx], self.returns[idx],
            self.policy_mask[idx], self.lam[idx], pick, ref,
        )  # fmt: skip

    def trim(self, width: int) -> ScoredBatch:
        """Cut to the first ``width`` positions."""
        return ScoredBatch(
            self.batch.trim(width), self.values[:, :width], self.advantages[:, :width],
            self.returns[:, :width], self.policy_mask[:, :width], self.lam, self.rollout_tokens,
            None if self.ref_logprobs is None else self.ref_logprobs[:, :width],
        )  # fmt: skip


# --------------------------------------------------------------------------- scoring


@torch.no_grad()
def critic_values(
    critic: torch.nn.Module,
    batch: SegmentBatch,
    rows: int,
    tokens: int | None = None,
    precision: Precision = "fp32",
) -> torch.Tensor:
    """V(tokens_<t) at every position, (S, T) float32 on the batch's device; 0 at padding.
    Micro-batches of ``rows`` rows and at most ``tokens`` padded tokens."""
    device = batch.token_ids.device
    values = torch.zeros(batch.token_ids.shape, dtype=torch.float32, device=device)
    for start, stop in micro_batch_spans(batch.lengths.tolist(), rows, tokens):
        chunk = batch.select(list(range(start, stop)))
        width = int(chunk.lengths.max())
        with autocast(precision, device):
            context = chunk.extras.get(OPENING_CONTEXT)  # what a context-reading head needs
            out = critic(
                chunk.token_ids[:, :width],
                chunk.attention[:, :width],
                context=None if context is None else context[:, :width],
            )
        values[start:stop, :width] = out.float() * chunk.attention[:, :width]
    return values


@torch.no_grad()
def final_values(
    critic: torch.nn.Module,
    batch: SegmentBatch,
    rows: torch.Tensor,
    continuation: Sequence[int],
    precision: Precision = "fp32",
) -> torch.Tensor:
    """(S,) the critic's value of each row in ``rows`` after all its tokens and then
    ``continuation`` (the assistant header: the state the next response would start in);
    0 on the other rows."""
    device = batch.token_ids.device
    out = torch.zeros(len(batch), dtype=torch.float32, device=device)
    extra = torch.tensor(list(continuation), dtype=torch.long, device=device)
    for row in rows.tolist():
        n = int(batch.lengths[row])
        ids = torch.cat([batch.token_ids[row, :n], extra, extra.new_zeros(1)])[None]
        context = None
        if OPENING_CONTEXT in batch.extras:  # the row's own; the continuation is not in it
            context = torch.zeros_like(ids, dtype=torch.bool)
            context[0, :n] = batch.extras[OPENING_CONTEXT][row, :n]
        with autocast(precision, device):
            values = critic(ids, torch.ones_like(ids, dtype=torch.bool), context=context)
        out[row] = values[0, -1].float()  # V(all tokens + continuation)
    return out


def with_critic_inputs(batch: SegmentBatch, cfg: PPOConfig, header: Sequence[int]) -> SegmentBatch:
    """The batch with what the configured value head reads besides the tokens: each row's
    opening context, up to its first assistant ``header`` (``SegmentBatch.extras``), for a
    head that reads it; else the batch itself."""
    if VALUE_HEADS[cfg.value_head].reads == "context":
        return batch.with_opening_context(header)
    return batch


def score_batch(
    batch: SegmentBatch,
    critic: torch.nn.Module | None,
    cfg: PPOConfig,
    whiten_fn: Whiten = whiten,
    continuation: Sequence[int] = (),
    precision: Precision = "fp32",
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[ScoredBatch, dict[str, float]]:
    """Values, advantages (``ESTIMATORS[cfg.estimator]``), returns and the per-row lambda.

    ``ref_logprobs``: the reference policy's log-probs of the trainable tokens
    (:func:`reference_logprobs`), for ``--ppo.kl-coef`` (in the reward: taken off each
    policy token's reward here) and the KL-to-reference figures; None without a reference.

    lambda fixed or length-adaptive (``cfg.lambda_scope``); terminal rewards
    bootstrapped at environment truncations when ``cfg.bootstrap_truncated`` (from the
    critic's value after the row and ``continuation``, :func:`final_values`); critic
    targets ``A + V`` from the estimator's advantages, or, with ``cfg.critic_lam``, from
    the same estimator's advantages at that lambda; whitening last, if on. The only
    model pass is the critic's (no grad; the behaviour log-probs come with the batch).
    """
    batch = with_critic_inputs(batch, cfg, continuation)
    mask = batch.policy_mask(cfg.train_summaries)  # (S, T)
    device = batch.token_ids.device
    estimator = ESTIMATORS[cfg.estimator]
    if critic is not None and estimator.needs_critic:
        values = critic_values(
            critic, batch, cfg.micro_batch_rows, cfg.micro_batch_tokens, precision
        )
    else:
        values = torch.zeros(batch.token_ids.shape, dtype=torch.float32, device=device)
    if cfg.lambda_scope == "fixed":
        lam: float | torch.Tensor = cfg.lam
    else:
        lam = adaptive_lambda(mask, batch.rollout_id, cfg.lambda_scope, cfg.alpha)  # (S,)
    rewards = batch.rewards
    truncated = batch.ends("env_truncated")
    if cfg.bootstrap_truncated and critic is not None and bool(truncated.any()):
        rows = torch.nonzero(truncated).squeeze(1)
        tail = final_values(critic, batch, rows, continuation, precision)
        rewards = bootstrapped_rewards(rewards, batch.rollout_id, truncated, tail, cfg.gamma)
    step_rewards = batch.step_rewards
    if ref_logprobs is not None and cfg.kl_coef > 0 and cfg.kl_in == "reward":
        step_rewards = kl_reward(step_rewards, batch.logprobs, ref_logprobs, mask, cfg.kl_coef)
    inputs = EstimatorInputs(
        values=values, mask=mask, rewards=rewards, step_rewards=step_rewards,
        rollout_id=batch.rollout_id, segment_index=batch.segment_index,
        group_id=batch.group_id, gamma=cfg.gamma, lam=lam, parent_index=batch.parent_index,
    )  # fmt: skip
    advantages = check_advantages(cfg.estimator, estimator.advantages(inputs), mask)
    if cfg.critic_lam is None:  # the critic's targets from the actor's advantages
        returns = critic_returns(advantages, values, mask)
    else:  # the same estimator over the same segments, at the critic's lambda
        critic_advantages = estimator.advantages(replace(inputs, lam=cfg.critic_lam))
        critic_advantages = check_advantages(cfg.estimator, critic_advantages, mask)
        returns = critic_returns(critic_advantages, values, mask)
    trained = whiten_fn(advantages, mask, cfg.whiten_std_floor) if cfg.whiten else advantages

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
        "stability/advantage_std": float(advantages[mask].std()) if mask.sum() > 1 else 0.0,
    }
    stats |= outcome_spread(batch.rewards, batch.rollout_id, batch.group_id)
    if ref_logprobs is not None:  # how far the sampling policy is from the reference
        stats |= reference_kl(batch.logprobs, ref_logprobs, batch.trainable, batch.is_summary)
    lam_rows = torch.as_tensor(lam, dtype=torch.float32, device=device).expand(len(batch))
    ref = ref_logprobs if cfg.kl_coef > 0 and cfg.kl_in == "loss" else None
    scored = ScoredBatch(batch, values, trained, returns, mask, lam_rows.clone(), None, ref)
    return scored, stats


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var(G - V) / Var(G)`` over the masked tokens (nan when G is constant, rounding
    left out: every rollout of a batch succeeding gives Monte Carlo targets that differ from
    1 in float32 only, and their variance, ~1e-15, would make this -1e14)."""
    g = returns[mask].double()
    return float(explained_variance_of(values[mask].double(), g)) if g.numel() > 1 else math.nan


# --------------------------------------------------------------------------- updates


def _with_denominator(
    minibatch: ScoredBatch, mode: str, global_sum: GlobalSum
) -> tuple[ScoredBatch, torch.Tensor]:
    """The minibatch (with each row's per-rollout figure, for a mode that divides by one:
    micro-batches may split a rollout) and its global denominator under loss mode ``mode``."""
    spec, mask, b = LOSS_MODES[mode], minibatch.policy_mask, minibatch.batch
    denom = loss_denominator(mask, mode, b.rollout_id, global_sum, b.is_summary)
    if spec.divides_by_rollout:
        minibatch = replace(minibatch, rollout_tokens=spec.rollout_figures(mask, b.rollout_id))
    return minibatch, denom


def critic_update(
    critic: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scored: ScoredBatch,
    cfg: PPOConfig,
    passes: int,
    global_sum: GlobalSum = _identity,
    sync_grads: SyncGrads = _no_sync,
    precision: Precision = "fp32",
) -> dict[str, float]:
    """``passes`` passes of ``cfg.minibatches`` steps on the value loss
    (``VALUE_LOSSES[cfg.value_loss]``, cxsim/critics.py), reduced by ``cfg.critic_loss_mode``
    (token-mean by default; ``thread-mean``: each compaction thread the same total weight)."""
    losses, norms = [], []
    device = scored.batch.token_ids.device
    value_loss = VALUE_LOSSES[cfg.value_loss]
    with_logits = value_loss.support(cfg) is not None  # a histogram head: the loss reads logits
    # the critic's own head (a critic built apart from cfg, as Critic.from_policy makes one)
    refit = VALUE_HEADS[getattr(critic, "value_head", cfg.value_head)].refit
    if refit is not None:  # the head's closed-form part, on this batch and the earlier ones
        refit(critic.pool, scored, global_sum)
    for _ in range(passes):
        for rows in minibatch_rows(scored.batch, cfg.minibatches):
            minibatch, denom = _with_denominator(
                scored.select(rows), cfg.critic_loss_mode, global_sum
            )
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for micro in micro_batches(minibatch, cfg.micro_batch_rows, cfg.micro_batch_tokens):
                logits = None
                with autocast(precision, device):
                    if with_logits:  # (s, t), (s, t, K)
                        values, logits = critic(
                            micro.batch.token_ids,
                            micro.batch.attention,
                            return_logits=True,
                            context=micro.batch.extras.get(OPENING_CONTEXT),
                        )
                    else:  # (s, t)
                        values = critic(
                            micro.batch.token_ids,
                            micro.batch.attention,
                            context=micro.batch.extras.get(OPENING_CONTEXT),
                        )
                per_token = value_loss.loss(
                    ValueLossInputs(values, logits, micro.values, micro.returns, cfg)
                )
                b = micro.batch
                loss = aggregate(
                    per_token, micro.policy_mask, cfg.critic_loss_mode, b.rollout_id, denom,
                    micro.rollout_tokens, b.is_summary,
                )  # fmt: skip
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


class _ActorStats:
    """Token-weighted sums of one actor update's statistics, micro-batch by micro-batch."""

    def __init__(self) -> None:
        self.sums = dict.fromkeys(("loss", "kl", "clipped", "entropy", "kl_ref"), 0.0)
        self.role = dict.fromkeys(("action", "summary", "action_n", "summary_n"), 0.0)
        self.tokens, self.ratio_max = 0.0, 0.0

    def add(
        self,
        loss: torch.Tensor,
        stats: dict[str, torch.Tensor],
        entropy: torch.Tensor,
        kl_ref: torch.Tensor | None,
        mask: torch.Tensor,
        is_summary: torch.Tensor,
    ) -> None:
        """One micro-batch's loss (a scalar), per-token statistics and entropy, (s, t)."""
        n = float(mask.sum())
        self.tokens += n
        self.sums["loss"] += float(loss.detach())
        self.sums["kl"] += float(masked_mean(stats["approx_kl"], mask)) * n
        self.sums["clipped"] += float(masked_mean(stats["clipped"], mask)) * n
        self.sums["entropy"] += float(masked_mean(entropy.detach(), mask)) * n
        if kl_ref is not None:
            self.sums["kl_ref"] += float(kl_ref.detach()[mask].sum())
        summary = mask & is_summary[:, None]
        for name, where in (("action", mask & ~summary), ("summary", summary)):
            self.role[name] += float(entropy.detach()[where].sum())
            self.role[f"{name}_n"] += float(where.sum())
        if n:
            self.ratio_max = max(self.ratio_max, float(stats["ratio"][mask].max()))

    def metrics(self, looked: int, with_kl: bool) -> dict[str, float]:
        tokens, role = max(self.tokens, 1.0), self.role
        out = {
            "losses/policy": self.sums["loss"] / max(looked, 1),
            "losses/approx_kl": self.sums["kl"] / tokens,
            "losses/clip_fraction": self.sums["clipped"] / tokens,
            "losses/entropy": self.sums["entropy"] / tokens,
            "losses/entropy_action": role["action"] / max(role["action_n"], 1.0),
            "losses/entropy_summary": role["summary"] / max(role["summary_n"], 1.0),
            "losses/ratio_max": self.ratio_max,
        }
        if with_kl:
            out["losses/kl_to_reference"] = self.sums["kl_ref"] / tokens
        return out


def actor_update(
    policy: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scored: ScoredBatch,
    cfg: PPOConfig,
    global_sum: GlobalSum = _identity,
    sync_grads: SyncGrads = _no_sync,
    precision: Precision = "fp32",
) -> dict[str, float]:
    """``cfg.epochs`` passes of ``cfg.minibatches`` clipped-PPO steps.

    Loss per step: ``aggregate(policy_loss, policy_mask, cfg.loss_mode)`` minus
    ``entropy_coef`` times the same reduction of the entropy, plus ``kl_coef`` times the
    same reduction of the KL estimate to the reference (``kl_in="loss"``), with the
    minibatch's global denominator. The first minibatch's largest |log ratio| is checked
    before any step (:func:`check_first_ratio`). With ``cfg.target_kl``, a minibatch whose
    approximate KL to the sampling policy exceeds it takes no step, nor do the rest.
    Log-probs and entropy at the policy-mask positions only (``token_logprobs_at``),
    under ``precision``'s autocast.
    """
    with_kl = cfg.kl_coef > 0 and cfg.kl_in == "loss"
    if with_kl and scored.ref_logprobs is None:
        raise ValueError("--ppo.kl-coef in the loss needs the reference's log-probs: score the "
                         "batch with ref_logprobs (cxsim.ppo.reference_logprobs)")  # fmt: skip
    acc, steps, looked, norms, first_ratio, stopped = _ActorStats(), 0, 0, [], 0.0, False
    device = scored.batch.token_ids.device
    for _ in range(cfg.epochs):
        for rows in minibatch_rows(scored.batch, cfg.minibatches):
            minibatch = scored.select(rows)
            minibatch, denom = _with_denominator(minibatch, cfg.loss_mode, global_sum)
            optimizer.zero_grad(set_to_none=True)
            step_kl = torch.zeros(2, dtype=torch.float64, device=device)  # sum, count
            for micro in micro_batches(minibatch, cfg.micro_batch_rows, cfg.micro_batch_tokens):
                mask, b = micro.policy_mask, micro.batch
                with autocast(precision, device):
                    logprobs, entropy = token_logprobs_at(
                        policy, b.token_ids, b.attention, mask, cfg.temperature,
                        return_entropy=True,
                    )  # fmt: skip
                per_token, stats = policy_loss(logprobs, b.logprobs, micro.advantages, cfg.clip_eps)
                if steps == 0 and mask.any():  # nothing has moved the policy since it sampled
                    log_ratio = (logprobs.detach() - b.logprobs)[mask]
                    first_ratio = max(first_ratio, float(log_ratio.abs().max()))
                args = (b.rollout_id, denom, micro.rollout_tokens, b.is_summary)
                loss = aggregate(per_token, mask, cfg.loss_mode, *args)
                if cfg.entropy_coef:
                    loss = loss - cfg.entropy_coef * aggregate(entropy, mask, cfg.loss_mode, *args)
                kl = kl_penalty(logprobs, micro.ref_logprobs, cfg.kl_estimator) if with_kl else None
                if kl is not None:
                    loss = loss + cfg.kl_coef * aggregate(kl, mask, cfg.loss_mode, *args)
                loss.backward()
                step_kl += torch.stack([stats["approx_kl"][mask].double().sum(), mask.sum()])
                acc.add(loss, stats, entropy, kl, mask, b.is_summary)
            looked += 1
            if steps == 0 and cfg.ratio_check_atol is not None:
                sampled = scored.batch.temperature
                atol = ratio_tolerance(cfg.ratio_check_atol, precision)
                check_first_ratio(first_ratio, atol, sampled, cfg.temperature, global_sum)
            if stopped := beyond_target_kl(step_kl, cfg.target_kl, global_sum):
                break
            sync_grads(policy)  # summed over ranks: with the global denominator, the full gradient
            norms.append(
                float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm))
            )
            optimizer.step()
            steps += 1
        if stopped:
            break
    optimizer.zero_grad(set_to_none=True)
    return acc.metrics(looked, with_kl) | {
        "losses/first_log_ratio_max": first_ratio,
        "losses/actor_grad_norm": sum(norms) / len(norms) if norms else 0.0,
        "losses/actor_steps": float(steps),
        "losses/early_stopped": float(stopped),
    }

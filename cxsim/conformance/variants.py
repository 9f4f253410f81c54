"""Deliberately wrong functions, one per pitfall of docs/conformance.md, for testing the check.

Each has the signature of a layout (named in its docstring) and gets one term
wrong, the way re-implementations of the method have. ``cxsim conform`` must
fail each of them and name the term::

    cxsim conform cxsim.conformance.variants:local_gae_observations_as_steps \\
        --quantity local-gae --layout segment-rows

They are loops over tokens on purpose: written the way such code usually is.
"""

from __future__ import annotations

import torch


def _gae_row(values, steps, reward_pos, reward, gamma, lams) -> list[float]:
    """GAE backwards over the positions where ``steps``; reward added at ``reward_pos``."""
    out = [0.0] * len(values)
    running, next_value = 0.0, 0.0
    for t in range(len(values) - 1, -1, -1):
        if not steps[t]:
            continue
        delta = (reward if t == reward_pos else 0.0) + gamma * next_value - values[t]
        running = delta + gamma * lams[t] * running
        out[t] = running
        next_value = values[t]
    return out


def _last(flags) -> int:
    return max(i for i, f in enumerate(flags) if f)


def _lengths_lambda(
    lengths: list[int], alpha: float, clamp: bool, cap: float | None
) -> list[float]:
    lams = [1.0 - 1.0 / (alpha * n) if n else 0.0 for n in lengths]  # l = 0: no tokens to step
    if clamp:
        lams = [max(x, 0.0) for x in lams]
    if cap is not None:
        lams = [min(x, cap) for x in lams]
    return lams


def _rollout_totals(ids: list[int], counts: list[int]) -> list[int]:
    """Each row's count replaced by the sum over the rows of its rollout (rollout scope)."""
    totals: dict[int, int] = {}
    for rid, n in zip(ids, counts, strict=True):
        totals[rid] = totals.get(rid, 0) + n
    return [totals[rid] for rid in ids]


def _row_lambdas(lam, response_mask, rollout_id, alpha, scope) -> list[float]:
    """Per-row lambda, right: fixed, or 1 - 1/(alpha l) over trainable tokens, clamped at 0."""
    if lam is not None:
        return [lam] * response_mask.shape[0]
    counts = response_mask.sum(dim=1).tolist()
    if scope == "rollout":
        counts = _rollout_totals(rollout_id.tolist(), counts)
    return _lengths_lambda(counts, alpha, clamp=True, cap=None)


def local_gae_observations_as_steps(
    values, response_mask, attention_mask, rewards, rollout_id, segment_index, gamma, lam, alpha,
    lambda_scope,
) -> torch.Tensor:  # fmt: skip
    """segment-rows, local-gae: every response token is a GAE step, reward on the last one.

    The recursion runs over the attention mask (observation tokens included, their
    values used), the reward sits on the row's last response token, and the
    advantages are masked with the response mask afterwards. On the 5-token row
    ``T T T o o`` with values (0.5, 0.4, 0.2, 0, 0.8), gamma 1, lambda 0.8, token 2
    gets 0.2544 instead of 0.44.
    """
    row_lams = _row_lambdas(lam, response_mask, rollout_id, alpha, lambda_scope)
    out = torch.zeros_like(values)
    for r in range(values.shape[0]):
        steps = attention_mask[r].tolist()
        lams = [row_lams[r]] * values.shape[1]
        row = _gae_row(values[r].tolist(), steps, _last(steps), float(rewards[r]), gamma, lams)
        out[r] = torch.tensor(row, dtype=values.dtype)
    return out * response_mask


def local_gae_reward_on_last_response_token(
    values, response_mask, attention_mask, rewards, rollout_id, segment_index, gamma, lam, alpha,
    lambda_scope,
) -> torch.Tensor:  # fmt: skip
    """segment-rows, local-gae: the reward goes to the last response token.

    Token-level rewards placed at ``response_length - 1``: when the segment ends on
    observation tokens that position is masked out and the reward is dropped.
    """
    row_lams = _row_lambdas(lam, response_mask, rollout_id, alpha, lambda_scope)
    out = torch.zeros_like(values)
    for r in range(values.shape[0]):
        steps = response_mask[r].tolist()
        lams = [row_lams[r]] * values.shape[1]
        reward_pos = _last(attention_mask[r].tolist())
        row = _gae_row(values[r].tolist(), steps, reward_pos, float(rewards[r]), gamma, lams)
        out[r] = torch.tensor(row, dtype=values.dtype)
    return out


def adaptive_lambda_with_observations(
    loss_masks, response_lengths, rollout_ids, trainable_counts, alpha, lambda_scope
) -> list[float]:
    """samples, adaptive-lambda: ``l`` is the response length, observation tokens included.

    A segment of 4 trainable and 4 observation tokens gets 1 - 1/12 instead of 1 - 1/6.
    """
    lengths = list(response_lengths)
    if lambda_scope == "rollout":
        lengths = _rollout_totals(rollout_ids, lengths)
    return _lengths_lambda(lengths, alpha, clamp=True, cap=None)


def _cross_segment_samples(
    values, loss_masks, rewards, rollout_ids, trainable_counts, tokens_after, gamma, lam,
    alpha, lambda_scope, clamp: bool, cap: float | None,
) -> list[torch.Tensor]:  # fmt: skip
    counts = list(trainable_counts)
    if lambda_scope == "rollout":
        counts = _rollout_totals(rollout_ids, counts)
    lams = _lengths_lambda(counts, alpha, clamp, cap) if lam is None else [lam] * len(values)
    out = []
    for v, m, reward, after, lam_s in zip(
        values, loss_masks, rewards, tokens_after, lams, strict=True
    ):
        steps = [bool(x) for x in m.tolist()]
        row = _gae_row(v.tolist(), steps, _last(steps), reward, gamma, [lam_s] * len(v))
        out.append(torch.tensor(row, dtype=torch.float64) * (gamma * lam_s) ** after)
    return out


def cross_segment_gae_lambda_capped(
    values, loss_masks, rewards, response_lengths, rollout_ids, segment_indices,
    trainable_counts, tokens_after, gamma, lam, alpha, lambda_scope,
) -> list[torch.Tensor]:  # fmt: skip
    """samples, cross-segment-gae: adaptive lambda capped at 0.999.

    The first token of a 1000-token segment followed by 2000 more gets
    0.999^2999 = 0.050 instead of (1 - 1/1500)^2999 = 0.135.
    """
    return _cross_segment_samples(
        values, loss_masks, rewards, rollout_ids, trainable_counts, tokens_after, gamma, lam,
        alpha, lambda_scope, clamp=True, cap=0.999,
    )  # fmt: skip


def cross_segment_gae_negative_lambda(
    values, loss_masks, rewards, response_lengths, rollout_ids, segment_indices,
    trainable_counts, tokens_after, gamma, lam, alpha, lambda_scope,
) -> list[torch.Tensor]:  # fmt: skip
    """samples, cross-segment-gae: adaptive lambda not clamped at 0.

    Below alpha = 1 a one-token segment gets lambda = 1 - 1/alpha < 0, and the
    correction (gamma lambda)^N_after flips sign with the parity of N_after.
    """
    return _cross_segment_samples(
        values, loss_masks, rewards, rollout_ids, trainable_counts, tokens_after, gamma, lam,
        alpha, lambda_scope, clamp=False, cap=None,
    )  # fmt: skip


def token_mean_of_micro_batch_means(losses, masks, rollout_ids, mode) -> torch.Tensor:
    """loss-matrix, loss-reduction (token-mean): each micro-batch's mean, averaged.

    Micro-batches of 1 token with loss 1 and 3 tokens with loss 0 give 0.50 instead of 0.25.
    """
    means = [
        (loss * mask).sum() / mask.sum().clamp(min=1)
        for loss, mask in zip(losses, masks, strict=True)
    ]
    return torch.stack(means).mean()


def _segment_scope_samples(
    values, loss_masks, response_lengths, rewards, trainable_counts, tokens_after, gamma, lam,
    alpha, reward_on_last_response_token: bool,
) -> list[torch.Tensor]:  # fmt: skip
    """Cross-segment GAE over samples with lambda always over the segment (``n_s``)."""
    lams = _lengths_lambda(list(trainable_counts), alpha, clamp=True, cap=None)
    if lam is not None:
        lams = [lam] * len(values)
    out = []
    for v, m, n, reward, after, lam_s in zip(
        values, loss_masks, response_lengths, rewards, tokens_after, lams, strict=True
    ):
        steps = [bool(x) for x in m.tolist()]
        if not any(steps):  # a rejected summary attempt: nothing to train
            out.append(torch.zeros(n, dtype=torch.float64))
            continue
        reward_pos = n - 1 if reward_on_last_response_token else _last(steps)
        row = _gae_row(v.tolist(), steps, reward_pos, reward, gamma, [lam_s] * len(v))
        out.append(torch.tensor(row, dtype=torch.float64) * (gamma * lam_s) ** after)
    return out


def cross_segment_gae_segment_scope_only(
    values, loss_masks, rewards, response_lengths, rollout_ids, segment_indices,
    trainable_counts, tokens_after, gamma, lam, alpha, lambda_scope,
) -> list[torch.Tensor]:  # fmt: skip
    """samples, cross-segment-gae: adaptive lambda over the segment only (``lambda_scope`` is
    ignored), right otherwise: it passes with ``--claims segment-scope``."""
    return _segment_scope_samples(
        values, loss_masks, response_lengths, rewards, trainable_counts, tokens_after, gamma,
        lam, alpha, reward_on_last_response_token=False,
    )  # fmt: skip


def cross_segment_gae_segment_scope_only_reward_dropped(
    values, loss_masks, rewards, response_lengths, rollout_ids, segment_indices,
    trainable_counts, tokens_after, gamma, lam, alpha, lambda_scope,
) -> list[torch.Tensor]:  # fmt: skip
    """samples, cross-segment-gae: segment-scope lambda only, and the reward on the sample's
    last response token (dropped when the segment ends on observation tokens)."""
    return _segment_scope_samples(
        values, loss_masks, response_lengths, rewards, trainable_counts, tokens_after, gamma,
        lam, alpha, reward_on_last_response_token=True,
    )  # fmt: skip


def cross_segment_gae_observations_as_steps_locally(
    values, loss_masks, rewards, response_lengths, rollout_ids, segment_indices,
    trainable_counts, tokens_after, gamma, lam, alpha, lambda_scope,
) -> list[torch.Tensor]:  # fmt: skip
    """samples, cross-segment-gae: inside each sample every response token is a GAE step
    (observation values and discount factors enter, the reward on the last response token),
    while ``N_after`` (``tokens_after``) counts trainable tokens, as it should: a mixed error.
    """
    counts = list(trainable_counts)
    if lambda_scope == "rollout":
        counts = _rollout_totals(rollout_ids, counts)
    lams = _lengths_lambda(counts, alpha, True, None) if lam is None else [lam] * len(values)
    out = []
    for v, m, reward, after, lam_s in zip(
        values, loss_masks, rewards, tokens_after, lams, strict=True
    ):
        steps = [True] * len(v)
        row = _gae_row(v.tolist(), steps, len(v) - 1, reward, gamma, [lam_s] * len(v))
        out.append(torch.tensor(row, dtype=torch.float64) * (gamma * lam_s) ** after * m)
    return out


def cross_segment_gae_rejected_included(
    values, response_mask, attention_mask, rewards, rollout_id, segment_index, gamma, lam, alpha,
    lambda_scope,
) -> torch.Tensor:  # fmt: skip
    """segment-rows, cross-segment-gae: a rejected summary attempt (a row whose mask is all 0)
    gets its response tokens back as trainable for the advantage computation and is masked
    only afterwards, so its tokens count in the ``N_after`` of the segments before it.

    Segments of 2, 1, 1 trainable tokens with a rejected 3-token attempt after the first,
    gamma 1, lambda 0.5: the first segment gets (1/64, 1/32) instead of (0.125, 0.25).
    """
    rejected = ~response_mask.any(dim=1) & attention_mask.any(dim=1)
    mask = response_mask | (rejected[:, None] & attention_mask)
    row_lams = _row_lambdas(lam, mask, rollout_id, alpha, lambda_scope)
    counts = mask.sum(dim=1)
    out = torch.zeros_like(values)
    for r in range(values.shape[0]):
        steps = mask[r].tolist()
        lams = [row_lams[r]] * values.shape[1]
        row = _gae_row(values[r].tolist(), steps, _last(steps), float(rewards[r]), gamma, lams)
        later = (rollout_id == rollout_id[r]) & (segment_index > segment_index[r])
        decay = (gamma * row_lams[r]) ** int(counts[later].sum())
        out[r] = torch.tensor(row, dtype=values.dtype) * decay
    return out * response_mask


def group_broadcast_per_segment(
    rewards, response_mask, attention_mask, rollout_id, group_id, eps
) -> torch.Tensor:
    """segment-rows, group-broadcast: the broadcast applied per segment, each physical trace
    a sample of the group statistics, so a rollout with more segments weighs more.

    A group of a 3-segment rollout with reward 1 and a 1-segment rollout with reward 0 gets
    +0.5 and -1.5 (mean 0.75, std 0.5) instead of +0.7071 and -0.7071.
    """
    out = torch.zeros(response_mask.shape, dtype=torch.float64)
    for g in group_id.unique():
        rows = group_id == g
        samples = rewards[rows]
        std = samples.std() if len(samples) > 1 else 0.0
        out[rows] = ((samples - samples.mean()) / (std + eps))[:, None]
    return out * response_mask


def chain_split_not_split(
    rewards, response_mask, attention_mask, rollout_id, segment_index
) -> torch.Tensor:
    """segment-rows, chain-split: every chain gets the rollout's whole reward R, not R/K.

    A rollout of 3 chains with reward 1 gets 1 on each chain instead of 1/3.
    """
    return rewards[:, None].to(torch.float64) * response_mask


def rollout_mean_segments_counted(losses, masks, rollout_ids, mode) -> torch.Tensor:
    """loss-matrix, loss-reduction (rollout-mean): each rollout's token mean, summed, then
    divided by the number of segments instead of rollouts.

    Rollout 0 with loss (1) and (0, 0, 0), rollout 1 with (2, 4): (1/4 + 3) / 3 = 1.0833
    instead of (1/4 + 3) / 2 = 1.625.
    """
    loss, mask, ids = torch.cat(losses), torch.cat(masks), torch.cat(rollout_ids)
    means = []
    for rid in ids.unique():
        rows = ids == rid
        tokens = mask[rows].sum()
        if tokens:
            means.append((loss[rows] * mask[rows]).sum() / tokens)
    return torch.stack(means).sum() / mask.any(dim=1).sum()


def token_mean_over_every_token(losses, masks, rollout_ids, mode) -> torch.Tensor:
    """loss-matrix, loss-reduction (token-mean): the masked sum divided by every token of the
    rows (padding and untrained tokens too), not by the trainable ones: 16 over 4 trainable of
    6 tokens gives 16/6 instead of 16/4. The gradient keeps its direction and loses a third of
    its length; ``cxsim conform --gradient`` measures the relative norm 4/6."""
    total = sum((loss * mask).sum() for loss, mask in zip(losses, masks, strict=True))
    return total / sum(mask.numel() for mask in masks)

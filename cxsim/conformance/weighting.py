"""Weighting per logical rollout, as float64 references (docs/conformance.md, "Weighting per
logical rollout").

A framework that cuts one logical rollout (a session) into several rows, one per context
window, decides how much each row weighs. Each rule here is a per-row weight column, written
as a plain loop over logical rollouts, apart from the vectorised loss modes cxsim trains with
(:mod:`cxsim.loss_weighting`, :data:`cxsim.loss_modes.LOSS_MODES`; tests check that both
agree). A row votes when it has a trainable token (``n_s > 0``); a rejected summary attempt
(no trainable token) gets weight 0 and never counts. ``S'`` voting rows, ``R'`` rollouts with a
voting row, ``N_tau`` the voting rows of rollout ``tau``, ``n_tau`` its trainable tokens.

- :func:`session_equal`: ``w_s = 1/N_tau``, renormalised over the whole batch to mean 1
  (``w_s = S' / (R' N_tau)``).
- :func:`partition_preserving`: ``w_s = n_s / mean n``, the mean over the batch's voting rows.
- :func:`one_reward_per_rollout`: ``w_s = 1/N_tau``, not renormalised: the weight each row
  has in the group statistics, so that a rollout's rows together count as one reward (each
  group's weights sum to its rollouts); :func:`group_normalised` applies it.
- :func:`thread_mean`: ``w_s = (n_s / n_tau) S'/R'``: equal total (critic) weight per
  compaction thread, renormalised to mean 1.

:func:`weighted_loss` is the loss the row weights go into: ``1/S' sum_s w_s mean_{M_s} l``
(the seq-mean-token-mean base), over the whole batch however it is cut into micro-batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from cxsim.conformance.quantity_names import WEIGHTING_RULE_NAMES


def _rollout_rows(rollout_id: torch.Tensor, voting: list[bool]) -> dict[int, list[int]]:
    """Each rollout's voting rows, in row order."""
    rows: dict[int, list[int]] = {}
    for row, rid in enumerate(rollout_id.tolist()):
        if voting[row]:
            rows.setdefault(rid, []).append(row)
    return rows


def _counts(trainable: torch.Tensor) -> list[int]:
    return [int(n) for n in trainable.sum(dim=1).tolist()]


def session_equal(trainable: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S,) float64: ``1/N_tau`` on each voting row, renormalised to mean 1 over them."""
    counts = _counts(trainable)
    voting = [n > 0 for n in counts]
    out = torch.zeros(len(counts), dtype=torch.float64)
    rollouts = _rollout_rows(rollout_id, voting)
    for rows in rollouts.values():
        for row in rows:
            out[row] = 1.0 / len(rows)
    total = float(out.sum())
    return out * (sum(voting) / total) if total else out


def partition_preserving(trainable: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S,) float64: ``n_s / mean n`` on each voting row (the mean over the voting rows)."""
    counts = _counts(trainable)
    voting = [n for n in counts if n > 0]
    if not voting:
        return torch.zeros(len(counts), dtype=torch.float64)
    mean = sum(voting) / len(voting)
    return torch.tensor([n / mean for n in counts], dtype=torch.float64)


def one_reward_per_rollout(trainable: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S,) float64: ``1/N_tau`` on each voting row, not renormalised: a rollout's rows
    together weigh one reward in its group's statistics."""
    counts = _counts(trainable)
    out = torch.zeros(len(counts), dtype=torch.float64)
    for rows in _rollout_rows(rollout_id, [n > 0 for n in counts]).values():
        for row in rows:
            out[row] = 1.0 / len(rows)
    return out


def thread_mean(trainable: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S,) float64: ``(n_s / n_tau) S'/R'``: each thread's rows share one vote by their
    tokens, renormalised to mean 1 over the voting rows."""
    counts = _counts(trainable)
    voting = [n > 0 for n in counts]
    rollouts = _rollout_rows(rollout_id, voting)
    out = torch.zeros(len(counts), dtype=torch.float64)
    for rows in rollouts.values():
        tokens = sum(counts[row] for row in rows)
        for row in rows:
            out[row] = counts[row] / tokens * sum(voting) / len(rollouts)
    return out


def weighted_loss(
    loss: torch.Tensor, mask: torch.Tensor, row_weights: torch.Tensor
) -> torch.Tensor:
    """0-dim float64: ``1/S' sum_s w_s mean_{M_s} l`` over the voting rows."""
    total, voting = 0.0, 0
    for row in range(mask.shape[0]):
        tokens = [float(loss[row, t]) for t in mask[row].nonzero().flatten().tolist()]
        if tokens:
            voting += 1
            total += float(row_weights[row]) * sum(tokens) / len(tokens)
    return torch.tensor(total / max(voting, 1), dtype=torch.float64)


def group_normalised(
    rewards: torch.Tensor,
    trainable: torch.Tensor,
    rollout_id: torch.Tensor,
    group_id: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """(S, T) float64: ``(R - mean_G) / (std_G + eps)`` on trainable tokens, the statistics
    over each group's rows weighted by :func:`one_reward_per_rollout` (weighted mean,
    variance ``sum w (R - mean)^2 / (sum w - 1)``); a group of one rollout gets 0. Equals
    :func:`cxsim.conformance.rules.outcome_broadcast` (tested): the weights make a rollout's
    rows one reward."""
    weights = one_reward_per_rollout(trainable, rollout_id)
    out = torch.zeros(trainable.shape, dtype=torch.float64)
    for gid in sorted(set(group_id.tolist())):
        rows = [r for r in range(len(rewards)) if int(group_id[r]) == gid and weights[r] > 0]
        total = sum(float(weights[r]) for r in rows)
        if total <= 1.0 + 1e-12:  # one rollout: nothing to compare with
            continue
        mean = sum(float(weights[r] * rewards[r]) for r in rows) / total
        var = sum(float(weights[r]) * (float(rewards[r]) - mean) ** 2 for r in rows) / (total - 1)
        for r in rows:
            out[r, trainable[r]] = (float(rewards[r]) - mean) / (var**0.5 + eps)
    return out


@dataclass(frozen=True)
class WeightingRule:
    """A weighting rule: its reference, how cxsim trains with it, how conform checks it."""

    weights: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    what: str
    trains_with: str
    check: str
    wrong_form: str
    """The wrong form its deliberately wrong outside-style implementation has."""


WEIGHTING_RULES: dict[str, WeightingRule] = {
    "session-equal": WeightingRule(
        session_equal,
        "each row of a session cut into N rows weighs 1/N, renormalised over the batch",
        "--ppo.loss-mode session-equal",
        "--quantity row-weights --mode session-equal; loss-reduction --mode session-equal",
        "the weights renormalised within each micro-batch",
    ),
    "partition-preserving": WeightingRule(
        partition_preserving,
        "each row weighs its tokens over the mean row's",
        "--ppo.loss-mode partition-preserving",
        "--quantity row-weights --mode partition-preserving",
        "row tokens counted with the observation tokens (response length)",
    ),
    "one-reward-per-rollout": WeightingRule(
        one_reward_per_rollout,
        "sibling rows of one rollout weigh one reward in the group statistics",
        "--ppo.estimator group-broadcast",
        "--quantity row-weights --mode one-reward-per-rollout; --quantity group-broadcast",
        "every row weight 1 (each row a sample of the statistics)",
    ),
    "thread-mean": WeightingRule(
        thread_mean,
        "equal total critic weight per compaction thread",
        "--ppo.critic-loss-mode thread-mean",
        "--quantity row-weights --mode thread-mean; loss-reduction --mode thread-mean",
        "the thread's rows counted within each micro-batch",
    ),
}
"""The weighting rules by name (``cxsim conform --quantity row-weights --mode NAME``)."""
if tuple(WEIGHTING_RULES) != WEIGHTING_RULE_NAMES:  # what --help lists without torch
    raise ValueError(
        f"WEIGHTING_RULES {tuple(WEIGHTING_RULES)} differ from WEIGHTING_RULE_NAMES "
        f"{WEIGHTING_RULE_NAMES} in cxsim/conformance/quantity_names.py: make them the same"
    )

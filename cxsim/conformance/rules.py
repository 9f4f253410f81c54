"""Credit rules in use for compacted trajectories, as named float64 references (docs/conformance.md).

Each rule is written here as a plain loop over logical rollouts, independent
of the vectorised code in :mod:`cxsim.advantages`, :mod:`cxsim.estimators` and
:mod:`cxsim.loss_modes` that trains with it (tests check that both agree):

- :func:`outcome_broadcast`: the group-normalised outcome of a logical rollout on
  every trainable token of each of its physical traces (segments); statistics over
  rollouts, each counted once.
- :func:`chain_split`: the rollout's reward split as ``R / K`` over its ``K`` chains.
- :func:`per_rollout_loss`: each rollout's tokens averaged within the rollout, then
  the rollouts averaged; rollouts, not segments, counted in the denominator.
- :func:`trained_without_rejected`: a rejected summary attempt (an untrained row,
  mask 0) is dropped before advantages are computed; the rollout is trained
  without it.

:data:`RULES` names each with the ``cxsim conform`` quantity that checks it and
the cxsim option that trains with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from cxsim.conformance.batches import Batch, select_rows


def _rollouts(rollout_id: torch.Tensor) -> dict[int, list[int]]:
    """Each rollout's rows, in row order."""
    rows: dict[int, list[int]] = {}
    for row, rid in enumerate(rollout_id.tolist()):
        rows.setdefault(rid, []).append(row)
    return rows


def outcome_broadcast(
    rewards: torch.Tensor,
    trainable: torch.Tensor,
    rollout_id: torch.Tensor,
    group_id: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """(S, T) float64: ``(R_tau - mean_G) / (std_G + eps)`` on every trainable token of every
    physical trace of rollout ``tau``.

    ``mean_G`` and the Bessel-corrected ``std_G`` run over the logical rollouts of group
    ``G``, each once however many traces it has; a group of one rollout gets 0.
    """
    rollouts = _rollouts(rollout_id)
    outcome = {rid: float(rewards[rows[0]]) for rid, rows in rollouts.items()}
    group_of = {rid: int(group_id[rows[0]]) for rid, rows in rollouts.items()}
    advantage: dict[int, float] = {}
    for gid in sorted(set(group_of.values())):
        members = [rid for rid, g in group_of.items() if g == gid]
        values = [outcome[rid] for rid in members]
        mean = sum(values) / len(values)
        if len(values) == 1:
            std = 0.0
        else:
            std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        for rid in members:
            advantage[rid] = (outcome[rid] - mean) / (std + eps) if len(values) > 1 else 0.0
    out = torch.zeros(trainable.shape, dtype=torch.float64)
    for rid, rows in rollouts.items():
        for row in rows:
            out[row, trainable[row]] = advantage[rid]
    return out


def chain_split(
    rewards: torch.Tensor, trainable: torch.Tensor, rollout_id: torch.Tensor
) -> torch.Tensor:
    """(S, T) float64: ``R_tau / K_tau`` on every trainable token of each chain of rollout ``tau``.

    ``K_tau`` counts the rollout's chains: its rows with at least one trainable token (a
    rejected summary attempt, mask 0, is no chain). The rollout's chains then carry ``R_tau``
    in total, however many there are.
    """
    out = torch.zeros(trainable.shape, dtype=torch.float64)
    for rows in _rollouts(rollout_id).values():
        chains = [row for row in rows if bool(trainable[row].any())]
        for row in chains:
            out[row, trainable[row]] = float(rewards[row]) / len(chains)
    return out


def per_rollout_loss(
    loss: torch.Tensor, mask: torch.Tensor, rollout_id: torch.Tensor
) -> torch.Tensor:
    """0-dim float64: ``1/R' sum_tau (1/|M_tau|) sum_{t in M_tau} l_t``.

    ``M_tau`` is every masked token of rollout ``tau`` over all its segments, ``R'`` the
    number of rollouts with a masked token: each rollout one vote, however many segments
    (or micro-batches) its tokens lie in.
    """
    means = []
    for rows in _rollouts(rollout_id).values():
        tokens = [float(loss[row, t]) for row in rows for t in mask[row].nonzero().flatten()]
        if tokens:
            means.append(sum(tokens) / len(tokens))
    return torch.tensor(sum(means) / max(len(means), 1), dtype=torch.float64)


def trained_without_rejected(
    batch: Batch, estimator: Callable[[Batch], torch.Tensor]
) -> torch.Tensor:
    """(S, T) float64: ``estimator`` on the batch without its rejected summary attempts.

    The rejected rows (no trainable token) are removed before the estimator runs, so no
    count, length, exponent or statistic sees them; they get 0.
    """
    kept = ~batch.rejected
    out = torch.zeros(batch.values.shape, dtype=torch.float64)
    advantages = estimator(select_rows(batch, kept))
    out[kept, : advantages.shape[1]] = advantages
    return out


@dataclass(frozen=True)
class CreditRule:
    """A credit rule: how ``cxsim conform`` checks it and how cxsim trains with it."""

    what: str
    """One line: the rule."""
    check: str
    """The ``cxsim conform`` options that check an implementation of it."""
    trains_with: str
    """The cxsim option that trains with it."""
    wrong_form: str
    """The recognised wrong form ``cxsim conform`` names."""


RULES: dict[str, CreditRule] = {
    "outcome-broadcast": CreditRule(
        "the group-normalised outcome on every trainable token of a rollout's physical traces",
        "--quantity group-broadcast",
        "--ppo.estimator group-broadcast",
        "the broadcast applied per segment (statistics over traces)",
    ),
    "chain-split": CreditRule(
        "the reward split as R/K over the K chains of one rollout",
        "--quantity chain-split",
        "--ppo.estimator chain-split",
        "the reward not split (R on every chain)",
    ),
    "per-rollout-loss": CreditRule(
        "each rollout's tokens averaged within it, then rollouts averaged",
        "--quantity loss-reduction --mode rollout-mean",
        "--ppo.loss-mode rollout-mean",
        "rollouts counted as segments in the denominator",
    ),
    "rejected-summaries": CreditRule(
        "a rejected summary attempt kept untrained and dropped before advantages",
        "the rejected-summaries cases of every advantage quantity",
        "every estimator (rows without a trainable token never enter)",
        "the rejected summary attempt included in the advantage computation",
    ),
}
"""The credit rules by name."""

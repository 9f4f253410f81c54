"""The quantities' models: each computed in float64, with the form of each term as a setting.

Each quantity has a model: a plain float64 computation whose keyword settings
choose one form of each term (which tokens are GAE steps, where the reward
sits, what ``N_after`` counts, the lambda used, the group statistics, the
split over chains, the denominator of a reduction, whether rejected summary
attempts enter); its default settings give the reference (tested). The known
wrong forms of each term, and the search for those that reproduce a failing
function's output, are in ``terms.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from cxsim.conformance.batches import Batch, select_rows
from cxsim.conformance.reference import GAE_QUANTITIES, GROUP_EPS, lambda_rows
from cxsim.losses import aggregate
from cxsim.segment_trees import segment_chains

# --------------------------------------------------------------------------- shared


def including_rejected(batch: Batch) -> Batch:
    """The batch with each rejected summary attempt's tokens made trainable: the attempt
    included in the computation as if it were an accepted segment."""
    if not bool(batch.rejected.any()):
        return batch
    trainable = batch.trainable | (batch.rejected[:, None] & batch.response)
    return replace(batch, trainable=trainable)


def _mask(batch: Batch, which: str) -> torch.Tensor:
    return batch.trainable if which == "trainable" else batch.response


def _last(flags: list[bool]) -> int:
    return max((i for i, f in enumerate(flags) if f), default=-1)


def tokens_after_rows(batch: Batch, counts: torch.Tensor) -> torch.Tensor:
    """(S,) float64: the sum of ``counts`` over the later segments of each row's rollout."""
    return torch.tensor(
        [
            float(
                counts[
                    (batch.rollout_id == batch.rollout_id[r])
                    & (batch.segment_index > batch.segment_index[r])
                ].sum()
            )
            for r in range(batch.num_rows)
        ],
        dtype=torch.float64,
    )


# --------------------------------------------------------------------------- GAE


def _gae_over(
    values: list[float],
    steps: list[bool],
    reward_at: int,
    reward: float,
    gamma: float,
    lams: list[float],
) -> list[float]:
    """GAE backwards over the positions where ``steps``; the reward enters at ``reward_at``.

    A reward position that is not a step never enters (the reward is dropped).
    Returns one advantage per position (0 off the steps).
    """
    out = [0.0] * len(values)
    running, next_value = 0.0, 0.0
    for pos in range(len(values) - 1, -1, -1):
        if not steps[pos]:
            continue
        r = reward if pos == reward_at else 0.0
        delta = r + gamma * next_value - values[pos]
        running = delta + gamma * lams[pos] * running
        out[pos] = running
        next_value = values[pos]
    return out


def gae_model(
    batch: Batch,
    quantity: str,
    lam: torch.Tensor | None = None,
    steps: str = "trainable",
    reward_at: str = "trainable",
    after: str = "trainable",
    lam_form: dict[str, Any] | None = None,
    include_rejected: bool = False,
    tree: bool = True,
) -> torch.Tensor:
    """GAE of ``quantity`` with chosen terms; (S, T), nonzero only on trainable tokens.

    Args:
        batch: canonical batch.
        quantity: "local-gae", "cross-segment-gae" or "stitched-gae".
        lam: (S,) lambda per segment (default: the reference's, or ``lam_form``'s).
        steps: tokens the recursion runs over, "trainable" (right) or "response"
            (observation tokens become GAE steps).
        reward_at: the reward sits on the last "trainable" token (right) or the last
            "response" token (dropped when that is an observation and ``steps`` is trainable).
        after: tokens counted in the cross-segment exponent ``N_after`` ("trainable",
            "response"), or "none" for no correction.
        lam_form: keyword arguments of :func:`~cxsim.conformance.reference.lambda_rows`
            (a wrong lambda), applied to the batch the model computes on.
        include_rejected: rejected summary attempts enter as if accepted (then masked).
        tree: on a tree batch, each segment's path is its sequence (right), not the rollout.
    """
    full = including_rejected(batch) if include_rejected else batch
    if lam is None:
        lam = lambda_rows(full, **(lam_form or {}))
    lam_rows = lam
    if tree and full.parent_index is not None:  # each path a sequence of its own
        chains = segment_chains(full.rollout_id, full.segment_index, full.parent_index)
        full = replace(full, rollout_id=chains)
    step_mask, reward_mask = _mask(full, steps), _mask(full, reward_at)
    out = torch.zeros_like(full.values)
    rows = range(full.num_rows)
    width = full.values.shape[1]
    if quantity == "stitched-gae":
        for rid in full.rollout_id.unique().tolist():
            members = sorted(
                (r for r in rows if full.rollout_id[r] == rid),
                key=lambda r: int(full.segment_index[r]),
            )
            result = _gae_over(
                full.values[members].flatten().tolist(),
                step_mask[members].flatten().tolist(),
                _last(reward_mask[members].flatten().tolist()),
                float(full.rewards[members[-1]]),
                full.gamma,
                lam_rows[members].repeat_interleave(width).tolist(),
            )
            out[members] = torch.tensor(result, dtype=torch.float64).reshape(len(members), width)
        return torch.where(batch.trainable, out, 0.0)
    for r in rows:
        out[r] = torch.tensor(
            _gae_over(
                full.values[r].tolist(),
                step_mask[r].tolist(),
                _last(reward_mask[r].tolist()),
                float(full.rewards[r]),
                full.gamma,
                [float(lam_rows[r])] * width,
            ),
            dtype=torch.float64,
        )
    if quantity == "cross-segment-gae" and after != "none":
        later = tokens_after_rows(full, _mask(full, after).sum(dim=1))
        out = torch.pow(full.gamma * lam_rows, later)[:, None] * out
    return torch.where(batch.trainable, out, 0.0)


# --------------------------------------------------------------------------- group broadcast


def broadcast_model(
    batch: Batch,
    voters: str = "rollouts",
    ddof: int = 1,
    divide: bool = True,
    last_only: bool = False,
    include_rejected: bool = False,
) -> torch.Tensor:
    """Group-normalised outcome on trainable tokens with chosen terms; (S, T).

    Args:
        voters: statistics over "rollouts" (each once; right) or "segments" (each physical
            trace a sample: the broadcast applied per segment).
        ddof: 1 (Bessel, right) or 0 (population std).
        divide: divide by ``std + eps`` (right) or only centre.
        last_only: the outcome only on each rollout's last trace.
        include_rejected: rejected summary attempts count as traces.
    """
    kept = torch.ones(batch.num_rows, dtype=torch.bool)
    if not include_rejected:
        kept = ~batch.rejected
    b = select_rows(batch, kept)
    advantage = torch.zeros(b.num_rows, dtype=torch.float64)
    for gid in b.group_id.unique().tolist():
        rows = (b.group_id == gid).nonzero().flatten().tolist()
        if voters == "segments":
            sample_rows = rows
        else:
            first: dict[int, int] = {}
            for r in rows:
                first.setdefault(int(b.rollout_id[r]), r)
            sample_rows = list(first.values())
        rewards = b.rewards[sample_rows]
        count = len(sample_rows)
        mean = rewards.mean()
        std = ((rewards - mean) ** 2).sum().div(max(count - ddof, 1)).sqrt() if count > 1 else 0.0
        for r in rows:
            advantage[r] = (
                (b.rewards[r] - mean) / (std + GROUP_EPS) if divide else b.rewards[r] - mean
            )
    if last_only:
        for rid in b.rollout_id.unique().tolist():
            rows = (b.rollout_id == rid) & b.trainable.any(dim=1)
            last = int(b.segment_index[rows].max())
            advantage[rows & (b.segment_index != last)] = 0.0
    out = torch.zeros_like(batch.values)
    out[kept, : b.values.shape[1]] = advantage[:, None].expand(-1, b.values.shape[1])
    return torch.where(batch.trainable, out, 0.0)


# --------------------------------------------------------------------------- chain split


def chain_model(
    batch: Batch, split: bool = True, last_only: bool = False, include_rejected: bool = False
) -> torch.Tensor:
    """The reward over a rollout's chains with chosen terms; (S, T).

    Args:
        split: ``R / K`` on each chain (right) or ``R`` on each.
        last_only: the (split) reward only on the rollout's last chain.
        include_rejected: rejected summary attempts count as chains.
    """
    full = including_rejected(batch) if include_rejected else batch
    chains = full.trainable.any(dim=1)
    out = torch.zeros_like(batch.values)
    for rid in full.rollout_id.unique().tolist():
        rows = (full.rollout_id == rid) & chains
        count = int(rows.sum())
        share = full.rewards[rows] / (count if split else 1)
        if last_only:
            share = torch.where(
                full.segment_index[rows] == full.segment_index[rows].max(), share, 0
            )
        out[rows] = share[:, None].expand(-1, out.shape[1])
    return torch.where(batch.trainable, out, 0.0)


# --------------------------------------------------------------------------- reductions


def _chunks(batch: Batch) -> list[slice]:
    out, start = [], 0
    for size in batch.micro_batches:
        out.append(slice(start, start + size))
        start += size
    return out


def reduction_model(
    batch: Batch,
    mode: str,
    chunks: str = "global",
    mode_used: str | None = None,
    rollout_count: str = "rollouts",
    rollout_tokens: str = "global",
) -> torch.Tensor:
    """The reduction with chosen terms; (1,).

    Args:
        chunks: "global" denominators (right), or each micro-batch reduced by its own
            count and the results averaged ("mean") or summed ("sum").
        mode_used: the mode computed (default ``mode``).
        rollout_count: rollout-mean's denominator counts "rollouts" (right) or "segments".
        rollout_tokens: rollout-mean divides each rollout's token sum by its tokens over the
            whole batch ("global", right) or within each micro-batch ("local").
    """
    used = mode_used or mode
    if chunks != "global":
        parts = [
            aggregate(batch.loss[c], batch.trainable[c], used, batch.rollout_id[c])
            for c in _chunks(batch)
        ]
        total = torch.stack(parts)
        return (total.mean() if chunks == "mean" else total.sum()).reshape(1)
    if used != "rollout-mean":
        return aggregate(batch.loss, batch.trainable, used, batch.rollout_id).reshape(1)
    masked = torch.where(batch.trainable, batch.loss, 0.0)
    row_sum, row_tokens = masked.sum(dim=1), batch.trainable.sum(dim=1)
    voting = batch.trainable.any(dim=1)
    count = (
        len(batch.rollout_id[voting].unique()) if rollout_count == "rollouts" else int(voting.sum())
    )
    total = torch.zeros((), dtype=torch.float64)
    for c in _chunks(batch) if rollout_tokens == "local" else [slice(0, batch.num_rows)]:
        ids = batch.rollout_id[c]
        for rid in ids.unique().tolist():
            tokens = int(row_tokens[c][ids == rid].sum())
            if tokens:
                total = total + row_sum[c][ids == rid].sum() / tokens
    return (total / max(count, 1)).reshape(1)


# --------------------------------------------------------------------------- adaptive lambda


def lambda_model(
    batch: Batch, lam_form: dict[str, Any] | None = None, include_rejected: bool = False
) -> torch.Tensor:
    """(S,) float64 adaptive lambda with chosen terms."""
    full = including_rejected(batch) if include_rejected else batch
    return lambda_rows(replace(full, lam=None), **(lam_form or {}))


# --------------------------------------------------------------------------- dispatch


def model(batch: Batch, quantity: str, mode: str | None, settings: dict[str, Any]) -> torch.Tensor:
    """The output of ``quantity``'s model under ``settings`` (canonical form)."""
    if quantity in GAE_QUANTITIES:
        return gae_model(batch, quantity, **settings)
    if quantity == "group-broadcast":
        return broadcast_model(batch, **settings)
    if quantity == "chain-split":
        return chain_model(batch, **settings)
    if quantity == "adaptive-lambda":
        return lambda_model(batch, **settings)
    if quantity == "loss-reduction":
        return reduction_model(batch, mode or "token-mean", **settings)
    raise ValueError(f"no model for quantity {quantity!r}")

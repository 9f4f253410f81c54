"""The quantities' models: each computed in float64, with the form of each term as a setting.

Each quantity has a model: a plain float64 computation whose keyword settings
choose one form of each term (which tokens are GAE steps, where the reward
sits, where the step rewards sit, what ``N_after`` counts, the lambda used,
the trace factor, the group statistics, the split over chains, the denominator
of a reduction, whether rejected summary attempts enter); its default settings
give the reference (tested). Each quantity's record (``quantities.py``) names its
model. The known wrong forms of each term, and the search for those that reproduce
a failing function's output, are in ``terms.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from cxsim.conformance.batches import Batch, select_rows
from cxsim.conformance.reference import GROUP_EPS, lambda_rows
from cxsim.conformance.weighting_models import weighted_reduction_model
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
    step_rewards: list[float],
    trace_gamma: float,
    to_go: bool = False,
) -> list[float]:
    """GAE backwards over the positions where ``steps``; the reward enters at ``reward_at``.

    A reward position that is not a step never enters (the reward is dropped); a step
    reward enters at its own position when that is a step. ``trace_gamma`` multiplies lambda
    in the recursion (gamma, right; 1: gamma left out of the trace). ``to_go``: each step
    reward is replaced by the discounted sum of it and the later ones over the steps (the
    rewards-to-go), which the recursion then discounts again.
    Returns one advantage per position (0 off the steps).
    """
    if to_go:
        step_rewards, carried = list(step_rewards), 0.0
        for pos in range(len(values) - 1, -1, -1):
            if steps[pos]:
                carried = step_rewards[pos] + gamma * carried
                step_rewards[pos] = carried
    out = [0.0] * len(values)
    running, next_value = 0.0, 0.0
    for pos in range(len(values) - 1, -1, -1):
        if not steps[pos]:
            continue
        r = (reward if pos == reward_at else 0.0) + step_rewards[pos]
        delta = r + gamma * next_value - values[pos]
        running = delta + trace_gamma * lams[pos] * running
        out[pos] = running
        next_value = values[pos]
    return out


def _first_of_response(batch: Batch) -> torch.Tensor:
    """The step rewards moved to the first token of the response (trainable run) that earned
    each: the wrong place, not the last token."""
    moved = torch.zeros_like(batch.values)
    steps = batch.steps
    for r, p in steps.nonzero().tolist():
        start = p
        while start > 0 and bool(batch.trainable[r, start - 1]):
            start -= 1
        moved[r, start] += steps[r, p]
    return moved


def _step_form(batch: Batch, step_at: str) -> Batch:
    """The batch with its step rewards where ``step_at`` puts them: "last" (the last token of
    the response, right), "none" (dropped), "first" (the first token of the response),
    "every-window" (the rollout's step rewards, summed, added to the terminal reward of each
    of its segments instead of at their tokens); "to-go" is applied in the recursion."""
    if step_at in ("last", "to-go"):
        return batch
    if step_at == "none":
        return replace(batch, step_rewards=None)
    if step_at == "first":
        return replace(batch, step_rewards=_first_of_response(batch))
    if step_at == "every-window":
        total = per_rollout_sum(batch.steps.sum(dim=1), batch.rollout_id)
        return replace(batch, rewards=batch.rewards + total, step_rewards=None)
    raise ValueError(f"unknown step_at {step_at!r}")


def per_rollout_sum(x: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """(S,): the sum of ``x`` over the rows of each row's rollout."""
    return torch.stack([x[rollout_id == rid].sum() for rid in rollout_id.tolist()])


def _one_lambda(lam_rows: torch.Tensor, one_lam: str | None) -> torch.Tensor:
    """Every row's lambda replaced by one: the first row's, or the mean over rows."""
    if one_lam is None:
        return lam_rows
    one = lam_rows[0] if one_lam == "first" else lam_rows.mean()
    return torch.full_like(lam_rows, float(one))


@dataclass(frozen=True)
class GaeForm:
    """Which GAE a quantity computes, as its model and its wrong forms read it."""

    stitched: bool = False
    """One recursion over each rollout's trainable tokens in segment order (stitched GAE);
    False: one recursion per segment."""
    correction: bool = False
    """Each segment's advantages times ``(gamma lam)^N_after`` (cross-segment GAE)."""

    @property
    def across_segments(self) -> bool:
        """It reads later segments (so a segment tree's paths matter)."""
        return self.stitched or self.correction


LOCAL = GaeForm()
CROSS_SEGMENT = GaeForm(correction=True)
STITCHED = GaeForm(stitched=True)


def gae_model(
    batch: Batch,
    form: GaeForm,
    lam: torch.Tensor | None = None,
    steps: str = "trainable",
    reward_at: str = "trainable",
    after: str = "trainable",
    lam_form: dict[str, Any] | None = None,
    include_rejected: bool = False,
    tree: bool = True,
    step_at: str = "last",
    one_lam: str | None = None,
    trace: str = "gamma-lam",
) -> torch.Tensor:
    """GAE of ``form`` with chosen terms; (S, T), nonzero only on trainable tokens.

    Args:
        batch: canonical batch.
        form: which GAE: :data:`LOCAL`, :data:`CROSS_SEGMENT` or :data:`STITCHED`.
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
        step_at: where the step rewards enter: "last" token of their response (right),
            "none", "first", "every-window", or "to-go" (discounted twice); :func:`_step_form`.
        one_lam: one lambda for every row ("first" row's or the "mean"), not each row's own.
        trace: the recursion's factor, "gamma-lam" (right), "lam" (gamma left out of the
            recursion) or "lam-everywhere" (out of the cross-segment correction too).
    """
    full = including_rejected(batch) if include_rejected else batch
    if lam is None:
        lam = lambda_rows(full, **(lam_form or {}))
    lam_rows = _one_lambda(lam, one_lam)
    full = _step_form(full, step_at)
    if tree and full.parent_index is not None:  # each path a sequence of its own
        chains = segment_chains(full.rollout_id, full.segment_index, full.parent_index)
        full = replace(full, rollout_id=chains)
    trace_gamma = full.gamma if trace == "gamma-lam" else 1.0
    out = _gae_rows(full, form, steps, reward_at, lam_rows, trace_gamma, step_at == "to-go")
    if form.correction and after != "none":
        later = tokens_after_rows(full, _mask(full, after).sum(dim=1))
        factor = lam_rows * (1.0 if trace == "lam-everywhere" else full.gamma)
        out = torch.pow(factor, later)[:, None] * out
    return torch.where(batch.trainable, out, 0.0)


def _gae_rows(
    full: Batch,
    form: GaeForm,
    steps: str,
    reward_at: str,
    lam_rows: torch.Tensor,
    trace_gamma: float,
    to_go: bool,
) -> torch.Tensor:
    """The recursion over each row (local and cross-segment GAE before the correction), or
    over each rollout's rows in segment order (stitched GAE)."""
    step_mask, reward_mask = _mask(full, steps), _mask(full, reward_at)
    step_rewards = full.steps
    out = torch.zeros_like(full.values)
    rows = range(full.num_rows)
    width = full.values.shape[1]
    if form.stitched:
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
                step_rewards[members].flatten().tolist(),
                trace_gamma,
                to_go,
            )
            out[members] = torch.tensor(result, dtype=torch.float64).reshape(len(members), width)
        return out
    for r in rows:
        out[r] = torch.tensor(
            _gae_over(
                full.values[r].tolist(),
                step_mask[r].tolist(),
                _last(reward_mask[r].tolist()),
                float(full.rewards[r]),
                full.gamma,
                [float(lam_rows[r])] * width,
                step_rewards[r].tolist(),
                trace_gamma,
                to_go,
            ),
            dtype=torch.float64,
        )
    return out


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
    if used not in ("rollout-mean", "thread-mean"):
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


# --------------------------------------------------------------------------- reductions


def loss_reduction_model(batch: Batch, mode: str | None, settings: dict[str, Any]) -> torch.Tensor:
    """A reduction with chosen terms: the row weights' wrong forms (``row_form``) or the
    denominator's (:func:`reduction_model`)."""
    if "row_form" in settings:
        return weighted_reduction_model(batch, mode or "session-equal", settings["row_form"])
    return reduction_model(batch, mode or "token-mean", **settings)

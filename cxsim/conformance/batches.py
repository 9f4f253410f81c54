"""Compacted batches for the conformance check: the canonical form and building.

A :class:`Batch` is cxsim's own layout in float64: one row per segment, holding
that segment's response tokens only (trainable tokens and the observation
tokens inside the response), right-padded. Layouts (``layouts.py``) translate it
into what a user's function expects. ``S`` segments, ``T`` padded width.

Random cases (``random_batches.py``) are hypothesis strategies over :func:`build_batch`,
so a failure shrinks to a small example: segment structures are drawn as run
lengths, and values and losses come from a drawn seed with a drawn scale that
shrinks to 0 (all-zero values make the advantages plain powers of
``gamma * lam``). Pinned cases (``pinned_batches.py``) are the small hand-built
examples in which the known pitfalls show their textbook numbers (docs/conformance.md).

A rejected summary attempt (a summary that failed and is kept as an untrained
branch) is a row whose response tokens are all untrainable: its mask is 0, so
a correct function never lets it into the advantages.

A tree batch (``parent_index``, the ``trees`` cases) is what ``folding`` records: each
segment names the segment it continues from, and estimators that look across segments
follow each segment's path (``cxsim.advantages``, "Segment trees"); the layouts that hand
an estimator its parents (``Layout.trees``) are checked on them too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from hypothesis import strategies as st

REDUCTION_MODES: tuple[str, ...] = (
    "token-mean",
    "segment-mean",
    "rollout-mean",
    "seq-mean-token-sum",
    "session-equal",
    "partition-preserving",
    "thread-mean",
)


@dataclass(frozen=True)
class Batch:
    """A compacted batch in canonical form (all float tensors float64)."""

    values: torch.Tensor
    """(S, T) critic values ``V(tokens_<t)``; only trainable positions matter."""
    trainable: torch.Tensor
    """(S, T) bool: tokens the policy generated (the response mask)."""
    response: torch.Tensor
    """(S, T) bool: the segment's response tokens, trainable and observation; False is padding."""
    rewards: torch.Tensor
    """(S,) the rollout's terminal reward, on every one of its segments."""
    rollout_id: torch.Tensor
    """(S,) int64."""
    segment_index: torch.Tensor
    """(S,) int64, position of the segment in its rollout (unique per rollout)."""
    group_id: torch.Tensor
    """(S,) int64: rollouts of one task share it (group advantages)."""
    loss: torch.Tensor
    """(S, T) per-token loss for reductions; only trainable positions matter."""
    micro_batches: tuple[int, ...]
    """Sizes of the contiguous row chunks a reduction is split into (sum = S)."""
    gamma: float
    """Discount."""
    lam: float | None
    """Fixed GAE lambda, or None for the length-adaptive ``1 - 1/(alpha l)``."""
    alpha: float
    """Adaptive-lambda alpha (used when ``lam`` is None)."""
    scope: str
    """Adaptive-lambda length: ``segment`` (n_s) or ``rollout`` (sum over the rollout)."""
    parent_index: torch.Tensor | None = None
    """(S,) int64: each segment's parent segment (-1: the rollout's first) when the rollout's
    segments form a tree; None: every rollout is the chain of its segments."""
    step_rewards: torch.Tensor | None = None
    """(S, T) float64: the rewards of non-final steps, each at the last token of the response
    (trainable run) that earned it, where the trainer puts them; None: no step rewards."""

    @property
    def num_rows(self) -> int:
        return self.values.shape[0]

    @property
    def steps(self) -> torch.Tensor:
        """(S, T) step rewards, zeros when the batch has none."""
        if self.step_rewards is None:
            return torch.zeros_like(self.values)
        return self.step_rewards

    @property
    def rejected(self) -> torch.Tensor:
        """(S,) bool: rows with response tokens but no trainable one (rejected summary attempts)."""
        return self.response.any(dim=1) & ~self.trainable.any(dim=1)


def select_rows(batch: Batch, keep: torch.Tensor) -> Batch:
    """The batch restricted to the rows where ``keep`` (S,) is True, in their order.

    Micro-batch sizes shrink with their rows (empty micro-batches vanish); the
    padded width is cut to the longest row kept.
    """
    rows = keep.nonzero().flatten()
    sizes, start = [], 0
    for size in batch.micro_batches:
        kept = int(keep[start : start + size].sum())
        if kept:
            sizes.append(kept)
        start += size
    width = max(int(batch.response[rows].sum(dim=1).max()), 1) if len(rows) else 1
    return replace(
        batch,
        values=batch.values[rows, :width],
        trainable=batch.trainable[rows, :width],
        response=batch.response[rows, :width],
        rewards=batch.rewards[rows],
        rollout_id=batch.rollout_id[rows],
        segment_index=batch.segment_index[rows],
        group_id=batch.group_id[rows],
        loss=batch.loss[rows, :width],
        micro_batches=tuple(sizes),
        parent_index=None if batch.parent_index is None else batch.parent_index[rows],
        step_rewards=None if batch.step_rewards is None else batch.step_rewards[rows, :width],
    )


def without_step_rewards(batch: Batch) -> Batch:
    """The batch with its step rewards taken out (for the layouts and quantities that take
    none: every reference then computes without them)."""
    return batch if batch.step_rewards is None else replace(batch, step_rewards=None)


@dataclass(frozen=True)
class Segment:
    """One segment's response as alternating runs: trainable, observation, trainable, ..."""

    runs: tuple[int, ...]
    """Run lengths, each >= 1, starting with a trainable run; an even count ends on observations."""
    rejected: bool = False
    """A rejected summary attempt: ``runs`` is one run of generated tokens, none of them trainable."""


@dataclass(frozen=True)
class Case:
    """A named family of batches: a hypothesis strategy, or one pinned batch."""

    name: str
    what: str
    """One line: which edge case the batches cover."""
    strategy: st.SearchStrategy[Batch]
    pinned: bool = False
    lam_kind: str | None = None
    """"fixed" or "adaptive" lambda; None where the quantity has no lambda."""
    scope: str | None = None
    """The adaptive-lambda scope the case exercises ("segment" or "rollout"); None when the
    scope cannot change the result (fixed lambda, one segment per rollout, no lambda)."""
    rejected: bool = False
    """Its batches hold rejected summary attempts."""
    tree: bool = False
    """Its batches hold segment trees (a segment whose parent is not the one before it)."""
    example: Batch | None = None
    """A pinned case's batch."""


# --------------------------------------------------------------------------- building


def build_batch(
    rollouts: Sequence[Sequence[Segment]],
    *,
    gamma: float,
    lam: float | None,
    alpha: float = 1.5,
    scope: str = "segment",
    rewards: Sequence[float] | None = None,
    groups: Sequence[int] | None = None,
    values: Sequence[Sequence[float]] | None = None,
    value_scale: float = 0.0,
    loss_scale: float = 1.0,
    seed: int = 0,
    row_order: Sequence[int] | None = None,
    micro_batches: Sequence[int] | None = None,
    losses: Sequence[Sequence[float]] | None = None,
    parents: Sequence[Sequence[int]] | None = None,
    step_rewards: Sequence[Sequence[float]] | None = None,
) -> Batch:
    """A canonical :class:`Batch` from segment structures (rows in rollout, segment order).

    ``values``/``losses`` give each row's response tokens explicitly; otherwise they are
    drawn from ``seed`` and multiplied by ``value_scale`` / ``loss_scale``.
    ``row_order`` permutes the rows (a permutation of range(S)). ``parents``: each
    rollout's parent of each segment (a tree batch); None: chains.
    """
    segs = [(r, k, seg) for r, rollout in enumerate(rollouts) for k, seg in enumerate(rollout)]
    lengths = [sum(seg.runs) for _, _, seg in segs]
    num_rows, width = len(segs), max(lengths)
    gen = torch.Generator().manual_seed(seed)
    trainable = torch.zeros(num_rows, width, dtype=torch.bool)
    response = torch.zeros(num_rows, width, dtype=torch.bool)
    for row, (_, _, seg) in enumerate(segs):
        pos = 0
        for j, run in enumerate(seg.runs):
            trainable[row, pos : pos + run] = j % 2 == 0 and not seg.rejected
            pos += run
        response[row, :pos] = True
    drawn_values = torch.rand(num_rows, width, generator=gen, dtype=torch.float64) * 2 - 1
    drawn_loss = torch.rand(num_rows, width, generator=gen, dtype=torch.float64) * 2 - 1
    # + 0.0 turns the -0.0 of a zero scale into 0.0 for printing
    val = _explicit(values, lengths, width) if values else drawn_values * value_scale + 0.0
    loss = _explicit(losses, lengths, width) if losses else drawn_loss * loss_scale
    reward_per_rollout = list(rewards) if rewards is not None else [1.0] * len(rollouts)
    group_per_rollout = list(groups) if groups is not None else list(range(len(rollouts)))
    order = list(row_order) if row_order is not None else list(range(num_rows))
    if sorted(order) != list(range(num_rows)):
        raise ValueError(f"row_order must be a permutation of range({num_rows}), got {order}")
    pick = torch.tensor(order)
    steps = None if step_rewards is None else _step_tokens(segs, step_rewards, width)[pick]
    sizes = tuple(micro_batches) if micro_batches else (num_rows,)
    if sum(sizes) != num_rows or min(sizes) < 1:
        raise ValueError(f"micro_batches must be positive sizes summing to {num_rows}, got {sizes}")
    return Batch(
        values=val[pick],
        trainable=trainable[pick],
        response=response[pick],
        rewards=torch.tensor([reward_per_rollout[r] for r, _, _ in segs], dtype=torch.float64)[
            pick
        ],
        rollout_id=torch.tensor([r for r, _, _ in segs])[pick],
        segment_index=torch.tensor([k for _, k, _ in segs])[pick],
        group_id=torch.tensor([group_per_rollout[r] for r, _, _ in segs])[pick],
        loss=loss[pick],
        micro_batches=sizes,
        gamma=float(gamma),
        lam=None if lam is None else float(lam),
        alpha=float(alpha),
        scope=scope,
        parent_index=None
        if parents is None
        else torch.tensor([p for rollout in parents for p in rollout])[pick],
        step_rewards=steps,
    )


def _step_tokens(segs: list, step_rewards: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """(S, T): each row's step rewards at the last token of each of its trainable runs."""
    if len(step_rewards) != len(segs):
        raise ValueError(f"step_rewards: {len(step_rewards)} rows for {len(segs)} segments")
    out = torch.zeros(len(segs), width, dtype=torch.float64)
    for row, ((_, _, seg), given) in enumerate(zip(segs, step_rewards, strict=True)):
        runs = [] if seg.rejected else seg.runs[::2]
        if len(given) != len(runs):
            raise ValueError(f"row {row}: {len(given)} step rewards for {len(runs)} responses")
        pos = 0
        for j, run in enumerate(seg.runs):
            pos += run
            if j % 2 == 0 and not seg.rejected:
                out[row, pos - 1] = float(given[j // 2])
    return out + 0.0


def _explicit(rows: Sequence[Sequence[float]], lengths: list[int], width: int) -> torch.Tensor:
    out = torch.zeros(len(lengths), width, dtype=torch.float64)
    for row, (given, length) in enumerate(zip(rows, lengths, strict=True)):
        if len(given) != length:
            raise ValueError(f"row {row}: {len(given)} numbers for {length} response tokens")
        out[row, :length] = torch.tensor(list(given), dtype=torch.float64)
    return out

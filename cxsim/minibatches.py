"""Minibatches and micro-batches of a segment batch, and the count a minibatch's loss is
divided by (docs/method.md section 5).

A minibatch holds whole rollouts (:func:`minibatch_rows`); a micro-batch is the rows one
forward pass takes (:func:`micro_batch_spans`: a row cap and an optional token budget);
the loss of every micro-batch is divided by the whole minibatch's count
(:func:`loss_denominator`), summed over data-parallel ranks, so results do not depend on
the micro-batching or on the number of processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

import torch

from cxsim.loss_modes import LOSS_MODES, role_keywords
from cxsim.segments import SegmentBatch

GlobalSum = Callable[[torch.Tensor], torch.Tensor]
"""Sums a local count over data-parallel ranks (identity on one process)."""


class Rows(Protocol):
    """What :func:`micro_batches` cuts: a ``SegmentBatch`` or a ``ScoredBatch``."""

    @property
    def lengths(self) -> torch.Tensor: ...

    def select(self, rows: list[int]) -> Rows: ...

    def trim(self, width: int) -> Rows: ...


B = TypeVar("B", bound=Rows)


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def micro_batch_spans(
    lengths: Sequence[int], rows: int, tokens: int | None = None
) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive row chunks: at most ``rows`` rows each and, with a
    ``tokens`` budget, at most ``tokens`` padded tokens (rows x the chunk's longest row);
    a row longer than the budget forms a chunk of its own."""
    spans, start, longest = [], 0, 0
    for row, n in enumerate(lengths):
        wider = max(longest, int(n))
        full = row - start == rows or (tokens is not None and (row - start + 1) * wider > tokens)
        if row > start and full:
            spans.append((start, row))
            start, wider = row, int(n)
        longest = wider
    if len(lengths):
        spans.append((start, len(lengths)))
    return spans


def micro_batches(batch: B, rows: int, tokens: int | None = None) -> Iterator[B]:
    """Consecutive chunks of a :class:`SegmentBatch` or a :class:`ScoredBatch` (see
    :func:`micro_batch_spans`), each trimmed to its longest real length."""
    for start, stop in micro_batch_spans(batch.lengths.tolist(), rows, tokens):
        chunk = batch.select(list(range(start, stop)))
        yield chunk.trim(int(chunk.lengths.max()))


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
    mask: torch.Tensor,
    mode: str,
    rollout_id: torch.Tensor,
    global_sum: GlobalSum = _identity,
    is_summary: torch.Tensor | None = None,
) -> torch.Tensor:
    """The count a minibatch's loss is divided by: the mode's ``count``
    (``cxsim.loss_modes.LOSS_MODES``) over the whole minibatch, summed over ranks by
    ``global_sum``; at least 1 (each entry, for a mode that counts several things);
    ``is_summary`` for the modes that read each row's role."""
    if mode not in LOSS_MODES:
        raise ValueError(f"unknown loss mode {mode!r}; choose one of: {', '.join(LOSS_MODES)}")
    spec = LOSS_MODES[mode]
    count = spec.count(mask, rollout_id, **role_keywords(spec, is_summary))
    return global_sum(count.to(torch.float32)).clamp(min=1.0)

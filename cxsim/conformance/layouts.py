"""Data layouts: how a canonical batch is handed to a user's function and how its output comes back.

Each layout turns a :class:`~cxsim.conformance.batches.Batch` into the keyword
arguments of the function under test (exact names and shapes in
docs/conformance.md) and maps the function's output back to the canonical
form of the reference: (S, T) advantages, (S,) lambdas, or a (1,) loss.

- ``segment-rows`` (verl style): one padded row per segment.
- ``rollout-rows``: one padded row per rollout, its segments' responses concatenated in
  segment order (for stitched GAE).
- ``samples`` (slime style): lists of 1-D response-only tensors with per-sample lengths and
  metadata (trainable counts, tokens after).
- ``loss-matrix``: a per-token loss and mask split into micro-batches, for reductions.
- ``estimator``: one :class:`~cxsim.estimators.EstimatorInputs`, what the trainer hands an
  estimator of its registry (``cxsim conform`` checks a registered or plug-in estimator so),
  ``parent_index`` included: it is also checked on segment trees (``trees/...`` and
  ``pinned/tree``, what ``folding`` records), where cross-segment and stitched GAE follow
  each segment's path (``cxsim.advantages``, "Segment trees"); a chain's
  ``parent_index`` is None, as the trainer gives it. The only layout that hands over step
  rewards (``step_rewards``, each at the last token of the response that earned it): the
  GAE cases' step rewards are checked in it; the other layouts take terminal rewards only
  and are given each batch without its step rewards (``Layout.step_rewards``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cxsim.conformance.batches import Batch
from cxsim.conformance.reference import GROUP_EPS as _EPS
from cxsim.conformance.reference import lambda_rows
from cxsim.conformance.term_models import tokens_after_rows
from cxsim.estimators import EstimatorInputs


@dataclass(frozen=True)
class Layout:
    """One layout: how it hands a batch over. The quantities it serves, and how each one's
    inputs are built and its output read back (a :class:`Handover`), are in each quantity's
    record (``cxsim.conformance.quantities``)."""

    name: str
    what: str
    trees: bool = False
    """It hands the function each segment's parent, so segment trees are checked too."""
    step_rewards: bool = False
    """It hands a GAE function the step rewards, so the cases' step rewards are checked;
    the other layouts (terminal rewards only) are given the batches without them."""


@dataclass(frozen=True)
class Handover:
    """How one quantity is handed over in one layout: the function's keyword arguments from a
    batch (and the mode), and its output back in canonical form."""

    inputs: Callable[[Batch, str | None], dict[str, Any]]
    output: Callable[[Batch, Any], torch.Tensor]


def _as_tensor(x: Any, name: str) -> torch.Tensor:
    try:
        return torch.as_tensor(x, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(
            f"the function returned {name} that is not a tensor of numbers: {err}"
        ) from err


def _shaped(x: Any, shape: tuple[int, ...], what: str) -> torch.Tensor:
    out = _as_tensor(x, what)
    if tuple(out.shape) != shape:
        raise TypeError(
            f"the function returned {what} of shape {tuple(out.shape)}, expected {shape}"
        )
    return out


def _lambda_args(batch: Batch) -> dict[str, Any]:
    return {"lam": batch.lam, "alpha": batch.alpha, "lambda_scope": batch.scope}


# --------------------------------------------------------------------------- segment rows


def _row_masks(batch: Batch) -> dict[str, Any]:
    return {"response_mask": batch.trainable.clone(), "attention_mask": batch.response.clone()}


def _segment_rows_lambda(batch: Batch, mode: str | None) -> dict[str, Any]:
    return {
        **_row_masks(batch),
        "rollout_id": batch.rollout_id.clone(),
        "alpha": batch.alpha,
        "lambda_scope": batch.scope,
    }


def _segment_rows_group(batch: Batch, mode: str | None) -> dict[str, Any]:
    return {
        "rewards": batch.rewards.clone(),
        **_row_masks(batch),
        "rollout_id": batch.rollout_id.clone(),
        "group_id": batch.group_id.clone(),
        "eps": _EPS,
    }


def _segment_rows_chain(batch: Batch, mode: str | None) -> dict[str, Any]:
    return {
        "rewards": batch.rewards.clone(),
        **_row_masks(batch),
        "rollout_id": batch.rollout_id.clone(),
        "segment_index": batch.segment_index.clone(),
    }


def _segment_rows_gae(batch: Batch, mode: str | None) -> dict[str, Any]:
    return {
        "values": batch.values.clone(),
        **_row_masks(batch),
        "rewards": batch.rewards.clone(),
        "rollout_id": batch.rollout_id.clone(),
        "segment_index": batch.segment_index.clone(),
        "gamma": batch.gamma,
        **_lambda_args(batch),
    }


def _lambdas_output(batch: Batch, out: Any) -> torch.Tensor:
    return _shaped(out, (batch.num_rows,), "lambdas")


def _tokens_output(batch: Batch, out: Any) -> torch.Tensor:
    return _shaped(out, tuple(batch.values.shape), "advantages")


# --------------------------------------------------------------------------- rollout rows


@dataclass(frozen=True)
class _RolloutIndex:
    """Where each canonical response token (src_row, src_col) lands in the rollout rows."""

    src_row: torch.Tensor
    src_col: torch.Tensor
    dst_row: torch.Tensor
    dst_col: torch.Tensor
    shape: tuple[int, int]
    last_row: list[int]
    """Each rollout's last segment (canonical row)."""


def _rollout_index(batch: Batch) -> _RolloutIndex:
    pieces: list[tuple[int, int, int, int]] = []  # (src row, length, dst row, dst offset)
    last_row = []
    for i, rid in enumerate(batch.rollout_id.unique().tolist()):
        rows = sorted(
            (r for r in range(batch.num_rows) if batch.rollout_id[r] == rid),
            key=lambda r: int(batch.segment_index[r]),
        )
        offset = 0
        for r in rows:
            n = int(batch.response[r].sum())
            pieces.append((r, n, i, offset))
            offset += n
        last_row.append(rows[-1])
    width = max(off + n for _, n, _, off in pieces)

    def cat(part) -> torch.Tensor:
        return torch.cat([part(*p) for p in pieces])

    return _RolloutIndex(
        src_row=cat(lambda r, n, i, off: torch.full((n,), r)),
        src_col=cat(lambda r, n, i, off: torch.arange(n)),
        dst_row=cat(lambda r, n, i, off: torch.full((n,), i)),
        dst_col=cat(lambda r, n, i, off: torch.arange(off, off + n)),
        shape=(len(last_row), width),
        last_row=last_row,
    )


def _rollout_rows_gae(batch: Batch, mode: str | None) -> dict[str, Any]:
    idx = _rollout_index(batch)
    src, dst = (idx.src_row, idx.src_col), (idx.dst_row, idx.dst_col)
    values = torch.zeros(idx.shape, dtype=torch.float64)
    trainable = torch.zeros(idx.shape, dtype=torch.bool)
    response = torch.zeros(idx.shape, dtype=torch.bool)
    segment_ids = torch.full(idx.shape, -1, dtype=torch.int64)
    values[dst] = batch.values[src]
    trainable[dst] = batch.trainable[src]
    response[dst] = True
    segment_ids[dst] = batch.segment_index[idx.src_row]
    return {
        "values": values,
        "response_mask": trainable,
        "attention_mask": response,
        "segment_ids": segment_ids,
        "rewards": batch.rewards[idx.last_row].clone(),
        "gamma": batch.gamma,
        **_lambda_args(batch),
    }


def _rollout_rows_output(batch: Batch, out: Any) -> torch.Tensor:
    idx = _rollout_index(batch)
    rows = _shaped(out, idx.shape, "advantages")
    back = torch.zeros_like(batch.values)
    back[idx.src_row, idx.src_col] = rows[idx.dst_row, idx.dst_col]
    return back


# --------------------------------------------------------------------------- samples


def _lengths(batch: Batch) -> list[int]:
    return batch.response.sum(dim=1).tolist()


def _samples_meta(batch: Batch) -> dict[str, Any]:
    """The loss masks, and the lengths and rollout ids every samples function is given."""
    lengths = _lengths(batch)
    return {
        "loss_masks": [batch.trainable[r, :n].to(torch.int64) for r, n in enumerate(lengths)],
        "response_lengths": lengths,
        "rollout_ids": batch.rollout_id.tolist(),
    }


def _samples_lambda(batch: Batch, mode: str | None) -> dict[str, Any]:
    return {
        **_samples_meta(batch),
        "trainable_counts": batch.trainable.sum(dim=1).tolist(),
        "alpha": batch.alpha,
        "lambda_scope": batch.scope,
    }


def _samples_group(batch: Batch, mode: str | None) -> dict[str, Any]:
    return {
        "rewards": batch.rewards.tolist(),
        **_samples_meta(batch),
        "group_ids": batch.group_id.tolist(),
        "eps": _EPS,
    }


def _samples_chain(batch: Batch, mode: str | None) -> dict[str, Any]:
    return {
        "rewards": batch.rewards.tolist(),
        **_samples_meta(batch),
        "segment_indices": batch.segment_index.tolist(),
    }


def _samples_gae(batch: Batch, mode: str | None) -> dict[str, Any]:
    meta = _samples_meta(batch)
    return {
        "values": [batch.values[r, :n].clone() for r, n in enumerate(meta["response_lengths"])],
        "loss_masks": meta["loss_masks"],
        "rewards": batch.rewards.tolist(),
        "response_lengths": meta["response_lengths"],
        "rollout_ids": meta["rollout_ids"],
        "segment_indices": batch.segment_index.tolist(),
        "trainable_counts": batch.trainable.sum(dim=1).tolist(),
        "tokens_after": [
            int(n) for n in tokens_after_rows(batch, batch.trainable.sum(dim=1)).tolist()
        ],
        "gamma": batch.gamma,
        **_lambda_args(batch),
    }


def _samples_output(batch: Batch, out: Any) -> torch.Tensor:
    lengths = _lengths(batch)
    if not isinstance(out, list | tuple) or len(out) != len(lengths):
        raise TypeError(f"the function must return a list of {len(lengths)} 1-D tensors")
    back = torch.zeros_like(batch.values)
    for r, (sample, n) in enumerate(zip(out, lengths, strict=True)):
        back[r, :n] = _shaped(sample, (n,), f"sample {r}")
    return back


# --------------------------------------------------------------------------- loss matrix


def _loss_matrix_inputs(batch: Batch, mode: str | None) -> dict[str, Any]:
    losses, masks, rollout_ids, start = [], [], [], 0
    for size in batch.micro_batches:
        rows = slice(start, start + size)
        losses.append(batch.loss[rows].clone())
        masks.append(batch.trainable[rows].clone())
        rollout_ids.append(batch.rollout_id[rows].clone())
        start += size
    return {"losses": losses, "masks": masks, "rollout_ids": rollout_ids, "mode": mode}


def _loss_matrix_output(batch: Batch, out: Any) -> torch.Tensor:
    return _shaped(out, (), "the loss").reshape(1)


# --------------------------------------------------------------------------- row weights


def _row_weights_inputs(batch: Batch, mode: str | None) -> dict[str, Any]:
    """Per micro-batch: the trainable-token masks, the response masks (observation tokens
    too), the rollout ids; and the rule."""
    masks, responses, rollout_ids, start = [], [], [], 0
    for size in batch.micro_batches:
        rows = slice(start, start + size)
        masks.append(batch.trainable[rows].clone())
        responses.append(batch.response[rows].clone())
        rollout_ids.append(batch.rollout_id[rows].clone())
        start += size
    return {"masks": masks, "attention_masks": responses, "rollout_ids": rollout_ids, "rule": mode}


def _row_weights_output(batch: Batch, out: Any) -> torch.Tensor:
    if not isinstance(out, list | tuple) or len(out) != len(batch.micro_batches):
        raise TypeError(
            f"the function must return a list of {len(batch.micro_batches)} per-row weight "
            "columns, one per micro-batch"
        )
    parts = [_shaped(w, (n,), f"micro-batch {k}'s weights") for k, (w, n) in
             enumerate(zip(out, batch.micro_batches, strict=True))]  # fmt: skip
    return torch.cat(parts)


# --------------------------------------------------------------------------- estimator


def _estimator_inputs(batch: Batch, mode: str | None) -> dict[str, Any]:
    """``inputs``: the batch as the trainer gives it to an estimator (the trainable tokens as
    the policy mask, the step rewards at the last token of each response, the float64
    lambda of each row when adaptive)."""
    return {
        "inputs": EstimatorInputs(
            values=batch.values.clone(),
            mask=batch.trainable.clone(),
            rewards=batch.rewards.clone(),
            step_rewards=batch.steps.clone(),
            rollout_id=batch.rollout_id.clone(),
            segment_index=batch.segment_index.clone(),
            group_id=batch.group_id.clone(),
            gamma=batch.gamma,
            lam=batch.lam if batch.lam is not None else lambda_rows(batch),
            parent_index=None if batch.parent_index is None else batch.parent_index.clone(),
        )
    }


ESTIMATOR = Handover(_estimator_inputs, _tokens_output)
"""The estimator layout: one ``EstimatorInputs``, whatever the estimator computes."""
GAE: dict[str, Handover] = {
    "segment-rows": Handover(_segment_rows_gae, _tokens_output),
    "rollout-rows": Handover(_rollout_rows_gae, _rollout_rows_output),
    "samples": Handover(_samples_gae, _samples_output),
    "estimator": ESTIMATOR,
}
"""A GAE quantity's layouts: values, masks, rewards, ids, gamma and lambda in, advantages out."""
GROUP: dict[str, Handover] = {
    "segment-rows": Handover(_segment_rows_group, _tokens_output),
    "samples": Handover(_samples_group, _samples_output),
    "estimator": ESTIMATOR,
}
"""Group advantages: rewards, masks, rollout and group ids, eps in; advantages out."""
CHAIN: dict[str, Handover] = {
    "segment-rows": Handover(_segment_rows_chain, _tokens_output),
    "samples": Handover(_samples_chain, _samples_output),
    "estimator": ESTIMATOR,
}
"""A credit split over chains: rewards, masks, rollout ids, segment indices in."""
LAMBDA: dict[str, Handover] = {
    "segment-rows": Handover(_segment_rows_lambda, _lambdas_output),
    "samples": Handover(_samples_lambda, _lambdas_output),
}
"""Per-row lambdas: masks (or trainable counts), rollout ids, alpha, scope in; (S,) out."""
REDUCTION: dict[str, Handover] = {
    "loss-matrix": Handover(_loss_matrix_inputs, _loss_matrix_output),
}
"""A loss reduction: per-token losses and masks in micro-batches, and the mode; a scalar."""
ROW_WEIGHTS: dict[str, Handover] = {
    "row-weights": Handover(_row_weights_inputs, _row_weights_output),
}
"""Per-row weights: masks and rollout ids per micro-batch, and the rule; a column each."""

LAYOUTS: dict[str, Layout] = {
    "segment-rows": Layout(
        "segment-rows", "one padded row per segment with a response mask (verl style)"
    ),
    "rollout-rows": Layout(
        "rollout-rows", "one padded row per rollout, segments concatenated (stitched GAE)"
    ),
    "samples": Layout(
        "samples",
        "response-only 1-D tensors with per-sample lengths and metadata (slime style)",
    ),
    "loss-matrix": Layout("loss-matrix", "(loss, mask) split into micro-batches, for reductions"),
    "row-weights": Layout(
        "row-weights", "per-row weight columns, one per micro-batch, from masks and rollout ids"
    ),
    "estimator": Layout(
        "estimator",
        "one EstimatorInputs, as the trainer calls an estimator of its registry",
        trees=True,
        step_rewards=True,
    ),
}


def call(function: Callable[..., Any], batch: Batch, handover: Handover, mode: str | None):
    """Calls ``function`` on ``batch`` as ``handover`` (a quantity in a layout) hands it over,
    and returns its output in canonical form."""
    return handover.output(batch, function(**handover.inputs(batch, mode)))

"""Behaviour cloning on recorded segments: token-mean cross-entropy on trainable tokens.

The demonstrations are rollouts of a scripted agent (oracle executor plus the
scripted summarizer) through the same compaction runtime the policy will face,
so an execution segment's trainable tokens are exactly the oracle's actions
and a summary segment's are the summary, each in the context the policy will
see (rebuilt windows, summary prompts). Prompts and observations are context
only.

Loss of one optimiser step over rows ``B``:
``L = -sum_{(s,t) in M_B} log pi(tok_{s,t} | tok_{s,<t}) / |M_B|``, with ``M_B``
the trainable tokens of the whole step, counted once across micro-batches.
The LM head runs only at those tokens (``token_logprobs_at``), so memory does
not grow with rows x window x vocab. Batches are moved to the policy's device;
``precision="bf16"`` runs the forwards under bfloat16 autocast (the weights and
Adam's state stay float32).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from cxsim.agents.models import token_logprobs_at
from cxsim.devices import Precision, autocast
from cxsim.losses import aggregate
from cxsim.minibatches import micro_batches
from cxsim.segments import SegmentBatch


def sft_step(
    policy: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    batch: SegmentBatch,
    micro_batch_rows: int,
    max_grad_norm: float,
    precision: Precision = "fp32",
) -> dict[str, float]:
    """One optimiser step of token-mean cross-entropy over ``batch``'s trainable tokens."""
    device = policy.device
    denom = batch.trainable.sum().clamp(min=1).float().to(device)
    optimizer.zero_grad(set_to_none=True)
    total, correct = 0.0, 0.0
    for micro in micro_batches(batch, micro_batch_rows):
        ids, attention = micro.token_ids.to(device), micro.attention.to(device)
        trainable = micro.trainable.to(device)
        with autocast(precision, device):
            logprobs = token_logprobs_at(policy, ids, attention, trainable)  # (s, t)
        loss = aggregate(-logprobs, trainable, "token-mean", denominator=denom)
        loss.backward()
        total += float(loss.detach())
        # a token is "right" when the model gives it more than half the mass (argmax for sure)
        correct += float((logprobs.detach() > -0.6931)[trainable].sum())
    norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    return {
        "losses/sft": total,
        "charts/token_accuracy": correct / float(denom),
        "losses/grad_norm": float(norm),
    }


@torch.no_grad()
def sft_eval(
    policy: PreTrainedModel,
    batch: SegmentBatch,
    micro_batch_rows: int,
    precision: Precision = "fp32",
) -> dict[str, float]:
    """Held-out cross-entropy, split by role (execution vs summary tokens)."""
    device = policy.device
    sums = {"execution": 0.0, "summary": 0.0}
    counts = {"execution": 0.0, "summary": 0.0}
    for micro in micro_batches(batch, micro_batch_rows):
        trainable = micro.trainable.to(device)
        with autocast(precision, device):
            logprobs = token_logprobs_at(
                policy, micro.token_ids.to(device), micro.attention.to(device), trainable
            )
        nll = -logprobs
        summary = micro.is_summary.to(device)
        for role, rows in (("execution", ~summary), ("summary", summary)):
            mask = trainable & rows[:, None]
            sums[role] += float(nll[mask].sum())
            counts[role] += float(mask.sum())
    return {f"losses/heldout_{role}": sums[role] / max(counts[role], 1.0) for role in sums}


def epoch_batches(
    num_rows: int, rows_per_step: int, lengths: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """One epoch's steps: row indices split into steps of ``rows_per_step`` (torch's RNG).

    Without ``lengths``: a shuffled split of ``range(num_rows)``. With ``lengths`` (one
    per row), bucketed: the rows are shuffled, sorted by length (stable, so equal lengths
    stay shuffled), cut into steps of similar length, and the steps are shuffled, so a
    step pads to about its own rows' length instead of the longest of a random draw.
    """
    order = torch.randperm(num_rows)
    if lengths is None:
        return list(torch.split(order, rows_per_step))
    order = order[torch.argsort(lengths[order], stable=True)]
    steps = list(torch.split(order, rows_per_step))
    return [steps[i] for i in torch.randperm(len(steps)).tolist()]

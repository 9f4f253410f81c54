"""Deliberately wrong weighting per logical rollout, one per rule, written the way a framework
outside cxsim would (loops over micro-batches and rows), for testing the check
(docs/conformance.md, "Weighting per logical rollout"). ``cxsim conform`` fails each and names
its term::

    cxsim conform cxsim.conformance.weighting_variants:session_equal_renormalised_per_micro_batch \\
        --quantity row-weights --layout row-weights --mode session-equal

Each row-weights function takes the ``row-weights`` layout (per micro-batch: ``masks``,
``attention_masks``, ``rollout_ids``; and ``rule``), the loss function the ``loss-matrix``
layout.
"""

from __future__ import annotations

import torch


def _session_rows(masks, rollout_ids) -> dict[int, int]:
    """Rows with a trainable token per session, over every micro-batch."""
    rows: dict[int, int] = {}
    for mask, ids in zip(masks, rollout_ids, strict=True):
        for row in range(len(ids)):
            if bool(mask[row].any()):
                rows[int(ids[row])] = rows.get(int(ids[row]), 0) + 1
    return rows


def session_equal_renormalised_per_micro_batch(
    masks, attention_masks, rollout_ids, rule
) -> list[torch.Tensor]:
    """row-weights, session-equal: 1/N per row, right, but renormalised to mean 1 inside each
    micro-batch (in the loss function, which sees one micro-batch), not once over the batch.

    Session A (1 row) and session B (3 rows) in micro-batches [A, B0] and [B1, B2]: weights
    (1.5, 0.5, 1, 1) instead of (2, 2/3, 2/3, 2/3).
    """
    rows = _session_rows(masks, rollout_ids)
    out = []
    for mask, ids in zip(masks, rollout_ids, strict=True):
        voting = mask.any(dim=1)
        raw = torch.tensor([1.0 / rows.get(int(i), 1) for i in ids], dtype=torch.float64)
        raw = raw * voting
        total = float(raw.sum())
        out.append(raw * (int(voting.sum()) / total) if total else raw)
    return out


def partition_preserving_response_lengths(
    masks, attention_masks, rollout_ids, rule
) -> list[torch.Tensor]:
    """row-weights, partition-preserving: each row's length over the mean, but the length read
    from the attention mask (the response, observation tokens included).

    Rows of 2, 1, 3 (+2 observation) and 2 trainable tokens: (0.8, 0.4, 2, 0.8) instead of
    (1, 0.5, 1.5, 1).
    """
    lengths = [
        torch.where(m.any(dim=1), a.sum(dim=1), 0).to(torch.float64)
        for m, a in zip(masks, attention_masks, strict=True)
    ]
    whole = torch.cat(lengths)
    mean = float(whole[whole > 0].mean()) if bool((whole > 0).any()) else 1.0
    return [n / mean for n in lengths]


def one_reward_every_row(masks, attention_masks, rollout_ids, rule) -> list[torch.Tensor]:
    """row-weights, one-reward-per-rollout: every row weight 1 in the group statistics (each
    row its own sample), so a session cut into 3 rows counts 3 times."""
    return [mask.any(dim=1).to(torch.float64) for mask in masks]


def thread_mean_threads_per_micro_batch(
    masks, attention_masks, rollout_ids, rule
) -> list[torch.Tensor]:
    """row-weights, thread-mean: each row's share of its thread's tokens, but the thread's tokens
    counted inside the row's micro-batch (a thread split over micro-batches counts in parts).

    Thread B's rows of 1 | 3, 2 tokens split [B0] | [B1, B2]: (2, 1.2, 0.8) instead of
    (1/3, 1, 2/3).
    """
    whole_rows = sum(int(m.any(dim=1).sum()) for m in masks)
    threads = len(_session_rows(masks, rollout_ids))
    out = []
    for mask, ids in zip(masks, rollout_ids, strict=True):
        counts = mask.sum(dim=1).to(torch.float64)
        local = torch.stack([counts[ids == i].sum() for i in ids])
        out.append(counts / local.clamp(min=1) * whole_rows / max(threads, 1))
    return out


def session_equal_loss_not_renormalised(losses, masks, rollout_ids, mode) -> torch.Tensor:
    """loss-matrix, loss-reduction (session-equal): each row's token mean times 1/N, averaged
    over the rows (the weights never renormalised to mean 1).

    Sessions A (loss mean 2) and B (row means 7, 1, 2): (2 + 10/3) / 4 = 1.333 instead of
    (2 + 10/3) / 2 = 2.667.
    """
    rows = _session_rows(masks, rollout_ids)
    total, voting = torch.zeros((), dtype=torch.float64), 0
    for loss, mask, ids in zip(losses, masks, rollout_ids, strict=True):
        for row in range(len(ids)):
            if bool(mask[row].any()):
                voting += 1
                total = total + loss[row][mask[row]].mean() / rows[int(ids[row])]
    return total / max(voting, 1)

"""Raw numbers behind the paper's figures: compactions per trajectory, tool calls,
summary length, tokens per turn, entropy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from cxsim.diagnostics._common import (
    as_records,
    check_per_row,
    check_per_token,
    safe_div,
    to_floats,
)


class FigureRecord(Protocol):
    success: bool
    turns: int
    compactions: int
    summaries: Sequence[str]
    tokens_generated: int
    tokens_summarised: int


def rollout_figures(records: Sequence[FigureRecord | Mapping]) -> dict[str, float]:
    """Per-trajectory statistics of a batch of rollouts.

    - ``figures/compactions_max``, ``figures/compactions_eq{k}`` (fraction of
      rollouts with exactly k);
    - ``figures/turns_max``: tool calls (assistant turns);

    Success rate, mean compactions and mean turns are ``charts/success_rate``,
    ``compaction/compactions_mean`` and ``charts/turns_mean``
    (``cxsim.evaluation.rollout_metrics``): one tag per quantity.
    - ``figures/summary_tokens`` = ``sum tokens_summarised / sum #summaries`` and
      ``figures/summary_words`` (mean whitespace-separated words per summary);
    - ``figures/tokens_per_turn`` = ``sum (tokens_generated - tokens_summarised)
      / sum turns``: response length of an execution turn.
    """
    recs = as_records(records)
    if not recs:
        raise ValueError("records is empty")
    c = torch.tensor([r.compactions for r in recs], dtype=torch.float64)
    turns = torch.tensor([r.turns for r in recs], dtype=torch.float64)
    gen = torch.tensor([r.tokens_generated for r in recs], dtype=torch.float64)
    summ = torch.tensor([r.tokens_summarised for r in recs], dtype=torch.float64)
    num_summaries = torch.tensor([len(r.summaries) for r in recs], dtype=torch.float64)
    words = torch.tensor([len(s.split()) for r in recs for s in r.summaries], dtype=torch.float64)
    stats: dict[str, torch.Tensor] = {
        "figures/compactions_max": c.max(),
        "figures/turns_max": turns.max(),
        "figures/summary_tokens": safe_div(summ.sum(), num_summaries.sum()),
        "figures/summary_words": words.mean(),
        "figures/tokens_per_turn": safe_div((gen - summ).sum(), turns.sum()),
    }
    for k in range(int(c.max()) + 1):
        stats[f"figures/compactions_eq{k}"] = (c == k).double().mean()
    return to_floats(stats)


def entropy_stats(
    entropy: torch.Tensor, mask: torch.Tensor, is_summary: torch.Tensor
) -> dict[str, float]:
    """Mean policy entropy (nats) over masked tokens: ``figures/entropy``, and by
    role ``figures/entropy_execution``, ``figures/entropy_summary``.

    ``entropy`` (S, T) is e.g. ``cxsim.losses.entropy_from_logits(logits)``.
    """
    check_per_token("entropy", entropy, mask)
    check_per_row("is_summary", is_summary, mask)
    e = entropy.detach().double()
    w = mask.double()
    role = is_summary[:, None].double()
    return to_floats(
        {
            "figures/entropy": safe_div((e * w).sum(), w.sum()),
            "figures/entropy_execution": safe_div(
                (e * w * (1 - role)).sum(), (w * (1 - role)).sum()
            ),
            "figures/entropy_summary": safe_div((e * w * role).sum(), (w * role).sum()),
        }
    )

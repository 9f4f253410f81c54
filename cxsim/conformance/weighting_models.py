"""The weighting rules' models, with each term's form as a setting, and their known wrong forms.

:func:`row_weights_model` computes a rule's per-row weight column in float64 with its terms
chosen (where the weights are renormalised, where a session's rows and a thread's tokens are
counted, what a row's tokens are, whether a rejected summary attempt counts, which rule);
its defaults give the reference of :mod:`cxsim.conformance.weighting` (tested).
:func:`weighted_reduction_model` is the loss those weights go into. :func:`row_weight_choices`
and :func:`weighted_reduction_choices` are the wrong forms ``cxsim conform`` names
(:mod:`cxsim.conformance.terms` runs the search).
"""

from __future__ import annotations

from typing import Any

import torch

from cxsim.conformance.batches import Batch
from cxsim.conformance.weighting import WEIGHTING_RULES, one_reward_per_rollout, weighted_loss

LOSS_MODE_RULES: dict[str, str] = {
    "session-equal": "session-equal",
    "partition-preserving": "partition-preserving",
    "thread-mean": "thread-mean",
}
"""The loss modes that are a weighting rule on the seq-mean-token-mean base, and their rule."""


def _chunks(batch: Batch) -> list[slice]:
    out, start = [], 0
    for size in batch.micro_batches:
        out.append(slice(start, start + size))
        start += size
    return out


def _as_trainable(batch: Batch, include_rejected: bool, lengths: str) -> torch.Tensor:
    """The mask the rule counts: trainable tokens (right), the response tokens of every row
    ("response": observation tokens counted), or a rejected attempt's tokens as if trained."""
    if lengths == "response":
        return batch.response & (batch.trainable.any(dim=1) | include_rejected)[:, None]
    if include_rejected:
        return batch.trainable | (batch.rejected[:, None] & batch.response)
    return batch.trainable


def row_weights_model(
    batch: Batch,
    rule: str,
    renormalise: str = "batch",
    rows_in: str = "batch",
    lengths: str = "trainable",
    include_rejected: bool = False,
    rule_used: str | None = None,
) -> torch.Tensor:
    """(S,) float64 row weights of ``rule`` with chosen terms.

    Args:
        renormalise: the weights' mean 1 over the whole "batch" (right), within each
            "micro-batch", or "none" (the raw 1/N or n_s).
        rows_in: a session's rows and a thread's tokens counted over the whole "batch" (right)
            or within each "micro-batch" (a session split over micro-batches counted in parts).
        lengths: a row's tokens: "trainable" (right) or "response" (observation tokens too).
        include_rejected: a rejected summary attempt counts as a row of its session.
        rule_used: the rule computed (default ``rule``); "every-row": weight 1 on every row.
    """
    used = rule_used or rule
    mask = _as_trainable(batch, include_rejected, lengths)
    if used == "every-row":
        return mask.any(dim=1).to(torch.float64)
    pieces = _chunks(batch) if rows_in == "micro-batch" else [slice(0, batch.num_rows)]
    raw = torch.cat([_raw(used, mask[c], batch.rollout_id[c]) for c in pieces])
    if used == "one-reward-per-rollout" or renormalise == "none":
        return raw
    if renormalise == "micro-batch":
        return torch.cat([_to_mean_one(raw[c], mask[c]) for c in _chunks(batch)])
    # the factor that gives the right weights mean 1 over the batch (S' / R' or S' / |M|)
    right = _raw(used, mask, batch.rollout_id)
    total = float(right.sum())
    return raw * (int(mask.any(dim=1).sum()) / total) if total else raw


def _to_mean_one(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    voting = mask.any(dim=1)
    total = float(weights[voting].sum())
    return weights * (int(voting.sum()) / total) if total else weights


def _raw(rule: str, mask: torch.Tensor, rollout_id: torch.Tensor) -> torch.Tensor:
    """The weights before renormalisation: 1/N_tau, n_s, or n_s / n_tau."""
    counts = mask.sum(dim=1).to(torch.float64)
    if rule in ("session-equal", "one-reward-per-rollout"):
        return one_reward_per_rollout(mask, rollout_id)
    if rule == "partition-preserving":
        return counts
    totals = torch.stack([counts[rollout_id == rid].sum() for rid in rollout_id.tolist()])
    return counts / totals.clamp(min=1)


def weighted_reduction_model(batch: Batch, mode: str, row_form: dict[str, Any]) -> torch.Tensor:
    """(1,) the loss of a weighting mode: ``1/S' sum_s w_s mean_{M_s} l`` with the weights of
    :func:`row_weights_model` under ``row_form``."""
    weights = row_weights_model(batch, LOSS_MODE_RULES[mode], **row_form)
    return weighted_loss(batch.loss, batch.trainable, weights).reshape(1)


# --------------------------------------------------------------------------- wrong forms


def _forms(batch: Batch, rule: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(term, form, settings) of each known wrong form of ``rule``."""
    forms = []
    if rule != "one-reward-per-rollout":
        forms += [
            (
                "the renormalisation",
                "the weights renormalised within each micro-batch, not once over the whole "
                "batch (a micro-batch of equal weights rescales to 1, erasing the reweighting)",
                {"renormalise": "micro-batch"},
            ),
            (
                "the renormalisation",
                "the weights not renormalised to mean 1 over the batch (the raw 1/N or n_s: "
                "the loss scale depends on how many rows the sessions were cut into)",
                {"renormalise": "none"},
            ),
        ]
    if rule == "one-reward-per-rollout":
        forms.append(
            (
                "the rows of a session",
                "every row weight 1: each row a sample of the group statistics, so a rollout "
                "cut into more rows weighs more",
                {"rule_used": "every-row"},
            )
        )
    if rule != "partition-preserving":
        forms.append(
            (
                "the rows of a session",
                "a session's rows (or a thread's tokens) counted within each micro-batch, not "
                "over the whole batch: a session split over micro-batches counts in parts",
                {"rows_in": "micro-batch"},
            )
        )
    if rule in ("partition-preserving", "thread-mean"):
        forms.append(
            (
                "the row tokens",
                "a row's tokens counted with its observation tokens (the response length), "
                "not its trainable tokens only",
                {"lengths": "response"},
            )
        )
    if bool(batch.rejected.any()):
        forms.append(
            (
                "the rejected summary attempts",
                "a rejected summary attempt counted as a row of its session",
                {"include_rejected": True},
            )
        )
    forms += [
        ("the rule", f"computes {other} instead of {rule}", {"rule_used": other})
        for other in WEIGHTING_RULES
        if other != rule
    ]
    return forms


def row_weight_choices(batch: Batch, rule: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The wrong forms of a row-weight column (quantity ``row-weights``)."""
    return _forms(batch, rule)


def weighted_reduction_choices(batch: Batch, mode: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The wrong forms of a weighting mode's loss (quantity ``loss-reduction``), as settings
    of :func:`cxsim.conformance.term_models.reduction_model` (``row_form``)."""
    rule = LOSS_MODE_RULES[mode]
    named = [(t, f, s) for t, f, s in _forms(batch, rule) if "rule_used" not in s]
    out = [(t, "row weights: " + f, {"row_form": s}) for t, f, s in named]
    out.append(
        (
            "the row weights",
            "no row weights: each row's token mean averaged over rows (seq-mean-token-mean)",
            {"row_form": {"rule_used": "every-row"}},
        )
    )
    return out

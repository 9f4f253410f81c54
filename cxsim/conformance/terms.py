"""Which term of the equation a failing function gets wrong.

For a failing example, the output is compared with the reference recomputed
with one term replaced by a known wrong form (the pitfalls of
docs/conformance.md): the lambda used, the exponent (which tokens count as
steps or as tokens after), where the reward sits, the group statistics, the
denominator of a reduction. The first form that reproduces the output names
the term. The GAE forms come from :func:`gae_model`, a plain float64 loop over
the equations whose default terms equal cxsim's estimators (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from cxsim.conformance.batches import REDUCTION_MODES, Batch
from cxsim.conformance.reference import GAE_QUANTITIES, GROUP_EPS, lambda_rows
from cxsim.losses import aggregate


@dataclass(frozen=True)
class Explanation:
    """A wrong form of one term and the output it gives."""

    term: str
    """The term: "the lambda used", "the exponent", "where the reward sits", ..."""
    form: str
    """What the function does instead, in one line."""
    output: torch.Tensor


# --------------------------------------------------------------------------- GAE model


def _mask(batch: Batch, which: str) -> torch.Tensor:
    return batch.trainable if which == "trainable" else batch.response


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


def _last(flags: list[bool]) -> int:
    return max((i for i, f in enumerate(flags) if f), default=-1)


def gae_model(
    batch: Batch,
    quantity: str,
    lam: torch.Tensor | None = None,
    steps: str = "trainable",
    reward_at: str = "trainable",
    after: str = "trainable",
) -> torch.Tensor:
    """GAE of ``quantity`` with chosen terms; (S, T), nonzero only on trainable tokens.

    Args:
        batch: canonical batch.
        quantity: "local-gae", "cross-segment-gae" or "stitched-gae".
        lam: (S,) lambda per segment (default: the reference's).
        steps: tokens the recursion runs over, "trainable" (right) or "response"
            (observation tokens become GAE steps).
        reward_at: the reward sits on the last "trainable" token (right) or the last
            "response" token (dropped when that is an observation and ``steps`` is trainable).
        after: tokens counted in the cross-segment exponent ``N_after``.
    """
    lam_rows = lambda_rows(batch) if lam is None else lam
    step_mask, reward_mask, after_mask = (_mask(batch, w) for w in (steps, reward_at, after))
    out = torch.zeros_like(batch.values)
    rows = range(batch.num_rows)
    if quantity == "stitched-gae":
        for rid in batch.rollout_id.unique().tolist():
            members = sorted(
                (r for r in rows if batch.rollout_id[r] == rid),
                key=lambda r: int(batch.segment_index[r]),
            )
            width = batch.values.shape[1]
            result = _gae_over(
                batch.values[members].flatten().tolist(),
                step_mask[members].flatten().tolist(),
                _last(reward_mask[members].flatten().tolist()),
                float(batch.rewards[members[-1]]),
                batch.gamma,
                lam_rows[members].repeat_interleave(width).tolist(),
            )
            out[members] = torch.tensor(result, dtype=torch.float64).reshape(len(members), width)
        return torch.where(batch.trainable, out, 0.0)
    for r in rows:
        out[r] = torch.tensor(
            _gae_over(
                batch.values[r].tolist(),
                step_mask[r].tolist(),
                _last(reward_mask[r].tolist()),
                float(batch.rewards[r]),
                batch.gamma,
                [float(lam_rows[r])] * batch.values.shape[1],
            ),
            dtype=torch.float64,
        )
    if quantity == "cross-segment-gae":
        counts = after_mask.sum(dim=1)
        later = torch.tensor(
            [
                int(
                    counts[
                        (batch.rollout_id == batch.rollout_id[r])
                        & (batch.segment_index > batch.segment_index[r])
                    ].sum()
                )
                for r in rows
            ],
            dtype=torch.float64,
        )
        out = torch.pow(batch.gamma * lam_rows, later)[:, None] * out
    return torch.where(batch.trainable, out, 0.0)


# --------------------------------------------------------------------------- wrong forms


def _lambda_forms(batch: Batch) -> list[tuple[str, torch.Tensor]]:
    """(form, (S,) lambda) for the adaptive-lambda pitfalls; none under a fixed lambda."""
    if batch.lam is not None:
        return []
    other = "rollout" if batch.scope == "segment" else "segment"
    return [
        (
            "lambda from lengths that include observation tokens (l = response length)",
            lambda_rows(batch, lengths="response"),
        ),
        ("lambda capped at 0.999", lambda_rows(batch, cap=0.999)),
        (
            "lambda not clamped at 0: 1 - 1/(alpha l) < 0 when alpha l < 1 (sign-flipped correction)",
            lambda_rows(batch, clamp=False),
        ),
        (f"lambda over the {other} instead of the {batch.scope}", lambda_rows(batch, scope=other)),
    ]


def _gae_forms(batch: Batch, quantity: str) -> list[Explanation]:
    forms = [
        Explanation(
            "the exponent",
            "observation tokens inside a response are stepped over as GAE steps "
            "(their values and extra discount factors enter; reward on the last response token)",
            gae_model(batch, quantity, steps="response", reward_at="response", after="response"),
        ),
        Explanation(
            "the exponent",
            "observation tokens inside a response are stepped over as GAE steps",
            gae_model(batch, quantity, steps="response", after="response"),
        ),
        Explanation(
            "where the reward sits",
            "the reward is put on the segment's last response token, so it is dropped "
            "when the segment ends on observation tokens",
            gae_model(batch, quantity, reward_at="response"),
        ),
    ]
    if quantity == "cross-segment-gae":
        forms += [
            Explanation(
                "the exponent",
                "N_after counts the observation tokens of later segments",
                gae_model(batch, quantity, after="response"),
            ),
            Explanation(
                "the exponent",
                "no cross-segment correction (exponent 0: the local GAE)",
                gae_model(batch, "local-gae"),
            ),
        ]
    forms += [
        Explanation("the lambda used", form, gae_model(batch, quantity, lam=lam))
        for form, lam in _lambda_forms(batch)
    ]
    return forms


def _group_stats(batch: Batch, per_segment: bool, ddof: int, divide: bool) -> torch.Tensor:
    out = torch.zeros_like(batch.values)
    for gid in batch.group_id.unique().tolist():
        rows = (batch.group_id == gid).nonzero().flatten().tolist()
        if not per_segment:
            seen: dict[int, int] = {}
            for r in rows:
                seen.setdefault(int(batch.rollout_id[r]), r)
            voters = list(seen.values())
        else:
            voters = rows
        rewards = batch.rewards[voters]
        mean = rewards.mean()
        count = len(voters)
        std = ((rewards - mean) ** 2).sum().div(max(count - ddof, 1)).sqrt() if count > 1 else 0.0
        for r in rows:
            centred = batch.rewards[r] - mean
            out[r] = centred / (std + GROUP_EPS) if divide else centred
    return torch.where(batch.trainable, out, 0.0)


def _broadcast_forms(batch: Batch) -> list[Explanation]:
    return [
        Explanation(
            "the group statistics",
            "mean and std over segments (a rollout counted once per segment)",
            _group_stats(batch, per_segment=True, ddof=1, divide=True),
        ),
        Explanation(
            "the group statistics",
            "population std (divides by n, not n - 1)",
            _group_stats(batch, per_segment=False, ddof=0, divide=True),
        ),
        Explanation(
            "the group statistics",
            "no division by the group std",
            _group_stats(batch, per_segment=False, ddof=1, divide=False),
        ),
    ]


def _chunks(batch: Batch) -> list[slice]:
    out, start = [], 0
    for size in batch.micro_batches:
        out.append(slice(start, start + size))
        start += size
    return out


def _reduction_forms(batch: Batch, mode: str) -> list[Explanation]:
    def per_chunk(m: str) -> list[torch.Tensor]:
        return [
            aggregate(batch.loss[c], batch.trainable[c], m, batch.rollout_id[c])
            for c in _chunks(batch)
        ]

    forms = [
        Explanation(
            "the denominator",
            "mean of micro-batch means (each micro-batch divided by its own count, "
            "then averaged over micro-batches)",
            torch.stack(per_chunk(mode)).mean().reshape(1),
        ),
        Explanation(
            "the denominator",
            "sum of micro-batch means (each micro-batch divided by its own count)",
            torch.stack(per_chunk(mode)).sum().reshape(1),
        ),
    ]
    forms += [
        Explanation(
            "the denominator",
            f"computes {other} instead of {mode}",
            aggregate(batch.loss, batch.trainable, other, batch.rollout_id).reshape(1),
        )
        for other in REDUCTION_MODES
        if other != mode
    ]
    return forms


def _adaptive_forms(batch: Batch) -> list[Explanation]:
    return [Explanation("the lambda used", form, lam) for form, lam in _lambda_forms(batch)]


_FORMS: dict[str, Callable[[Batch, str, str | None], list[Explanation]]] = {
    **{q: (lambda b, q, m: _gae_forms(b, q)) for q in GAE_QUANTITIES},
    "group-broadcast": lambda b, q, m: _broadcast_forms(b),
    "adaptive-lambda": lambda b, q, m: _adaptive_forms(b),
    "loss-reduction": lambda b, q, m: _reduction_forms(b, m or "token-mean"),
}


def explain(
    batch: Batch,
    quantity: str,
    mode: str | None,
    got: torch.Tensor,
    expected: torch.Tensor,
    where: torch.Tensor,
    close: Callable[[torch.Tensor, torch.Tensor], bool],
) -> tuple[str, str]:
    """(term, form) naming what differs: the first wrong form that reproduces ``got``.

    ``where`` masks the compared entries; ``close(a, b)`` is the pass criterion.
    With no matching form, locates the largest difference instead. ``where`` is
    nonempty for every quantity (batches have at least one trainable token).
    """
    matches = [
        (float((form.output[where] - got[where]).abs().max()), i, form)
        for i, form in enumerate(_FORMS[quantity](batch, quantity, mode))
        if not close(form.output[where], expected[where]) and close(form.output[where], got[where])
    ]
    if matches:  # the closest reproduction wins; on a small example several forms can agree
        ranked = sorted(matches, key=lambda m: (m[0], m[1]))
        tie = ranked[0][0] + 1e-9 * (1.0 + float(got[where].abs().max()))
        others = [f"{f.term}: {f.form}" for d, _, f in ranked[1:] if d <= tie]
        ranked = [form for _, _, form in ranked]
        also = f" (this example is also reproduced by: {'; '.join(others)})" if others else ""
        return ranked[0].term, ranked[0].form + also
    return "unidentified", _locate(batch, quantity, got, expected, where)


def _locate(
    batch: Batch, quantity: str, got: torch.Tensor, expected: torch.Tensor, where: torch.Tensor
) -> str:
    diff = torch.where(where, (got - expected).abs(), 0.0)
    if quantity in ("adaptive-lambda", "loss-reduction"):
        return "no known pitfall reproduces the output"
    row, col = divmod(int(diff.argmax()), diff.shape[1])
    last = max(i for i, f in enumerate(batch.trainable[row].tolist()) if f)
    at = "the last trainable token" if col == last else f"trainable token {col}"
    return f"no known pitfall reproduces the output; the largest difference is at {at} of row {row}"

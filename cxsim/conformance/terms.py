"""Which terms of the equation a failing function gets wrong.

Each quantity has a model: a plain float64 computation whose keyword settings
choose one form of each term (which tokens are GAE steps, where the reward
sits, what ``N_after`` counts, the lambda used, the group statistics, the
split over chains, the denominator of a reduction, whether rejected summary
attempts enter); its default settings give the reference (tested). A
:class:`Choice` is one known wrong form of one term (the pitfalls of
docs/conformance.md). For a failing example, the output is compared with the
model under each choice; when none reproduces it, under each pair and then
each triple of choices that change different terms, so that a mixed error
(for example, observation tokens stepped over inside a segment but ``N_after``
counted right, and a capped lambda) is reported as the terms that explain
each part.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from cxsim.conformance.batches import Batch, select_rows
from cxsim.conformance.reference import GAE_QUANTITIES, GROUP_EPS, lambda_rows
from cxsim.losses import aggregate
from cxsim.segment_trees import segment_chains

MAX_TERMS = 3
"""The most wrong terms tried together."""


@dataclass(frozen=True)
class Choice:
    """A known wrong form of one term, as settings of the quantity's model."""

    term: str
    """The term: "the exponent", "the lambda used", "where the reward sits", ..."""
    form: str
    """What the function does instead, in one line."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Keyword settings of the model; two choices combine when their keys differ."""


@dataclass(frozen=True)
class Diagnosis:
    """The wrong forms that together reproduce a function's output (empty: unidentified)."""

    parts: tuple[tuple[str, str], ...]
    """(term, form) of each wrong term."""
    note: str = ""
    """Other reproductions of the same example, or where the largest difference sits."""

    @property
    def term(self) -> str:
        return " + ".join(t for t, _ in self.parts) if self.parts else "unidentified"

    @property
    def form(self) -> str:
        if not self.parts:
            return self.note
        if len(self.parts) == 1:
            text = self.parts[0][1]
        else:
            text = f"{len(self.parts)} errors together, each explaining its part: " + "; ".join(
                f"({i}) {t}: {f}" for i, (t, f) in enumerate(self.parts, 1)
            )
        return text + (f" (this example is also reproduced by: {self.note})" if self.note else "")


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


def _tokens_after(batch: Batch, counts: torch.Tensor) -> torch.Tensor:
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


# --------------------------------------------------------------------------- GAE model


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
        later = _tokens_after(full, _mask(full, after).sum(dim=1))
        out = torch.pow(full.gamma * lam_rows, later)[:, None] * out
    return torch.where(batch.trainable, out, 0.0)


def _lambda_choices(batch: Batch) -> list[Choice]:
    """The adaptive-lambda pitfalls; none under a fixed lambda."""
    if batch.lam is not None:
        return []
    other = "rollout" if batch.scope == "segment" else "segment"
    forms: list[tuple[str, dict[str, Any]]] = [
        (
            "lambda from lengths that include observation tokens (l = response length)",
            {"lengths": "response"},
        ),
        ("lambda capped at 0.999", {"cap": 0.999}),
        (
            "lambda not clamped at 0: 1 - 1/(alpha l) < 0 when alpha l < 1 "
            "(sign-flipped correction)",
            {"clamp": False},
        ),
        (f"lambda over the {other} instead of the {batch.scope}", {"scope": other}),
    ]
    return [Choice("the lambda used", form, {"lam_form": kw}) for form, kw in forms]


def _rejected_choice(batch: Batch, form: str) -> list[Choice]:
    if not bool(batch.rejected.any()):
        return []
    return [Choice("the rejected summary attempts", form, {"include_rejected": True})]


def _gae_choices(batch: Batch, quantity: str) -> list[Choice]:
    choices = _rejected_choice(
        batch,
        "a rejected summary attempt is included in the advantage computation "
        "(its tokens counted as if trained, then masked) instead of dropped before it",
    )
    choices += [
        Choice(
            "the exponent",
            "observation tokens inside a response are stepped over as GAE steps "
            "(their values and extra discount factors enter; reward on the last response token)",
            {"steps": "response", "reward_at": "response", "after": "response"},
        ),
        Choice(
            "the exponent",
            "observation tokens inside a response are stepped over as GAE steps",
            {"steps": "response", "after": "response"},
        ),
        Choice(
            "where the reward sits",
            "the reward is put on the segment's last response token, so it is dropped "
            "when the segment ends on observation tokens",
            {"reward_at": "response"},
        ),
    ]
    if batch.parent_index is not None and quantity != "local-gae":
        choices.append(
            Choice(
                "the path",
                "the segment tree read as a chain in segment order (parents ignored: later "
                "tokens are every later segment's, not those on the segment's path)",
                {"tree": False},
            )
        )
    if quantity == "cross-segment-gae":
        choices += [
            Choice(
                "the exponent",
                "N_after counts the observation tokens of later segments",
                {"after": "response"},
            ),
            Choice(
                "the exponent",
                "no cross-segment correction (exponent 0: the local GAE)",
                {"after": "none"},
            ),
            Choice(
                "the exponent",
                "observation tokens inside each segment are stepped over as GAE steps "
                "(N_after counts trainable tokens only)",
                {"steps": "response"},
            ),
        ]
    return choices + _lambda_choices(batch)


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


def _broadcast_choices(batch: Batch) -> list[Choice]:
    return [
        Choice(
            "the group statistics",
            "the broadcast applied per segment: mean and std over physical traces, each "
            "counted as a sample, which overweights rollouts with more segments",
            {"voters": "segments"},
        ),
        Choice("the group statistics", "population std (divides by n, not n - 1)", {"ddof": 0}),
        Choice("the group statistics", "no division by the group std", {"divide": False}),
        Choice(
            "where the outcome sits",
            "the outcome only on each rollout's last trace (earlier traces get 0)",
            {"last_only": True},
        ),
        *_rejected_choice(
            batch,
            "a rejected summary attempt is included in the advantage computation "
            "(counted as a trace) instead of dropped before it",
        ),
    ]


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


def _chain_choices(batch: Batch) -> list[Choice]:
    return [
        Choice(
            "the split",
            "the reward not split: R on every chain (a rollout with K chains gets K times "
            "the credit)",
            {"split": False},
        ),
        Choice(
            "the split",
            "the reward only on the rollout's last chain (earlier chains get 0)",
            {"last_only": True},
        ),
        *_rejected_choice(
            batch,
            "a rejected summary attempt is counted as a chain (R / (K + 1)) instead of "
            "dropped before the split",
        ),
    ]


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


def _reduction_choices(batch: Batch, mode: str) -> list[Choice]:
    from cxsim.conformance.batches import REDUCTION_MODES

    choices = [
        Choice(
            "the denominator",
            "mean of micro-batch means (each micro-batch divided by its own count, "
            "then averaged over micro-batches)",
            {"chunks": "mean"},
        ),
        Choice(
            "the denominator",
            "sum of micro-batch means (each micro-batch divided by its own count)",
            {"chunks": "sum"},
        ),
    ]
    if mode == "rollout-mean":
        choices += [
            Choice(
                "the denominator",
                "rollouts counted as segments: the rollout means summed, then divided by the "
                "number of segments instead of rollouts",
                {"rollout_count": "segments"},
            ),
            Choice(
                "the denominator",
                "a rollout split over micro-batches averaged over its tokens in each "
                "micro-batch (each part votes as a whole rollout)",
                {"rollout_tokens": "local"},
            ),
        ]
    choices += [
        Choice("the denominator", f"computes {other} instead of {mode}", {"mode_used": other})
        for other in REDUCTION_MODES
        if other != mode
    ]
    return choices


# --------------------------------------------------------------------------- adaptive lambda


def lambda_model(
    batch: Batch, lam_form: dict[str, Any] | None = None, include_rejected: bool = False
) -> torch.Tensor:
    """(S,) float64 adaptive lambda with chosen terms."""
    full = including_rejected(batch) if include_rejected else batch
    return lambda_rows(replace(full, lam=None), **(lam_form or {}))


def _adaptive_choices(batch: Batch) -> list[Choice]:
    return [
        *_rejected_choice(
            batch,
            "a rejected summary attempt's tokens are counted in l instead of dropped before it",
        ),
        *_lambda_choices(replace(batch, lam=None)),
    ]


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


_CHOICES: dict[str, Callable[[Batch, str, str | None], list[Choice]]] = {
    **{q: (lambda b, q, m: _gae_choices(b, q)) for q in GAE_QUANTITIES},
    "group-broadcast": lambda b, q, m: _broadcast_choices(b),
    "chain-split": lambda b, q, m: _chain_choices(b),
    "adaptive-lambda": lambda b, q, m: _adaptive_choices(b),
    "loss-reduction": lambda b, q, m: _reduction_choices(b, m or "token-mean"),
}


def choices(batch: Batch, quantity: str, mode: str | None = None) -> list[Choice]:
    """The known wrong forms of ``quantity``'s terms on ``batch``, in order of preference."""
    return _CHOICES[quantity](batch, quantity, mode)


def _combinations(options: list[Choice], size: int) -> list[tuple[Choice, ...]]:
    """Tuples of ``size`` choices whose settings change different terms."""
    out = []
    for combo in itertools.combinations(options, size):
        keys = [set(c.settings) for c in combo]
        if all(a.isdisjoint(b) for a, b in itertools.combinations(keys, 2)):
            out.append(combo)
    return out


def explain(
    batch: Batch,
    quantity: str,
    mode: str | None,
    got: torch.Tensor,
    expected: torch.Tensor,
    where: torch.Tensor,
    close: Callable[[torch.Tensor, torch.Tensor], bool],
) -> Diagnosis:
    """The wrong forms that reproduce ``got``: one choice, else the fewest that together do.

    ``where`` masks the compared entries; ``close(a, b)`` is the pass criterion. With
    no matching set of forms (up to :data:`MAX_TERMS`), locates the largest difference
    instead. ``where`` is nonempty for every quantity (batches have a trainable token).
    """
    options = choices(batch, quantity, mode)
    for size in range(1, MAX_TERMS + 1):
        matches = []
        for index, combo in enumerate(_combinations(options, size)):
            settings = {k: v for c in combo for k, v in c.settings.items()}
            output = model(batch, quantity, mode, settings)
            if close(output[where], expected[where]) or not close(output[where], got[where]):
                continue
            matches.append((float((output[where] - got[where]).abs().max()), index, combo))
        if matches:  # the closest reproduction wins; on a small example several can agree
            ranked = sorted(matches, key=lambda m: (m[0], m[1]))
            tie = ranked[0][0] + 1e-9 * (1.0 + float(got[where].abs().max()))
            others = [
                " + ".join(f"{c.term}: {c.form}" for c in combo)
                for d, _, combo in ranked[1:]
                if d <= tie
            ]
            parts = tuple((c.term, c.form) for c in ranked[0][2])
            return Diagnosis(parts, "; ".join(others))
    return Diagnosis((), _locate(batch, quantity, got, expected, where))


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

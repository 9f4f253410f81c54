"""Which terms of the equation a failing function gets wrong.

Each quantity has a model (``term_models.py``): a plain float64 computation
whose keyword settings choose one form of each term (which tokens are GAE
steps, where the reward sits, where the step rewards sit, what ``N_after``
counts, the lambda used, the trace factor, the group statistics, the split
over chains, the denominator of a reduction, whether rejected summary attempts
enter); its default settings give the reference (tested). A
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
from typing import TYPE_CHECKING, Any

import torch

from cxsim.conformance.batches import Batch
from cxsim.conformance.reference import lambda_rows
from cxsim.conformance.term_models import GaeForm
from cxsim.conformance.weighting_models import (
    LOSS_MODE_RULES,
    row_weight_choices,
    weighted_reduction_choices,
)

if TYPE_CHECKING:
    from cxsim.conformance.quantities import Quantity

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


# --------------------------------------------------------------------------- GAE


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


def _one_lambda_choices(batch: Batch) -> list[Choice]:
    """One lambda for every row, where the rows' lambdas differ (adaptive lambda)."""
    if batch.lam is not None or len(set(lambda_rows(batch).tolist())) < 2:
        return []
    return [
        Choice(
            "the lambda used",
            "one lambda for every row: the first row's, not each row's own "
            "(the per-row, length-adaptive lambda ignored)",
            {"one_lam": "first"},
        ),
        Choice(
            "the lambda used",
            "one lambda for every row: the mean of the rows' lambdas, not each row's own",
            {"one_lam": "mean"},
        ),
    ]


def _step_choices(batch: Batch) -> list[Choice]:
    """The step-reward pitfalls, where the batch has step rewards."""
    if not bool((batch.steps != 0).any()):
        return []
    forms = [
        ("the step rewards dropped (only the terminal reward enters)", "none"),
        (
            "each step reward put at the first token of the response that earned it, "
            "not at its last token",
            "first",
        ),
        (
            "the step rewards discounted twice: turned into discounted rewards-to-go "
            "(G_t = r_t + gamma G_t+1) before the GAE, which discounts them again",
            "to-go",
        ),
        (
            "the step rewards copied to every window: each segment gets all its rollout's "
            "step rewards, summed onto its terminal reward, instead of each at its own token",
            "every-window",
        ),
    ]
    return [Choice("the step rewards", form, {"step_at": at}) for form, at in forms]


def _trace_choices(batch: Batch, form: GaeForm) -> list[Choice]:
    """gamma left out of the trace factor (visible only below gamma 1)."""
    if batch.gamma == 1.0:
        return []
    choices = [
        Choice(
            "the trace",
            "gamma left out of the trace: A_t = delta_t + lam A_t+1, not gamma lam A_t+1",
            {"trace": "lam"},
        )
    ]
    if form.correction:
        choices.append(
            Choice(
                "the trace",
                "gamma left out of the trace and of the cross-segment correction: "
                "lam A_t+1 and lam^N_after, not gamma lam",
                {"trace": "lam-everywhere"},
            )
        )
    return choices


def _rejected_choice(batch: Batch, form: str) -> list[Choice]:
    if not bool(batch.rejected.any()):
        return []
    return [Choice("the rejected summary attempts", form, {"include_rejected": True})]


def gae_choices(batch: Batch, form: GaeForm) -> list[Choice]:
    """The wrong forms of a GAE's terms (``form``: which GAE)."""
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
    if batch.parent_index is not None and form.across_segments:
        choices.append(
            Choice(
                "the path",
                "the segment tree read as a chain in segment order (parents ignored: later "
                "tokens are every later segment's, not those on the segment's path)",
                {"tree": False},
            )
        )
    if form.correction:
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
    choices += _step_choices(batch) + _trace_choices(batch, form)
    return choices + _lambda_choices(batch) + _one_lambda_choices(batch)


# --------------------------------------------------------------------------- group broadcast


def broadcast_choices(batch: Batch, mode: str | None = None) -> list[Choice]:
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


def chain_choices(batch: Batch, mode: str | None = None) -> list[Choice]:
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


def reduction_choices(batch: Batch, mode: str | None) -> list[Choice]:
    """The wrong denominators of a reduction under ``mode`` (default token-mean)."""
    mode = mode or "token-mean"
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
    if mode in LOSS_MODE_RULES:
        choices += [Choice(t, f, s) for t, f, s in weighted_reduction_choices(batch, mode)]
    if mode in ("rollout-mean", "thread-mean"):
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


def adaptive_choices(batch: Batch, mode: str | None = None) -> list[Choice]:
    return [
        *_rejected_choice(
            batch,
            "a rejected summary attempt's tokens are counted in l instead of dropped before it",
        ),
        *_lambda_choices(replace(batch, lam=None)),
    ]


# --------------------------------------------------------------------------- row weights


def weight_choices(batch: Batch, mode: str | None) -> list[Choice]:
    """The wrong forms of the row weights of rule ``mode`` (default session-equal)."""
    return [Choice(t, f, s) for t, f, s in row_weight_choices(batch, mode or "session-equal")]


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
    quantity: Quantity,
    mode: str | None,
    got: torch.Tensor,
    expected: torch.Tensor,
    where: torch.Tensor,
    close: Callable[[torch.Tensor, torch.Tensor], bool],
) -> Diagnosis:
    """The wrong forms that reproduce ``got``: one choice, else the fewest that together do.

    ``quantity``'s record gives the wrong forms (``wrong_forms``) and the model that
    computes them (``model``).
    ``where`` masks the compared entries; ``close(a, b)`` is the pass criterion. With
    no matching set of forms (up to :data:`MAX_TERMS`), locates the largest difference
    instead. ``where`` is nonempty for every quantity (batches have a trainable token).
    """
    options = quantity.wrong_forms(batch, mode)
    for size in range(1, MAX_TERMS + 1):
        matches = []
        for index, combo in enumerate(_combinations(options, size)):
            settings = {k: v for c in combo for k, v in c.settings.items()}
            output = quantity.model(batch, mode, settings)
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
    batch: Batch, quantity: Quantity, got: torch.Tensor, expected: torch.Tensor, where: torch.Tensor
) -> str:
    diff = torch.where(where, (got - expected).abs(), 0.0)
    if quantity.output != "tokens":
        return "no known pitfall reproduces the output"
    row, col = divmod(int(diff.argmax()), diff.shape[1])
    last = max(i for i, f in enumerate(batch.trainable[row].tolist()) if f)
    at = "the last trainable token" if col == last else f"trainable token {col}"
    return f"no known pitfall reproduces the output; the largest difference is at {at} of row {row}"

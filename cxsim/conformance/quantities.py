"""The quantities ``cxsim conform`` checks, one record each: adding a quantity is adding a record.

A :class:`Quantity` holds everything the check decides per quantity: its float64
reference (:mod:`cxsim.conformance.reference`), its relative tolerance, the layouts
that serve it and how each hands it over (:mod:`cxsim.conformance.layouts`), its term
model and the known wrong forms of its terms (:mod:`cxsim.conformance.term_models`,
:mod:`cxsim.conformance.terms`), the cases it is checked on, the declarations that
apply to it, how the report prints it and its deliberately wrong variants
(:mod:`cxsim.conformance.variants`), which the check must reject. :data:`QUANTITIES` is the
registry, keyed by name, in the order the command lists them. The names, the layouts that
serve each and what ``--mode`` names live torch-free in
:mod:`cxsim.conformance.quantity_names` (``--help`` reads them); each record is checked
against its line there when it is made. Which estimator answers to a quantity is the
estimator's declaration (``Estimator.quantity``, cxsim/estimators.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from cxsim.conformance import layouts, reference, term_models, terms
from cxsim.conformance.batches import Batch, Case
from cxsim.conformance.layouts import Handover
from cxsim.conformance.pinned_batches import pinned_cases
from cxsim.conformance.quantity_names import ModeKind, check_records
from cxsim.conformance.random_batches import random_cases, tree_cases
from cxsim.conformance.reference import GROUP_EPS, Reference
from cxsim.conformance.terms import Choice
from cxsim.conformance.weighting_models import row_weights_model
from cxsim.estimators import ESTIMATORS

Model = Callable[[Batch, "str | None", dict[str, Any]], torch.Tensor]
"""(batch, mode, settings) -> the quantity's output with the terms ``settings`` choose."""
WrongForms = Callable[[Batch, "str | None"], list[Choice]]
"""(batch, mode) -> the known wrong forms of the quantity's terms on that batch."""


@dataclass(frozen=True)
class Variant:
    """A deliberately wrong function of one quantity, one pitfall each: the check must fail it."""

    function: str
    """``package.module:function``."""
    layout: str
    mode: str | None = None


@dataclass(frozen=True)
class Quantity:
    """One quantity a function under test may claim to compute."""

    name: str
    what: str
    """One line: what the function computes."""
    reference: Reference
    """(batch, mode) -> the expected output in canonical form."""
    rtol: float
    """Default relative tolerance (``--rtol``)."""
    output: Literal["tokens", "rows", "one"]
    """Canonical output: (S, T) per token, (S,) per row, or (1,)."""
    layouts: Mapping[str, Handover]
    """The layouts that serve it, each with how the quantity is handed over in it."""
    model: Model
    wrong_forms: WrongForms
    header: Callable[[Batch, str | None], str]
    """The report's first line of a failing example (its parameters)."""
    lam_kinds: tuple[str, ...] = ("none",)
    """Lambda kinds of its random cases (:func:`~cxsim.conformance.random_batches.random_cases`;
    "none": it has no lambda)."""
    left_out: tuple[str, ...] = ()
    """Random case families it is not checked on."""
    pins: tuple[str, ...] = ()
    """The pinned cases it is checked on."""
    shown: Literal["values", "loss"] | None = None
    """The input row the report prints under each example's mask."""
    lambdas: bool = False
    """It takes a lambda: ``--claims`` and ``--lambda-kind`` apply."""
    groups: bool = False
    """It reads groups: ``--min-group`` applies (its random batches are drawn with it)."""
    trees: bool = False
    """Checked on segment trees too where the layout hands over parents; ``--no-trees``."""
    step_rewards: bool = False
    """It reads step rewards, where the layout hands them over (``Layout.step_rewards``)."""
    mode: ModeKind | None = None
    """What ``--mode`` names for it (required then), or None (no ``--mode``)."""
    variants: tuple[Variant, ...] = ()

    @property
    def rejected(self) -> bool:
        """Checked on rejected summary attempts: ``--no-rejected-attempts`` applies."""
        return "rejected-summaries" not in self.left_out

    def compared(self, batch: Batch) -> torch.Tensor:
        """Bool mask of the output entries that are compared (the ones a loss ever reads):
        trainable tokens, rows with a trainable token, or the one value."""
        if self.output == "rows":
            return batch.trainable.any(dim=1)
        if self.output == "one":
            return torch.ones(1, dtype=torch.bool)
        return batch.trainable

    def cases(self, min_group: int = 1, trees: bool = False) -> list[Case]:
        """The random and pinned cases it is checked on (``min_group``: the smallest group the
        random batches are drawn with, where it reads groups; ``trees``: segment trees too,
        where it reads them and the layout hands over parents)."""
        drawn = random_cases(self.lam_kinds, min_group=min_group if self.groups else 1)
        randoms = [c for c in drawn if c.name.partition("/")[0] not in self.left_out]
        pins = {c.name: c for c in pinned_cases()}
        names = self.pins
        if trees and self.trees:
            randoms += tree_cases()
            names = (*names, "pinned/tree")
        return [*randoms, *(pins[name] for name in names)]


# --------------------------------------------------------------------------- the records


def _gae_header(b: Batch, mode: str | None) -> str:
    lam = f"lam={b.lam}" if b.lam is not None else f"lam=adaptive alpha={b.alpha} scope={b.scope}"
    return f"gamma={b.gamma} {lam}"


def _micro_batches(b: Batch) -> str:
    return f"micro-batch sizes (rows) {list(b.micro_batches)}"


GAE_RTOL = 1e-3
"""GAE allows 1e-3: a float32 lambda (cxsim's own ``adaptive_lambda``, most frameworks) is
off by up to 3e-8, which an exponent of 3000 turns into 1e-4 relative; every pitfall of
docs/conformance.md is off by more than 10%."""
_LOCAL_PINS = (
    "pinned/observations-5",
    "pinned/4+4",
    "pinned/1000+2000",
    "pinned/ends-on-observation",
    "pinned/one-token-alpha-0.5",
)
_V = "cxsim.conformance.variants:"
_W = "cxsim.conformance.weighting_variants:"


def _gae(
    name: str, what: str, ref: Reference, form: term_models.GaeForm, **fields: Any
) -> Quantity:
    """A GAE quantity: ``form`` picks its model and wrong forms; the rest is shared."""
    return Quantity(
        name,
        what,
        ref,
        GAE_RTOL,
        "tokens",
        layouts.GAE,
        lambda b, m, s: term_models.gae_model(b, form, **s),
        lambda b, m: terms.gae_choices(b, form),
        _gae_header,
        lam_kinds=("fixed", "adaptive"),
        shown="values",
        lambdas=True,
        trees=True,
        step_rewards=True,
        **fields,
    )


_RECORDS = (
    _gae(
        "local-gae",
        "GAE inside each segment, observation tokens skipped",
        reference.local_gae,
        term_models.LOCAL,
        pins=_LOCAL_PINS,
        variants=(
            Variant(_V + "local_gae_observations_as_steps", "segment-rows"),
            Variant(_V + "local_gae_reward_on_last_response_token", "segment-rows"),
        ),
    ),
    _gae(
        "cross-segment-gae",
        "local GAE times the cross-segment correction (gamma lam)^N_after",
        reference.cross_segment,
        term_models.CROSS_SEGMENT,
        pins=(*_LOCAL_PINS, "pinned/rejected-summary"),
        variants=(
            Variant(_V + "cross_segment_gae_lambda_capped", "samples"),
            Variant(_V + "cross_segment_gae_negative_lambda", "samples"),
            Variant(_V + "cross_segment_gae_observations_as_steps_locally", "samples"),
            Variant(_V + "cross_segment_gae_rejected_included", "segment-rows"),
        ),
    ),
    _gae(
        "stitched-gae",
        "one GAE recursion over each rollout's segments in order",
        reference.stitched,
        term_models.STITCHED,
        pins=(*_LOCAL_PINS, "pinned/rejected-summary"),
    ),
    Quantity(
        "group-broadcast",
        "each rollout's group-normalised outcome on every token of its segments",
        reference.broadcast,
        1e-5,
        "tokens",
        layouts.GROUP,
        lambda b, m, s: term_models.broadcast_model(b, **s),
        terms.broadcast_choices,
        lambda b, m: f"eps={GROUP_EPS}",
        pins=("pinned/traces",),
        groups=True,
        variants=(Variant(_V + "group_broadcast_per_segment", "segment-rows"),),
    ),
    Quantity(
        "chain-split",
        "each rollout's reward split over its chains, R/K on each",
        reference.chain_split,
        1e-6,
        "tokens",
        layouts.CHAIN,
        lambda b, m, s: term_models.chain_model(b, **s),
        terms.chain_choices,
        lambda b, m: "each rollout's reward over its chains",
        pins=("pinned/three-chains",),
        variants=(Variant(_V + "chain_split_not_split", "segment-rows"),),
    ),
    Quantity(
        "adaptive-lambda",
        "each segment's length-adaptive lambda 1 - 1/(alpha l)",
        reference.adaptive_lambda,
        1e-6,
        "rows",
        layouts.LAMBDA,
        lambda b, m, s: term_models.lambda_model(b, **s),
        terms.adaptive_choices,
        lambda b, m: f"alpha={b.alpha} scope={b.scope}",
        lam_kinds=("adaptive",),
        pins=("pinned/4+4", "pinned/1000+2000", "pinned/one-token-alpha-0.5"),
        lambdas=True,
        variants=(Variant(_V + "adaptive_lambda_with_observations", "samples"),),
    ),
    Quantity(
        "loss-reduction",
        "the per-token loss reduced over micro-batches under a loss mode",
        reference.loss_reduction,
        1e-6,
        "one",
        layouts.REDUCTION,
        term_models.loss_reduction_model,
        terms.reduction_choices,
        lambda b, m: f"mode={m}, {_micro_batches(b)}",
        left_out=("long", "rejected-summaries"),
        pins=("pinned/two-micro-batches", "pinned/rollout-denominators", "pinned/sessions"),
        shown="loss",
        mode="loss mode",
        variants=(
            Variant(_V + "token_mean_of_micro_batch_means", "loss-matrix", "token-mean"),
            Variant(_V + "rollout_mean_segments_counted", "loss-matrix", "rollout-mean"),
            Variant(_W + "session_equal_loss_not_renormalised", "loss-matrix", "session-equal"),
        ),
    ),
    Quantity(
        "row-weights",
        "each row's loss weight under a weighting rule, per micro-batch",
        reference.row_weights,
        1e-6,
        "rows",
        layouts.ROW_WEIGHTS,
        lambda b, m, s: row_weights_model(b, m or "session-equal", **s),
        terms.weight_choices,
        lambda b, m: f"rule={m}, {_micro_batches(b)}",
        left_out=("long",),
        pins=("pinned/sessions",),
        mode="weighting rule",
        variants=(
            Variant(
                _W + "session_equal_renormalised_per_micro_batch", "row-weights", "session-equal"
            ),
            Variant(
                _W + "partition_preserving_response_lengths", "row-weights", "partition-preserving"
            ),
            Variant(_W + "one_reward_every_row", "row-weights", "one-reward-per-rollout"),
            Variant(_W + "thread_mean_threads_per_micro_batch", "row-weights", "thread-mean"),
        ),
    ),
)

QUANTITIES: dict[str, Quantity] = check_records(
    {q.name: (q, tuple(q.layouts), q.mode) for q in _RECORDS}
)
"""Every quantity ``cxsim conform --quantity`` accepts, by name (checked against the
torch-free names ``--help`` lists when it is built)."""
GAE_QUANTITIES: tuple[str, ...] = tuple(name for name, q in QUANTITIES.items() if q.trees)
"""The GAE quantities (those also checked on segment trees)."""
ESTIMATOR_QUANTITIES: dict[str, str] = {
    name: estimator.quantity
    for name, estimator in ESTIMATORS.items()
    if estimator.quantity is not None
}
"""The quantity whose reference each estimator of cxsim's registry (cxsim/estimators.py)
answers to, as it declares it (``cxsim conform NAME``); a plug-in declares its own
(``Estimator(..., quantity=...)``) or says it with ``--quantity``."""


def reference_of(batch: Batch, quantity: str, mode: str | None = None) -> torch.Tensor:
    """The expected output of ``quantity`` (a name) in canonical form: (S, T), (S,) for
    lambda and row weights, (1,) for a reduction."""
    return QUANTITIES[quantity].reference(batch, mode)

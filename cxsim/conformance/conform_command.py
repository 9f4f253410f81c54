"""``cxsim conform FUNCTION``: checks another framework's advantage or loss-reduction function.

FUNCTION is ``package.module:function``, imported with the current folder on
the import path; ``--quantity`` says what it claims to compute and
``--layout`` the data layout it takes (exact signatures in
docs/conformance.md). The check draws random compacted batches for every edge
case (several segments per rollout, observation tokens inside responses,
segments ending on observations, one-token and long segments, rejected
summary attempts, step rewards at the last token of responses (handed over in
the estimator layout), fixed and adaptive lambda in both scopes, gamma below
and at 1, micro-batch splits), compares the output with cxsim's float64
reference, and prints per case the largest difference; for a failure, an
example shrunk by hypothesis (within ``--shrink-seconds`` per case) and the
terms of the equation that differ. ``--claims``, ``--lambda-kind``,
``--min-group``, ``--no-rejected-attempts`` and ``--no-trees`` declare what the function
implements: cases outside that are skipped, and the report says what was not
checked.

Exit status: 0 when every case run agrees, 1 when one differs, 2 for a usage
or configuration error (a bad flag, a function that cannot be imported, a
declaration that does not apply to the quantity, ``--only`` matching no case).

    cxsim conform cxsim.conformance.adapters:cross_segment_gae_rows \\
        --quantity cross-segment-gae --layout segment-rows
    cxsim conform my_adapters:gae --quantity cross-segment-gae --layout samples \\
        --claims segment-scope

FUNCTION may also be an estimator of the trainer's registry (cxsim/estimators.py): a
name it holds or an installed plug-in's, or ``my_module:my_gae`` naming an
``Estimator`` (docs/training.md, "Your own estimator or loss mode"). It is then
called as the trainer calls it, with one ``EstimatorInputs`` (layout ``estimator``);
``--quantity`` defaults to the reference a registered estimator answers to:

    cxsim conform my_module:my_gae --quantity stitched-gae
    cxsim conform chain-split
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated, Literal, get_args

import tyro

from cxsim.conformance.quantity_names import (
    LAYOUT_NAMES,
    LAYOUT_QUANTITIES,
    MODE_KINDS,
    QUANTITY_LAYOUTS,
    WEIGHTING_RULE_NAMES,
)
from cxsim.estimators import ESTIMATORS
from cxsim.loss_modes import LOSS_MODES

USAGE_ERROR = 2
"""Exit status of a usage, import or configuration error (1 means: the function differs)."""

QuantityName = Literal[tuple(QUANTITY_LAYOUTS)]  # type: ignore[valid-type]
LayoutName = Literal[LAYOUT_NAMES]  # type: ignore[valid-type]
Mode = str
"""A loss mode of the trainer's registry (cxsim/loss_modes.py), plug-ins included."""


def _choices(names) -> str:
    return "{" + ",".join(names) + "}"


ScopeClaim = Literal["both", "segment-scope", "rollout-scope"]
LambdaKind = Literal["both", "fixed", "adaptive"]


@dataclass(frozen=True)
class Config:
    """Check a function against cxsim's reference on random compacted batches. Exits 0 when
    every case run agrees, 1 when one differs, 2 on a usage, import or configuration error."""

    function: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="FUNCTION")]
    """The function under test, as package.module:function (the current folder is on the
    import path); or an estimator: a name of cxsim/estimators.py or of an installed plug-in,
    or package.module:name of an ``Estimator``."""
    quantity: Annotated[
        QuantityName | None,
        tyro.conf.arg(
            metavar=_choices(get_args(QuantityName)),
            help_behavior_hint="(default: the reference of the estimator cxsim holds)",
        ),
    ] = None
    """What the function claims to compute; required, but for an estimator cxsim holds."""
    layout: Annotated[
        LayoutName | None,
        tyro.conf.arg(
            metavar=_choices(get_args(LayoutName)),
            help_behavior_hint="(default: estimator, for an estimator)",
        ),
    ] = None
    """The data layout it takes (docs/conformance.md gives exact shapes); required for a
    function."""
    mode: Annotated[
        Mode | None,
        tyro.conf.arg(
            metavar=_choices(LOSS_MODES) + "|MODULE:NAME",
            help_behavior_hint="(default: none)",
        ),
    ] = None
    """The reduction mode (loss-reduction: a loss mode of cxsim/loss_modes.py, a plug-in's
    name or package.module:name) or the weighting rule (row-weights: session-equal,
    partition-preserving, one-reward-per-rollout, thread-mean); required for those two."""
    examples: int = 25
    """Random batches per case (each failing case is then shrunk)."""
    seed: int = 0
    """Seed of the random batches."""
    atol: float = 1e-6
    """Absolute tolerance: |got - expected| <= atol + rtol max|expected| on every entry."""
    only: tuple[str, ...] = ()
    """Run only the cases whose names start with one of these (e.g. pinned/ long/)."""
    rtol: float | None = None
    """Relative tolerance (default per quantity: 1e-3 for GAE, 1e-5 group broadcast, 1e-6 otherwise)."""

    claims: ScopeClaim = "both"
    """The adaptive-lambda scope the function implements: cases of the other scope are skipped
    (and listed as not checked)."""
    lambda_kind: LambdaKind = "both"
    """The lambdas the function implements: fixed, adaptive or both; cases of the other kind
    are skipped."""
    min_group: int = 1
    """Smallest group (rollouts) the function's group advantages are defined for
    (group-broadcast): smaller groups are removed from each batch before the call, and counted."""
    rejected_attempts: bool = True
    """The function is given rejected summary attempts (rows without a trainable token) and
    must keep them out of its advantages; --no-rejected-attempts skips those cases."""
    trees: bool = True
    """The function is given segment trees (``parent_index``, the estimator layout: what the
    folding and memory-notes strategies record) and must follow each segment's path;
    --no-trees (chains only) skips those cases."""
    shrink_seconds: float = 10.0
    """Time each failing case may spend shrinking its example; the report says where it ran
    out (the example is then not minimal)."""
    gradient: bool = False
    """The expected-gradient check instead (FUNCTION an estimator, --mode a loss mode): the
    estimator and the reduction together against the true policy gradient of the lab's small
    process, beside cxsim's pair (docs/conformance.md)."""
    reduction: str | None = None
    """With --gradient: the reduction, package.module:function in the loss-matrix layout
    (default: cxsim's own for --mode)."""
    gradient_tolerance: float = 0.02
    """With --gradient: the largest difference of cosine and relative norm from cxsim's pair."""

    def __post_init__(self) -> None:
        if ":" not in self.function and self.function not in ESTIMATORS:
            raise ValueError(
                "FUNCTION must be package.module:function or an estimator's name (one of: "
                f"{', '.join(ESTIMATORS.choices())}), got {self.function!r}"
            )
        if (
            self.layout is not None
            and self.quantity is not None
            and self.quantity not in LAYOUT_QUANTITIES[self.layout]
        ):
            raise ValueError(
                f"layout {self.layout} does not serve {self.quantity}; it serves "
                f"{', '.join(LAYOUT_QUANTITIES[self.layout])}"
            )
        if self.gradient or self.reduction is not None:
            if not self.gradient or self.mode is None:
                raise ValueError("--gradient needs --mode (a loss mode); --reduction only with it")
            LOSS_MODES.check("--mode", self.mode)
            return
        kind = MODE_KINDS.get(self.quantity or "")
        if (self.mode is None) == (kind is not None):
            raise ValueError(f"--mode is required for {' and '.join(MODE_KINDS)}, and only there")
        if kind == "loss mode":
            LOSS_MODES.check("--mode", self.mode)
        if kind == "weighting rule" and self.mode not in WEIGHTING_RULE_NAMES:
            raise ValueError(
                f"--mode for {self.quantity} must be one of {', '.join(WEIGHTING_RULE_NAMES)}, "
                f"got {self.mode!r}"
            )
        if self.examples < 1:
            raise ValueError(f"examples must be >= 1, got {self.examples}")
        if self.atol < 0 or (self.rtol is not None and self.rtol < 0):
            raise ValueError("atol and rtol must be >= 0")
        if self.min_group < 1:
            raise ValueError(f"--min-group must be >= 1, got {self.min_group}")
        if not self.shrink_seconds > 0:
            raise ValueError(f"--shrink-seconds must be > 0, got {self.shrink_seconds}")


def _parse(argv: list[str] | None) -> Config:
    """The config; a parse error exits with status 2 (through ``cxsim``, whose one-line
    rewrite of tyro's message ends with the status 1 of a message, this restores the 2)."""
    try:
        return tyro.cli(Config, args=argv)
    except SystemExit as stop:
        if stop.code in (0, None):  # --help
            raise
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None


def estimator_under_test(function: str):
    """The :class:`~cxsim.estimators.Estimator` FUNCTION names (a registry name, or
    package.module:name of an ``Estimator``), or None for a plain function."""
    from cxsim.estimators import Estimator
    from cxsim.user_modules import import_user_module

    if ":" not in function:
        return ESTIMATORS[function]
    module, _, attribute = function.rpartition(":")
    try:
        found = getattr(import_user_module(module), attribute, None)
    except Exception:  # a plain function's module: the check reports its import error
        return None
    return ESTIMATORS[function] if isinstance(found, Estimator) else None  # validated


def settle(config: Config, estimator) -> tuple[str, str]:
    """(quantity, layout) of the check: the flags, or an estimator's declarations."""
    quantity, layout = config.quantity, config.layout
    if estimator is not None:
        if layout not in (None, "estimator"):
            raise ValueError(
                f"{config.function} is an Estimator: it takes the estimator layout; drop "
                f"--layout {layout}"
            )
        layout = "estimator"
    elif layout is None:
        raise ValueError(
            f"{config.function} is a function: say which data layout it takes with --layout "
            f"({', '.join(LAYOUT_QUANTITIES)}; docs/conformance.md)"
        )
    if quantity is None:
        quantity = estimator.quantity if estimator is not None else None
        if quantity is None:
            raise ValueError(
                f"say what {config.function} computes with --quantity (one of: "
                f"{', '.join(LAYOUT_QUANTITIES[layout])})"
            )
    if quantity not in LAYOUT_QUANTITIES[layout]:
        raise ValueError(
            f"layout {layout} does not serve {quantity}; it serves "
            f"{', '.join(LAYOUT_QUANTITIES[layout])}"
        )
    return quantity, layout


def check_estimator(estimator, config: Config, quantity: str, claims) -> tuple[bool, str]:
    """(passed, report) of ``estimator`` called as the trainer calls it (layout ``estimator``)."""
    import time

    from cxsim.conformance import Checker
    from cxsim.conformance.check import format_report
    from cxsim.plugin_checks import check_advantages

    start = time.perf_counter()

    def advantages(inputs):
        return check_advantages(config.function, estimator.advantages(inputs), inputs.mask)

    checker = Checker(
        advantages, quantity, "estimator", None, config.atol, config.rtol, claims,
        config.shrink_seconds,
    )  # fmt: skip
    results, skipped = checker.run_all(config.examples, config.seed, config.only)
    report = format_report(
        results, config.function, quantity, "estimator", None, skipped, claims,
        config.shrink_seconds,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    return all(r.passed for r in results), report + f"\n({seconds:.1f} s)"


def gradient_check(config: Config, estimator) -> tuple[bool, str]:
    """``--gradient``: (passed, report) of ``cxsim/conformance/conform_gradient.py``."""
    from cxsim.conformance.conform_gradient import GradientRequest, check
    from cxsim.conformance.quantities import ESTIMATOR_QUANTITIES

    if estimator is None:
        raise ValueError(f"--gradient checks an estimator; {config.function} is not one")
    quantity = config.quantity or estimator.quantity
    references = {q: name for name, q in ESTIMATOR_QUANTITIES.items()}
    if quantity not in references:
        raise ValueError(
            f"say which of cxsim's estimators {config.function} computes with --quantity "
            f"(one of: {', '.join(references)})"
        )
    request = GradientRequest(
        config.function, config.reduction, config.mode, references[quantity],
        config.gradient_tolerance, config.seed,
    )  # fmt: skip
    return check(request)


def main(argv: list[str] | None = None) -> None:
    config = _parse(argv)
    from cxsim.conformance import Claims, conform, load_function
    from cxsim.plugin_checks import PluginOutputError

    claims = Claims(
        config.claims, config.lambda_kind, config.min_group, config.rejected_attempts, config.trees
    )
    try:
        estimator = estimator_under_test(config.function)
        if estimator is None:  # a plain function: found, before its layout is asked for
            load_function(config.function)
        if config.gradient:
            passed, report = gradient_check(config, estimator)
            print(report)
            sys.exit(0 if passed else 1)
        quantity, layout = settle(config, estimator)
        if estimator is not None:
            passed, report = check_estimator(estimator, config, quantity, claims)
        else:
            passed, report, _ = conform(
                config.function,
                quantity,
                layout,
                config.mode,
                examples=config.examples,
                seed=config.seed,
                atol=config.atol,
                rtol=config.rtol,
                only=config.only,
                claims=claims,
                shrink_seconds=config.shrink_seconds,
            )
    except PluginOutputError as err:  # the estimator's output is unusable: the check fails
        print(f"cxsim conform: error: {err}", file=sys.stderr)
        sys.exit(1)
    except ValueError as err:
        print(f"cxsim conform: error: {err}", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    print(report)
    if not passed:
        sys.exit(1)


if __name__ == "__main__":
    main()

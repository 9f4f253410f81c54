"""``cxsim conform FUNCTION``: checks another framework's advantage or loss-reduction function.

FUNCTION is ``package.module:function``; ``--quantity`` says what it claims to
compute and ``--layout`` the data layout it takes (exact signatures in
docs/conformance.md). The check draws random compacted batches for every edge
case (several segments per rollout, observation tokens inside responses,
segments ending on observations, one-token and long segments, fixed and
adaptive lambda, gamma below and at 1, micro-batch splits), compares the
output with cxsim's float64 reference, and prints per case the largest
difference; for a failure, a minimal example shrunk by hypothesis and the term
of the equation that differs. Exits 1 when any case differs.

    cxsim conform cxsim.conformance.adapters:cross_segment_gae_rows \\
        --quantity cross-segment-gae --layout segment-rows
    cxsim conform cxsim.conformance.variants:token_mean_of_micro_batch_means \\
        --quantity loss-reduction --layout loss-matrix --mode token-mean
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated, Literal

import tyro

Quantity = Literal[
    "local-gae",
    "cross-segment-gae",
    "stitched-gae",
    "group-broadcast",
    "adaptive-lambda",
    "loss-reduction",
]
LayoutName = Literal["segment-rows", "rollout-rows", "samples", "loss-matrix"]
Mode = Literal["token-mean", "segment-mean", "rollout-mean", "seq-mean-token-sum"]

# kept here (not imported) so that --help never imports torch; tests check they match
LAYOUT_QUANTITIES: dict[str, tuple[str, ...]] = {
    "segment-rows": (
        "local-gae",
        "cross-segment-gae",
        "stitched-gae",
        "group-broadcast",
        "adaptive-lambda",
    ),
    "rollout-rows": ("local-gae", "cross-segment-gae", "stitched-gae"),
    "samples": (
        "local-gae",
        "cross-segment-gae",
        "stitched-gae",
        "group-broadcast",
        "adaptive-lambda",
    ),
    "loss-matrix": ("loss-reduction",),
}


@dataclass(frozen=True)
class Config:
    """Check a function against cxsim's reference on random compacted batches."""

    function: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="FUNCTION")]
    """The function under test, as package.module:function (importable from here)."""
    quantity: Quantity
    """What the function claims to compute."""
    layout: LayoutName
    """The data layout it takes (docs/conformance.md gives exact shapes)."""
    mode: Mode | None = None
    """The reduction mode (loss-reduction only; required there)."""
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

    def __post_init__(self) -> None:
        if ":" not in self.function:
            raise ValueError(
                f"function must be given as package.module:function, got {self.function!r}"
            )
        if self.quantity not in LAYOUT_QUANTITIES[self.layout]:
            raise ValueError(
                f"layout {self.layout} does not serve {self.quantity}; it serves "
                f"{', '.join(LAYOUT_QUANTITIES[self.layout])}"
            )
        if (self.quantity == "loss-reduction") != (self.mode is not None):
            raise ValueError("--mode is required for loss-reduction and only there")
        if self.examples < 1:
            raise ValueError(f"examples must be >= 1, got {self.examples}")
        if self.atol < 0 or (self.rtol is not None and self.rtol < 0):
            raise ValueError("atol and rtol must be >= 0")


def main(argv: list[str] | None = None) -> None:
    config = tyro.cli(Config, args=argv)
    from cxsim.conformance import conform

    try:
        passed, report, _ = conform(
            config.function,
            config.quantity,
            config.layout,
            config.mode,
            examples=config.examples,
            seed=config.seed,
            atol=config.atol,
            rtol=config.rtol,
            only=config.only,
        )
    except ValueError as err:
        sys.exit(f"cxsim conform: {err}")
    print(report)
    if not passed:
        sys.exit(1)


if __name__ == "__main__":
    main()

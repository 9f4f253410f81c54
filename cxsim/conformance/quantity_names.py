"""What ``cxsim conform`` knows of its quantities without torch: their names, the layouts
that serve each, what ``--mode`` names for a quantity and the weighting rules' names.

``--help`` and the config checks of :mod:`cxsim.conformance.conform_command` read this
module, so that they answer at once. The registry of :mod:`cxsim.conformance.quantities`
(whose records import torch) is checked against it when it is built
(:func:`check_records`): a record whose name, layouts or mode kind differ from its line here
fails at import, naming both sides, so the two cannot drift.
"""

from __future__ import annotations

from typing import Literal, TypeVar

T = TypeVar("T")

LAYOUT_NAMES: tuple[str, ...] = (
    "segment-rows",
    "rollout-rows",
    "samples",
    "loss-matrix",
    "row-weights",
    "estimator",
)
"""The data layouts a function under test can take (docs/conformance.md gives their shapes)."""

_GAE = ("segment-rows", "rollout-rows", "samples", "estimator")
_PER_ROLLOUT = ("segment-rows", "samples", "estimator")

QUANTITY_LAYOUTS: dict[str, tuple[str, ...]] = {
    "local-gae": _GAE,
    "cross-segment-gae": _GAE,
    "stitched-gae": _GAE,
    "group-broadcast": _PER_ROLLOUT,
    "chain-split": _PER_ROLLOUT,
    "adaptive-lambda": ("segment-rows", "samples"),
    "loss-reduction": ("loss-matrix",),
    "row-weights": ("row-weights",),
}
"""Every quantity ``--quantity`` accepts, in the order the command lists them, with the
layouts that serve it."""

ModeKind = Literal["loss mode", "weighting rule"]
MODE_KINDS: dict[str, ModeKind] = {"loss-reduction": "loss mode", "row-weights": "weighting rule"}
"""The quantities that take ``--mode`` (required there), and what it names for each."""

WEIGHTING_RULE_NAMES: tuple[str, ...] = (
    "session-equal",
    "partition-preserving",
    "one-reward-per-rollout",
    "thread-mean",
)
"""The rules of ``--quantity row-weights``, in the order of
:data:`cxsim.conformance.weighting.WEIGHTING_RULES` (checked when that module is imported)."""


def serving(layout: str) -> tuple[str, ...]:
    """The quantities ``layout`` serves, in the order of :data:`QUANTITY_LAYOUTS`."""
    return tuple(name for name, served in QUANTITY_LAYOUTS.items() if layout in served)


LAYOUT_QUANTITIES: dict[str, tuple[str, ...]] = {name: serving(name) for name in LAYOUT_NAMES}
"""The quantities each layout serves."""


def check_records(records: dict[str, tuple[T, tuple[str, ...], str | None]]) -> dict[str, T]:
    """The registry of the records, each given with the layouts it serves and its mode kind,
    once they match this module: the same names in the same order, the same layouts, the same
    ``--mode`` kinds. A difference is a ValueError that names both sides."""
    if tuple(records) != tuple(QUANTITY_LAYOUTS):
        raise ValueError(
            f"the quantity records {tuple(records)} differ from QUANTITY_LAYOUTS "
            f"{tuple(QUANTITY_LAYOUTS)} in cxsim/conformance/quantity_names.py: make them the same"
        )
    for name, (_, layouts, mode) in records.items():
        if set(layouts) != set(QUANTITY_LAYOUTS[name]):
            raise ValueError(
                f"quantity {name!r}: its record serves {sorted(layouts)}, QUANTITY_LAYOUTS in "
                f"cxsim/conformance/quantity_names.py says {sorted(QUANTITY_LAYOUTS[name])}"
            )
        if mode != MODE_KINDS.get(name):
            raise ValueError(
                f"quantity {name!r}: its record's mode is {mode!r}, MODE_KINDS in "
                f"cxsim/conformance/quantity_names.py says {MODE_KINDS.get(name)!r}"
            )
    return {name: record for name, (record, _, _) in records.items()}

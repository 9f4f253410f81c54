"""Conformance check: another framework's compaction-RL advantages and loss reductions
against cxsim's float64 references, on random compacted batches (docs/conformance.md).

``conform(function_path, quantity, layout, mode)`` runs the check and returns
(passed, report, seconds); ``cxsim conform`` is its command line. ``Claims``
declares what the function implements (lambda scope and kind, smallest group,
rejected summary attempts); ``cxsim.conformance.rules`` holds the credit rules
in use as named references.

``QUANTITIES`` holds one :class:`Quantity` record per quantity: its reference,
tolerance, layouts, term model, wrong forms, cases and report form (``quantities``).

Modules: ``quantities`` (the records), ``batches`` (the canonical batch and building
it), ``pinned_batches`` (the hand-built cases with textbook numbers),
``random_batches`` (the random case families, hypothesis strategies),
``layouts``, ``adapters``, ``reference``, ``rules``, ``claims``, ``term_models``
(each quantity in float64 with its terms as settings), ``terms`` (which terms a
failing function gets wrong), ``variants``, ``check`` (runs the cases), ``report``
(the results and their report); ``conform_command`` is ``cxsim conform``'s entry point and
``conform_gradient`` its ``--gradient`` check.

The names below are imported on first use (:func:`__getattr__`), so that importing the
command module, ``cxsim conform --help`` included, does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cxsim.conformance.check import CaseResult, Checker, Skipped, conform, load_function
    from cxsim.conformance.claims import Claims
    from cxsim.conformance.layouts import LAYOUTS
    from cxsim.conformance.quantities import QUANTITIES, Quantity

__all__ = [
    "LAYOUTS",
    "QUANTITIES",
    "CaseResult",
    "Checker",
    "Claims",
    "Quantity",
    "Skipped",
    "conform",
    "load_function",
]


def __getattr__(name: str) -> Any:
    """The package's exports, imported when first asked for (PEP 562)."""
    if name in ("CaseResult", "Checker", "Skipped", "conform", "load_function"):
        from cxsim.conformance import check

        return getattr(check, name)
    if name == "Claims":
        from cxsim.conformance.claims import Claims

        return Claims
    if name == "LAYOUTS":
        from cxsim.conformance.layouts import LAYOUTS

        return LAYOUTS
    if name in ("QUANTITIES", "Quantity"):
        from cxsim.conformance import quantities

        return getattr(quantities, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

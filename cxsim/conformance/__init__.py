"""Conformance check: another framework's compaction-RL advantages and loss reductions
against cxsim's float64 references, on random compacted batches (docs/conformance.md).

``conform(function_path, quantity, layout, mode)`` runs the check and returns
(passed, report, seconds); ``cxsim conform`` is its command line. ``Claims``
declares what the function implements (lambda scope and kind, smallest group,
rejected summary attempts); ``cxsim.conformance.rules`` holds the credit rules
in use as named references.

Modules: ``batches`` (the canonical batch and building it), ``pinned_batches`` (the
hand-built cases with textbook numbers),
``random_batches`` (the random case families, hypothesis strategies),
``layouts``, ``adapters``, ``reference``, ``rules``, ``claims``, ``term_models``
(each quantity in float64 with its terms as settings), ``terms`` (which terms a
failing function gets wrong), ``variants``, ``check`` (runs the cases), ``report``
(the results and their report).
"""

from cxsim.conformance.check import CaseResult, Checker, Skipped, conform, load_function
from cxsim.conformance.claims import Claims
from cxsim.conformance.layouts import LAYOUTS
from cxsim.conformance.reference import QUANTITIES

__all__ = [
    "LAYOUTS",
    "QUANTITIES",
    "CaseResult",
    "Checker",
    "Claims",
    "Skipped",
    "conform",
    "load_function",
]

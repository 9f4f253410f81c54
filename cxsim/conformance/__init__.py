"""Conformance check: another framework's compaction-RL advantages and loss reductions
against cxsim's float64 references, on random compacted batches (docs/conformance.md).

``conform(function_path, quantity, layout, mode)`` runs the check and returns
(passed, report, seconds); ``cxsim conform`` is its command line.
"""

from cxsim.conformance.check import CaseResult, Checker, conform, load_function
from cxsim.conformance.layouts import LAYOUTS
from cxsim.conformance.reference import QUANTITIES

__all__ = ["LAYOUTS", "QUANTITIES", "CaseResult", "Checker", "conform", "load_function"]

"""Runs a user's function over the cases of its quantity and reports, per case, the largest difference.

For each random case hypothesis draws ``examples`` batches; the first failing
batch is shrunk by hypothesis to a minimal one, within a time budget per case
(``shrink_seconds``: when it is spent, the smallest failing batch found so far
is reported, and the report says so), which the report prints as small
tensors with the terms that differ (:mod:`cxsim.conformance.terms`). Pinned
cases run once each. Cases outside the function's declared claims
(:mod:`cxsim.conformance.claims`) are skipped, and the report says what was not
checked.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from cxsim.conformance import layouts
from cxsim.conformance.batches import Batch, Case, without_step_rewards
from cxsim.conformance.claims import Claims
from cxsim.conformance.quantities import QUANTITIES, Quantity
from cxsim.conformance.report import (
    DEFAULT_SHRINK_SECONDS,
    CaseResult,
    Failure,
    Skipped,
    format_report,
)
from cxsim.conformance.terms import explain
from cxsim.plugin_checks import PluginOutputError
from cxsim.user_modules import missing_attribute, missing_module

__all__ = [
    "DEFAULT_SHRINK_SECONDS",
    "CaseResult",
    "Checker",
    "Failure",
    "Skipped",
    "cases_for",
    "conform",
    "format_report",
    "load_function",
]

DEFAULT_ATOL = 1e-6


class _Mismatch(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.error or "output differs from the reference")
        self.failure = failure


class _UnusableOutput(BaseException):
    """Carries a :class:`~cxsim.plugin_checks.PluginOutputError` out of the hypothesis test
    (not an ``Exception``, so it is neither shrunk nor taken for a difference): an output
    the trainer could not use ends the check in one line."""

    def __init__(self, error: PluginOutputError) -> None:
        super().__init__(str(error))
        self.error = error


class _ShrinkBudgetSpent(BaseException):
    """Ends shrinking: raised inside the hypothesis test, not an ``Exception``, so that
    hypothesis does not take it for a failure of the function and lets it through."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def load_function(path: str) -> Callable[..., Any]:
    """The function at ``package.module:function``, imported with the current folder on
    the import path (as ``python -m`` has it), so that an adapter module next to the
    user is found."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"function must be given as package.module:function, got {path!r}")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # whatever the user's module raises while it is imported
        missing = missing_module(module_name, err)
        if missing is not None:  # a typo, most often: not found, with the close match
            raise ValueError(f"{path}: not found: {missing}, searched from {here}") from err
        raise ValueError(
            f"cannot import {module_name!r} (from {path!r}, searched from {here}): "
            f"{type(err).__name__}: {_first_line(err)}"
        ) from err
    function = getattr(module, attr, None)
    if function is None:
        raise ValueError(f"{path}: not found: {missing_attribute(module, attr)}")
    if not callable(function):
        raise ValueError(f"{module_name} has no function {attr!r}")
    return function


def cases_for(quantity: str, min_group: int = 1, trees: bool = False) -> list[Case]:
    """The random and pinned cases a quantity is checked on (its record's
    :meth:`~cxsim.conformance.quantities.Quantity.cases`)."""
    return QUANTITIES[quantity].cases(min_group, trees)


class Checker:
    """Compares one function with the reference of ``quantity`` (a name of
    :data:`~cxsim.conformance.quantities.QUANTITIES`, or a record) in ``layout``: every
    decision per quantity is read from its record."""

    def __init__(
        self,
        function: Callable[..., Any],
        quantity: str | Quantity,
        layout: str,
        mode: str | None = None,
        atol: float = DEFAULT_ATOL,
        rtol: float | None = None,
        claims: Claims | None = None,
        shrink_seconds: float = DEFAULT_SHRINK_SECONDS,
    ) -> None:
        self.record = QUANTITIES[quantity] if isinstance(quantity, str) else quantity
        self.function, self.quantity, self.layout, self.mode = (
            function, self.record.name, layout, mode,
        )  # fmt: skip
        if layout not in self.record.layouts:
            raise ValueError(
                f"layout {layout} does not serve {self.quantity}; it serves "
                f"{', '.join(self.record.layouts)}"
            )
        self.handover = self.record.layouts[layout]
        self.atol = atol
        self.rtol = self.record.rtol if rtol is None else rtol
        self.claims = claims or Claims()
        self.claims.check_applies(self.record)
        if not shrink_seconds > 0:
            raise ValueError(f"--shrink-seconds must be > 0, got {shrink_seconds}")
        self.shrink_seconds = shrink_seconds

    def close(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """``|a - b| <= atol + rtol * max|b|`` everywhere: relative to the output's scale,
        since an advantage near 0 inherits the rounding of the large terms it sums."""
        if a.numel() == 0:
            return True
        scale = float(b.abs().max())
        return bool(
            torch.isfinite(a).all() and ((a - b).abs() <= self.atol + self.rtol * scale).all()
        )

    def as_given(self, batch: Batch) -> Batch:
        """The batch as the function is given it: step rewards only to a GAE quantity in a
        layout that hands them over (``Layout.step_rewards``, the estimator layout)."""
        if self.record.step_rewards and layouts.LAYOUTS[self.layout].step_rewards:
            return batch
        return without_step_rewards(batch)

    def compare(self, batch: Batch) -> tuple[float, Failure | None]:
        """(largest difference, failure or None) on one batch (without its step rewards
        where the layout or the quantity takes none)."""
        batch = self.as_given(batch)
        expected = self.record.reference(batch, self.mode)
        where = self.record.compared(batch)
        try:
            got = layouts.call(self.function, batch, self.handover, self.mode)
        except PluginOutputError as err:
            raise _UnusableOutput(err) from None
        except Exception as err:
            error = f"{type(err).__name__}: {err}"
            if isinstance(err, TypeError):
                names = self.handover.inputs(batch, self.mode)
                error += (
                    f" (layout {self.layout} calls fn({', '.join(names)}) for {self.quantity}; "
                    "docs/conformance.md)"
                )
            return float("inf"), Failure(batch, expected, None, error, "error", error)
        diff = (got[where] - expected[where]).abs()
        largest = float(diff.max()) if diff.numel() else 0.0
        if largest != largest:  # NaN
            largest = float("inf")
        if self.close(got[where], expected[where]):
            return largest, None
        return largest, Failure(batch, expected, got, None, "", "")

    def explain(self, failure: Failure) -> Failure:
        """The failure with its differing terms filled in (run once, on the shrunk example)."""
        if failure.got is None:
            return failure
        where = self.record.compared(failure.batch)
        diagnosis = explain(
            failure.batch,
            self.record,
            self.mode,
            failure.got,
            failure.expected,
            where,
            self.close,
        )
        return replace(failure, term=diagnosis.term, form=diagnosis.form, parts=diagnosis.parts)

    def run_case(self, case: Case, examples: int, seed: int) -> CaseResult:
        """Draws ``examples`` batches (1 if pinned); a failure is shrunk by hypothesis for at
        most ``shrink_seconds``."""
        state: dict[str, Any] = {
            "count": 0, "max": 0.0, "first": None, "steps": 0, "best": None, "size": None,
            "removed": 0, "restricted": 0, "stopped": False,
        }  # fmt: skip

        @hypothesis_seed(seed)
        @settings(
            max_examples=1 if case.pinned else examples,
            database=None,
            deadline=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
            phases=(Phase.generate, Phase.shrink),
            print_blob=False,
            report_multiple_bugs=False,
        )
        @given(case.strategy)
        def prop(batch: Batch) -> None:
            shrinking = state["first"] is not None
            if shrinking:
                if time.perf_counter() - state["first"] > self.shrink_seconds:
                    state["stopped"] = True
                    raise _ShrinkBudgetSpent
                state["steps"] += 1
            kept, removed = self.claims.restrict(batch, self.record)
            if not shrinking:
                state["count"] += 1
                state["removed"] += removed
                state["restricted"] += removed > 0
            if kept.num_rows == 0:
                return
            largest, failure = self.compare(kept)
            state["max"] = max(state["max"], largest)
            if failure is not None:
                if not shrinking:
                    state["first"] = time.perf_counter()
                size = (kept.num_rows, int(kept.response.sum()))
                if state["best"] is None or size <= state["size"]:  # what the budget leaves
                    state["best"], state["size"] = failure, size
                raise _Mismatch(failure)

        failure: Failure | None
        try:
            prop()
            failure = None
        except _Mismatch as mismatch:
            failure = mismatch.failure
        except _ShrinkBudgetSpent:
            failure = state["best"]
        except _UnusableOutput as unusable:
            raise unusable.error.within(f"case {case.name}") from None
        shrink_time = 0.0 if state["first"] is None else time.perf_counter() - state["first"]
        return CaseResult(
            case,
            1 if case.pinned else state["count"],
            state["max"],
            None if failure is None else self.explain(failure),
            shrink_steps=state["steps"],
            shrink_seconds=shrink_time,
            shrink_stopped=state["stopped"],
            groups_removed=state["removed"],
            batches_restricted=state["restricted"],
        )

    def select(self, only: Sequence[str] = ()) -> tuple[list[Case], list[Skipped]]:
        """The cases to run (those whose names start with one of ``only``, if given) and
        those skipped as outside the claims; ValueError when nothing is left to run."""
        trees = layouts.LAYOUTS[self.layout].trees
        everything = self.record.cases(self.claims.min_group, trees)
        cases = [c for c in everything if not only or c.name.startswith(tuple(only))]
        if not cases:
            names = ", ".join(c.name for c in everything)
            raise ValueError(
                f"--only {' '.join(only)} matches no case of {self.quantity}; cases: {names}"
            )
        run, skipped = [], []
        for case in cases:
            reason = self.claims.excludes(case, self.record)
            if reason is None:
                run.append(case)
            else:
                skipped.append(Skipped(case, reason))
        if not run:
            raise ValueError(
                f"every selected case of {self.quantity} lies outside the claims "
                f"({'; '.join(sorted({s.reason for s in skipped}))}): nothing to check"
            )
        return run, skipped

    def run(self, examples: int = 25, seed: int = 0, only: Sequence[str] = ()) -> list[CaseResult]:
        """Every case of the quantity inside the claims, or those whose names start with one
        of ``only``."""
        return self.run_all(examples, seed, only)[0]

    def run_all(
        self, examples: int = 25, seed: int = 0, only: Sequence[str] = ()
    ) -> tuple[list[CaseResult], list[Skipped]]:
        """(results of the cases run, the cases skipped as outside the claims)."""
        cases, skipped = self.select(only)
        return [self.run_case(case, examples, seed) for case in cases], skipped


def conform(
    function: str,
    quantity: str,
    layout: str,
    mode: str | None = None,
    examples: int = 25,
    seed: int = 0,
    atol: float = DEFAULT_ATOL,
    rtol: float | None = None,
    only: Sequence[str] = (),
    claims: Claims | None = None,
    shrink_seconds: float = DEFAULT_SHRINK_SECONDS,
) -> tuple[bool, str, float]:
    """Checks ``function`` (``package.module:function``); returns (passed, report, seconds).

    ValueError (before any case runs) for a function that cannot be imported, a
    declaration that does not apply to ``quantity``, or an ``only`` that leaves no case.
    """
    start = time.perf_counter()
    claims = claims or Claims()
    checker = Checker(
        load_function(function), quantity, layout, mode, atol, rtol, claims, shrink_seconds
    )
    results, skipped = checker.run_all(examples, seed, only)
    seconds = time.perf_counter() - start
    report = format_report(
        results, function, quantity, layout, mode, skipped, claims, shrink_seconds
    )
    return all(r.passed for r in results), report + f"\n({seconds:.1f} s)", seconds

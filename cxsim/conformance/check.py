"""Runs a user's function over the cases of its quantity and reports, per case, the largest difference.

For each random case hypothesis draws ``examples`` batches; the first failing
batch is shrunk by hypothesis to a minimal one, which the report prints as
small tensors with the term that differs (:mod:`cxsim.conformance.terms`).
Pinned cases run once each.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from cxsim.conformance import layouts
from cxsim.conformance.batches import Batch, Case, pinned_cases, random_cases
from cxsim.conformance.reference import GAE_QUANTITIES, compared_positions, reference
from cxsim.conformance.terms import explain

DEFAULT_RTOL: dict[str, float] = {
    **dict.fromkeys(GAE_QUANTITIES, 1e-3),
    "group-broadcast": 1e-5,
    "adaptive-lambda": 1e-6,
    "loss-reduction": 1e-6,
}
"""Relative tolerance per quantity. GAE allows 1e-3: a float32 lambda (cxsim's own
``adaptive_lambda``, most frameworks) is off by up to 3e-8, which an exponent of
3000 turns into 1e-4 relative; every pitfall of docs/conformance.md is off by more
than 10%."""
DEFAULT_ATOL = 1e-6


@dataclass(frozen=True)
class Failure:
    """A failing example: the (shrunk) batch, both outputs, and the differing term."""

    batch: Batch
    expected: torch.Tensor
    got: torch.Tensor | None
    error: str | None
    term: str
    form: str


@dataclass(frozen=True)
class CaseResult:
    case: Case
    examples: int
    max_diff: float
    failure: Failure | None

    @property
    def passed(self) -> bool:
        return self.failure is None


class _Mismatch(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.error or "output differs from the reference")
        self.failure = failure


def load_function(path: str) -> Callable[..., Any]:
    """The function at ``package.module:function``."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"function must be given as package.module:function, got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import {module_name!r} (from {path!r}): {err}") from err
    function = getattr(module, attr, None)
    if not callable(function):
        raise ValueError(f"{module_name} has no function {attr!r}")
    return function


def cases_for(quantity: str) -> list[Case]:
    """The random and pinned cases a quantity is checked on."""
    if quantity == "loss-reduction":
        randoms = [c for c in random_cases(("none",)) if c.name != "long"]
        pins = ["pinned/two-micro-batches"]
    elif quantity == "group-broadcast":
        randoms = random_cases(("none",))
        pins = []
    elif quantity == "adaptive-lambda":
        randoms = random_cases(("adaptive",))
        pins = ["pinned/4+4", "pinned/1000+2000", "pinned/one-token-alpha-0.5"]
    else:
        randoms = random_cases()
        pins = [c.name for c in pinned_cases() if c.name != "pinned/two-micro-batches"]
    return [*randoms, *(c for c in pinned_cases() if c.name in pins)]


class Checker:
    """Compares one function with the reference of ``quantity`` in ``layout``."""

    def __init__(
        self,
        function: Callable[..., Any],
        quantity: str,
        layout: str,
        mode: str | None = None,
        atol: float = DEFAULT_ATOL,
        rtol: float | None = None,
    ) -> None:
        self.function, self.quantity, self.layout, self.mode = function, quantity, layout, mode
        self.atol = atol
        self.rtol = DEFAULT_RTOL[quantity] if rtol is None else rtol

    def close(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """``|a - b| <= atol + rtol * max|b|`` everywhere: relative to the output's scale,
        since an advantage near 0 inherits the rounding of the large terms it sums."""
        if a.numel() == 0:
            return True
        scale = float(b.abs().max())
        return bool(
            torch.isfinite(a).all() and ((a - b).abs() <= self.atol + self.rtol * scale).all()
        )

    def compare(self, batch: Batch) -> tuple[float, Failure | None]:
        """(largest difference, failure or None) on one batch."""
        expected = reference(batch, self.quantity, self.mode)
        where = compared_positions(batch, self.quantity)
        try:
            got = layouts.call(self.function, batch, self.layout, self.quantity, self.mode)
        except Exception as err:
            error = f"{type(err).__name__}: {err}"
            if isinstance(err, TypeError):
                names = layouts.LAYOUTS[self.layout].inputs(batch, self.quantity, self.mode)
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
        """The failure with its differing term filled in (run once, on the shrunk example)."""
        if failure.got is None:
            return failure
        where = compared_positions(failure.batch, self.quantity)
        term, form = explain(
            failure.batch,
            self.quantity,
            self.mode,
            failure.got,
            failure.expected,
            where,
            self.close,
        )
        return replace(failure, term=term, form=form)

    def run_case(self, case: Case, examples: int, seed: int) -> CaseResult:
        """Draws ``examples`` batches (1 if pinned); a failure is shrunk by hypothesis."""
        seen = {"count": 0, "max": 0.0}

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
            largest, failure = self.compare(batch)
            seen["count"] += 1
            seen["max"] = max(seen["max"], largest)
            if failure is not None:
                raise _Mismatch(failure)

        try:
            prop()
        except _Mismatch as mismatch:
            count = 1 if case.pinned else seen["count"]
            return CaseResult(case, count, seen["max"], self.explain(mismatch.failure))
        return CaseResult(case, seen["count"], seen["max"], None)

    def run(self, examples: int = 25, seed: int = 0, only: Sequence[str] = ()) -> list[CaseResult]:
        """Every case of the quantity, or those whose names start with one of ``only``."""
        cases = [c for c in cases_for(self.quantity) if not only or c.name.startswith(tuple(only))]
        if not cases:
            names = ", ".join(c.name for c in cases_for(self.quantity))
            raise ValueError(f"no case matches {list(only)}; cases: {names}")
        return [self.run_case(case, examples, seed) for case in cases]


# --------------------------------------------------------------------------- report


def _num(x: float) -> str:
    return f"{x:.4g}" if x == x else "nan"


def _runs(flags: list[str]) -> str:
    """'TTTooo' -> 'T×3 o×3' for long rows."""
    out, i = [], 0
    while i < len(flags):
        j = i
        while j < len(flags) and flags[j] == flags[i]:
            j += 1
        out.append(f"{flags[i]}×{j - i}")
        i = j
    return " ".join(out)


def format_batch(failure: Failure, quantity: str, mode: str | None) -> list[str]:
    """The failing batch and both outputs as small tensors (long rows run-length coded)."""
    b = failure.batch
    lam = f"lam={b.lam}" if b.lam is not None else f"lam=adaptive alpha={b.alpha} scope={b.scope}"
    header = {
        "loss-reduction": f"mode={mode}, micro-batch sizes (rows) {list(b.micro_batches)}",
        "adaptive-lambda": f"alpha={b.alpha} scope={b.scope}",
        "group-broadcast": "eps=1e-06",
    }
    lines = ["    " + header.get(quantity, f"gamma={b.gamma} {lam}")]
    lines.append("    mask: T trainable, o observation inside the response")
    per_row = quantity not in ("adaptive-lambda", "loss-reduction")
    for r in range(b.num_rows):
        n = int(b.response[r].sum())
        flags = ["T" if bool(b.trainable[r, t]) else "o" for t in range(n)]
        head = (
            f"    row {r}: rollout {int(b.rollout_id[r])} segment {int(b.segment_index[r])} "
            f"group {int(b.group_id[r])} reward {_num(float(b.rewards[r]))}"
        )
        lines.append(head)
        if n <= 16:
            lines.append("      mask     " + " ".join(f"{f:>7}" for f in flags))
            if quantity in ("loss-reduction", *GAE_QUANTITIES):
                data = b.loss if quantity == "loss-reduction" else b.values
                name = "loss    " if quantity == "loss-reduction" else "values  "
                cells = " ".join(f"{_num(float(v)):>7}" for v in data[r, :n])
                lines.append(f"      {name} {cells}")
            if per_row and failure.got is not None:
                for label, out in (("expected", failure.expected), ("got     ", failure.got)):
                    cells = [
                        f"{_num(float(out[r, t])):>7}" if flags[t] == "T" else f"{'.':>7}"
                        for t in range(n)
                    ]
                    lines.append(f"      {label} " + " ".join(cells))
        else:
            zero = bool((b.values[r, :n] == 0).all())
            lines.append(f"      mask     {_runs(flags)}; values {'all 0' if zero else 'random'}")
            if per_row and failure.got is not None:
                diff = torch.where(b.trainable[r], (failure.got[r] - failure.expected[r]).abs(), 0)
                for t in sorted({0, int(diff.argmax())}):
                    lines.append(
                        f"      token {t}: expected {_num(float(failure.expected[r, t]))}, "
                        f"got {_num(float(failure.got[r, t]))}"
                    )
    if not per_row and failure.got is not None:
        lines.append(f"    expected {[round(float(x), 6) for x in failure.expected]}")
        lines.append(f"    got      {[round(float(x), 6) for x in failure.got]}")
    return lines


def format_report(
    results: list[CaseResult], function: str, quantity: str, layout: str, mode: str | None
) -> str:
    """The per-case table, then each failure with its minimal example and the differing term."""
    what = quantity + (f" ({mode})" if mode else "")
    lines = [f"conformance of {function}: {what}, layout {layout}", ""]
    width = max(len(r.case.name) for r in results)
    for r in results:
        status = "ok  " if r.passed else "FAIL"
        lines.append(
            f"  {status} {r.case.name.ljust(width)}  largest difference {_num(r.max_diff):>9}"
            f"  ({r.examples} batches)"
        )
    failures = [r for r in results if not r.passed]
    lines.append("")
    if not failures:
        lines.append(f"all {len(results)} cases agree with the reference")
        return "\n".join(lines)
    lines.append(f"{len(failures)} of {len(results)} cases differ from the reference")
    for r in failures:
        f = r.failure
        assert f is not None
        kind = "example" if r.case.pinned else "minimal example (shrunk)"
        lines += ["", f"{r.case.name}: {r.case.what}", f"  {kind}:"]
        lines += format_batch(f, quantity, mode)
        if f.error is not None:
            lines.append(f"  the function raised {f.error}")
        else:
            lines.append(f"  differing term: {f.term}: {f.form}")
    return "\n".join(lines)


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
) -> tuple[bool, str, float]:
    """Checks ``function`` (``package.module:function``); returns (passed, report, seconds)."""
    start = time.perf_counter()
    checker = Checker(load_function(function), quantity, layout, mode, atol, rtol)
    results = checker.run(examples, seed, only)
    seconds = time.perf_counter() - start
    report = format_report(results, function, quantity, layout, mode)
    return all(r.passed for r in results), report + f"\n({seconds:.1f} s)", seconds

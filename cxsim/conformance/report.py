"""The results of a conformance check and their report: per case the largest difference, and
for each failure its (shrunk) example as small tensors with the terms that differ.

:class:`Failure`, :class:`CaseResult` and :class:`Skipped` are what
:class:`~cxsim.conformance.check.Checker` returns; :func:`format_report` prints them
(docs/conformance.md, "What a failure looks like").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from cxsim.conformance.batches import Batch, Case
from cxsim.conformance.claims import Claims
from cxsim.conformance.quantities import QUANTITIES, Quantity

DEFAULT_SHRINK_SECONDS = 10.0
"""Time each failing case may spend shrinking its example."""


@dataclass(frozen=True)
class Failure:
    """A failing example: the (shrunk) batch, both outputs, and the differing terms."""

    batch: Batch
    expected: torch.Tensor
    got: torch.Tensor | None
    error: str | None
    term: str
    form: str
    parts: tuple[tuple[str, str], ...] = ()
    """(term, form) of each wrong term; several for a mixed error."""


@dataclass(frozen=True)
class CaseResult:
    case: Case
    examples: int
    """Batches drawn until the first failure (all of them when none fails)."""
    max_diff: float
    failure: Failure | None
    shrink_steps: int = 0
    """Batches tried while shrinking the failure."""
    shrink_seconds: float = 0.0
    shrink_stopped: bool = False
    """Shrinking ran out of its time budget: the example is not minimal."""
    groups_removed: int = 0
    """Groups below the claimed smallest size, removed from the drawn batches."""
    batches_restricted: int = 0
    """Drawn batches that had such a group."""

    @property
    def passed(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class Skipped:
    """A case outside the function's claims, and what it would have checked."""

    case: Case
    reason: str


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


def format_batch(failure: Failure, quantity: str | Quantity, mode: str | None) -> list[str]:
    """The failing batch and both outputs as small tensors (long rows run-length coded), as
    ``quantity``'s record has them printed (its ``header``, ``shown``, ``output``)."""
    record = QUANTITIES[quantity] if isinstance(quantity, str) else quantity
    b = failure.batch
    lines = ["    " + record.header(b, mode)]
    legend = "    mask: T trainable, o observation inside the response"
    rejected = b.rejected
    if bool(rejected.any()):
        legend += ", x token of a rejected summary attempt (untrained)"
    lines.append(legend)
    per_row = record.output == "tokens"
    for r in range(b.num_rows):
        n = int(b.response[r].sum())
        flags = [
            "T" if bool(b.trainable[r, t]) else "x" if bool(rejected[r]) else "o" for t in range(n)
        ]
        head = (
            f"    row {r}: rollout {int(b.rollout_id[r])} segment {int(b.segment_index[r])} "
            f"group {int(b.group_id[r])} reward {_num(float(b.rewards[r]))}"
        )
        lines.append(head + (" (rejected summary attempt)" if bool(rejected[r]) else ""))
        if n <= 16:
            lines.append("      mask     " + " ".join(f"{f:>7}" for f in flags))
            if record.shown is not None:
                cells = " ".join(f"{_num(float(v)):>7}" for v in getattr(b, record.shown)[r, :n])
                lines.append(f"      {record.shown:<8} {cells}")
            if record.step_rewards and bool((b.steps != 0).any()):
                cells = " ".join(
                    f"{_num(float(v)):>7}" if v else f"{'.':>7}" for v in b.steps[r, :n].tolist()
                )
                lines.append(f"      steps    {cells}")
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


def _batches(r: CaseResult) -> str:
    text = f"{r.examples} batch" + ("" if r.examples == 1 else "es")
    if r.failure is not None and not r.case.pinned:
        text += f"; shrunk in {r.shrink_steps} steps, {r.shrink_seconds:.1f} s"
        if r.shrink_stopped:
            text += ", stopped at the budget"
    return text


def _not_checked(
    results: list[CaseResult], skipped: Sequence[Skipped], claims: Claims | None
) -> list[str]:
    """What the claims left out: skipped cases by reason, removed groups."""
    lines = []
    by_reason: dict[str, list[str]] = {}
    for s in skipped:
        by_reason.setdefault(s.reason, []).append(s.case.name)
    for reason, names in by_reason.items():
        count = f"{len(names)} case" + ("s" if len(names) > 1 else "")
        lines.append(f"  {reason}: {count} skipped: {', '.join(names)}")
    removed = sum(r.groups_removed for r in results)
    if claims is not None and claims.min_group > 1:
        drawn = sum(r.examples for r in results)
        restricted = sum(r.batches_restricted for r in results)
        lines.append(
            f"  {claims.group_text()}: {removed} groups removed from {restricted} of "
            f"{drawn} batches before the call"
        )
    return ["", "not checked (outside the claims):", *lines] if lines else []


def format_report(
    results: list[CaseResult],
    function: str,
    quantity: str | Quantity,
    layout: str,
    mode: str | None,
    skipped: Sequence[Skipped] = (),
    claims: Claims | None = None,
    shrink_seconds: float = DEFAULT_SHRINK_SECONDS,
) -> str:
    """The per-case table, then each failure with its minimal example and the differing
    terms, what the claims left out, and the shrinking budget."""
    record = QUANTITIES[quantity] if isinstance(quantity, str) else quantity
    what = record.name + (f" ({mode})" if mode else "")
    lines = [f"conformance of {function}: {what}, layout {layout}"]
    if claims is not None and claims.describe():
        lines.append(claims.describe())
    lines.append("")
    width = max(len(r.case.name) for r in results)
    for r in results:
        status = "ok  " if r.passed else "FAIL"
        lines.append(
            f"  {status} {r.case.name.ljust(width)}  largest difference {_num(r.max_diff):>9}"
            f"  ({_batches(r)})"
        )
    failures = [r for r in results if not r.passed]
    lines.append("")
    unchecked = f"; {len(skipped)} not checked (below)" if skipped else ""
    if not failures:
        lines.append(f"all {len(results)} cases run agree with the reference{unchecked}")
    else:
        lines.append(
            f"{len(failures)} of {len(results)} cases run differ from the reference{unchecked}"
        )
    for r in failures:
        f = r.failure
        assert f is not None
        kind = "example" if r.case.pinned else "minimal example (shrunk)"
        if r.shrink_stopped:
            kind = "smallest example found before the shrinking budget ran out"
        lines += ["", f"{r.case.name}: {r.case.what}", f"  {kind}:"]
        lines += format_batch(f, record, mode)
        if f.error is not None:
            lines.append(f"  the function raised {f.error}")
        elif len(f.parts) > 1:
            lines.append(
                f"  differing terms ({len(f.parts)} errors together, each explains its part):"
            )
            lines += [f"    {term}: {form}" for term, form in f.parts]
        else:
            lines.append(f"  differing term: {f.term}: {f.form}")
    lines += _not_checked(results, skipped, claims)
    stopped = [r.case.name for r in results if r.shrink_stopped]
    budget = f"shrinking: at most {shrink_seconds:g} s per failing case (--shrink-seconds)"
    if stopped:
        budget += f"; stopped at the budget, examples not minimal: {', '.join(stopped)}"
    elif failures:
        budget += f"; the longest took {max(r.shrink_seconds for r in failures):.1f} s"
    return "\n".join([*lines, "", budget])

"""A page-level correction for many claims: the study file's ``correction = "holm"``.

A page of many claims at 95% each resolves some by chance. With ``correction = "holm"`` the
claims the page tests (those :func:`cxsim.studies.stats.refusal` did not refuse) are one
family, and Holm-Bonferroni holds its family-wise error at :data:`FAMILY_ALPHA`: each
claim's p-value (:func:`cxsim.studies.stats.p_value`, the test its verdict rests on) is
adjusted by :func:`holm_adjusted`, and a claim stays *reproduced* or *contradicted* only
when its adjusted p-value is at most :data:`FAMILY_ALPHA`; one whose own interval resolved
it but that does not survive reads *not resolved after Holm*. The intervals are the
claims' own 95% intervals, unadjusted.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import TypeVar

from cxsim.studies.stats import Comparison

CORRECTIONS = ("none", "holm")
"""The study file's ``correction`` values: none (the default), or Holm-Bonferroni."""
FAMILY_ALPHA = 0.05
"""The family-wise error rate Holm holds over a page's tested claims."""
RESOLVED = ("reproduced", "contradicted")

Key = TypeVar("Key", bound=Hashable)


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: sorted ascending, the i-th
    (from 1) of m is multiplied by m - i + 1, capped at 1 and made non-decreasing (each the
    largest so far). A claim survives at level a when its adjusted p-value is at most a,
    exactly when Holm's procedure (reject while p_(i) <= a / (m - i + 1)) rejects it."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [math.nan] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def corrected(comparisons: dict[Key, Comparison], method: str) -> dict[Key, Comparison]:
    """The comparisons with ``method`` applied over the tested ones (``none``: as they are):
    each tested claim's adjusted p-value, and a resolved verdict that does not survive at
    :data:`FAMILY_ALPHA` turned into *not resolved after Holm*."""
    if method not in CORRECTIONS:
        raise ValueError(f"correction = {method!r}; choose one of: {', '.join(CORRECTIONS)}")
    if method == "none":
        return dict(comparisons)
    tested = [key for key, c in comparisons.items() if c.tested]
    adjusted = dict(
        zip(tested, holm_adjusted([comparisons[k].p_value for k in tested]), strict=True)
    )
    out = dict(comparisons)
    for key, p in adjusted.items():
        c = comparisons[key]
        said = c.verdict
        if said in RESOLVED and p > FAMILY_ALPHA:
            said = f"not resolved after Holm (adjusted p {p:.3f} > {FAMILY_ALPHA:g})"
        out[key] = replace(c, adjusted_p=p, verdict=said)
    return out

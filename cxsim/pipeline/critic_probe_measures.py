"""What ``cxsim critic-probe`` measures: held-out ridge probes of a feature set, and the
explained variance of the outcome by a critic's values at each segment's first trainable
token (and at each rollout's last segment), with the steps a learning curve takes to reach a
bar."""

from __future__ import annotations

import math
from typing import Any


def ridge_heldout_ev(x: Any, y: Any, fit: Any, ridge: float) -> float:
    """Ridge regression of ``y`` on ``x`` (standardised on the fit rows, with an intercept)
    fit on rows ``fit``; explained variance on the other rows."""
    import torch

    from cxsim.diagnostics import explained_variance

    mean, std = x[fit].mean(0), x[fit].std(0) + 1e-6
    z = torch.cat([(x - mean) / std, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)
    gram = z[fit].T @ z[fit] + ridge * torch.eye(z.shape[1], dtype=x.dtype)
    weights = torch.linalg.solve(gram, z[fit].T @ y[fit])
    return float(explained_variance(z[~fit] @ weights, y[~fit]))


def ridge_probe(x: Any, y: Any, fit: Any, ridges: tuple[float, ...]) -> tuple[float, float]:
    """``(held-out explained variance, ridge)``: the ridge penalty chosen on a validation
    quarter of the fit rows (their last rows, at least 2; the middle penalty when no
    penalty scores there), then the probe refit on every fit row (:func:`ridge_heldout_ev`)."""
    import torch

    fit_rows = torch.nonzero(fit).squeeze(1)
    held = max(2, len(fit_rows) // 4)
    inner = torch.zeros(len(fit_rows), dtype=torch.bool)
    inner[: len(fit_rows) - held] = True
    scores = [ridge_heldout_ev(x[fit_rows], y[fit_rows], inner, r) for r in ridges]
    scored = [(ev, r) for ev, r in zip(scores, ridges, strict=True) if not math.isnan(ev)]
    ridge = max(scored)[1] if scored else sorted(ridges)[len(ridges) // 2]
    return ridge_heldout_ev(x, y, fit, ridge), ridge


def last_segment_rows(batch: Any) -> Any:
    """(R,) long: each rollout's last row with a trainable token (by segment index), in
    rollout order."""
    import torch

    last: dict[int, tuple[int, int]] = {}
    has = batch.trainable.any(dim=1).tolist()
    pairs = zip(batch.rollout_id.tolist(), batch.segment_index.tolist(), strict=True)
    for row, (rid, k) in enumerate(pairs):
        if has[row] and (rid not in last or k > last[rid][0]):
            last[rid] = (k, row)
    return torch.tensor([last[rid][1] for rid in sorted(last)], dtype=torch.long)


def last_segment_ev(values: Any, batch: Any) -> float:
    """Explained variance of the outcome by the value at the first trainable token of each
    rollout's last segment (nan when the outcome does not vary)."""
    from cxsim.diagnostics import explained_variance

    rows = last_segment_rows(batch)
    first = batch.trainable[rows].long().argmax(dim=1)
    real = batch.rewards[rows].double()
    if len(rows) < 2:
        return float("nan")
    return float(explained_variance(values[rows, first].double(), real))


def steps_to_reach(curve: list[dict[str, float]], target: float) -> int | None:
    """The optimiser steps of the first point of ``curve`` whose ``last`` explained variance
    is at least ``target`` (None: never, or no target)."""
    if math.isnan(target):
        return None
    return next((int(p["step"]) for p in curve if p["last"] >= target), None)


def first_token_ev(values: Any, batch: Any) -> dict[str, float]:
    """Explained variance of the outcome by the value at each segment's first trainable
    token, per segment index (``seg{k}``; left out where the outcome does not vary)."""
    from cxsim.diagnostics import explained_variance

    first = batch.trainable.long().argmax(dim=1)
    out = {}
    for k in range(int(batch.segment_index.max()) + 1):
        rows = (batch.segment_index == k).nonzero().squeeze(1)
        real = batch.rewards[rows].double()
        if len(rows) > 1 and float(real.var()) > 0:
            out[f"seg{k}"] = float(explained_variance(values[rows, first[rows]].double(), real))
    return out

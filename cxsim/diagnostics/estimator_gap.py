"""Estimator gap: one advantage estimate against a reference on the same batch.

The paper's cross-segment estimator approximates stitched GAE (docs/method.md section 3);
their gap is a first-class measurement. The same function compares any
estimate with any reference (e.g. true advantages where an environment's
value is known in closed form).

Shapes: S segments, T tokens; ``mask`` (S, T) bool marks the compared tokens.
"""

from __future__ import annotations

import torch

from cxsim.diagnostics._common import check_per_row, check_per_token, safe_div, to_floats


def _gap(a: torch.Tensor, b: torch.Tensor, prefix: str, suffix: str) -> dict[str, torch.Tensor]:
    """Statistics of estimate ``a`` against reference ``b``, both (N,) float64."""
    da, db = a - a.mean(), b - b.mean()
    corr = safe_div((da * db).sum(), torch.sqrt((da * da).sum() * (db * db).sum()))
    diff = a - b
    return {
        f"{prefix}/corr{suffix}": corr,
        f"{prefix}/sign_agree{suffix}": (torch.sign(a) == torch.sign(b)).double().mean(),
        f"{prefix}/rel_err{suffix}": safe_div(diff.norm(), b.norm()),
        f"{prefix}/mean_abs_diff{suffix}": diff.abs().mean(),
        f"{prefix}/mean_diff{suffix}": diff.mean(),
    }


def estimator_gap(
    estimate: torch.Tensor,
    reference: torch.Tensor,
    mask: torch.Tensor,
    segment_index: torch.Tensor,
    prefix: str = "gap",
) -> dict[str, float]:
    """Agreement of ``estimate`` with ``reference`` over masked tokens, overall and
    by segment index k (suffix ``_seg{k}``).

    Keys (``{prefix}/...``, default prefix ``gap``):

    - ``corr``: Pearson correlation (left out when either side is constant);
    - ``sign_agree``: fraction of tokens where ``sign(a) == sign(b)`` (a PPO
      update pushes those tokens the same way);
    - ``rel_err`` = ``||a - b||_2 / ||b||_2`` (left out when ``b = 0``);
    - ``mean_abs_diff`` = ``mean |a - b|``, ``mean_diff`` = ``mean (a - b)`` (bias).

    Cross-segment equals stitched when values are zero (both reduce to the
    discounted terminal reward), so every gap is then 0 (corr and sign 1).
    """
    check_per_token("estimate", estimate, mask)
    check_per_token("reference", reference, mask)
    check_per_row("segment_index", segment_index, mask)
    a = estimate.detach().double()[mask]
    b = reference.detach().double()[mask]
    seg = segment_index[:, None].expand_as(mask)[mask]
    stats = _gap(a, b, prefix, "")
    for k in range(int(segment_index.max()) + 1):
        stats.update(_gap(a[seg == k], b[seg == k], prefix, f"_seg{k}"))
    return to_floats(stats)

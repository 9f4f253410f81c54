"""Estimators on lab samples, their errors against the truth, and the theory's predictions.

The estimators are the trainer's: :data:`cxsim.estimators.ESTIMATORS` by name, so a name
registered there, an installed plug-in's name or a ``module:name`` plug-in runs here too.

Metrics of an estimate ``A_hat`` against the true advantage ``A`` over a group
of tokens (a segment, a distance bin, ...). Rollouts are the independent
units: standard errors come from per-rollout sums, never from tokens, which
share the rollout's reward.

- ``bias``: mean of ``A_hat - A`` over the group's tokens, ``bias_se`` its standard error.
- ``slope``: ``sum A_hat A / sum A^2``, the scale at which the estimator passes the true
  advantage on (1 = right scale); ``slope_se`` by the delta method.
- ``rms_bias``: root mean square over cells (token, action, information alive) of the
  conditional bias ``E[A_hat - A | cell]``, sampling noise subtracted.
- ``sd``: pooled within-cell standard deviation of ``A_hat`` (estimator noise).
- ``corr``: Pearson correlation of ``A_hat`` and ``A`` over the group's tokens.
- ``grad_cos``: cosine between the policy gradients the estimate and the truth give a
  tabular policy (one logit per event token): ``mean_b (a - p) A_hat`` vs ``mean_b (a - p) A``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any, Literal

import numpy as np
import torch

from cxsim import advantages
from cxsim.estimators import ESTIMATORS, EstimatorInputs
from cxsim.lab.backend import from_torch, to_torch
from cxsim.lab.process import Sample
from cxsim.plugin_checks import check_advantages

LambdaMode = Literal["fixed", "segment", "rollout"]

PAGE_LABELS: dict[str, str] = {"cross-segment": "cross", "group-broadcast": "group"}
"""Short names the lab's page gives two of the registry's estimators; every other estimator
(a plug-in's ``module:name`` included) appears under its registry name."""


def label(estimator: str) -> str:
    """The name ``estimator`` (a name of :data:`cxsim.estimators.ESTIMATORS`) has on the page."""
    return PAGE_LABELS.get(estimator, estimator)


@dataclass(frozen=True)
class Inputs:
    """Torch views of a sample's padded tensors, in the argument names of cxsim.advantages."""

    values: torch.Tensor
    trainable: torch.Tensor
    rewards: torch.Tensor
    rollout_id: torch.Tensor
    segment_index: torch.Tensor
    group_id: torch.Tensor
    step_rewards: torch.Tensor
    """(S, W) zeros: the lab's rollouts have only their terminal reward."""


def inputs(sample: Sample) -> Inputs:
    values = to_torch(sample.values)
    return Inputs(
        values=values,
        trainable=to_torch(sample.trainable),
        rewards=to_torch(sample.rewards),
        rollout_id=to_torch(sample.rollout_id),
        segment_index=to_torch(sample.segment_index),
        group_id=to_torch(sample.group_id),
        step_rewards=torch.zeros_like(values),
    )


def estimator_inputs(x: Inputs, gamma: float, lam: float | torch.Tensor) -> EstimatorInputs:
    """What an estimator of the registry reads, with the trainable tokens as the policy mask."""
    return EstimatorInputs(
        values=x.values,
        mask=x.trainable,
        rewards=x.rewards,
        step_rewards=x.step_rewards,
        rollout_id=x.rollout_id,
        segment_index=x.segment_index,
        group_id=x.group_id,
        gamma=gamma,
        lam=lam,
    )


def lambda_for(x: Inputs, mode: LambdaMode, lam: float) -> float | torch.Tensor:
    """``lam`` itself, or the length-adaptive (S,) lambda with the given scope."""
    if mode == "fixed":
        return lam
    return advantages.adaptive_lambda(x.trainable, x.rollout_id, mode)


def estimate(x: Inputs, estimator: str, gamma: float, lam: float | torch.Tensor) -> torch.Tensor:
    """(S, W) advantages from ``ESTIMATORS[estimator]`` (cxsim/estimators.py): a name the
    registry holds, an installed plug-in's, or ``module:name``; what it returns is checked
    (:func:`cxsim.plugin_checks.check_advantages`)."""
    found = ESTIMATORS[estimator].advantages(estimator_inputs(x, gamma, lam))
    return check_advantages(estimator, found, x.trainable)


def rows(x: Inputs, lo: int, hi: int) -> Inputs:
    """Rows ``lo:hi`` of every tensor (views, no copy)."""
    return Inputs(*(getattr(x, f.name)[lo:hi] for f in fields(Inputs)))


def run(
    sample: Sample,
    estimator: str,
    lam: float = 1.0,
    mode: LambdaMode = "fixed",
    chunk_rollouts: int = 256,
) -> Any:
    """(B, N) advantages of ``estimator`` on ``sample``, as an array of ``sample.xp``.

    The estimator runs on chunks of ``chunk_rollouts`` whole rollouts (whole groups
    when it is a multiple of the group size): the same result, but each chunk's
    intermediates stay in cache, several times faster on CPU than one huge call.
    """
    x = inputs(sample)
    per_rollout = sample.layout.num_rows
    out = torch.empty_like(x.values)
    for lo in range(0, sample.num_rollouts, chunk_rollouts):
        part = rows(x, lo * per_rollout, (lo + chunk_rollouts) * per_rollout)
        adv = estimate(part, estimator, sample.spec.gamma, lambda_for(part, mode, lam))
        out[lo * per_rollout : lo * per_rollout + adv.shape[0]] = adv
    return sample.per_token(from_torch(out, sample.xp))


# ---------------------------------------------------------------- grouping
# A grouping is (member (N, G) bool, labels): token t belongs to group g where member[t, g].


def segment_groups(sample: Sample) -> tuple[np.ndarray, list[str]]:
    """One group per segment (time order), labelled ``exec 0``, ``sum 0``, ..."""
    lay = sample.layout
    member = lay.token_row[:, None] == np.arange(lay.num_rows)[None, :]
    return member, [lay.row_label(r) for r in range(lay.num_rows)]


def distance_groups(sample: Sample, bins: int = 8) -> tuple[np.ndarray, list[str]]:
    """Bins of the distance to the end of the rollout, in trainable tokens."""
    n = sample.layout.num_tokens
    edges = np.linspace(0, n, bins + 1).round().astype(np.int64)
    group = np.searchsorted(edges, sample.layout.dist, side="right") - 1
    member = group[:, None] == np.arange(bins)[None, :]
    return member, [f"{edges[i]}-{edges[i + 1] - 1}" for i in range(bins)]


def role_groups(sample: Sample) -> tuple[np.ndarray, list[str]]:
    """``all`` tokens, the first execution segment ``exec 0``, and all ``summaries``."""
    lay = sample.layout
    summary = lay.is_summary[lay.token_row]
    member = np.stack([np.ones_like(summary), lay.token_row == 0, summary], axis=1)
    return member, ["all", "exec 0", "summaries"]


# ---------------------------------------------------------------- metrics


def _host(xp: ModuleType, arr: Any) -> np.ndarray:
    return np.asarray(arr.get() if xp is not np else arr, dtype=np.float64)


def _rollout_sums(xp: ModuleType, arr: Any, onehot: Any) -> np.ndarray:
    """(B, N) @ (N, G) -> (B, G) per-rollout sums over each group, as float64 NumPy."""
    return _host(xp, arr @ onehot)


def _cell_stats(sample: Sample, err: Any, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """rms conditional bias and pooled within-cell sd per group (see module docstring)."""
    xp = sample.xp
    n = sample.layout.num_tokens
    cell = sample.cell.reshape(-1)
    c_n = _host(xp, xp.bincount(cell, minlength=4 * n))
    c_s1 = _host(xp, xp.bincount(cell, weights=err.reshape(-1), minlength=4 * n))
    c_s2 = _host(xp, xp.bincount(cell, weights=(err * err).reshape(-1), minlength=4 * n))
    ok = c_n >= 2
    size = np.where(ok, c_n, 0.0)
    mean = np.where(ok, c_s1 / np.maximum(c_n, 1), 0.0)
    var = np.where(ok, (c_s2 - c_n * mean**2) / np.maximum(c_n - 1, 1), 0.0)
    # per token (sum over its 4 cells), then per group
    per_token = np.stack(
        [
            (size * (mean**2 - var / np.maximum(c_n, 1))).reshape(n, 4).sum(1),
            size.reshape(n, 4).sum(1),
            (np.maximum(size - 1, 0) * var).reshape(n, 4).sum(1),
            np.maximum(size - 1, 0).reshape(n, 4).sum(1),
        ],
        axis=1,
    )
    sq, wsum, within, dof = per_token.T @ member.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(np.maximum(sq, 0.0) / wsum), np.sqrt(within / dof)


def metrics(sample: Sample, est: Any, member: np.ndarray) -> dict[str, np.ndarray]:
    """Each metric of the module docstring for ``est`` (B, N); arrays of length G (NaN for empty groups)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return _metrics(sample, est, member)


def _metrics(sample: Sample, est: Any, member: np.ndarray) -> dict[str, np.ndarray]:
    xp, true = sample.xp, sample.true_adv
    b = true.shape[0]
    onehot = xp.asarray(member, dtype=xp.float32)
    count = member.sum(0).astype(np.float64)  # tokens per rollout in each group
    tot = count * b
    err = est - true

    per_rollout = _rollout_sums(xp, err, onehot) / count
    num = _rollout_sums(xp, est * true, onehot)
    den = _rollout_sums(xp, true * true, onehot)
    s_est = _rollout_sums(xp, est, onehot).sum(0)
    s_true = _rollout_sums(xp, true, onehot).sum(0)
    s_est2 = _rollout_sums(xp, est * est, onehot).sum(0)
    cov = num.sum(0) / tot - s_est * s_true / tot**2
    var_e = s_est2 / tot - (s_est / tot) ** 2
    var_t = den.sum(0) / tot - (s_true / tot) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = num.sum(0) / den.sum(0)
        slope_se = np.sqrt(((num - slope * den) ** 2).sum(0)) / den.sum(0)
        corr = np.where(var_t > 1e-20, cov / np.sqrt(var_e * var_t), np.nan)
    rms_bias, sd = _cell_stats(sample, err, member)
    return {
        "bias": per_rollout.mean(0),
        "bias_se": per_rollout.std(0, ddof=1) / np.sqrt(b),
        "slope": slope,
        "slope_se": slope_se,
        "rms_bias": rms_bias,
        "sd": sd,
        "corr": corr,
        "mse": _rollout_sums(xp, err * err, onehot).sum(0) / tot,
    }


def gradient_cosine(sample: Sample, est: Any) -> float:
    """Cosine between tabular policy gradients from ``est`` and from the true advantage."""
    xp = sample.xp
    tokens = xp.asarray(sample.layout.event_token)
    score = sample.event_score
    g_hat = (score * xp.take(est, tokens, axis=1)).mean(0)
    g_true = (score * xp.take(sample.true_adv, tokens, axis=1)).mean(0)
    cos = (g_hat * g_true).sum() / xp.sqrt((g_hat * g_hat).sum() * (g_true * g_true).sum())
    return float(cos)


# ---------------------------------------------------------------- theory


def predicted_bias(sample: Sample, estimator: str, lam: float, critic_bias: float) -> Any:
    """(B, N) ``E[A_hat - A | x_t, a_t]`` for a fixed lambda and a critic ``V + b`` (+ noise).

    With ``q = gamma lam``, ``D_t`` the distance to the end, ``e - t`` the distance to the
    end of the own segment, ``N_{>s}`` the tokens of later segments and ``u_t = E[R | x_t, a_t]``:

    - stitched: ``beta_t = (gamma - 1) b (1 - q^{D_t}) / (1 - q) - q^{D_t} b`` (0 for an exact critic);
    - local: ``beta_t + q^{e-t} [(1 - gamma^{N_{>s}}) u_t - gamma b - q beta_{e+1}]``: the copied
      reward misses the discount of the later ``N_{>s}`` tokens, the boundary bootstraps 0;
    - cross-segment: ``(q^{N_{>s}} - 1) A_t + q^{N_{>s}} (bias of local)``: the correction discounts
      the whole local advantage, the true advantage included.

    With ``gamma = lam = 1`` all three vanish for an exact critic: local, cross and
    stitched are then the same number, ``R - V_hat_t``.
    """
    xp = sample.xp
    lay, gamma = sample.layout, sample.spec.gamma
    q = gamma * lam
    f32 = xp.float32

    def stitched_at(dist: np.ndarray) -> np.ndarray:
        qd = q ** dist.astype(np.float64)
        geo = (1 - qd) / (1 - q) if q < 1 else dist.astype(np.float64)
        return (gamma - 1) * critic_bias * geo - qd * critic_bias

    beta = stitched_at(lay.dist)
    if estimator == "stitched":
        return xp.broadcast_to(xp.asarray(beta, dtype=f32), sample.true_adv.shape)
    to_end = lay.to_segment_end.astype(np.float64)
    beta_next = np.where(lay.after > 0, stitched_at(np.maximum(lay.after - 1, 0)), 0.0)
    q_end = q**to_end
    reward_gap = xp.asarray(q_end * (1 - gamma ** lay.after.astype(np.float64)), dtype=f32)
    const = xp.asarray(
        beta + q_end * (-gamma * critic_bias - q * beta_next) * (lay.after > 0), dtype=f32
    )
    # last segment: local and stitched coincide
    local = const + reward_gap * sample.value_after
    if estimator == "local":
        return local
    if estimator == "cross-segment":
        shrink = xp.asarray(q ** lay.after.astype(np.float64), dtype=f32)
        return (shrink - 1) * sample.true_adv + shrink * local
    raise ValueError(f"no prediction for estimator {estimator!r}")

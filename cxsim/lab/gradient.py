"""The expected-gradient check: an estimator and a loss reduction against the true policy
gradient of a lab process.

The policy is tabular over the process's decisions: one logit per event (a decisive token or
a summary's keep token, ``p_e = sigmoid(theta_e)``; the other tokens do not change the
outcome). The success probability is known in closed form (``cxsim.lab.process``),

    J(theta) = base + sum_d w sigmoid(theta_d) prod_{keep k before d} sigmoid(theta_k),

so the true gradient ``grad J`` is exact (float64 autograd of that expression). A batch of B
rollouts gives the gradient the loss steps along, at ratio 1,

    g_e = sum_b w_{b,e} A_hat_{b,e} (a_{b,e} - p_e),

with ``A_hat`` the estimator's advantage at event e's token and ``w`` the reduction's gradient
weight of that token (``LOSS_MODES[mode].weights``, or ``d reduce / d l`` of a reduction under
test, by autograd). Its expectation over batches is estimated by Monte Carlo, batches as
units. Reported:

- ``cosine``: cosine between ``E[g]`` and ``grad J`` (1: the expected step points up the true
  gradient);
- ``rel_norm``: ``|E[g]| / |g*|``, with ``g* = E[sum_b w*_{b,e}] grad J_e`` the gradient the
  declared mode gives with the exact advantages (``w*``: cxsim's weights of the mode): 1 for an
  unbiased estimator and a right reduction; a reduction that divides by too many tokens
  shrinks it (the masked sum over every token instead of the trainable ones: 4/6);
- ``mode_cosine``: cosine between ``g*`` and ``grad J``, the mode's own reweighting of the
  decisions (1 when it weighs every event token alike);

each with a 95% percentile bootstrap interval over the batches. ``|E[g]|`` is estimated
without the upward bias of a noisy mean's norm (its squared norm less ``tr Cov / K``); a
cosine near 1 can then come out a little above it, so the cosine and its interval are clipped
to [-1, 1], the range a cosine has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cxsim.lab.process import Layout, ProcessSpec, Sample

Weights = Callable[[Sample, slice], np.ndarray]
"""``(sample, rows) -> (B, N)``: the gradient weight of each trainable token of the batch of
rollouts ``rows`` (a slice of rollouts), in rollout time order."""


def true_gradient(spec: ProcessSpec, layout: Layout) -> np.ndarray:
    """(E,) float64: ``dJ / dtheta_e`` of the tabular policy at the spec's probabilities."""
    prob = torch.tensor(layout.event_prob, dtype=torch.float64)
    theta = torch.logit(prob).requires_grad_(True)
    p = torch.sigmoid(theta)
    keep = torch.tensor(layout.event_is_keep)
    weight = torch.tensor(layout.event_weight, dtype=torch.float64)
    kept = torch.where(keep, p, torch.ones_like(p))
    alive = torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(kept, 0)[:-1]])
    success = spec.base + (weight * torch.where(keep, 0.0, p) * alive).sum()
    (grad,) = torch.autograd.grad(success, theta)
    return grad.numpy()


def mode_weights(mode: str) -> Weights:
    """Weights of cxsim's loss mode ``mode`` (``LOSS_MODES[mode].weights``, summary rows
    passed to the modes that read them)."""
    from cxsim.loss_modes import LOSS_MODES, role_keywords

    spec = LOSS_MODES[mode]

    def weights(sample: Sample, rows: slice) -> np.ndarray:
        mask, rollout_id, is_summary = _batch_rows(sample, rows)
        w = spec.weights(mask, rollout_id, **role_keywords(spec, is_summary))
        return _at_tokens(sample, w, rows)

    return weights


def reduction_weights(reduce: Callable[..., Any], mode: str) -> Weights:
    """Weights of a reduction under test in the ``loss-matrix`` layout
    (``reduce(losses, masks, rollout_ids, mode) -> scalar``, one micro-batch): ``d reduce / d l``
    by autograd at a per-token loss of 1."""

    def weights(sample: Sample, rows: slice) -> np.ndarray:
        mask, rollout_id, _ = _batch_rows(sample, rows)
        loss = torch.ones(mask.shape, dtype=torch.float64, device=mask.device, requires_grad=True)
        out = torch.as_tensor(reduce(losses=[loss], masks=[mask], rollout_ids=[rollout_id],
                                     mode=mode))  # fmt: skip
        (grad,) = torch.autograd.grad(out.sum(), loss, allow_unused=True)
        return _at_tokens(sample, torch.zeros_like(loss) if grad is None else grad, rows)

    return weights


def _batch_rows(sample: Sample, rows: slice) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mask, rollout ids and summary flags of the padded rows of rollouts ``rows``."""
    from cxsim.lab.backend import to_torch

    per = sample.layout.num_rows
    padded = slice(rows.start * per, rows.stop * per)
    mask = to_torch(sample.trainable[padded]).bool()
    rollout_id = to_torch(sample.rollout_id[padded])
    summary = np.tile(sample.layout.is_summary, rows.stop - rows.start)
    return mask, rollout_id, torch.as_tensor(summary, device=mask.device)


def _at_tokens(sample: Sample, padded: torch.Tensor, rows: slice) -> np.ndarray:
    """(S_batch, W) -> (B, N) at the trainable tokens, float64 NumPy."""
    flat = padded.detach().double().cpu().numpy().reshape(rows.stop - rows.start, -1)
    return flat[:, sample.layout.token_flat]


@dataclass(frozen=True)
class GradientCheck:
    """The expected gradient of one (estimator, reduction) against the truth."""

    cosine: tuple[float, float, float]
    """cos(E[g], grad J): estimate, 95% interval low, high."""
    rel_norm: tuple[float, float, float]
    """|E[g]| / |g*|: estimate, low, high."""
    mode_cosine: float
    """cos(g*, grad J): the declared mode's own reweighting of the decisions."""
    batches: int


def batch_gradients(sample: Sample, advantages: Any, weights: Weights, batch_rollouts: int):
    """``(g, w_sum)``: (K, E) each batch's gradient and (K, E) its summed weights at each event
    token, for the K whole batches of ``batch_rollouts`` rollouts in ``sample``."""
    xp = sample.xp
    tokens = sample.layout.event_token
    score = _host(xp, sample.event_score)
    adv = _host(xp, advantages)[:, tokens]
    count = sample.num_rollouts // batch_rollouts
    grads, sums = [], []
    for k in range(count):
        rows = slice(k * batch_rollouts, (k + 1) * batch_rollouts)
        w = weights(sample, rows)[:, tokens]
        grads.append((w * adv[rows] * score[rows]).sum(0))
        sums.append(w.sum(0))
    return np.stack(grads), np.stack(sums)


def _host(xp, arr) -> np.ndarray:
    return np.asarray(arr.get() if xp is not np else arr, dtype=np.float64)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    den = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / den if den > 0 else float("nan")


def _debiased_norm(g: np.ndarray) -> float:
    """``|E[g]|`` from K batch gradients (K, E): the squared norm of their mean less its
    noise, ``tr Cov / K`` (the plain norm of a noisy mean overstates the length, and a cosine
    divided by it understates the agreement); 0 when the noise exceeds it."""
    mean = g.mean(0)
    noise = float(g.var(0, ddof=1).sum()) / len(g)
    return math.sqrt(max(float(mean @ mean) - noise, 0.0))


def check_gradient(
    sample: Sample,
    advantages: Any,
    weights: Weights,
    reference_weights: Weights,
    batch_rollouts: int = 64,
    resamples: int = 400,
    seed: int = 0,
) -> GradientCheck:
    """The expected-gradient check of ``advantages`` (B_total, N) reduced with ``weights``,
    against the true gradient and the declared mode's ``reference_weights``."""
    if sample.num_rollouts < 2 * batch_rollouts:
        raise ValueError(f"need at least 2 batches of {batch_rollouts} rollouts")
    truth = true_gradient(sample.spec, sample.layout)
    grads, _ = batch_gradients(sample, advantages, weights, batch_rollouts)
    ref_sums = batch_gradients(sample, advantages, reference_weights, batch_rollouts)[1]
    target = ref_sums.mean(0) * truth  # g*: the mode's exact-advantage gradient

    def figures(g: np.ndarray) -> tuple[float, float]:
        mean = g.mean(0)
        norm = _debiased_norm(g)
        cos = float(mean @ truth) / (norm * float(np.linalg.norm(truth))) if norm else math.nan
        cos = min(max(cos, -1.0), 1.0)  # the debiased norm can put it a little past 1
        return cos, norm / float(np.linalg.norm(target))

    cos, rel = figures(grads)
    rng = np.random.default_rng(seed)
    draws = np.array(
        [figures(grads[rng.integers(0, len(grads), len(grads))]) for _ in range(resamples)]
    )
    low, high = np.nanpercentile(draws, [2.5, 97.5], axis=0)
    return GradientCheck(
        cosine=(cos, float(low[0]), float(high[0])),
        rel_norm=(rel, float(low[1]), float(high[1])),
        mode_cosine=_cos(target, truth),
        batches=len(grads),
    )

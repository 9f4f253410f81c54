"""The estimator lab's studies (``cxsim lab``; settings in ``cxsim/lab/lab.py``): theory
check, by segment, by distance, gap sweeps, throughput; ``run_lab`` runs them all and
writes the page (``cxsim/lab/lab_page.py``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import numpy as np
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from cxsim.estimators import ESTIMATORS
from cxsim.lab import measure
from cxsim.lab.backend import array_module
from cxsim.lab.gradient import GradientCheck, Weights, check_gradient, mode_weights
from cxsim.lab.lab_page import render
from cxsim.lab.process import Critic, ProcessSpec, build_layout, simulate
from cxsim.loss_modes import LOSS_MODES
from cxsim.tracking import say

if TYPE_CHECKING:  # the settings of the entry point, which imports this module to run
    from cxsim.lab.lab import Config

PAGE_ESTIMATORS: tuple[str, ...] = ("local", "cross-segment", "stitched", "group-broadcast")
"""The estimators the page's findings and throughput speak of, in its order (registry names)."""
THEORY_ESTIMATORS: tuple[str, ...] = ("local", "cross-segment", "stitched")
"""Those :func:`cxsim.lab.measure.predicted_bias` predicts (the theory check, by distance)."""


def lab_estimators(cfg: Config) -> tuple[str, ...]:
    """Every estimator the tables show: the page's, the rest of the registry (installed
    plug-ins included), then ``cfg.estimators``; each once."""
    names = tuple(dict.fromkeys((*PAGE_ESTIMATORS, *ESTIMATORS.choices(), *cfg.estimators)))
    shown: dict[str, str] = {}
    for name in names:
        other = shown.setdefault(measure.label(name), name)
        if other != name:
            raise ValueError(
                f"estimator {name!r} would appear on the lab's page as {other!r} does "
                f"({measure.label(name)!r}); rename the plug-in"
            )
    return names


@dataclass(frozen=True)
class Setting:
    """One point of a sweep: a process, a critic and a lambda."""

    spec: ProcessSpec
    critic: Critic = field(default_factory=Critic)
    mode: measure.LambdaMode = "rollout"
    lam: float = 1.0

    @property
    def lam_label(self) -> str:
        return f"{self.lam:g}" if self.mode == "fixed" else f"adaptive ({self.mode})"


class Lab:
    """Runs settings with fresh seeds and keeps the wall time of the estimator calls."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.xp = array_module(cfg.device)
        self.next_seed = cfg.seed
        self.estimators = lab_estimators(cfg)

    def sample(self, setting: Setting):
        self.next_seed += 1
        return simulate(setting.spec, self.cfg.rollouts, setting.critic, self.next_seed, self.xp)

    def evaluate(self, setting: Setting, grouping, estimators: tuple[str, ...] | None = None):
        """{estimator's page label: metrics dict (+ grad_cos)} and the group labels for one
        setting; every estimator of the lab unless ``estimators`` names some."""
        sample = self.sample(setting)
        member, labels = grouping(sample)
        out = {}
        for name in self.estimators if estimators is None else estimators:
            est = measure.run(sample, name, setting.lam, setting.mode, self.cfg.chunk_rollouts)
            out[measure.label(name)] = {
                **measure.metrics(sample, est, member),
                "grad_cos": measure.gradient_cosine(sample, est),
            }
        return out, labels


# ---------------------------------------------------------------- experiments


def theory_check(lab: Lab) -> tuple[list[list[str]], dict]:
    """Measured bias against the prediction of ``measure.predicted_bias``, per segment.

    Returns the table rows and {(case, estimator): (bias exec 0, its se, predicted,
    max |z| raw, max |z| after the prediction)}.
    """
    base = lab.cfg.spec
    cases = [
        ("exact critic, gamma = lam = 1", base, Critic(), 1.0),
        ("exact critic, lam = 0.99", base, Critic(), 0.99),
        ("exact critic, gamma = 0.999", replace(base, gamma=0.999), Critic(), 1.0),
        ("critic bias +0.1, lam = 0.99", base, Critic(bias=0.1), 0.99),
    ]
    rows, raw_out = [], {}
    for case, (title, spec, critic, lam) in enumerate(cases):
        sample = lab.sample(Setting(spec, critic, "fixed", lam))
        member, _ = measure.segment_groups(sample)
        for estimator in THEORY_ESTIMATORS:
            name = measure.label(estimator)
            est = measure.run(sample, estimator, lam, "fixed")
            pred = measure.predicted_bias(sample, estimator, lam, critic.bias)
            raw = measure.metrics(sample, est, member)
            res = measure.metrics(sample, est - pred, member)
            z_raw = raw["bias"] / raw["bias_se"]
            z_res = res["bias"] / res["bias_se"]
            pred0 = _mean_pred(sample, pred, member)[0]
            raw_out[case, name] = (
                raw["bias"][0],
                raw["bias_se"][0],
                pred0,
                np.nanmax(np.abs(z_raw)),
                np.nanmax(np.abs(z_res)),
            )
            rows.append(
                [
                    title,
                    name,
                    f"{raw['bias'][0]:+.4f} ± {raw['bias_se'][0]:.4f}",
                    f"{pred0:+.4f}",
                    f"{raw['slope'][0]:.3f}",
                    f"{np.nanmax(np.abs(z_raw)):.1f}",
                    f"{np.nanmax(np.abs(z_res)):.1f}",
                    f"{np.nanmax(raw['rms_bias']):.4f} / {np.nanmax(res['rms_bias']):.4f}",
                ]
            )
    return rows, raw_out


def _mean_pred(sample, pred, member) -> np.ndarray:
    xp = sample.xp
    sums = measure._host(xp, pred.sum(0) @ xp.asarray(member, dtype=xp.float32))
    return sums / (member.sum(0) * sample.num_rollouts)


def by_segment(lab: Lab, critic: Critic):
    """Slope (± se) and correlation per segment, for each lambda mode and estimator.

    Returns labels, slope rows, correlation rows and {(lambda label, estimator): metrics}.
    """
    modes = [("fixed", 1.0), ("fixed", 0.99), ("rollout", 1.0), ("segment", 1.0)]
    slope_rows, corr_rows, labels, raw = [], [], [], {}
    for mode, lam in modes:
        setting = Setting(lab.cfg.spec, critic, mode, lam)
        res, labels = lab.evaluate(setting, measure.segment_groups)
        for name, m in res.items():
            raw[setting.lam_label, name] = m
            head = [setting.lam_label, name]
            slope_rows.append(
                head + [f"{x:.2f}±{e:.2f}" for x, e in zip(m["slope"], m["slope_se"], strict=True)]
            )
            corr_rows.append(head + [f"{x:.3f}" for x in m["corr"]] + [f"{m['grad_cos']:.3f}"])
    return labels, slope_rows, corr_rows, raw


def by_distance(lab: Lab, path: Path) -> None:
    """Plot: slope, noise and correlation against distance to the end."""
    settings = [
        (
            "adaptive lambda (rollout), critic noise 0.1",
            Setting(lab.cfg.spec, Critic(noise=0.1), "rollout"),
        ),
        ("lambda 0.99, critic noise 0.1", Setting(lab.cfg.spec, Critic(noise=0.1), "fixed", 0.99)),
    ]
    fig, axes = plt.subplots(len(settings), 3, figsize=(13, 3.4 * len(settings)), squeeze=False)
    for row, (title, setting) in enumerate(settings):
        res, labels = lab.evaluate(setting, measure.distance_groups, THEORY_ESTIMATORS)
        x = np.arange(len(labels))
        for col, key in enumerate(("slope", "sd", "corr")):
            ax = axes[row, col]
            for name, m in res.items():
                ax.plot(x, m[key], marker="o", label=name)
            ax.set_xticks(x, labels, rotation=45, fontsize=7)
            ax.set_title(f"{key} — {title}", fontsize=9)
            ax.set_xlabel("distance to end of rollout (trainable tokens)", fontsize=8)
            ax.grid(alpha=0.3)
        axes[row, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def gap_sweeps(lab: Lab) -> dict[str, tuple[list, dict[str, dict[str, list[float]]]]]:
    """{sweep: (values, {estimator: {metric: one value per sweep point}})} over role groups."""
    cfg, base = lab.cfg, lab.cfg.spec
    make = {
        "noise": lambda v: Setting(base, Critic(noise=v)),
        "noise, lambda 0.99": lambda v: Setting(base, Critic(noise=v), "fixed", 0.99),
        "compactions": lambda v: Setting(replace(base, compactions=v), Critic(noise=0.1)),
        "lam": lambda v: Setting(base, Critic(noise=0.1), "fixed", v),
        "exec": lambda v: Setting(replace(base, exec_tokens=(v,)), Critic(noise=0.1)),
        "gamma": lambda v: Setting(replace(base, gamma=v), Critic(noise=0.1)),
    }
    values = {**cfg.sweeps, "noise, lambda 0.99": cfg.sweeps["noise"]}
    out = {}
    for sweep, build in make.items():
        table: dict[str, dict[str, list[float]]] = {}
        for v in values[sweep]:
            res, _ = lab.evaluate(build(v), measure.role_groups)
            for name, m in res.items():
                row = table.setdefault(name, {})
                for key, val in (
                    ("corr", m["corr"][0]),
                    ("grad_cos", m["grad_cos"]),
                    ("slope_exec0", m["slope"][1]),
                    ("slope_sum", m["slope"][2]),
                    ("mse", m["mse"][0]),
                ):
                    row.setdefault(key, []).append(float(val))
        out[sweep] = (values[sweep], table)
    return out


def plot_gaps(gaps, path: Path) -> None:
    names = list(gaps)
    fig, axes = plt.subplots(2, len(names), figsize=(3.4 * len(names), 6.2), squeeze=False)
    for col, sweep in enumerate(names):
        xs, table = gaps[sweep]
        for row, key in enumerate(("grad_cos", "slope_sum")):
            ax = axes[row, col]
            for name, m in table.items():
                if key == "slope_sum" and name == "group":
                    continue
                ax.plot(range(len(xs)), m[key], marker="o", label=name)
            ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs], fontsize=7)
            ax.set_xlabel(sweep, fontsize=8)
            ax.set_title(key, fontsize=9)
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def expected_gradients(lab: Lab) -> dict[tuple[str, str], GradientCheck]:
    """{(estimator's page label, loss mode): its expected-gradient check} on the base process,
    critic noise 0.1, adaptive lambda (rollout): every estimator of the lab under every loss
    mode of the registry (``cxsim.lab.gradient``)."""
    setting = Setting(lab.cfg.spec, Critic(noise=0.1))
    sample = lab.sample(setting)
    weights = {mode: _cached(mode_weights(mode)) for mode in LOSS_MODES}
    out = {}
    for name in lab.estimators:
        est = measure.run(sample, name, setting.lam, setting.mode, lab.cfg.chunk_rollouts)
        for mode, w in weights.items():
            out[measure.label(name), mode] = check_gradient(
                sample, est, w, w, lab.cfg.gradient_batch, seed=lab.cfg.seed
            )
    return out


def _cached(weights: Weights) -> Weights:
    """The same weights, each batch's computed once (every estimator reads them)."""
    seen: dict[tuple[int, int], np.ndarray] = {}

    def cached(sample, rows: slice) -> np.ndarray:
        key = (rows.start, rows.stop)
        if key not in seen:
            seen[key] = weights(sample, rows)
        return seen[key]

    return cached


def throughput(cfg: Config, xp) -> dict[str, float]:
    """Estimator tokens per second, simulation included (best of 3 repeats).

    Streams ``bench_rollouts`` rollouts in chunks of ``chunk_rollouts``: simulate a
    chunk, hand it to torch, run the page's four estimators on it (``PAGE_ESTIMATORS``).
    """
    spec = cfg.spec
    layout = build_layout(spec)
    chunks = max(cfg.bench_rollouts // cfg.chunk_rollouts, 1)
    best_total, best_est = np.inf, np.inf
    for rep in range(3):
        est_time = 0.0
        start = time.perf_counter()
        for c in range(chunks):
            sample = simulate(
                spec,
                cfg.chunk_rollouts,
                Critic(noise=0.1),
                10_000 + 1000 * rep + c,
                xp,
                layout=layout,
            )
            x = measure.inputs(sample)
            mid = time.perf_counter()
            for name in PAGE_ESTIMATORS:
                measure.estimate(x, name, spec.gamma, 0.99)
            est_time += time.perf_counter() - mid
        best_total = min(best_total, time.perf_counter() - start)
        best_est = min(best_est, est_time)
    trainable = sample.num_tokens * chunks
    tokens = trainable * len(PAGE_ESTIMATORS)
    return {
        "tokens": float(tokens),
        "trainable": float(trainable),
        "positions": float(sample.values.size * chunks),
        "seconds": best_total,
        "rate": tokens / best_total,
        "rate_estimators": tokens / best_est,
    }


# ---------------------------------------------------------------- the whole lab


def run_lab(cfg: Config) -> None:
    """Every study, then estimators.md and the PNGs in ``cfg.output_dir``."""
    torch.set_num_threads(cfg.threads)
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    lab = Lab(cfg)

    say("lab: theory check")
    theory = theory_check(lab)
    say("lab: by segment")
    seg_exact = by_segment(lab, Critic())
    seg_noisy = by_segment(lab, Critic(noise=0.1))
    say("lab: by distance")
    by_distance(lab, cfg.output_dir / "estimators_distance.png")
    say("lab: gap sweeps")
    gaps = gap_sweeps(lab)
    plot_gaps(gaps, cfg.output_dir / "estimators_gap.png")
    say("lab: expected gradients")
    gradients = expected_gradients(lab)
    say("lab: throughput")
    bench = throughput(cfg, lab.xp)
    say(
        f"lab: throughput {bench['rate'] / 1e6:.1f}M estimator tokens/s end to end "
        f"({bench['rate_estimators'] / 1e6:.1f}M/s in the estimators alone)"
    )
    runtime = time.perf_counter() - start
    page = render(
        cfg, theory, seg_exact, seg_noisy, gaps, bench, runtime, lab.xp.__name__, gradients
    )
    (cfg.output_dir / "estimators.md").write_text(page)
    say(f"lab: wrote {cfg.output_dir / 'estimators.md'} in {runtime:.0f} s")

"""Estimator lab: exact ground truth, data exchange, and the estimators' bias against theory."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from cxsim.lab import measure
from cxsim.lab.backend import array_module, cupy_available, from_torch, to_torch
from cxsim.lab.process import Critic, ProcessSpec, build_layout, event_values, simulate

SMALL = ProcessSpec(
    compactions=2, exec_tokens=(24,), summary_tokens=4, turn_tokens=8, obs_tokens=2, prompt_tokens=2
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # on a busy 2-core machine a second intra-op thread makes small scans ~10x slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def z_scores(m: dict[str, np.ndarray]) -> np.ndarray:
    return m["bias"] / m["bias_se"]


# ---------------------------------------------------------------- the process


def test_layout_counts_and_distances():
    lay = build_layout(SMALL)
    assert lay.num_rows == 5 and lay.num_tokens == 3 * 24 + 2 * 4
    assert lay.trainable.sum(1).tolist() == [24, 4, 24, 4, 24]
    assert not lay.trainable[:, 0].any()  # position 0 is a prompt
    assert lay.after[0] == 4 + 24 + 4 + 24 and lay.after[-1] == 0
    assert lay.dist[0] == lay.num_tokens - 1 and lay.to_segment_end[23] == 0
    # events: 2 decisive per execution segment, one keep per summary (its last token)
    assert lay.event_is_keep.tolist() == [False, False, True, False, False, True, False, False]
    assert lay.event_token[2] == 24 + 3


def test_values_match_enumeration():
    """v before each event = E[P(success) | actions so far], by brute force over all outcomes."""
    spec = ProcessSpec(compactions=2, exec_tokens=(4,), summary_tokens=2, drop=0.4, p_good=0.3)
    lay = build_layout(spec)
    e = lay.num_events
    outcomes = np.array(list(itertools.product([False, True], repeat=e)))
    v, _ = event_values(lay, spec, outcomes, np)
    prob = np.prod(np.where(outcomes, lay.event_prob, 1 - lay.event_prob), axis=1)
    success = v[:, -1]
    for j in range(e + 1):
        for prefix in itertools.product([False, True], repeat=j):
            rows = (outcomes[:, :j] == prefix).all(axis=1)
            expected = (prob[rows] * success[rows]).sum() / prob[rows].sum()
            np.testing.assert_allclose(v[rows, j], expected, rtol=1e-5)


def test_reward_rate_matches_initial_value():
    sample = simulate(SMALL, 20000, Critic(), seed=3)
    v0 = SMALL.base + build_layout(SMALL).future[0]
    rewards = sample.rewards[:: build_layout(SMALL).num_rows]
    assert abs(rewards.mean() - v0) < 4 * np.sqrt(v0 * (1 - v0) / rewards.size)


def test_true_advantage_is_zero_off_events_and_mean_zero_on_them():
    sample = simulate(SMALL, 20000, Critic(), seed=4)
    lay = sample.layout
    off = np.setdiff1d(np.arange(lay.num_tokens), lay.event_token)
    assert np.all(sample.true_adv[:, off] == 0)
    on = sample.true_adv[:, lay.event_token]
    assert np.all(np.abs(on.mean(0)) < 4 * on.std(0) / np.sqrt(on.shape[0]) + 1e-7)


# ---------------------------------------------------------------- exchange with cxsim.advantages


def _loop_reference(sample, lam: float) -> dict[str, np.ndarray]:
    """Per-token GAE by a plain loop over each rollout's trainable tokens (time order)."""
    gamma, lay = sample.spec.gamma, sample.layout
    v = sample.per_token(sample.values).astype(np.float64)  # (B, N) values at trainable tokens
    r = sample.rewards[:: lay.num_rows].astype(np.float64)
    seg, n = lay.token_row, lay.num_tokens
    local, stitched = np.zeros_like(v), np.zeros_like(v)
    run_loc, run_st = np.zeros(len(r)), np.zeros(len(r))
    for t in range(n - 1, -1, -1):
        seg_end = t == n - 1 or seg[t + 1] != seg[t]
        d_loc = (r - v[:, t]) if seg_end else (gamma * v[:, t + 1] - v[:, t])
        run_loc = d_loc + (0.0 if seg_end else gamma * lam * run_loc)
        d_st = (r - v[:, t]) if t == n - 1 else (gamma * v[:, t + 1] - v[:, t])
        run_st = d_st + gamma * lam * run_st
        local[:, t], stitched[:, t] = run_loc, run_st
    cross = local * (gamma * lam) ** lay.after
    return {"local": local, "cross-segment": cross, "stitched": stitched}


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.9), (0.97, 0.95)])
def test_estimators_match_loop_reference(gamma, lam):
    spec = ProcessSpec(
        compactions=2, exec_tokens=(12, 20, 9), summary_tokens=3, turn_tokens=5, gamma=gamma
    )
    sample = simulate(spec, 64, Critic(bias=0.05, noise=0.3), seed=5)
    ref = _loop_reference(sample, lam)
    for name, expected in ref.items():
        got = measure.run(sample, name, lam)
        np.testing.assert_allclose(got, expected, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("gamma,lam", [(1.0, "rollout"), (0.999, 0.99)])
def test_registry_estimators_are_the_direct_calls_bit_for_bit(gamma, lam):
    """The lab runs the trainer's registry (cxsim/estimators.py); on its samples (terminal
    rewards only, step rewards 0) each of the page's estimators returns exactly what the
    direct call of cxsim.advantages returns, so the page's numbers do not depend on the route."""
    from cxsim import advantages

    spec = ProcessSpec(**{**SMALL.__dict__, "gamma": gamma})
    x = measure.inputs(simulate(spec, 96, Critic(bias=0.05, noise=0.2), seed=6))
    if isinstance(lam, str):
        lam = advantages.adaptive_lambda(x.trainable, x.rollout_id, lam)
    v, m, r, rid, seg = x.values, x.trainable, x.rewards, x.rollout_id, x.segment_index
    direct = {
        "local": advantages.segment_gae(v, m, r, gamma, lam),
        "cross-segment": advantages.cross_segment_gae(v, m, r, rid, seg, gamma, lam),
        "stitched": advantages.stitched_gae(v, m, r, rid, seg, gamma, lam),
        "group-broadcast": advantages.group_broadcast(r, m, rid, x.group_id),
    }
    for name, expected in direct.items():
        got = measure.estimate(x, name, gamma, lam)
        assert torch.equal(got, expected), (name, float((got - expected).abs().max()))
    assert measure.label("cross-segment") == "cross" and measure.label("stitched") == "stitched"


def test_torch_views_share_memory():
    x = np.arange(6, dtype=np.float32)
    t = to_torch(x)
    t[0] = 7.0
    assert x[0] == 7.0 and from_torch(t, np) is not None
    assert array_module("cpu") is np


# ---------------------------------------------------------------- bias against theory


def test_exact_critic_gamma_lambda_one_stitched_unbiased_local_identical():
    """gamma = lam = 1, exact critic: stitched unbiased; local = cross = stitched = R - V."""
    sample = simulate(SMALL, 6000, Critic(), seed=11)
    member, _ = measure.segment_groups(sample)
    st = measure.run(sample, "stitched", 1.0)
    m = measure.metrics(sample, st, member)
    assert np.all(np.abs(z_scores(m)) < 3), z_scores(m)
    assert np.all(np.abs(m["slope"] - 1) < 3 * m["slope_se"]), m["slope"]
    for name in ("local", "cross-segment"):
        np.testing.assert_allclose(measure.run(sample, name, 1.0), st, atol=1e-5)
        assert np.all(measure.predicted_bias(sample, name, 1.0, 0.0) == 0)
    v = sample.per_token(sample.values)
    np.testing.assert_allclose(st, sample.rewards[:: sample.layout.num_rows, None] - v, atol=1e-5)


def test_local_biased_on_early_segments_when_gamma_below_one():
    """The copied reward skips gamma^{N>s}: bias q^{e-t} (1 - gamma^{N>s}) u_t > 0, as predicted."""
    spec = ProcessSpec(**{**SMALL.__dict__, "gamma": 0.98})
    sample = simulate(spec, 6000, Critic(), seed=12)
    member, _ = measure.segment_groups(sample)
    local = measure.run(sample, "local", 1.0)
    raw = z_scores(measure.metrics(sample, local, member))
    assert np.all(raw[:-1] > 5), raw  # every segment before the last is biased upwards
    assert abs(raw[-1]) < 3  # the last segment is the stitched one
    resid = measure.metrics(
        sample, local - measure.predicted_bias(sample, "local", 1.0, 0.0), member
    )
    assert np.all(np.abs(z_scores(resid)) < 3), z_scores(resid)
    st = measure.metrics(sample, measure.run(sample, "stitched", 1.0), member)
    assert np.all(np.abs(z_scores(st)) < 3), z_scores(st)


def test_cross_segment_scales_true_advantage_by_q_pow_tokens_after():
    """gamma = 1, lam < 1, exact critic: E[cross] = lam^{N>s} A; local and stitched keep scale 1."""
    lam = 0.95
    sample = simulate(SMALL, 4000, Critic(), seed=13)
    member, _ = measure.segment_groups(sample)
    after = sample.layout.after
    predicted = lam ** np.array([after[member[:, g]][0] for g in range(member.shape[1])])
    assert predicted[0] < 0.1
    for name, expect in (("cross-segment", predicted), ("local", 1.0), ("stitched", 1.0)):
        m = measure.metrics(sample, measure.run(sample, name, lam), member)
        tol = 3 * m["slope_se"] + 1e-3
        assert np.all(np.abs(m["slope"] - expect) < tol), (name, m["slope"], expect)


def test_critic_offset_bias_matches_theory():
    b, lam = 0.2, 0.95
    sample = simulate(SMALL, 3000, Critic(bias=b, noise=0.05), seed=14)
    member, _ = measure.segment_groups(sample)
    for name in ("local", "cross-segment", "stitched"):
        est = measure.run(sample, name, lam)
        pred = measure.predicted_bias(sample, name, lam, b)
        raw = measure.metrics(sample, est, member)
        resid = measure.metrics(sample, est - pred, member)
        assert np.all(np.abs(z_scores(resid)) < 3), (name, z_scores(resid))
        assert np.max(np.abs(z_scores(raw))) > 5, name  # the offset is visible before correction


# ---------------------------------------------------------------- GPU backend


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
def test_cupy_path_matches_numpy_statistics():
    import cupy

    xp = array_module("cuda")
    sample = simulate(SMALL, 4000, Critic(noise=0.1), seed=15, xp=xp)
    assert isinstance(sample.values, cupy.ndarray)
    x = measure.inputs(sample)
    assert x.values.is_cuda and x.values.data_ptr() == sample.values.data.ptr  # zero copy
    member, _ = measure.segment_groups(sample)
    est = measure.run(sample, "stitched", 0.95)
    m = measure.metrics(sample, est, member)
    assert np.all(np.abs(z_scores(m)) < 3)
    cpu = simulate(SMALL, 4000, Critic(noise=0.1), seed=15)
    m_cpu = measure.metrics(cpu, measure.run(cpu, "stitched", 0.95), member)
    assert np.all(np.abs(m["slope"] - m_cpu["slope"]) < 4 * (m["slope_se"] + m_cpu["slope_se"]))


# ---------------------------------------------------------------- entry point


def test_lab_smoke_writes_page_and_plots(tmp_path):
    from cxsim.lab import lab

    lab.main(["--preset", "smoke", "--out", str(tmp_path)])
    page = (tmp_path / "estimators.md").read_text()
    for section in (
        "## Findings",
        "## Theory",
        "## By segment",
        "## Expected policy gradient",
        "## Throughput",
        "estimator tokens/s",
    ):
        assert section in page
    # the expected-gradient column: every estimator under every loss mode
    gradient = page[page.index("## Expected policy gradient") : page.index("## Throughput")]
    from cxsim.loss_modes import LOSS_MODES

    assert all(f"| {mode} " in gradient or f"| {mode} |" in gradient for mode in LOSS_MODES)
    assert "| chain-split | " in gradient and "| (exact advantages) | 1.000 |" in gradient
    assert "| exact critic, gamma = lam = 1 | stitched |" in page
    # every estimator of the registry is measured: the one the page's findings do not name too
    assert "| adaptive (rollout) | chain-split |" in page
    for png in ("estimators_distance.png", "estimators_gap.png"):
        assert (tmp_path / png).stat().st_size > 10_000


def test_lab_settings_stay_light_and_match_the_backend():
    from typing import get_args

    from cxsim.lab import backend, lab

    assert get_args(lab.Device) == get_args(backend.Device)

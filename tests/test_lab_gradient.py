"""The expected-gradient check (cxsim/lab/gradient.py): a hand-derived gradient on a 2-step
process, an unbiased estimator with the right reduction on the true gradient, and the
diluting token-mean (the masked sum over every token) caught by its relative norm."""

from __future__ import annotations

import numpy as np
import pytest

from cxsim.conformance.variants import token_mean_over_every_token
from cxsim.lab import measure
from cxsim.lab.gradient import (
    batch_gradients,
    check_gradient,
    mode_weights,
    reduction_weights,
    true_gradient,
)
from cxsim.lab.process import Critic, ProcessSpec, build_layout, simulate

TWO_STEPS = ProcessSpec(
    compactions=0, exec_tokens=(2,), turn_tokens=2, prompt_tokens=1, decisive_per_segment=2,
    base=0.1, p_good=0.5,
)  # fmt: skip
"""One window: a prompt token, then two decisive tokens; J = 0.1 + 0.45 p_1 + 0.45 p_2."""


def test_true_gradient_of_two_steps_by_hand():
    """dJ/dtheta_d = w p (1 - p) = 0.45 * 0.25 for both decisions."""
    layout = build_layout(TWO_STEPS)
    assert layout.event_token.tolist() == [0, 1]
    np.testing.assert_allclose(true_gradient(TWO_STEPS, layout), [0.1125, 0.1125], rtol=1e-12)


def test_true_gradient_with_a_summary_by_hand():
    """K = 1, one decision per window: J = 0.1 + 0.45 p_1 + 0.45 q p_2 (q the keep probability
    0.7): dJ/dtheta_1 = 0.45 * 0.25, dJ/dtheta_keep = 0.45 p_2 * q (1 - q) = 0.04725,
    dJ/dtheta_2 = 0.45 * 0.7 * 0.25."""
    spec = ProcessSpec(compactions=1, exec_tokens=(2,), summary_tokens=1, turn_tokens=2,
                       prompt_tokens=1, decisive_per_segment=1, drop=0.3)  # fmt: skip
    got = true_gradient(spec, build_layout(spec))
    np.testing.assert_allclose(got, [0.1125, 0.45 * 0.5 * 0.21, 0.45 * 0.7 * 0.25], rtol=1e-12)


@pytest.fixture(scope="module")
def two_step_sample():
    return simulate(TWO_STEPS, 8192, Critic(), seed=3)


def test_expected_gradient_of_two_steps_is_the_hand_derived_one(two_step_sample):
    """Stitched GAE (gamma = lambda = 1, exact critic: R - V) under token-mean, weights
    1/(2B): E[g] = grad J / 2 = (0.05625, 0.05625), within 4 standard errors."""
    est = measure.run(two_step_sample, "stitched", 1.0, "fixed")
    grads, sums = batch_gradients(two_step_sample, est, mode_weights("token-mean"), 64)
    np.testing.assert_allclose(sums, 0.5)  # 64 rollouts x 1/128 at each event token
    mean, se = grads.mean(0), grads.std(0, ddof=1) / np.sqrt(len(grads))
    assert (np.abs(mean - 0.05625) < 4 * se).all(), (mean, se)
    check = check_gradient(two_step_sample, est, mode_weights("token-mean"),
                           mode_weights("token-mean"))  # fmt: skip
    assert check.cosine[0] > 0.99 and check.cosine[2] >= 0.999
    assert check.cosine[1] <= check.cosine[0] <= check.cosine[2] == 1.0  # a cosine's range
    assert check.rel_norm[1] < 1.0 < check.rel_norm[2]
    assert check.mode_cosine == pytest.approx(1.0)


def test_the_diluting_token_mean_is_caught(two_step_sample):
    """The masked sum over every token (3 per row: 1 prompt + 2 trainable) instead of the
    trainable ones: the same direction, 2/3 of the length (16/6 against 16/4); the right
    reduction's interval covers 1, the diluting one's excludes it and covers 2/3."""
    est = measure.run(two_step_sample, "stitched", 1.0, "fixed")
    diluted = check_gradient(two_step_sample, est,
                             reduction_weights(token_mean_over_every_token, "token-mean"),
                             mode_weights("token-mean"))  # fmt: skip
    assert diluted.cosine[0] > 0.99
    assert diluted.rel_norm[2] < 0.9
    assert diluted.rel_norm[1] < 2 / 3 < diluted.rel_norm[2]


def test_the_cross_segment_shrinkage_shows_in_the_cosine():
    """With lambda 0.9 and a compaction, cross-segment GAE scales early decisions by
    (gamma lambda)^N_after: its expected gradient turns away from the truth, stitched's not."""
    spec = ProcessSpec(compactions=1, exec_tokens=(8,), summary_tokens=2, turn_tokens=8,
                       prompt_tokens=1, decisive_per_segment=1)  # fmt: skip
    sample = simulate(spec, 4096, Critic(), seed=5)
    token = mode_weights("token-mean")
    cross = check_gradient(sample, measure.run(sample, "cross-segment", 0.9, "fixed"), token, token)
    stitched = check_gradient(sample, measure.run(sample, "stitched", 0.9, "fixed"), token, token)
    assert cross.cosine[2] < stitched.cosine[1]
    assert stitched.rel_norm[1] < 1.0 < stitched.rel_norm[2]


def test_conform_gradient_command(capsys):
    """``cxsim conform ESTIMATOR --gradient``: exit 0 for cxsim's own pair, 1 for the diluting
    reduction (its length named), 2 without a mode."""
    from cxsim import cli

    base = ["conform", "cross-segment", "--gradient", "--mode", "token-mean"]
    with pytest.raises(SystemExit) as stop:
        cli.main(base)
    assert stop.value.code == 0
    assert "passes: cosine and relative norm within 0.02" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        cli.main([*base, "--reduction", "cxsim.conformance.variants:token_mean_over_every_token"])
    assert stop.value.code == 1
    out = capsys.readouterr().out
    assert "the direction agrees and the length is" in out and "fails" in out
    with pytest.raises(SystemExit) as stop:
        cli.main(["conform", "cross-segment", "--gradient"])
    assert stop.value.code == 2

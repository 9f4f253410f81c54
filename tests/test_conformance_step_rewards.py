"""Step rewards in the conformance cases: drawn at the last token of responses (where the
trainer puts them), handed over in the estimator layout, and each wrong form named.

The outside implementations below are plain Python loops over an ``EstimatorInputs``, written
the way a GAE outside cxsim usually is; each has one slip (or none) and is checked as
``cxsim conform`` checks a function in the ``estimator`` layout.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cxsim.conformance import Checker
from cxsim.conformance import conform_command as conform_cli
from cxsim.conformance.batches import Segment, build_batch
from cxsim.conformance.check import cases_for
from cxsim.conformance.pinned_batches import pinned_cases
from cxsim.conformance.quantities import GAE_QUANTITIES, QUANTITIES
from cxsim.conformance.quantities import reference_of as reference
from cxsim.conformance.random_batches import random_cases
from cxsim.conformance.term_models import LOCAL, gae_model
from cxsim.estimators import ESTIMATORS, EstimatorInputs

HERE = __name__


def _gae_loop(x: EstimatorInputs, cross: bool = False, slip: str | None = None) -> torch.Tensor:
    """Local GAE row by row over the masked tokens (``cross``: times (gamma lam)^N_after),
    step rewards added to delta at their own tokens; ``slip`` is the one thing done wrong."""
    lams = torch.as_tensor(x.lam, dtype=torch.float64).expand(len(x.values)).tolist()
    if slip == "one-lambda":  # the first row's lambda for every row
        lams = [lams[0]] * len(lams)
    values, mask, steps = x.values.tolist(), x.mask.tolist(), x.step_rewards.tolist()
    rewards, rollout = x.rewards.tolist(), x.rollout_id.tolist()
    if slip == "every-window":  # the rollout's step rewards summed into each row's reward
        totals: dict[int, float] = {}
        for r, rid in enumerate(rollout):
            totals[rid] = totals.get(rid, 0.0) + sum(steps[r])
        rewards = [reward + totals[rid] for reward, rid in zip(rewards, rollout, strict=True)]
    trace = 1.0 if slip == "no-gamma-in-trace" else x.gamma
    out = [[0.0] * len(row) for row in values]
    for r, row in enumerate(values):
        tokens = [t for t, on in enumerate(mask[r]) if on]
        row_steps = _steps_as_given(steps[r], mask[r], tokens, x.gamma, slip)
        advantage, following = 0.0, None
        for t in reversed(tokens):
            reward = rewards[r] if following is None else x.gamma * following
            delta = reward + row_steps[t] - row[t]
            advantage = delta + trace * lams[r] * advantage
            out[r][t] = advantage
            following = row[t]
        if cross:
            later = sum(
                sum(mask[j])
                for j in range(len(values))
                if rollout[j] == rollout[r] and x.segment_index[j] > x.segment_index[r]
            )
            out[r] = [a * (x.gamma * lams[r]) ** later for a in out[r]]
    return torch.tensor(out, dtype=torch.float64)


def _steps_as_given(
    steps: list[float], mask: list[bool], tokens: list[int], gamma: float, slip: str | None
) -> list[float]:
    """The row's step rewards as the loop reads them: at their tokens (right) or slipped."""
    if slip in ("dropped", "every-window"):
        return [0.0] * len(steps)
    if slip == "first-token":  # each moved back to the first token of its response
        moved = [0.0] * len(steps)
        for t, s in enumerate(steps):
            start = t
            while start > 0 and mask[start - 1]:
                start -= 1
            moved[start] += s
        return moved
    if slip == "discounted-twice":  # rewards-to-go, which the recursion discounts again
        to_go, carried = list(steps), 0.0
        for t in reversed(tokens):
            carried = steps[t] + gamma * carried
            to_go[t] = carried
        return to_go
    return steps


def local_gae(inputs: EstimatorInputs) -> torch.Tensor:
    return _gae_loop(inputs)


def local_gae_dropping_step_rewards(inputs: EstimatorInputs) -> torch.Tensor:
    return _gae_loop(inputs, slip="dropped")


def cross_segment_gae(inputs: EstimatorInputs) -> torch.Tensor:
    return _gae_loop(inputs, cross=True)


# --------------------------------------------------------------------------- the cases


def _drawn_with_step_rewards(strategy: st.SearchStrategy) -> list[bool]:
    """Whether each of 15 drawn batches has a step reward (each checked where it sits)."""
    drawn: list[bool] = []

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(batch):
        placed = batch.steps != 0
        assert not (placed & ~batch.trainable).any()
        next_trainable = torch.zeros_like(batch.trainable)
        next_trainable[:, :-1] = batch.trainable[:, 1:]
        assert not (placed & next_trainable).any()  # the last token of its run
        drawn.append(bool(placed.any()))

    check()
    return drawn


def test_the_cases_draw_step_rewards_at_the_last_token_of_responses():
    """Every random family draws non-zero step rewards, each on the last trainable token of a
    response (a trainable run), never on an observation, a rejected attempt or padding."""
    for case in random_cases():
        assert any(_drawn_with_step_rewards(case.strategy)), case.name
    (four,) = [c.example for c in pinned_cases() if c.name == "pinned/4+4"]
    assert four.steps[0].tolist() == [0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.one_of([c.strategy for c in random_cases() if not c.name.startswith("long")]),
    st.sampled_from(GAE_QUANTITIES),
)
def test_gae_model_with_step_rewards_equals_cxsim(batch, quantity):
    torch.testing.assert_close(
        QUANTITIES[quantity].model(batch, None, {}),
        reference(batch, quantity),
        rtol=1e-12,
        atol=1e-12,
    )


def test_the_pinned_step_reward_has_the_hand_computed_numbers():
    """pinned/4+4 (T T o o T T o o, lambda 5/6, gamma 1, zero values, R 1) with a step reward
    0.5 on its second token: that token gets 0.5 + (5/6)^2 = 1.194, 0.694 without it."""
    (batch,) = [c.example for c in pinned_cases() if c.name == "pinned/4+4"]
    q = 5 / 6
    want = [0.5 * q + q**3, 0.5 + q**2, 0, 0, q, 1.0, 0, 0]
    for quantity in GAE_QUANTITIES:
        assert reference(batch, quantity)[0].tolist() == pytest.approx(want, abs=1e-12)
    assert gae_model(batch, LOCAL, step_at="none")[0, 1] == pytest.approx(q**2)
    assert round(0.5 + q**2, 3) == 1.194 and round(q**2, 3) == 0.694


def test_other_layouts_are_given_the_batches_without_step_rewards():
    """segment-rows, rollout-rows and samples take terminal rewards only: their references
    are computed without the step rewards, and group broadcast and chain split (the credit
    rules of R alone) take none in any layout."""
    (batch,) = [c.example for c in pinned_cases() if c.name == "pinned/4+4"]
    assert Checker(local_gae, "local-gae", "estimator").as_given(batch) is batch
    for quantity, layout in (("local-gae", "segment-rows"), ("chain-split", "estimator")):
        given_batch = Checker(local_gae, quantity, layout).as_given(batch)
        assert not given_batch.steps.any()


# --------------------------------------------------------------------------- cxsim conform


def test_a_local_gae_that_drops_step_rewards_fails_cxsim_conform(capsys):
    """The issue's example: an outside local GAE that ignores ``step_rewards`` used to pass
    every case; now ``cxsim conform`` exits 1 and names the step rewards."""
    argv = [f"{HERE}:local_gae_dropping_step_rewards", "--quantity", "local-gae", "--layout",
            "estimator", "--examples", "10", "--shrink-seconds", "1"]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        conform_cli.main(argv)
    assert info.value.code == 1
    out = capsys.readouterr().out
    assert "FAIL pinned/4+4" in out
    assert "differing term: the step rewards: the step rewards dropped" in out
    assert "      steps    " in out  # the example prints where the step rewards sit
    failing = [line.split()[1] for line in out.splitlines() if line.startswith("  FAIL ")]
    randoms = [c.name for c in cases_for("local-gae", trees=True) if not c.pinned]
    assert set(randoms) <= set(failing), out  # every random case draws a step reward
    named = [line for line in out.splitlines() if line.startswith("  differing term")]
    assert len(named) == len(failing)
    assert all("the step rewards dropped" in line for line in named), named


@pytest.mark.parametrize(
    ("function", "quantity"),
    [("local_gae", "local-gae"), ("cross_segment_gae", "cross-segment-gae")],
)
def test_outside_loops_that_add_step_rewards_pass(function, quantity, capsys):
    conform_cli.main([f"{HERE}:{function}", "--quantity", quantity, "--layout", "estimator",
                      "--examples", "5", "--no-trees"])  # fmt: skip
    out = capsys.readouterr().out
    checked = len(cases_for(quantity))
    assert f"all {checked} cases run agree with the reference" in out


def test_cxsims_estimators_pass_with_step_rewards():
    for name, quantity in (("local", "local-gae"), ("cross-segment", "cross-segment-gae"),
                           ("stitched", "stitched-gae")):  # fmt: skip
        checker = Checker(lambda inputs, n=name: ESTIMATORS[n].advantages(inputs), quantity,
                          "estimator")  # fmt: skip
        results = checker.run(examples=5, seed=4, only=("segments/", "observations/", "pinned/"))
        assert all(r.passed for r in results), (
            name,
            [r.case.name for r in results if not r.passed],
        )
        assert any(r.case.name == "pinned/4+4" for r in results)


# --------------------------------------------------------------------------- each wrong form


# (slip, quantity, cases, term, words of the form)
SLIPS = [
    ("dropped", "local-gae", ("pinned/4+4", "observations/fixed"), "the step rewards",
     "the step rewards dropped"),
    ("first-token", "local-gae", ("pinned/4+4", "segments/fixed"), "the step rewards",
     "put at the first token of the response"),
    ("discounted-twice", "local-gae", ("pinned/4+4", "segments/fixed"), "the step rewards",
     "discounted twice"),
    ("every-window", "cross-segment-gae", ("pinned/4+4", "segments/fixed"), "the step rewards",
     "copied to every window"),
    ("one-lambda", "local-gae", ("segments/adaptive-segment",), "the lambda used",
     "one lambda for every row: the first row's"),
    ("no-gamma-in-trace", "local-gae", ("segments/fixed", "observations/fixed"), "the trace",
     "gamma left out of the trace"),
]  # fmt: skip


@pytest.mark.parametrize(("slip", "quantity", "cases", "term", "words"), SLIPS)
def test_each_slip_is_named(slip, quantity, cases, term, words):
    def outside(inputs: EstimatorInputs) -> torch.Tensor:
        return _gae_loop(inputs, cross=quantity == "cross-segment-gae", slip=slip)

    # shrinking ends when nothing smaller fails (a few seconds); the time limit is only a
    # guard, set wide so a loaded machine does not stop it early (it did at 3 s: 4 rows left)
    checker = Checker(outside, quantity, "estimator", shrink_seconds=60)
    results = checker.run(examples=25, seed=0, only=cases)
    assert sorted(r.case.name for r in results) == sorted(cases)
    for r in results:
        assert not r.passed, (slip, r.case.name)
        assert r.failure.term == term, (slip, r.case.name, r.failure.form)
        assert words in r.failure.form, (slip, r.case.name, r.failure.form)
        if not r.case.pinned:  # shrunk to a few short rows
            assert not r.shrink_stopped, (slip, r.case.name)
            assert r.failure.batch.num_rows <= 3, (slip, r.case.name)


def test_the_pinned_step_reward_numbers_of_each_form():
    """The numbers docs/conformance.md quotes for pinned/4+4's second token (0-based col 1)
    and first token (col 0)."""
    (batch,) = [c.example for c in pinned_cases() if c.name == "pinned/4+4"]
    q = 5 / 6
    got = {at: gae_model(batch, LOCAL, step_at=at)[0] for at in
           ("last", "none", "first", "to-go", "every-window")}  # fmt: skip
    assert math.isclose(got["last"][1], 0.5 + q**2)
    assert math.isclose(got["none"][1], q**2)
    assert math.isclose(got["first"][0], 0.5 + q**3)
    assert math.isclose(got["to-go"][0], 0.5 + q * (0.5 + q**2))
    assert math.isclose(got["every-window"][5], 1.5)


def test_one_lambda_and_gamma_slips_are_no_longer_unidentified():
    """Rollouts of one segment of 3 and of 2 tokens, adaptive lambda over the segment, gamma
    0.9: the first row's lambda for both rows, and gamma left out of the trace, each named."""
    batch = build_batch([[Segment((3,))], [Segment((2,))]], gamma=0.9, lam=None, alpha=1.5)
    for slip, term in (("one-lambda", "the lambda used"), ("no-gamma-in-trace", "the trace")):
        checker = Checker(lambda inputs, s=slip: _gae_loop(inputs, slip=s), "local-gae",
                          "estimator")  # fmt: skip
        _, failure = checker.compare(batch)
        assert failure is not None, slip
        assert checker.explain(failure).term == term, slip

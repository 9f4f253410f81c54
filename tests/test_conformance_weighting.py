"""Weighting per logical rollout: the float64 references by hand, the loss modes cxsim trains
with against them, cxsim's adapters passing ``cxsim conform``, and a deliberately wrong
outside-style implementation of each rule failing with its term named."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cxsim import cli
from cxsim.conformance import conform
from cxsim.conformance.pinned_batches import pinned_cases
from cxsim.conformance.random_batches import random_cases
from cxsim.conformance.rules import outcome_broadcast
from cxsim.conformance.weighting import (
    WEIGHTING_RULES,
    group_normalised,
    one_reward_per_rollout,
    partition_preserving,
    session_equal,
    thread_mean,
    weighted_loss,
)
from cxsim.conformance.weighting_models import row_weights_model
from cxsim.loss_modes import LOSS_MODES
from cxsim.loss_weighting import ROW_WEIGHT_RULES, rollout_row_counts, row_weights
from cxsim.losses import aggregate

SESSIONS = {c.name: c.example for c in pinned_cases()}["pinned/sessions"]
"""Session A: one row of 2 tokens, loss (1, 3); session B: rows of 1, 3 (+2 observation) and 2
tokens, loss (7), (1, 1, 1), (0, 4); micro-batches [A, B0] and [B1, B2]."""
_some_batch = st.one_of(
    [c.strategy for c in random_cases(("none",)) if c.name != "long"]
)  # fmt: skip
WRONG = "cxsim.conformance.weighting_variants:"
ADAPTERS = "cxsim.conformance.adapters:"


def _close(got: torch.Tensor, expected: list[float]) -> None:
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))


# --------------------------------------------------------------------------- by hand


def test_session_equal_by_hand():
    """1/N per row, renormalised to mean 1 over the 4 rows: sum of 1/N is R' = 2, so x 4/2;
    loss (2 * 2 + 2/3 (7 + 1 + 2)) / 4 = 8/3 = (2 + (7 + 1 + 2)/3) / 2, each session one vote."""
    b = SESSIONS
    _close(session_equal(b.trainable, b.rollout_id), [2, 2 / 3, 2 / 3, 2 / 3])
    assert math.isclose(float(weighted_loss(b.loss, b.trainable, session_equal(
        b.trainable, b.rollout_id))), 8 / 3, rel_tol=1e-12)  # fmt: skip
    assert math.isclose(float(aggregate(b.loss, b.trainable, "session-equal", b.rollout_id)), 8 / 3)


def test_partition_preserving_by_hand():
    """Rows of 2, 1, 3, 2 trainable tokens, mean 2: (1, 0.5, 1.5, 1); the loss is the
    token-mean, 18/8, however the sessions are cut."""
    b = SESSIONS
    weights = partition_preserving(b.trainable, b.rollout_id)
    _close(weights, [1, 0.5, 1.5, 1])
    assert math.isclose(float(weighted_loss(b.loss, b.trainable, weights)), 18 / 8)
    assert math.isclose(float(aggregate(b.loss, b.trainable, "partition-preserving")), 18 / 8)


def test_one_reward_per_rollout_by_hand():
    """(1, 1/3, 1/3, 1/3): session B's three rows weigh one reward in the statistics; the
    weighted group normalisation is the outcome broadcast over rollouts."""
    b = SESSIONS
    _close(one_reward_per_rollout(b.trainable, b.rollout_id), [1, 1 / 3, 1 / 3, 1 / 3])
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    groups = torch.zeros(4, dtype=torch.int64)
    out = group_normalised(rewards, b.trainable, b.rollout_id, groups)
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)  # rollouts (1, 0): mean 0.5, std sqrt(0.5)
    assert math.isclose(float(out[0, 0]), expected) and math.isclose(float(out[1, 0]), -expected)


def test_thread_mean_by_hand():
    """Thread A (2 tokens) and thread B (1 + 3 + 2 tokens): (n_s / n_tau) x S'/R' = (2, 1/3, 1,
    2/3); loss (2 + (7 + 3 + 4)/6) / 2 = 13/6, each thread the same total weight."""
    b = SESSIONS
    weights = thread_mean(b.trainable, b.rollout_id)
    _close(weights, [2, 1 / 3, 1, 2 / 3])
    assert math.isclose(float(weighted_loss(b.loss, b.trainable, weights)), 13 / 6)
    assert math.isclose(float(aggregate(b.loss, b.trainable, "thread-mean", b.rollout_id)), 13 / 6)


def test_the_wrong_forms_by_hand():
    """The numbers the wrong outside-style implementations' docstrings quote."""
    b = SESSIONS
    _close(row_weights_model(b, "session-equal", renormalise="micro-batch"), [1.5, 0.5, 1, 1])
    _close(row_weights_model(b, "partition-preserving", lengths="response"), [0.8, 0.4, 2, 0.8])
    _close(row_weights_model(b, "thread-mean", rows_in="micro-batch"), [2, 2, 1.2, 0.8])
    raw = row_weights_model(b, "session-equal", renormalise="none")
    assert math.isclose(float(weighted_loss(b.loss, b.trainable, raw)), 4 / 3)


def test_summary_loss_by_hand():
    """Action tokens (1, 3) and a summary row (10): 4/2 + 10/1 = 12 (token-mean: 14/3); with
    summary weight 0.5, 7; split over micro-batches with the pair of global counts, the same."""
    from cxsim.loss_weighting import summary_loss_count, summary_loss_mode

    loss = torch.tensor([[1.0, 3.0], [10.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])
    is_summary = torch.tensor([False, True])
    rid = torch.tensor([0, 0])
    assert float(aggregate(loss, mask, "summary-loss", rid, is_summary=is_summary)) == 12.0
    assert math.isclose(float(aggregate(loss, mask, "token-mean")), 14 / 3)
    half = summary_loss_mode(0.5)
    assert float(half.reduce(loss, mask, rid, is_summary=is_summary)) == 7.0
    denom = summary_loss_count(mask, rid, is_summary).double()
    parts = [
        aggregate(loss[r], mask[r], "summary-loss", rid[r], denom, None, is_summary[r])
        for r in (slice(0, 1), slice(1, 2))
    ]
    assert float(sum(parts)) == 12.0
    weights = LOSS_MODES["summary-loss"].weights(mask, rid, is_summary=is_summary)
    _close(weights, [[0.5, 0.5], [1.0, 0.0]])


# --------------------------------------------------------------------------- cxsim agrees


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(_some_batch)
def test_cxsims_row_weights_and_modes_are_the_references(batch):
    """The vectorised columns and loss modes against the float64 loops, random batches."""
    b = batch
    for rule in ROW_WEIGHT_RULES:
        ours = WEIGHTING_RULES[rule].weights(b.trainable, b.rollout_id)
        torch.testing.assert_close(row_weights(b.trainable, b.rollout_id, rule), ours)
    for mode, rule in (("session-equal", "session-equal"), ("thread-mean", "thread-mean"),
                       ("partition-preserving", "partition-preserving")):  # fmt: skip
        expected = weighted_loss(b.loss, b.trainable, WEIGHTING_RULES[rule].weights(
            b.trainable, b.rollout_id))  # fmt: skip
        got = aggregate(b.loss, b.trainable, mode, b.rollout_id)
        assert math.isclose(float(got), float(expected), rel_tol=1e-9, abs_tol=1e-12)
    one = group_normalised(b.rewards, b.trainable, b.rollout_id, b.group_id)
    torch.testing.assert_close(one, outcome_broadcast(b.rewards, b.trainable, b.rollout_id,
                                                      b.group_id), rtol=1e-9, atol=1e-9)  # fmt: skip


def test_session_equal_over_split_micro_batches():
    """Each micro-batch divides by the global rollout count and its rows' N over the whole
    batch (``rollout_figures``): the sum is the whole batch's loss."""
    b = SESSIONS
    spec = LOSS_MODES["session-equal"]
    figures = spec.rollout_figures(b.trainable, b.rollout_id)
    torch.testing.assert_close(figures, rollout_row_counts(b.trainable, b.rollout_id))
    denom = spec.count(b.trainable, b.rollout_id).double()
    parts = [
        aggregate(b.loss[r], b.trainable[r], "session-equal", b.rollout_id[r], denom, figures[r])
        for r in (slice(0, 2), slice(2, 4))
    ]
    assert math.isclose(float(sum(parts)), 8 / 3, rel_tol=1e-12)


# --------------------------------------------------------------------------- conform


@pytest.mark.parametrize("rule", sorted(WEIGHTING_RULES))
def test_cxsims_adapter_passes(rule):
    passed, report, _ = conform(
        ADAPTERS + "row_weights_micro_batches", "row-weights", "row-weights", rule, examples=8
    )
    assert passed, report
    assert "pinned/sessions" in report


@pytest.mark.parametrize("mode", ["session-equal", "partition-preserving", "thread-mean"])
def test_cxsims_reduction_passes(mode):
    passed, report, _ = conform(
        ADAPTERS + "reduce_micro_batches", "loss-reduction", "loss-matrix", mode, examples=8
    )
    assert passed, report


@pytest.mark.parametrize(
    ("function", "quantity", "layout", "mode", "term"),
    [
        ("session_equal_renormalised_per_micro_batch", "row-weights", "row-weights",
         "session-equal", "the renormalisation: the weights renormalised within each micro-batch"),
        ("partition_preserving_response_lengths", "row-weights", "row-weights",
         "partition-preserving", "the row tokens: a row's tokens counted with its observation"),
        ("one_reward_every_row", "row-weights", "row-weights", "one-reward-per-rollout",
         "the rows of a session: every row weight 1"),
        ("thread_mean_threads_per_micro_batch", "row-weights", "row-weights", "thread-mean",
         "the rows of a session: a session's rows (or a thread's tokens) counted within each"),
        ("session_equal_loss_not_renormalised", "loss-reduction", "loss-matrix",
         "session-equal", "the renormalisation: row weights: the weights not renormalised"),
    ],
)  # fmt: skip
def test_a_wrong_outside_implementation_fails_with_its_term(function, quantity, layout, mode, term):
    passed, report, _ = conform(
        WRONG + function, quantity, layout, mode, examples=8, only=("pinned/",)
    )
    assert not passed
    assert f"differing term: {term}" in report, report


def test_conform_cli_row_weights(capsys):
    """Exit 0 for cxsim's column, 1 for a wrong one, 2 for a rule it does not know."""
    base = ["conform", "--quantity", "row-weights", "--layout", "row-weights", "--examples", "3"]
    with pytest.raises(SystemExit) as stop:
        cli.main([*base[:1], WRONG + "one_reward_every_row", *base[1:], "--mode",
                  "one-reward-per-rollout"])  # fmt: skip
    assert stop.value.code == 1
    with pytest.raises(SystemExit) as stop:
        cli.main([*base[:1], ADAPTERS + "row_weights_micro_batches", *base[1:], "--mode",
                  "token-mean"])  # fmt: skip
    assert stop.value.code == 2
    cli.main([*base[:1], ADAPTERS + "row_weights_micro_batches", *base[1:], "--mode",
              "session-equal"])  # fmt: skip
    assert "all" in capsys.readouterr().out


def test_the_conform_flag_names_the_rules():
    from cxsim.conformance.quantity_names import WEIGHTING_RULE_NAMES as FLAG_RULES

    assert FLAG_RULES == tuple(WEIGHTING_RULES) == ROW_WEIGHT_RULES


def test_new_modes_train_one_iteration():
    """One PPO iteration with each new actor mode, and the critic at thread-mean."""
    from test_registries import one_iteration, sampled_batch

    from cxsim.agents.models import build_policy
    from cxsim.agents.tokenizer import default_tokenizer
    from cxsim.config import PPOConfig

    policy = build_policy("tiny", default_tokenizer(), seed=0)
    batch = sampled_batch(policy, 1.0)
    base = dict(rollouts_per_batch=4, minibatches=1, whiten=False, kl_coef=0.0)
    for mode in ("session-equal", "partition-preserving", "summary-loss"):
        stats = one_iteration(policy, batch, PPOConfig(loss_mode=mode, **base))
        assert stats["losses/first_log_ratio_max"] < 1e-3 and math.isfinite(stats["losses/policy"])
    cfg = PPOConfig(critic_loss_mode="thread-mean", estimator="cross-segment", **base)
    stats = one_iteration(policy, batch, cfg)
    assert math.isfinite(stats["losses/value"])


@pytest.mark.parametrize("mode", ["thread-mean", "session-equal", "summary-loss"])
def test_the_critic_loss_mode_is_exact_across_micro_batches(mode):
    """--ppo.critic-loss-mode: one critic step with micro-batches of 1 row (which split every
    rollout) equals one step over the whole minibatch, and differs from token-mean's."""
    from dataclasses import replace

    from test_ppo import WORDS, make_batch

    from cxsim.agents.critic import Critic
    from cxsim.agents.models import build_policy
    from cxsim.agents.tokenizer import build_tokenizer
    from cxsim.config import PPOConfig
    from cxsim.ppo import critic_update, score_batch

    tokenizer = build_tokenizer(WORDS)
    batch = make_batch(num_rollouts=4, seed=1)  # rollouts of 9, 9, 8 and 13 trainable tokens
    policy = build_policy("tiny", tokenizer, seed=0)
    base = dict(lambda_scope="fixed", whiten=False, minibatches=1, kl_coef=0.0,
                estimator="cross-segment", value_head="last", critic_lam=None)  # fmt: skip
    scored, _ = score_batch(batch, Critic.from_policy(policy), PPOConfig(**base))
    params = []
    for critic_mode, rows in ((mode, 1), (mode, 64), ("token-mean", 64)):
        cfg = PPOConfig(critic_loss_mode=critic_mode, micro_batch_rows=rows, **base)
        critic = Critic.from_policy(build_policy("tiny", tokenizer, seed=0))
        torch.manual_seed(0)
        critic_update(critic, torch.optim.SGD(critic.parameters(), lr=0.1), replace(scored), cfg, 1)
        params.append(torch.cat([p.detach().flatten() for p in critic.parameters()]))
    split = float((params[0] - params[1]).abs().max())
    moved = float((params[1] - params[2]).abs().max())
    assert split < 1e-6 and moved > 100 * max(split, 1e-9), (split, moved)

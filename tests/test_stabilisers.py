"""The stabilisers (cxsim/stabilisers.py) on hand values and hand-made batches: the KL
estimators, the KL penalty in the reward and in the loss, early stopping at a target KL,
the floor under whitening, the linear rate, and the figures of what a batch has to learn."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from cxsim.agents import build_policy, build_tokenizer, sequence_logprobs
from cxsim.config import PPOConfig
from cxsim.distributed import DistContext, global_whiten
from cxsim.ppo import actor_update, score_batch
from cxsim.segments import Segment, pack_segments
from cxsim.stabilisers import (
    kl_penalty,
    kl_reward,
    linear_lr,
    outcome_spread,
    reference_kl,
    reference_logprobs,
    uniform_outcomes,
)
from cxsim.whitening import whiten

WORDS = ["a", "b", "c", "d", "e"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(WORDS)


def batch_of(rewards: list[float], groups: list[int] | None = None, seed: int = 0):
    """One rollout per reward: an execution segment then a summary segment, random tokens."""
    g = torch.Generator().manual_seed(seed)
    segments = []
    for r, reward in enumerate(rewards):
        for s, role in enumerate(("execution", "summary")):
            n = int(torch.randint(6, 10, (1,), generator=g))
            ids = torch.randint(9, 9 + len(WORDS), (n,), generator=g).tolist()
            trainable = [False, False] + [True] * (n - 2)
            segments.append(
                Segment(role, ids, trainable, [-1.5 if t else 0.0 for t in trainable],
                        rollout_id=r, segment_index=s, reward=reward,
                        group_id=(groups or list(range(len(rewards))))[r])
            )  # fmt: skip
    return pack_segments(segments)


def on_policy(batch, policy):
    """The batch with the policy's own log-probs as the behaviour's (nothing moved yet)."""
    with torch.no_grad():
        logprobs = sequence_logprobs(policy, batch.token_ids, batch.attention)
    return replace(batch, logprobs=logprobs * batch.trainable)


def test_kl_estimators_on_hand_values():
    logp = torch.tensor([math.log(0.5), math.log(0.2)])
    ref = torch.tensor([math.log(0.25), math.log(0.2)])
    # d = log ref - log pi = -log 2, 0
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), torch.tensor([math.log(2), 0.0]))
    torch.testing.assert_close(
        kl_penalty(logp, ref, "k2"), torch.tensor([0.5 * math.log(2) ** 2, 0.0])
    )
    # k3 = e^d - 1 - d = 0.5 - 1 + log 2
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), torch.tensor([math.log(2) - 0.5, 0.0]))
    with pytest.raises(ValueError, match="k4"):
        kl_penalty(logp, ref, "k4")


def test_k3_is_never_negative_and_its_gradient_moves_toward_the_reference():
    logp = torch.linspace(-3.0, -0.1, 9, requires_grad=True)
    ref = torch.full((9,), -1.0)
    k3 = kl_penalty(logp, ref, "k3")
    assert bool((k3 >= 0).all())
    k3.sum().backward()
    # d/dlogp (e^(ref - logp) - 1 - ref + logp) = 1 - e^(ref - logp): > 0 above ref, < 0 below
    torch.testing.assert_close(logp.grad, 1 - torch.exp(ref - logp.detach()))
    assert bool((logp.grad[logp.detach() > -1.0] > 0).all())
    assert bool((logp.grad[logp.detach() < -1.0] < 0).all())


def test_kl_reward_takes_k1_off_the_masked_tokens_only():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[True, True, False]])
    steps = torch.tensor([[0.0, 1.0, 0.0]])
    out = kl_reward(steps, logp, ref, mask, coef=0.1)
    torch.testing.assert_close(out, torch.tensor([[-0.05, 1.1, 0.0]]))


def test_kl_in_the_reward_changes_the_advantages_by_the_penalty_to_go():
    batch = batch_of([1.0, 0.0])
    cfg = PPOConfig(estimator="local", lambda_scope="fixed", lam=1.0, gamma=1.0, whiten=False,
                    critic_lam=None, kl_in="reward", kl_estimator="k1", kl_coef=0.0)  # fmt: skip
    ref = torch.where(batch.trainable, batch.logprobs - 0.2, torch.zeros(()))  # k1 = 0.2 each
    plain, _ = score_batch(batch, None, cfg, ref_logprobs=ref)
    penalised, _ = score_batch(batch, None, replace(cfg, kl_coef=0.5), ref_logprobs=ref)
    mask = batch.trainable
    # lambda = gamma = 1, no critic: each token's advantage is the rewards to the segment's
    # end; the penalty adds -0.5 * 0.2 for itself and every later trainable token
    to_go = mask.flip(1).cumsum(1).flip(1).float() * mask
    torch.testing.assert_close(penalised.advantages - plain.advantages, -0.1 * to_go)


def test_kl_in_the_loss_pulls_the_policy_back_to_the_reference(tokenizer):
    batch = batch_of([1.0, 0.0, 1.0, 0.0])
    reference = build_policy("tiny", tokenizer, seed=0)
    policy = build_policy("tiny", tokenizer, seed=1)  # somewhere else
    batch = on_policy(batch, policy)
    cfg = PPOConfig(lambda_scope="fixed", whiten=False, minibatches=1, epochs=20, kl_coef=1.0,
                    ratio_check_atol=None, clip_eps=10.0)  # fmt: skip
    ref = reference_logprobs(reference, batch, cfg)
    scored, stats = score_batch(batch, None, cfg, ref_logprobs=ref)
    scored = replace(scored, advantages=torch.zeros_like(scored.advantages))  # only the KL acts
    before = stats["stability/kl_to_reference"]
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    out = actor_update(policy, opt, scored, cfg)
    after = reference_kl(on_policy(batch, policy).logprobs, ref, batch.trainable, batch.is_summary)
    assert out["losses/kl_to_reference"] > 0
    assert after["stability/kl_to_reference"] < 0.2 * before  # measured: 0.0077 -> 0.0003
    with pytest.raises(ValueError, match="reference"):
        actor_update(policy, opt, replace(scored, ref_logprobs=None), cfg)


def test_target_kl_stops_the_iteration_before_the_step_that_exceeds_it(tokenizer):
    batch = batch_of([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    policy = build_policy("tiny", tokenizer, seed=0)
    cfg = PPOConfig(lambda_scope="fixed", minibatches=4, epochs=2, kl_coef=0.0)
    scored, _ = score_batch(on_policy(batch, policy), None, cfg)
    torch.manual_seed(0)
    full = actor_update(policy, torch.optim.Adam(policy.parameters(), lr=3e-2), scored, cfg)
    assert full["losses/actor_steps"] == 8 and full["losses/early_stopped"] == 0
    policy = build_policy("tiny", tokenizer, seed=0)
    torch.manual_seed(0)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-2)
    stopped = actor_update(policy, opt, scored, replace(cfg, target_kl=1e-6))
    # the first minibatch is on-policy (KL 0) and steps; the second has moved and stops it
    assert stopped["losses/actor_steps"] == 1 and stopped["losses/early_stopped"] == 1


def test_the_floor_keeps_a_small_spread_from_being_scaled_up():
    mask = torch.ones(1, 4, dtype=torch.bool)
    small = torch.tensor([[1.0, 1.1, 0.9, 1.0]])  # std 0.0816
    centred = small - small.mean()
    torch.testing.assert_close(whiten(small, mask, std_floor=0.5), centred / 0.5)
    assert float(whiten(small, mask).std()) == pytest.approx(1.0, abs=1e-4)  # no floor: x12
    wide = torch.tensor([[0.0, 2.0, -2.0, 0.0]])  # std 1.63 > the floor: whitened as ever
    torch.testing.assert_close(whiten(wide, mask, std_floor=0.5), whiten(wide, mask))
    one = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    torch.testing.assert_close(global_whiten(small, mask, one, std_floor=0.5), centred / 0.5)


def test_linear_rate_falls_to_one_over_iterations_at_the_last():
    rates = [linear_lr(1e-3, "linear", k, 4) for k in range(4)]
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
    assert linear_lr(1e-3, "constant", 3, 4) == 1e-3


def test_outcome_spread_counts_groups_that_ended_alike():
    # groups: {0, 1} both succeed, {2, 3} both fail, {4, 5} mixed
    batch = batch_of([1.0, 1.0, 0.0, 0.0, 1.0, 0.0], groups=[0, 0, 1, 1, 2, 2])
    out = outcome_spread(batch.rewards, batch.rollout_id, batch.group_id)
    assert out["stability/groups_all_success"] == pytest.approx(1 / 3)
    assert out["stability/groups_all_failure"] == pytest.approx(1 / 3)
    assert out["stability/outcome_std"] == pytest.approx(0.5)
    assert out["stability/uniform_batch"] == 0.0
    same = batch_of([1.0, 1.0, 1.0])
    assert outcome_spread(same.rewards, same.rollout_id, same.group_id)["stability/uniform_batch"]


def test_uniform_outcomes_reads_every_rank():
    same = batch_of([1.0, 1.0])
    assert uniform_outcomes(same.rewards, same.rollout_id, lambda x: x)
    # another rank holds one failure among its two rollouts: sums of (R, R^2, n) add (1, 1, 2)
    other = torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)
    assert not uniform_outcomes(same.rewards, same.rollout_id, lambda x: x + other)


@pytest.mark.parametrize(
    "changes, flag",
    [
        ({"kl_coef": -1.0}, "--ppo.kl-coef"),
        ({"kl_estimator": "k9"}, "--ppo.kl-estimator"),
        ({"kl_in": "reward", "kl_estimator": "k3", "kl_coef": 0.1}, "--ppo.kl-estimator k1"),
        ({"target_kl": 0.0}, "--ppo.target-kl"),
        ({"whiten_std_floor": -0.1}, "--ppo.whiten-std-floor"),
        ({"lr_schedule": "cosine"}, "--ppo.lr-schedule"),
    ],
)
def test_invalid_stabiliser_settings_name_the_flag(changes, flag):
    with pytest.raises(ValueError, match=flag.replace(".", r"\.")):
        PPOConfig(**changes)

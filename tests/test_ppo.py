"""PPO pieces on hand-made segment batches: denominators, scoring, updates."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from cxsim.advantages import cross_segment_gae, segment_gae
from cxsim.agents import build_policy, build_tokenizer
from cxsim.agents.critic import Critic
from cxsim.config import PPOConfig
from cxsim.loss_modes import LOSS_MODES
from cxsim.minibatches import loss_denominator, micro_batch_spans, micro_batches, minibatch_rows
from cxsim.ppo import actor_update, critic_update, score_batch
from cxsim.ratio_check import ratio_tolerance
from cxsim.segments import Segment, pack_segments

WORDS = ["a", "b", "c", "d", "e"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(WORDS)


def make_batch(num_rollouts: int = 3, seed: int = 0, reward_of=lambda r: float(r % 2)):
    """Rollouts of exec, summary, exec segments with random lengths and tokens."""
    g = torch.Generator().manual_seed(seed)
    segments = []
    for r in range(num_rollouts):
        for s, role in enumerate(("execution", "summary", "execution")):
            n = int(torch.randint(5, 12, (1,), generator=g))
            ids = torch.randint(9, 9 + len(WORDS), (n,), generator=g).tolist()
            trainable = [False, False] + [bool(b) for b in torch.rand(n - 2, generator=g) < 0.6]
            logprobs = [-1.5 if t else 0.0 for t in trainable]
            segments.append(
                Segment(
                    role,
                    ids,
                    trainable,
                    logprobs,
                    rollout_id=r,
                    segment_index=s,
                    reward=reward_of(r),
                    group_id=r // 2,
                )
            )
    return pack_segments(segments)


def test_loss_denominator_counts_per_mode():
    batch = make_batch()
    mask = batch.trainable
    assert float(loss_denominator(mask, "token-mean", batch.rollout_id)) == mask.sum()
    assert float(loss_denominator(mask, "segment-mean", batch.rollout_id)) == mask.any(1).sum()
    assert float(loss_denominator(mask, "rollout-mean", batch.rollout_id)) == 3
    doubled = loss_denominator(mask, "token-mean", batch.rollout_id, global_sum=lambda x: 2 * x)
    assert float(doubled) == 2 * mask.sum()


def test_minibatches_keep_rollouts_whole_and_cover_the_batch():
    batch = make_batch(num_rollouts=5)
    torch.manual_seed(0)
    parts = minibatch_rows(batch, 2)
    rows = torch.cat(parts).sort().values
    assert torch.equal(rows, torch.arange(len(batch)))
    ids = [set(batch.rollout_id[p].tolist()) for p in parts]
    assert not ids[0] & ids[1]


def test_micro_batches_trim_padding():
    batch = make_batch()
    for micro in micro_batches(batch, 2):
        assert micro.attention[:, -1].any()


def test_score_batch_cross_segment_with_zero_critic_matches_estimator():
    batch = make_batch()
    cfg = PPOConfig(lambda_scope="fixed", lam=0.9, gamma=1.0, whiten=False, critic_lam=None)
    scored, stats = score_batch(batch, None, cfg)
    zeros = torch.zeros(batch.token_ids.shape)
    expected = cross_segment_gae(
        zeros, batch.trainable, batch.rewards, batch.rollout_id, batch.segment_index, 1.0, 0.9
    )
    assert torch.allclose(scored.advantages, expected)
    assert torch.allclose(scored.returns, expected)  # A + V with V = 0
    local = score_batch(batch, None, replace(cfg, estimator="local"))[0]
    assert torch.allclose(
        local.advantages, segment_gae(zeros, batch.trainable, batch.rewards, 1.0, 0.9)
    )
    assert stats["charts/policy_tokens"] == batch.num_trainable


def test_score_batch_without_summary_training_zeroes_summary_rows():
    batch = make_batch()
    cfg = PPOConfig(train_summaries=False, whiten=True)
    scored, _ = score_batch(batch, None, cfg)
    summary = batch.is_summary
    assert not scored.policy_mask[summary].any()
    assert (scored.advantages[summary] == 0).all()
    # N_{>s} counts only trained tokens: the first segment's correction skips the summary
    full = score_batch(batch, None, replace(cfg, train_summaries=True, whiten=False))[0]
    masked = score_batch(batch, None, replace(cfg, whiten=False))[0]
    first = (batch.segment_index == 0) & (batch.rewards > 0)
    assert masked.advantages[first].abs().sum() > full.advantages[first].abs().sum()


def test_group_broadcast_needs_no_critic():
    batch = make_batch(num_rollouts=4)
    cfg = PPOConfig(estimator="group-broadcast", group_size=2, whiten=False)
    assert not cfg.uses_critic
    scored, _ = score_batch(batch, None, cfg)
    # rewards 0 and 1 in every group of 2: (R - 0.5) / std, std = sqrt(0.5) (Bessel)
    expected = torch.where(batch.rewards > 0, 0.5**0.5, -(0.5**0.5))[:, None].expand_as(
        scored.advantages
    )
    torch.testing.assert_close(
        scored.advantages[batch.trainable], expected[batch.trainable], atol=1e-5, rtol=0
    )
    assert (scored.advantages[~batch.trainable] == 0).all()


def test_micro_batch_spans_keep_to_the_row_and_token_budgets():
    lengths = [12, 10, 9, 9, 4, 30, 3]
    spans = micro_batch_spans(lengths, rows=3, tokens=30)
    assert spans == [(0, 2), (2, 5), (5, 6), (6, 7)]  # 30 tokens alone: longer rows go alone
    for start, stop in spans:
        assert stop - start <= 3
        assert (stop - start) * max(lengths[start:stop]) <= 30 or stop - start == 1
    assert micro_batch_spans(lengths, rows=64) == [(0, 7)]
    assert micro_batch_spans(lengths, rows=2) == [(0, 2), (2, 4), (4, 6), (6, 7)]
    assert micro_batch_spans([], rows=2, tokens=5) == []


def updated_models(scored, cfg, tokenizer):
    """Actor and critic after one actor update and two critic passes from seed-0 models
    (SGD: Adam's first step is sign(gradient), which float noise flips where it is ~0)."""
    policy = build_policy("tiny", tokenizer, seed=0)
    critic = Critic.from_policy(policy)
    torch.manual_seed(0)
    actor = actor_update(policy, torch.optim.SGD(policy.parameters(), lr=0.1), scored, cfg)
    torch.manual_seed(0)
    value = critic_update(critic, torch.optim.SGD(critic.parameters(), lr=0.1), scored, cfg, 2)
    flat = [torch.cat([p.detach().flatten() for p in m.parameters()]) for m in (policy, critic)]
    return actor | value, flat


def test_results_do_not_depend_on_the_micro_batch_token_budget(tokenizer):
    """Micro-batches of 1 row (budget below any row), a few rows, or the whole minibatch give
    the same losses and the same weights: the token-mean denominator is the minibatch's."""
    batch = make_batch(num_rollouts=4, seed=3)
    cfg = PPOConfig(lambda_scope="fixed", minibatches=2, ratio_check_atol=None, kl_coef=0.0)
    policy = build_policy("tiny", tokenizer, seed=0)
    scored, _ = score_batch(batch, Critic.from_policy(policy), cfg)
    runs = {n: updated_models(scored, replace(cfg, micro_batch_tokens=n), tokenizer)
            for n in (None, 24, 1)}  # fmt: skip
    (ref_stats, ref_flat) = runs[None]
    assert ref_stats["losses/policy"] != 0 and ref_stats["losses/value"] != 0
    for n in (24, 1):
        stats, flat = runs[n]
        for key in ("losses/policy", "losses/value", "losses/approx_kl", "losses/entropy"):
            assert stats[key] == pytest.approx(ref_stats[key], rel=1e-5, abs=1e-7), (n, key)
        for a, b in zip(flat, ref_flat, strict=True):
            assert torch.allclose(a, b, atol=1e-6), n
    # the budget really splits: 24 tokens make more micro-batches than rows alone
    rows = minibatch_rows(batch, 1)[0]
    assert len(list(micro_batches(batch.select(rows), 64, 24))) > 1


def test_the_first_ratio_tolerance_widens_under_bf16_only():
    assert ratio_tolerance(1e-3, "fp32") == 1e-3
    assert ratio_tolerance(1e-3, "bf16") == 0.1
    assert ratio_tolerance(0.5, "bf16") == 0.5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_ppo_step_on_cuda_matches_the_cpu_step(tokenizer):
    """Scoring, a critic pass and an actor step on the GPU (batch, models and estimator
    inputs there) agree with the same step on CPU."""
    cfg = PPOConfig(lambda_scope="fixed", minibatches=1, ratio_check_atol=None, kl_coef=0.0)
    out = {}
    for device in ("cpu", "cuda"):
        batch = make_batch(num_rollouts=3).to(device)
        policy = build_policy("tiny", tokenizer, seed=0).to(device)
        critic = Critic.from_policy(policy)
        torch.nn.init.constant_(critic.head.bias, 0.25)
        scored, _ = score_batch(batch, critic, cfg)
        assert scored.advantages.device.type == device
        torch.manual_seed(0)
        stats = critic_update(critic, torch.optim.Adam(critic.parameters()), scored, cfg, 1)
        torch.manual_seed(0)
        stats |= actor_update(policy, torch.optim.Adam(policy.parameters()), scored, cfg)
        out[device] = stats, torch.cat([p.detach().cpu().flatten() for p in policy.parameters()])
    for key in ("losses/policy", "losses/value", "losses/entropy"):
        assert out["cuda"][0][key] == pytest.approx(out["cpu"][0][key], rel=1e-3, abs=1e-5)
    assert torch.allclose(out["cuda"][1], out["cpu"][1], atol=1e-4)


@pytest.mark.parametrize("mode", LOSS_MODES)
def test_every_loss_mode_is_exact_across_micro_batches(tokenizer, mode):
    """One step with micro-batches of 1 row (which split every rollout) equals one step
    over the whole minibatch."""
    batch = make_batch(num_rollouts=3)
    cfg = PPOConfig(
        lambda_scope="fixed", whiten=False, minibatches=1, epochs=1, loss_mode=mode,
        ratio_check_atol=None, kl_coef=0.0,  # made-up behaviour log-probs; no reference
    )  # fmt: skip
    scored, _ = score_batch(batch, None, cfg)
    results = []
    for rows in (1, 64):
        policy = build_policy("tiny", tokenizer, seed=0)
        opt = torch.optim.SGD(policy.parameters(), lr=0.1)
        torch.manual_seed(0)
        actor_update(policy, opt, scored, replace(cfg, micro_batch_rows=rows, max_grad_norm=1e9))
        results.append(torch.cat([p.detach().flatten() for p in policy.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-6)


def test_actor_update_raises_logprob_of_advantaged_tokens(tokenizer):
    batch = make_batch(num_rollouts=2, reward_of=lambda r: 1.0)
    cfg = PPOConfig(lambda_scope="fixed", whiten=False, minibatches=1, epochs=4, kl_coef=0.0)
    scored, _ = score_batch(batch, None, cfg)
    policy = build_policy("tiny", tokenizer, seed=0)
    from cxsim.agents import sequence_logprobs

    with torch.no_grad():
        before = sequence_logprobs(policy, batch.token_ids, batch.attention)
    on_policy = replace(scored.batch, logprobs=before * batch.trainable)  # behaviour = current
    scored = replace(scored, batch=on_policy)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    stats = actor_update(policy, opt, scored, cfg)
    with torch.no_grad():
        after = sequence_logprobs(policy, batch.token_ids, batch.attention)
    assert after[batch.trainable].sum() > before[batch.trainable].sum()
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert stats["losses/clip_fraction"] >= 0


def test_critic_update_fits_returns(tokenizer):
    """Value passes on a fixed batch make the critic predict the targets: the rewarded
    rollouts' tokens end up valued above the unrewarded ones'."""
    batch = make_batch(num_rollouts=3)
    policy = build_policy("tiny", tokenizer, seed=0)
    critic = Critic.from_policy(policy)  # a `last` head, trained on the actor's targets
    cfg = PPOConfig(lambda_scope="fixed", whiten=False, minibatches=1, critic_lam=None)
    opt = torch.optim.Adam(critic.parameters(), lr=1e-2)
    scored, _ = score_batch(batch, critic, cfg)
    critic_update(critic, opt, scored, cfg, passes=30)
    with torch.no_grad():
        values = critic(batch.token_ids, batch.attention)
    mask = scored.policy_mask
    error = (values - scored.returns)[mask].abs().mean()
    assert error < 0.5 * scored.returns[mask].abs().mean()  # initially: error = mean |G|
    rewarded = (batch.rewards > 0)[:, None] & mask
    assert values[rewarded].mean() > values[~(batch.rewards > 0)[:, None] & mask].mean() + 0.2


def test_score_batch_uses_critic_values(tokenizer):
    batch = make_batch()
    policy = build_policy("tiny", tokenizer, seed=0)
    critic = Critic.from_policy(policy)
    torch.nn.init.constant_(critic.head.bias, 0.25)
    scored, stats = score_batch(batch, critic, PPOConfig(whiten=False))
    values = scored.values
    assert torch.allclose(values[batch.trainable], torch.full_like(values[batch.trainable], 0.25))
    assert (values[~batch.attention] == 0).all()
    assert stats["critic/value_mean"] == pytest.approx(0.25)


def test_copy_of_batch_unchanged_by_scoring():
    batch = make_batch()
    before = copy.deepcopy(batch)
    score_batch(batch, None, PPOConfig())
    assert torch.equal(before.token_ids, batch.token_ids) and not batch.extras
    assert torch.equal(before.rewards, batch.rewards)


class ConstantCritic(torch.nn.Module):
    """V = 0.5 everywhere (and for the state after any row)."""

    def forward(
        self, ids: torch.Tensor, attention: torch.Tensor, context: torch.Tensor | None = None
    ) -> torch.Tensor:
        return 0.5 * attention.float()


def test_bootstrap_truncated_is_a_choice_at_env_truncations_only():
    batch = make_batch(num_rollouts=2, reward_of=lambda r: 0.0)
    last = batch.segment_index == 2
    ends = torch.where(last & (batch.rollout_id == 0), 2, 0)  # rollout 0: env_truncated
    batch = replace(batch, episode_end=torch.where(last & (batch.rollout_id == 1), 1, ends))
    assert batch.ends("env_truncated").tolist() == (last & (batch.rollout_id == 0)).tolist()
    cfg = PPOConfig(lambda_scope="fixed", lam=1.0, whiten=False, estimator="stitched")
    off = score_batch(batch, ConstantCritic(), cfg)[0].advantages
    on = score_batch(batch, ConstantCritic(), replace(cfg, bootstrap_truncated=True))[0]
    on = on.advantages
    # stitched, gamma = lambda = 1, V = 0.5: every token's advantage is R + tail - V
    mask, r0 = batch.trainable, (batch.rollout_id == 0)[:, None]
    torch.testing.assert_close(off[mask], torch.full_like(off[mask], -0.5))
    torch.testing.assert_close(on[mask & r0], torch.zeros_like(on[mask & r0]))  # 0 + 0.5 - 0.5
    torch.testing.assert_close(on[mask & ~r0], off[mask & ~r0])  # terminated: untouched


def test_first_ratio_check_stops_every_rank_together():
    from cxsim.ratio_check import RatioCheckError, check_first_ratio

    check_first_ratio(1e-6, 1e-3, 1.0, 1.0, global_sum=lambda x: x)  # within tolerance
    with pytest.raises(RatioCheckError, match=r"sampled at temperature 0\.7 .* temperature 1 "):
        check_first_ratio(0.2, 1e-3, 0.7, 1.0, global_sum=lambda x: x)
    with pytest.raises(RatioCheckError):  # this rank is fine, another one is not
        check_first_ratio(1e-6, 1e-3, 1.0, 1.0, global_sum=lambda x: x + 1)

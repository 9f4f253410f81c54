"""One registry per choice: a new estimator or loss mode is one dict entry, unknown names fail
at config time, and the trainer's update runs with whatever is registered."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from cxsim.agents.chat import WordChatFormat
from cxsim.agents.critic import Critic
from cxsim.agents.lm_agent import LMAgent
from cxsim.agents.models import build_policy
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.config import PPOConfig
from cxsim.estimators import ESTIMATORS, Estimator
from cxsim.generation import SamplingConfig
from cxsim.loss_modes import LOSS_MODES, LossModeSpec
from cxsim.ppo import actor_update, critic_update, score_batch
from cxsim.ratio_check import RatioCheckError
from cxsim.runtime import CompactionConfig, collect_rollouts
from cxsim.segments import pack_segments

ENV, KWARGS = "cxsim/KeyRecall-v0", {"memory_length": 3, "obs_words_mean": 6.0, "num_values": 4}
WINDOW = CompactionConfig(budget=160, threshold=72, max_summary_tokens=32, max_response_tokens=8)


@pytest.fixture(scope="module")
def policy():
    return build_policy("tiny", default_tokenizer(), seed=0)


def sampled_batch(policy, temperature: float):
    chat = WordChatFormat(default_tokenizer())
    agent = LMAgent(policy, chat, SamplingConfig(temperature=temperature, seed=0))
    with torch.no_grad():
        rollouts = collect_rollouts(ENV, KWARGS, agent, WINDOW, [0, 1, 2, 3], chat)
    return pack_segments(rollouts.segments, chat.pad_id, temperature=temperature)


def one_iteration(policy, batch, cfg: PPOConfig) -> dict[str, float]:
    """score, critic update, actor update: the trainer's loop body."""
    critic = Critic.from_policy(policy) if cfg.uses_critic else None
    scored, metrics = score_batch(batch, critic, cfg)
    if critic is not None:
        opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
        metrics |= critic_update(critic, opt, scored, cfg, passes=1)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    return metrics | actor_update(policy, opt, scored, cfg)


def test_a_new_estimator_and_loss_mode_train_one_iteration(policy, monkeypatch):
    def reward_everywhere(x):  # R on every policy token, no critic
        return torch.where(x.mask, x.rewards[:, None], 0.0)

    def token_sum(loss, mask, rollout_id=None, denominator=None, rollout_tokens=None):
        return torch.where(mask, loss, 0.0).sum() / (1.0 if denominator is None else denominator)

    def one(mask, rollout_id):
        return torch.tensor(1.0)

    def unit_weights(mask, rollout_id):
        return mask.to(torch.float64)

    monkeypatch.setitem(ESTIMATORS, "reward-to-token", Estimator(reward_everywhere, False, "R"))
    monkeypatch.setitem(LOSS_MODES, "token-sum", LossModeSpec(token_sum, one, unit_weights, "sum"))
    batch = sampled_batch(policy, 1.0)
    base = dict(rollouts_per_batch=4, minibatches=1, whiten=False, kl_coef=0.0)
    cfg = PPOConfig(estimator="reward-to-token", **base)
    assert not cfg.uses_critic  # read from the registry entry
    scored, _ = score_batch(batch, None, cfg)
    expected = torch.where(batch.trainable, batch.rewards[:, None], 0.0)
    assert torch.equal(scored.advantages, expected)
    stats = one_iteration(policy, batch, cfg)
    assert stats["losses/first_log_ratio_max"] < 1e-3
    stats = one_iteration(policy, batch, PPOConfig(loss_mode="token-sum", **base))
    assert torch.isfinite(torch.tensor(stats["losses/policy"]))
    from cxsim.diagnostics import segment_weight_stats

    weights = segment_weight_stats(
        batch.trainable, batch.rollout_id, batch.is_summary, batch.segment_index, ("token-sum",)
    )
    assert weights["weights/token-sum/max_share"] > 0  # the diagnostics read the same entry


@pytest.mark.parametrize(
    ("field", "name", "listed"),
    [("estimator", "gae", "cross-segment, local, stitched, group-broadcast"),
     ("loss_mode", "mean", "token-mean, segment-mean, rollout-mean, seq-mean-token-sum")],
)  # fmt: skip
def test_an_unknown_name_fails_at_config_time_with_the_choices(field, name, listed):
    with pytest.raises(ValueError, match=f"{field}='{name}' is unknown; choose one of: {listed}"):
        PPOConfig(**{field: name})


def test_sampling_and_scoring_at_other_temperatures_stops_the_update(policy):
    batch = sampled_batch(policy, 0.5)
    cfg = PPOConfig(rollouts_per_batch=4, minibatches=1, temperature=1.0, kl_coef=0.0)
    before = [p.detach().clone() for p in policy.parameters()]
    with pytest.raises(RatioCheckError, match=r"sampled at temperature 0\.5 .* temperature 1 "):
        one_iteration(policy, batch, cfg)
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    stats = one_iteration(policy, batch, replace(cfg, temperature=0.5))  # the same: ratio 1
    assert stats["losses/first_log_ratio_max"] < 1e-3


def test_a_registered_estimator_is_in_the_lab_and_conform(monkeypatch, capsys):
    """One table per concept: the lab measures every registered estimator and conform checks
    one by its name, in the layout the trainer calls it with."""
    from cxsim.conformance import conform_command as conform
    from cxsim.lab.lab import Config as LabConfig
    from cxsim.lab.lab_studies import lab_estimators

    def split_evenly(x):  # chain-split written again: R over the rollout's chains
        from cxsim.scans import per_group_sum

        chains = per_group_sum(x.mask.any(dim=1).to(x.rewards.dtype), x.rollout_id)
        return torch.where(x.mask, (x.rewards / chains.clamp(min=1))[:, None], 0.0)

    monkeypatch.setitem(ESTIMATORS, "split-evenly", Estimator(split_evenly, False, "R/K"))
    assert lab_estimators(LabConfig())[-1] == "split-evenly"
    conform.main(["split-evenly", "--quantity", "chain-split", "--examples", "3"])
    report = capsys.readouterr().out
    assert report.startswith("conformance of split-evenly: chain-split, layout estimator")
    assert "cases run agree with the reference" in report

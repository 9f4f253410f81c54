"""Configs validate on construction and say what to change."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import tyro

from cxsim.config import (
    DEFAULT_COMPACTION,
    EnvConfig,
    EvalConfig,
    PPOConfig,
    SFTConfig,
    check_policy_dir,
)
from cxsim.diagnostics import token_weights
from cxsim.pipeline.presets import PRESETS, cli_with_preset, preset_from_argv, preset_ppo
from cxsim.pipeline.run import Config as RunConfig
from cxsim.pipeline.run import preset_ppo as run_preset_ppo
from cxsim.pipeline.train import Config as TrainConfig
from cxsim.ppo import score_batch
from cxsim.segments import Segment, pack_segments


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"estimator": "gae"}, "estimator='gae' is unknown"),
        ({"loss_mode": "mean"}, "loss_mode"),
        ({"lambda_scope": "window"}, "lambda_scope"),
        ({"estimator": "group-broadcast"}, "--ppo.group-size"),
        ({"rollouts_per_batch": 10, "group_size": 4}, "multiple of"),
        ({"gamma": 1.5}, "gamma"),
        ({"minibatches": 100}, "lower --ppo.minibatches"),
        ({"actor_lr": 0.0}, "positive"),
        (
            {"estimator": "group-broadcast", "group_size": 2, "bootstrap_truncated": True},
            "no critic",
        ),
    ],
)
def test_ppo_config_rejects(changes, message):
    with pytest.raises(ValueError, match=message):
        PPOConfig(**changes)


def test_other_configs_reject():
    with pytest.raises(ValueError, match="unknown environment id 'cxsim/Nope-v0'"):
        EnvConfig(env_id="cxsim/Nope-v0")
    with pytest.raises(ValueError, match="cannot import module 'no_such_module_here'"):
        EnvConfig(env_id="no_such_module_here:my/Env-v0")
    with pytest.raises(ValueError, match="unknown environment id 'my/Env-v0'"):
        EnvConfig(env_id="cxsim.envs:my/Env-v0")  # the module imports, the id is not there
    with pytest.raises(ValueError, match="omission_rate"):
        SFTConfig(omission_rate=1.5)
    with pytest.raises(ValueError, match="skip_rate"):
        SFTConfig(skip_rate=2.0)
    with pytest.raises(ValueError, match="protocol"):
        EvalConfig(protocols=("both",))
    with pytest.raises(ValueError, match="threshold"):
        replace(DEFAULT_COMPACTION, budget=200, threshold=201)
    with pytest.raises(ValueError, match=r"--ppo\.protocol sliding-window disagree"):
        single = replace(DEFAULT_COMPACTION, protocol="single")
        TrainConfig(compaction=single, ppo=PPOConfig(protocol="sliding-window"))
    with pytest.raises(FileNotFoundError, match="cxsim sft"):
        check_policy_dir("/nonexistent/policy")


def test_env_kwargs_flag_takes_pairs():
    env = tyro.cli(EnvConfig, args=["--kwargs", "memory_length", "5", "noise", "0.1", "x", "True"])
    assert env.kwargs == {"memory_length": 5, "noise": 0.1, "x": True}
    assert tyro.cli(EnvConfig, args=["--kwargs"]).kwargs == {}
    assert "remember the key" in tyro.cli(EnvConfig, args=[]).system_prompt


def preset_batch():
    """Two rollouts (rewards 1 and 0, one task group) of exec, summary, exec segments."""
    segments = []
    for r in range(2):
        for k, role in enumerate(("execution", "summary", "execution")):
            trainable = [False, False, True, True, False, True]
            segments.append(
                Segment(role, [3] * 6, trainable, [-1.0 if t else 0.0 for t in trainable],
                        rollout_id=r, segment_index=k, reward=float(r == 0), group_id=0)
            )  # fmt: skip
    return pack_segments(segments)


def test_each_preset_does_what_its_paper_row_ablates():
    """Scored on one batch, each preset differs from ``compactionrl`` by its ablation."""
    batch = preset_batch()
    scored = {
        name: score_batch(batch, None, replace(cfg, whiten=False))[0]
        for name, (_, cfg) in PRESETS.items()
    }
    base = scored["compactionrl"]
    summary = batch.is_summary[:, None] & batch.trainable
    assert base.advantages[summary].abs().sum() > 0  # summaries are trained
    assert scored["no-summary-training"].advantages[summary].abs().sum() == 0
    assert not scored["no-summary-training"].policy_mask[summary].any()
    first = batch.segment_index == 0  # the correction discounts early windows...
    local, cross = scored["no-cross-segment"].advantages, base.advantages
    assert (local[first].abs().sum() > cross[first].abs().sum()) and torch.equal(
        local[~first & ~batch.is_summary], cross[~first & ~batch.is_summary]
    )  # ...and leaves the last one alone
    assert not torch.equal(scored["stitched"].advantages, cross)
    supo = scored["supo"].advantages
    assert not preset_ppo("supo").uses_critic and supo[batch.trainable].sum().abs() < 1e-5
    weights = token_weights(batch.trainable, "segment-mean", batch.rollout_id).sum(dim=1)
    assert preset_ppo("segment-mean-loss").loss_mode == "segment-mean"
    assert torch.allclose(weights, weights[0].expand_as(weights))  # each segment one vote
    assert preset_ppo("ppo-single").protocol == "single"  # the runtime's Single protocol
    with pytest.raises(ValueError, match="unknown preset"):
        preset_ppo("nope")


def test_preset_then_flags_override():
    assert preset_from_argv(["--x", "1", "--preset=supo"]) == "supo"
    build = lambda name: TrainConfig(preset=name, ppo=preset_ppo(name))  # noqa: E731
    cfg = cli_with_preset(
        TrainConfig, build, ["--preset", "no-summary-training", "--ppo.actor-lr", "5e-4"]
    )
    assert cfg.preset == "no-summary-training" and not cfg.ppo.train_summaries
    assert cfg.ppo.actor_lr == 5e-4


def test_run_applies_preset_changes_on_top_of_ppo_flags():
    cfg = RunConfig(ppo=PPOConfig(iterations=7, actor_lr=1e-4))
    ablation = run_preset_ppo(cfg, "no-summary-training")
    assert ablation.iterations == 7 and ablation.actor_lr == 1e-4 and not ablation.train_summaries
    with pytest.raises(ValueError, match="multiple of group_size"):
        RunConfig(presets=("supo",), ppo=PPOConfig(rollouts_per_batch=6))

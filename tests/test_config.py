"""Configs validate on construction and say what to change."""

from __future__ import annotations

from dataclasses import replace

import pytest
import tyro

from cxsim.config import (
    DEFAULT_COMPACTION,
    EnvConfig,
    EvalConfig,
    PPOConfig,
    SFTConfig,
    check_policy_dir,
)
from cxsim.experiments.presets import PRESETS, cli_with_preset, preset_from_argv, preset_ppo
from cxsim.experiments.run import Config as RunConfig
from cxsim.experiments.run import preset_ppo as run_preset_ppo
from cxsim.experiments.train import Config as TrainConfig


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
    ],
)
def test_ppo_config_rejects(changes, message):
    with pytest.raises(ValueError, match=message):
        PPOConfig(**changes)


def test_other_configs_reject():
    with pytest.raises(ValueError, match="unknown environment id 'cxsim/Nope-v0'"):
        EnvConfig(env_id="cxsim/Nope-v0")
    with pytest.raises(ValueError, match="omission_rate"):
        SFTConfig(omission_rate=1.5)
    with pytest.raises(ValueError, match="protocol"):
        EvalConfig(protocols=("both",))
    with pytest.raises(ValueError, match="threshold"):
        replace(DEFAULT_COMPACTION, budget=200, threshold=201)
    with pytest.raises(ValueError, match=r"--ppo\.protocol"):
        TrainConfig(compaction=replace(DEFAULT_COMPACTION, protocol="single"))
    with pytest.raises(FileNotFoundError, match="cxsim sft"):
        check_policy_dir("/nonexistent/policy")


def test_env_kwargs_flag_takes_pairs():
    env = tyro.cli(EnvConfig, args=["--kwargs", "memory_length", "5", "noise", "0.1", "x", "True"])
    assert env.kwargs == {"memory_length": 5, "noise": 0.1, "x": True}
    assert tyro.cli(EnvConfig, args=["--kwargs"]).kwargs == {}
    assert "remember the key" in tyro.cli(EnvConfig, args=[]).system_prompt


def test_presets_are_the_paper_rows():
    assert set(PRESETS) >= {"compactionrl", "ppo-single", "no-summary-training",
                            "segment-mean-loss", "no-cross-segment", "stitched", "supo"}  # fmt: skip
    assert preset_ppo("ppo-single").protocol == "single"
    assert not preset_ppo("no-summary-training").train_summaries
    assert preset_ppo("segment-mean-loss").loss_mode == "segment-mean"
    assert preset_ppo("no-cross-segment").estimator == "local"
    supo = preset_ppo("supo")
    assert supo.estimator == "group-broadcast" and supo.group_size > 1 and not supo.uses_critic
    with pytest.raises(SystemExit, match="unknown preset"):
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

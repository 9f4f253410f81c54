"""Per-id default kwargs (envs/defaults.py) and how ``EnvConfig`` picks them."""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import pytest
import tyro

import cxsim.envs  # registers the ids
from cxsim.config import DEFAULT_ENV_KWARGS, EnvConfig
from cxsim.envs.defaults import DEFAULT_KWARGS, default_kwargs, sample_episodes

ENV_IDS = sorted(
    k for k in gym.registry if k.startswith("cxsim/") and k not in cxsim.envs.OUTSIDE_IDS
)
"""cxsim's own ids; a family from outside (its optional extra) has its own tests."""


@dataclass(frozen=True)
class Parent:
    env: EnvConfig = field(default_factory=EnvConfig)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_id_alone_gets_its_own_defaults(env_id: str) -> None:
    """``--env.env-id ID`` under an entry point's default EnvConfig builds the env."""
    env = tyro.cli(Parent, args=["--env.env-id", env_id]).env
    assert env.kwargs == DEFAULT_KWARGS.get(env_id, {})
    assert env.system_prompt  # gym.make with these kwargs works
    assert env.kwargs is not default_kwargs(env_id)  # a fresh dict per config


def test_the_default_task_keeps_the_published_kwargs() -> None:
    assert tyro.cli(Parent, args=[]).env.kwargs == DEFAULT_ENV_KWARGS
    assert DEFAULT_ENV_KWARGS == {"obs_words_mean": 8.0, "obs_words_std": 2.0, "num_values": 4}


def test_explicit_kwargs_are_kept_for_any_id() -> None:
    env = tyro.cli(
        Parent, args=["--env.env-id", "cxsim/KeyRecall-easy-v0", "--env.kwargs", "num_values", "5"]
    ).env
    assert env.kwargs == {"num_values": 5}
    cleared = tyro.cli(Parent, args=["--env.kwargs"]).env
    assert cleared.kwargs == {} and cleared.env_id == "cxsim/KeyRecall-v0"
    assert EnvConfig(env_id="cxsim/SimRepo-v0", kwargs={"num_files": 2}).kwargs == {"num_files": 2}


def test_sample_episodes_records_the_oracle_text() -> None:
    (episode,) = sample_episodes("cxsim/KeyRecall-v0", DEFAULT_ENV_KWARGS, 1, seed=4)
    assert len(episode.actions) == len(episode.observations) == len(episode.summaries) == 13
    assert episode.actions[-1].startswith("answer ") and episode.actions[0] == "next"
    key = episode.actions[-1].split()[1]
    assert all(f"the key is {key} ." in s for s in episode.summaries)
    assert "question" in episode.summaries[-1] and "question" not in episode.summaries[0]

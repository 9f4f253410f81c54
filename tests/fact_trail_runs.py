"""What the FactTrail tests share: the dials off, the scripted oracle at the derived sizes,
and where an episode's compactions fell (tests/test_fact_trail_*.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import gymnasium as gym

from cxsim.agents import WordChatFormat, default_tokenizer
from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig
from cxsim.envs.scripted import Episode, oracle_for, play
from cxsim.preflight import preflight
from cxsim.rollout_records import RolloutRecord
from cxsim.runtime import collect_rollouts

ENV_ID = "cxsim/FactTrail-v0"
BARE = {"num_facts": 2, "num_distractors": 0, "num_revisions": 0, "num_hops": 0, "num_subtasks": 0}
"""Every dial off but the two codes (the tests turn one on at a time)."""
EVERY_DIAL = {
    "num_facts": 2,
    "num_distractors": 2,
    "num_revisions": 1,
    "num_hops": 1,
    "num_subtasks": 1,
}
"""Every dial on: FactTrail's defaults before the calibrated default (whose bases solve 0.00);
the default preset (``cxsim/FactTrail-v0``) is one code, a distractor and a revision."""
TASKS = 16
CHAT = WordChatFormat(default_tokenizer())


def dials(**on: Any) -> dict[str, Any]:
    """:data:`BARE` with the dials ``on``."""
    return {**BARE, **on}


def oracle_at_derived_budget(
    kwargs: dict[str, Any], protocol: str = "compacted", tasks: int = TASKS
) -> tuple[CompactionConfig, list[RolloutRecord]]:
    """The pre-flight's sizes under ``protocol`` (it raises if the strategy cannot serve the
    task), then the strategy's scripted agents on seeds 0 .. tasks - 1 at those sizes."""
    env = EnvConfig(env_id=ENV_ID, kwargs=kwargs)
    config = preflight(env, replace(DEFAULT_COMPACTION, protocol=protocol), CHAT)
    agents = config.strategy.scripted_agents(ENV_ID, CHAT, config=config)
    seeds = list(range(tasks))
    records = collect_rollouts(
        ENV_ID, kwargs, agents.actor, config, seeds, CHAT, agents.summarizer
    ).records
    return config, records


def oracle_episode(kwargs: dict[str, Any], seed: int) -> Episode:
    """The env's oracle on ``seed`` with full information (no window)."""
    env = gym.make(ENV_ID, **kwargs)
    return play(env, oracle_for(env), seed=seed)


def compaction_steps(transcript: str) -> list[int]:
    """The environment steps taken before each summary of a ``compacted`` rollout."""
    steps, out = 0, []
    for line in transcript.splitlines():
        if line.startswith("[assistant]"):
            steps += 1
        elif line.startswith("[summary"):
            out.append(steps)
    return out

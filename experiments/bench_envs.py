"""Benchmark: environment steps per second on one core.

Each env runs ``steps`` steps (resets included, as in a rollout loop) driven
by the scripted oracle or by uniformly random admissible actions; the agent's
own cost is included. The median of ``repeats`` timed runs is reported, with
the oracle's (or random agent's) success rate over the episodes it finished.
The speed target is ``--min-steps-per-s`` (1,000 steps/s per env, far below the
17k-97k measured in docs/environments.md: a rollout of a tiny model is then
bounded by the model, never by the env); the command exits 1 when an env is slower.

    cxsim bench envs --steps 100000
    cxsim bench envs --agent random --env-ids cxsim/SimRepo-v0
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gymnasium as gym
import tyro

import cxsim.envs
from cxsim.envs.scripted import Oracle, RandomAgent, oracle_for


@dataclass(frozen=True)
class Config:
    env_ids: tuple[str, ...] = (
        "cxsim/KeyRecall-v0",
        "cxsim/KeyRecallActive-v0",
        "cxsim/FactUpdate-v0",
        "cxsim/SimRepo-v0",
    )
    """Registered ids to time."""
    agent: Literal["oracle", "random"] = "oracle"
    """Who picks the actions: the scripted oracle or uniform random admissible actions."""
    steps: int = 50_000
    """Environment steps per timed run."""
    repeats: int = 3
    """Timed runs per env (after a short warm-up); the median is reported."""
    wrapped: bool = False
    """Time ``gym.make``'s wrappers too (order enforcing, passive checker) instead of
    the bare environment."""
    pin_core: int | None = 0
    """Pin the process to this CPU core (Linux); None leaves scheduling alone."""
    seed: int = 0
    min_steps_per_s: float | None = 1000.0
    """Speed target: exit 1 when an env runs fewer steps per second (None: no check)."""
    out: Path | None = None
    """Write the results as JSON here as well."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.repeats < 1:
            raise ValueError(f"steps ({self.steps}) and repeats ({self.repeats}) must be >= 1")
        unknown = [i for i in self.env_ids if i not in gym.registry]
        if unknown:
            raise ValueError(f"unknown env ids {unknown}; registered: cxsim/* from cxsim.envs")


def time_env(env: gym.Env, agent: Oracle, steps: int, seed: int) -> tuple[float, int, int]:
    """Run ``steps`` steps; return (seconds, finished episodes, successes)."""
    obs, info = env.reset(seed=seed)
    episodes = successes = 0
    start = time.perf_counter()
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
        if terminated or truncated:
            episodes += 1
            successes += info["success"]
            obs, info = env.reset()
    return time.perf_counter() - start, episodes, successes


def make_agent(config: Config, env: gym.Env, vocab: list[str]) -> Oracle:
    if config.agent == "oracle":
        return oracle_for(env)
    return RandomAgent(vocab, config.seed)


def bench(config: Config) -> list[dict[str, float | str]]:
    vocab = cxsim.envs.vocabulary()
    results = []
    for env_id in config.env_ids:
        env = gym.make(env_id)
        env = env if config.wrapped else env.unwrapped
        warmup = min(1000, config.steps)
        time_env(env, make_agent(config, env, vocab), warmup, config.seed)
        runs = [
            time_env(env, make_agent(config, env, vocab), config.steps, config.seed)
            for _ in range(config.repeats)
        ]
        seconds = statistics.median(r[0] for r in runs)
        episodes, successes = runs[0][1], runs[0][2]
        results.append(
            {
                "env_id": env_id,
                "agent": config.agent,
                "steps_per_s": config.steps / seconds,
                "episodes": episodes,
                "success_rate": successes / max(episodes, 1),
            }
        )
    return results


def main(argv: list[str] | None = None) -> None:
    config = tyro.cli(Config, args=argv)
    if config.pin_core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {config.pin_core})
    results = bench(config)
    print(f"{'env':32s} {'agent':7s} {'steps/s':>10s} {'episodes':>9s} {'success':>8s}")
    for r in results:
        print(
            f"{r['env_id']:32s} {r['agent']:7s} {r['steps_per_s']:10.0f} "
            f"{r['episodes']:9d} {r['success_rate']:8.3f}"
        )
    if config.out is not None:
        config.out.parent.mkdir(parents=True, exist_ok=True)
        config.out.write_text(json.dumps({"config": str(config), "results": results}, indent=2))
    floor = config.min_steps_per_s
    slow = [r["env_id"] for r in results if floor is not None and r["steps_per_s"] < floor]
    if slow:
        raise SystemExit(f"below the target of {floor:.0f} steps/s: {', '.join(map(str, slow))}")


if __name__ == "__main__":
    main()

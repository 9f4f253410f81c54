"""Bring your own environment: a Gymnasium text env with none of cxsim's info keys trains and
evaluates end to end through the CLI (docs/environments.md shows the same env)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import pytest

from cxsim.agents import build_policy, build_tokenizer
from cxsim.agents.models import save_policy
from cxsim.cli import main as cxsim
from cxsim.config import EnvConfig

LETTERS = "abcdefghijklmnopqrstuvwxyz "


class DoorsEnv(gym.Env):
    """Walk past ``length`` closed doors, then say ``open``: reward 1, else 0."""

    system_prompt = "walk on , then open the last door"

    def __init__(self, length: int = 4):
        self.length, self.t = length, 0
        self.observation_space = gym.spaces.Text(200, charset=LETTERS + ",.")
        self.action_space = gym.spaces.Text(50, charset=LETTERS)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "a corridor of doors", {}

    def step(self, action: str):
        self.t += 1
        if self.t <= self.length:
            return "a closed door", 0.0, False, False, {}
        return "the end", float(action.strip() == "open"), True, False, {}

    @staticmethod
    def vocabulary() -> list[str]:
        return sorted(
            set(f"{DoorsEnv.system_prompt} a corridor of doors closed door the end".split())
            | {"open", "walk"}
        )


if "mine/Doors-v0" not in gym.registry:
    gym.register("mine/Doors-v0", entry_point=DoorsEnv)

ENV_ID = f"{__name__}:mine/Doors-v0"  # gymnasium's module:id form, as on the command line
OWN = [
    "--env.env-id",
    ENV_ID,
    "--env.kwargs",
    "--compaction.budget",
    "140",
    "--compaction.threshold",
    "72",
    "--compaction.max-response-tokens",
    "8",
    "--compaction.max-summary-tokens",
    "32",
]  # fmt: skip  (no oracle to derive them from)


def test_own_env_trains_two_iterations_and_evaluates(tmp_path: Path):
    tokenizer = build_tokenizer(DoorsEnv.vocabulary())
    save_policy(build_policy("tiny", tokenizer, seed=0), tokenizer, tmp_path / "base")
    run_dir = tmp_path / "train"
    cxsim(["train", "--policy", str(tmp_path / "base"), "--run-dir", str(run_dir), *OWN,
           "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "1", "--ppo.critic-warmup", "1",
           "--ppo.minibatches", "1", "--no-progress-bar"])  # fmt: skip
    results = json.loads((run_dir / "results.json").read_text())
    assert results["iterations_done"] == 2
    last = results["history"][-1]
    assert math.isfinite(last["losses/policy"]) and last["losses/first_log_ratio_max"] < 1e-3
    assert last["compaction/summary_recall"] is None  # no ground truth: not measured (nan)
    out = tmp_path / "eval.json"
    cxsim(["eval", "--policy", results["policy"], "--out", str(out), *OWN,
           "--eval.episodes", "3"])  # fmt: skip
    rows = {r["protocol"]: r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {"single", "compacted"}
    assert all(0.0 <= r["pass_at_1"] <= 1.0 and r["episodes"] == 3 for r in rows.values())


class NumbersEnv(DoorsEnv):
    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Discrete(3)


def test_an_env_without_text_spaces_is_refused_before_any_work():
    if "mine/Numbers-v0" not in gym.registry:
        gym.register("mine/Numbers-v0", entry_point=NumbersEnv)
    with pytest.raises(ValueError, match=r"needs gymnasium\.spaces\.Text"):
        _ = EnvConfig(env_id=f"{__name__}:mine/Numbers-v0", kwargs={}).system_prompt

"""Bring your own environment: a Gymnasium text env with none of cxsim's info keys trains and
evaluates end to end through the CLI; its module is found in the current folder, by spawned
processes too; a word the policy's tokenizer lacks is an error naming it. (The example of
docs/environments.md runs as written in tests/test_docs_own_env.py.)"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from cxsim.agents import WordChatFormat, build_policy, build_tokenizer, compaction_words
from cxsim.agents.models import save_policy
from cxsim.cli import main as cxsim
from cxsim.compaction import CompactionConfig
from cxsim.config import EnvConfig
from cxsim.runtime import collect_rollouts
from cxsim.user_modules import put_cwd_on_path

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
    tokenizer = build_tokenizer([*DoorsEnv.vocabulary(), *compaction_words()])
    save_policy(build_policy("tiny", tokenizer, seed=0), tokenizer, tmp_path / "base")
    run_dir = tmp_path / "train"
    # a model that knows nothing fails every rollout: --ppo.no-skip-uniform-batches, so the
    # actor steps
    cxsim(["train", "--policy", str(tmp_path / "base"), "--run-dir", str(run_dir), *OWN,
           "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "1", "--ppo.critic-warmup", "1",
           "--ppo.minibatches", "1", "--ppo.no-skip-uniform-batches",
           "--no-progress-bar"])  # fmt: skip
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


SIZES = CompactionConfig(budget=140, threshold=72, max_response_tokens=8, max_summary_tokens=32)


class _SilentAgent:
    """Answers every turn with the end token alone (an empty action or summary)."""

    def __init__(self, chat: WordChatFormat):
        self.chat = chat

    def respond(self, requests):
        from cxsim.agent_api import TurnResponse

        end = self.chat.end_id
        return [TurnResponse([end], [0.0], "", True) for _ in requests]


def test_a_word_of_the_env_vocabulary_the_tokenizer_lacks_is_named_before_any_rollout():
    words = sorted({*DoorsEnv.vocabulary(), *compaction_words()})
    lacking, chat = words[:3], WordChatFormat(build_tokenizer(words[3:]))
    with pytest.raises(ValueError, match="lacks 3 word") as error:
        collect_rollouts(ENV_ID, {}, _SilentAgent(chat), SIZES, [0], chat)
    message = str(error.value)
    assert all(repr(word) in message for word in lacking), message
    assert "build_tokenizer" in message and "compaction_words()" in message


class SurpriseEnv(DoorsEnv):
    """Says a word its vocabulary() does not list, at the second step."""

    def step(self, action: str):
        obs, *rest = super().step(action)
        return ("a zebra walks by" if self.t == 2 else obs), *rest


def test_an_observation_word_the_tokenizer_lacks_is_an_error_when_it_arrives():
    if "mine/Surprise-v0" not in gym.registry:
        gym.register("mine/Surprise-v0", entry_point=SurpriseEnv)
    chat = WordChatFormat(build_tokenizer([*DoorsEnv.vocabulary(), *compaction_words()]))
    env_id = f"{__name__}:mine/Surprise-v0"
    words = r"lacks 3 word\(s\) of the text 'a zebra walks by': 'by', 'walks', 'zebra';"
    with pytest.raises(ValueError, match=words):
        collect_rollouts(env_id, {}, _SilentAgent(chat), SIZES, [0], chat)


def test_the_word_check_lets_a_tokenizer_with_every_word_through():
    chat = WordChatFormat(build_tokenizer([*DoorsEnv.vocabulary(), *compaction_words()]))
    batch = collect_rollouts(ENV_ID, {}, _SilentAgent(chat), SIZES, [0, 1], chat)
    assert [r.end_reason for r in batch.records] == ["terminated", "terminated"]


CWD_MODULE = """
import gymnasium as gym


class CwdEnv(gym.Env):
    observation_space = gym.spaces.Text(20)
    action_space = gym.spaces.Text(20)


gym.register("mine/Cwd-v0", entry_point=CwdEnv)
"""


def test_a_module_in_the_current_folder_is_found_here_and_in_spawned_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The ``cxsim`` console script does not search the current folder (its sys.path starts at
    the script's folder): ``module:id`` still finds a module there, and so do spawned workers,
    which start with the parent's sys.path."""
    (tmp_path / "cwd_env_module.py").write_text(CWD_MODULE)
    monkeypatch.chdir(tmp_path)
    here = {os.path.realpath(str(tmp_path)), ""}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if os.path.realpath(p) not in here])
    monkeypatch.delitem(sys.modules, "cwd_env_module", raising=False)
    with pytest.raises(ModuleNotFoundError):
        __import__("cwd_env_module")

    EnvConfig(env_id="cwd_env_module:mine/Cwd-v0", kwargs={})
    assert sys.path[-1] == str(tmp_path)
    assert put_cwd_on_path() == str(tmp_path) and sys.path.count(str(tmp_path)) == 1
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        made = pool.apply(gym.make, ("cwd_env_module:mine/Cwd-v0",))  # imports it there
    assert type(made.unwrapped).__module__ == "cwd_env_module"

"""Scripted agents for every cxsim environment, text in / text out like a model.

* Each environment class declares its family (``cxsim.envs.family.EnvFamily``): the oracle
  and the summary writer below are the shipped families' parts. ``oracle_for(env)``
  returns a fresh oracle of ``env``'s family, whose ``act(observation, info)`` solves the
  environment. It decides from ``info`` alone (ground truth and the state snapshot), so it
  keeps acting correctly after any compaction.
* ``ScriptedSummarizer(omission_rate, seed, family).summarize(context_text, info)``
  writes a short summary with the family's writer: each needed fact whose current value
  is still a word of ``context_text`` is kept with probability ``1 - omission_rate`` (a
  fact the context lost is never recovered), plus the goal and any open question, since
  the rebuilt context may lack the task text.
* ``summary_recall(summary, info)`` says, per needed fact already shown when the
  summary was written, whether the summary holds its current value as a whole word.
* ``fact_types(info)`` says, per needed fact already shown, what kind of fact it is at that
  moment (``key`` or ``revised``), for survival by type (``cxsim.diagnostics.survival``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from cxsim.envs.family import EnvFamily, Oracle, family_of, require_family


class CorridorOracle:
    """KeyRecall / FactUpdate: open the box if offered, walk on, answer the latest values."""

    skippable: ClassVar[dict[str, str]] = {"open box": "next"}
    """Optional actions, each with what to do instead when a demonstration skips it."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        state = info["state"]
        if "open box" in info["admissible_actions"]:
            return "open box"
        if state["phase"] == "query":
            return "answer " + info["key_facts"][state["query_fact"]]
        return "next"


class TrailOracle(CorridorOracle):
    """FactTrail: as the corridor oracle, and at a door row or a gate the action it asks for
    (``state["expects"]``) with the value of the fact it needs (``open k5``, ``pass k9``)."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        state = info["state"]
        if state.get("expects"):
            return f"{state['expects']} {info['key_facts'][state['expects_fact']]}"
        return super().act(observation, info)


class SimRepoOracle:
    """SimRepo: look around, run the tests, view the bug, list patches, edit, re-test, submit."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        state = info["state"]
        if not state["listed"]:
            return "ls"
        if info["fact_shown_step"]["location"] < 0:
            return "run_tests"
        if not state["viewed"]:
            line = state["bug_line"]
            return f"view {state['bug_file']} {max(1, line - 2)} {line + 2}"
        if not state["patches"]:
            return "patches"
        if state["applied"] != info["key_facts"]["patch"]:
            return f"edit {info['key_facts']['patch']}"
        if not state["tested_edit"]:
            return "run_tests"
        return "submit"


def has_oracle(env: gym.Env) -> bool:
    """Whether ``env`` (wrapped or not) declares a family, and so a scripted oracle."""
    return family_of(env) is not None


def oracle_for(env: gym.Env) -> Oracle:
    """A fresh oracle of ``env``'s family (``env`` wrapped or not; a ValueError when it
    declares none)."""
    name = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    return require_family(env, name).oracle()


class RandomAgent:
    """Uniform over the admissible actions; with probability ``garbage_rate`` a
    random string of vocabulary words (or nothing) instead."""

    def __init__(self, vocab: list[str], seed: int = 0, garbage_rate: float = 0.0) -> None:
        self.vocab = vocab
        self.garbage_rate = garbage_rate
        self.rng = np.random.default_rng(seed)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        actions = info["admissible_actions"]
        if not actions or self.rng.random() < self.garbage_rate:
            n = int(self.rng.integers(0, 4))
            return " ".join(self.vocab[i] for i in self.rng.integers(len(self.vocab), size=n))
        return actions[int(self.rng.integers(len(actions)))]


@dataclass
class Episode:
    """One episode: the task, then per step the action, observation, reward and info."""

    task: str
    reset_info: dict[str, Any]
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False

    @property
    def success(self) -> bool:
        return bool(self.infos[-1]["success"]) if self.infos else False

    def transcript(self) -> str:
        lines = [f"task: {self.task}"]
        for action, obs in zip(self.actions, self.observations, strict=True):
            lines += [f"> {action}", obs]
        return "\n".join(lines)


def play(
    env: gym.Env, agent: Oracle, seed: int | None = None, options: dict[str, Any] | None = None
) -> Episode:
    """Run one episode of ``agent`` (oracle, random, ...) on ``env`` to its end (reset with
    ``seed`` and ``options``)."""
    obs, info = env.reset(seed=seed, options=options)
    episode = Episode(task=obs, reset_info=info)
    while True:
        action = agent.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        episode.actions.append(action)
        episode.observations.append(obs)
        episode.rewards.append(float(reward))
        episode.infos.append(info)
        if terminated or truncated:
            episode.terminated, episode.truncated = terminated, truncated
            return episode


# -- summaries -------------------------------------------------------------------------

KEY_GOAL = "goal : walk on with next . at the end , say answer and the key ."
CODE_GOAL = "goal : walk on with next . answer each question with the latest code ."
REPO_GOAL = "goal : run_tests to find the bug , edit the patch at the bug , run_tests , submit ."


def key_recall_summary(kept: dict[str, str], info: dict[str, Any]) -> str:
    """The key (``unknown`` when lost), the goal, and the question once it is asked."""
    fact = f"the key is {kept['key']} ." if "key" in kept else "the key is unknown ."
    parts = ["summary :", fact, KEY_GOAL]
    if info["state"]["phase"] == "query":
        parts.append("question : what is the key ?")
    return " ".join(parts)


def _with_code_question(parts: list[str], info: dict[str, Any]) -> str:
    """A code family's summary ends alike: the goal, then the question once it is asked."""
    parts.append(CODE_GOAL)
    if info["state"]["phase"] == "query":
        parts.append(f"question : what is the {info['state']['query_fact']} code ?")
    return " ".join(parts)


def fact_update_summary(kept: dict[str, str], info: dict[str, Any]) -> str:
    """Each code (``unknown`` when lost), the goal, and the question once it is asked."""
    parts = ["summary :"]
    for name in info["needed_facts"]:
        value = kept.get(name, "unknown")
        parts.append(f"the {name} code is {value} .")
    return _with_code_question(parts, info)


def fact_trail_summary(kept: dict[str, str], info: dict[str, Any]) -> str:
    """Each code (``unknown`` when lost), each door and gate word still needed that is kept."""
    parts = ["summary :"]
    for name in info["needed_facts"]:
        if name.endswith(" door"):
            if name in kept:
                parts.append(f"the {name.split()[0]} code is behind door {kept[name]} .")
        elif name.startswith("gate "):
            if name in kept:
                parts.append(f"the gate word is {kept[name]} .")
        else:
            parts.append(f"the {name} code is {kept.get(name, 'unknown')} .")
    return _with_code_question(parts, info)


def sim_repo_summary(kept: dict[str, str], info: dict[str, Any]) -> str:
    """Where the bug is and the fix (``unknown`` when lost), the patch applied, the goal."""
    parts = ["summary :", f"the bug is at {kept.get('location', 'unknown')} ."]
    parts.append(f"the fix is {kept.get('patch', 'unknown')} .")
    if info["state"]["applied"] is not None:
        parts.append(f"applied {info['state']['applied']} .")
    parts.append(REPO_GOAL)
    return " ".join(parts)


KEY_SUMMARY_WORDS = f"summary : the key is unknown . question : what ? {KEY_GOAL}".split()
"""Every word :func:`key_recall_summary` writes besides the key."""
CODE_SUMMARY_WORDS = f"summary : the code is unknown . question : what ? {CODE_GOAL}".split()
"""Every word :func:`fact_update_summary` writes besides the codes and the facts' names."""
TRAIL_SUMMARY_WORDS = [*CODE_SUMMARY_WORDS, "behind", "door", "gate", "word"]
"""Every word :func:`fact_trail_summary` writes besides the codes, doors, gate words and names."""
REPO_SUMMARY_WORDS = f"summary : the bug is at unknown . fix applied {REPO_GOAL}".split()
"""Every word :func:`sim_repo_summary` writes besides the location and the patches."""


class ScriptedSummarizer:
    """Summaries with a controllable omission rate, written by ``family``'s summary writer
    (see module docstring; without a family it cannot summarize: a ValueError says so)."""

    def __init__(
        self, omission_rate: float = 0.0, seed: int = 0, family: EnvFamily | None = None
    ) -> None:
        if not 0.0 <= omission_rate <= 1.0:
            raise ValueError(f"omission_rate={omission_rate} must be in [0, 1]")
        self.omission_rate = omission_rate
        self.rng = np.random.default_rng(seed)
        self.family = family

    def summarize(self, context_text: str, info: dict[str, Any]) -> str:
        if self.family is None:
            raise ValueError(
                "the scripted summarizer has no summary writer: its environment declares no "
                "EnvFamily (pass family=cxsim.envs.family_of(env))"
            )
        present = set(context_text.split())
        kept = {}
        facts = info.get("key_facts", {})
        for name in info.get("needed_facts", ()):
            value = facts[name]
            # Draw for every present fact so the RNG stream does not depend on the rate.
            if value in present and self.rng.random() >= self.omission_rate:
                kept[name] = value
        return self.family.summary(kept, info)


def shown_facts(info: dict[str, Any]) -> list[str]:
    """The needed facts already shown by ``info``'s step: ``0 <= fact_shown_step <= step``
    (-1 marks a fact not shown yet). Without ``fact_shown_step`` (an env that gives only
    ``key_facts`` and ``needed_facts``) every needed fact counts."""
    shown = info.get("fact_shown_step")
    if shown is None:
        return list(info["needed_facts"])
    step = info.get("step", float("inf"))
    return [name for name in info["needed_facts"] if 0 <= shown.get(name, -1) <= step]


def summary_recall(summary: str, info: dict[str, Any]) -> dict[str, bool]:
    """Needed fact name -> whether ``summary`` holds its current value as a whole word, over
    the needed facts shown before the summary was written (``info`` is the one at that
    moment; `shown_facts`): a fact the episode has not shown yet is no summary's to keep."""
    words = set(summary.split())
    return {name: info["key_facts"][name] in words for name in shown_facts(info)}


KEY, REVISED = "key", "revised"
"""Fact types of the built-in environments (:func:`fact_types`): a value stated once and
unchanged so far; a value the episode has changed since it was first shown."""


def fact_types(info: dict[str, Any]) -> dict[str, str]:
    """Needed fact name -> its type at ``info``'s moment, over the needed facts shown so far
    (`shown_facts`, as :func:`summary_recall`): ``revised`` once ``fact_revised_steps`` holds
    a revision of it (its current value is not the first one shown), else ``key``."""
    revised = info.get("fact_revised_steps") or {}
    return {name: REVISED if revised.get(name) else KEY for name in shown_facts(info)}

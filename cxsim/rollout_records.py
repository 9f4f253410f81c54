"""Per-rollout records: what the runtime (``cxsim.runtime``) reports of each episode it ran.

``RolloutRecord`` holds one rollout's outcome (success, return, how and why it ended), its
turns, compactions and child windows, the text of its summaries with their recall, its token
counts and its transcript; diagnostics, evaluation, tracking and compute accounting read it
(``cxsim.diagnostics`` also take dicts with the same keys). ``recall_hook`` says how a summary
is scored against the environment's ground truth: its own ``summary_recall`` method, else
cxsim's ``key_facts`` / ``needed_facts`` info keys, else not at all (no recall recorded);
``stated_hook`` says which facts a summary states a value for, right or wrong;
``fact_types_hook`` what type each needed fact has when a summary is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym

from cxsim.envs.scripted import summary_recall

EndReason = Literal[
    "terminated", "env_truncated", "window_full", "max_turns", "observation_overflow"
]

RecallHook = Callable[[str, dict[str, Any]], dict[str, bool]]
"""``(summary text, info) -> {needed fact: kept its current value}``."""
StatedHook = Callable[[str, dict[str, Any]], dict[str, bool]]
"""``(summary text, info) -> {needed fact: states a value of its kind, right or wrong}``."""
FactTypesHook = Callable[[dict[str, Any]], dict[str, str]]
"""``info -> {needed fact shown so far: its type}`` (``key``, ``revised``, ...)."""


def recall_hook(env: gym.Env) -> RecallHook | None:
    """How to score a summary against the environment's ground truth, if it has any: its own
    ``summary_recall`` method, else cxsim's ``key_facts`` / ``needed_facts`` info keys."""
    own = getattr(env.unwrapped, "summary_recall", None)
    if callable(own):
        return own
    return _info_recall


def stated_hook(env: gym.Env) -> StatedHook | None:
    """How to read which needed facts a summary states a value for, right or wrong: the
    environment's own ``summary_stated`` method, else not at all. What a reader of the summary
    can see: it tells a summary that says ``the key is k3`` from one that says ``unknown``, not
    a right key from a wrong one (``summary_recall`` does)."""
    own = getattr(env.unwrapped, "summary_stated", None)
    return own if callable(own) else None


def fact_types_hook(env: gym.Env) -> FactTypesHook | None:
    """What type each needed fact has when a summary is written (``cxsim.diagnostics.survival``
    counts survival per type): the environment's own ``fact_types(info)`` method, else not at
    all (every fact then has the type ``fact``)."""
    own = getattr(env.unwrapped, "fact_types", None)
    return own if callable(own) else None


def _info_recall(summary: str, info: dict[str, Any]) -> dict[str, bool] | None:
    if "key_facts" in info and "needed_facts" in info:
        return summary_recall(summary, info)
    return None


@dataclass
class RolloutRecord:
    """What happened in one rollout (diagnostics, evaluation, compute accounting)."""

    rollout_id: int
    seed: int
    success: bool
    reward: float
    """The episode's return: every reward of the environment, summed."""
    terminated: bool
    """The environment ended the episode (solved or failed by its own rules)."""
    truncated: bool
    """The episode was cut: by the environment's time limit or by the runtime."""
    end_reason: EndReason
    turns: int
    compactions: int
    summaries: list[str]
    """Text of each summary, in order (also those another agent wrote)."""
    summary_recall: list[dict[str, bool]]
    """Per summary: needed fact -> the summary kept its value at that time (empty when the
    environment has no ground truth to score summaries against)."""
    tokens_generated: int
    """Tokens sampled by the agents: responses and summaries, end tokens included."""
    tokens_prefilled: int
    """Tokens the agents had to encode that they did not generate (the ``append`` chunks)."""
    tokens_summarised: int
    """Summary tokens written (a part of ``tokens_generated``)."""
    peak_context: int
    """Longest context of the rollout (window, or summary prompt + summary), in tokens."""
    group_id: int = -1
    transcript: str = ""
    model_calls: int = 0
    """Requests the agents answered: actions, summaries and any state or note they wrote."""
    branches: int = 0
    """Child windows opened (a strategy's ``branch`` moves); 0 for a chain of windows."""
    summary_stated: list[dict[str, bool]] = field(default_factory=list)
    """Per summary: needed fact -> the summary states a value of its kind, right or wrong
    (``stated_hook``; empty when the environment cannot say)."""
    summary_fact_types: list[dict[str, str]] = field(default_factory=list)
    """Per summary with recall (as ``summary_recall``): needed fact -> its type when the summary
    was written (``fact_types_hook``; empty when the environment cannot say)."""

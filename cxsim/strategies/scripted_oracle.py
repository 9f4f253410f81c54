"""Scripted agents: the environment's oracle behind the LM agent's interface (``cxsim.agent_api.Agent``).

They answer turn requests with text from the scripted oracle and summary writer the
environment's family declares (``cxsim.envs.family``), encoded with the chat format and
ended with ``chat.end_id``; their log-probs are 0. Rollouts of them are the SFT data:
the trainable tokens of their segments are exactly the scripted actions and
summaries.

The environment oracles decide from the ground truth in ``info``. An agent
under compaction must act from what its context still holds, so
``ScriptedAgent`` grounds every action in the context: an action that names
the current value of a needed fact the context text no longer contains is
replaced by a uniform guess among the admissible actions of the same shape
(the same words except that value). A lost fact then costs exactly what it
costs a perfect reader: a guess.

Every strategy's scripted agents start from :class:`ScriptedAgent`
(:meth:`cxsim.strategies.rollout_agents.ScriptedOptions.oracle`); a strategy that decides
more than the oracle does wraps it with its own oracle, in its own module
(``CompactingOracle`` in ``self_compaction.py``, ``FoldingOracle`` in ``folding.py``,
``NotingOracle`` in ``memory_notes.py``). This module imports no agent of
``cxsim.agents`` (``cxsim.agents.scripted`` re-exports these names), so the strategies never
import back up into the agents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

import cxsim.envs  # noqa: F401  (registers the cxsim/* environment ids)
from cxsim.agent_api import TurnRequest, TurnResponse
from cxsim.envs import vocabulary
from cxsim.envs.family import EnvFamily, require_family
from cxsim.envs.scripted import Oracle, ScriptedSummarizer
from cxsim.envs.scripted import RandomAgent as RandomPolicy

if TYPE_CHECKING:
    from cxsim.agents.chat import ChatFormat


def ground_action(
    action: str, context_text: str, info: dict[str, Any], rng: np.random.Generator
) -> str:
    """``action`` if every needed fact value it names is in ``context_text``, else a guess.

    The guess is uniform over the admissible actions that agree with ``action``
    on every word except the positions holding lost fact values.
    """
    words = action.split()
    present = set(context_text.split())
    facts = info.get("key_facts", {})
    values = {facts[name] for name in info.get("needed_facts", ())}
    lost = [i for i, w in enumerate(words) if w in values and w not in present]
    if not lost:
        return action
    candidates = [
        a
        for a in info.get("admissible_actions", ())
        if len(a.split()) == len(words)
        and all(
            w == v for i, (w, v) in enumerate(zip(a.split(), words, strict=True)) if i not in lost
        )
    ]
    return candidates[int(rng.integers(len(candidates)))] if candidates else action


class _TextAgent:
    """Shared plumbing: text per request -> tokens ended by ``end_id`` (cut at the cap)."""

    def __init__(self, chat: ChatFormat, omission_rate: float, seed: int, family: EnvFamily | None):
        self.chat = chat
        self.summarizer = ScriptedSummarizer(omission_rate, seed, family)
        self.rng = np.random.default_rng(seed)

    def act(self, request: TurnRequest) -> str:
        raise NotImplementedError

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        responses = []
        for request in requests:
            if request.kind == "summarize":
                text = self.summarizer.summarize(request.context_text, request.info)
            else:
                text = self.act(request)
            ids = [*self.chat.encode(text), self.chat.end_id][: request.max_new_tokens]
            responses.append(TurnResponse.scripted(ids, self.chat))
        return responses


class ScriptedAgent(_TextAgent):
    """The environment's oracle, grounded in the context (see module docstring), with the
    scripted summarizer; ``epsilon`` > 0 makes it a noisy oracle (a uniformly random
    admissible action with that probability); ``skip_rate`` > 0 makes it skip each optional
    action of its oracle (``skippable``: KeyRecallActive's ``open box``) with that
    probability, doing the oracle's stand-in instead."""

    def __init__(
        self,
        env_id: str,
        chat: ChatFormat,
        omission_rate: float = 0.0,
        seed: int = 0,
        epsilon: float = 0.0,
        skip_rate: float = 0.0,
    ):
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon ({epsilon}) must be in [0, 1]")
        if not 0.0 <= skip_rate <= 1.0:
            raise ValueError(f"skip_rate ({skip_rate}) must be in [0, 1]")
        self.env = gym.make(env_id)  # only for its family
        self.family = require_family(self.env, env_id)
        super().__init__(chat, omission_rate, seed, self.family)
        self.epsilon = epsilon
        self.skip_rate = skip_rate
        self.oracles: dict[int, Oracle] = {}

    def act(self, request: TurnRequest) -> str:
        info = request.info
        if request.row not in self.oracles or info.get("step") == 0:
            self.oracles[request.row] = self.family.oracle()
        observation = self.chat.decode(request.append)
        oracle = self.oracles[request.row]
        action = oracle.act(observation, info)
        instead = getattr(oracle, "skippable", {}).get(action)
        if instead is not None and self.skip_rate and self.rng.random() < self.skip_rate:
            action = instead
        if self.epsilon and self.rng.random() < self.epsilon and info.get("admissible_actions"):
            actions = info["admissible_actions"]
            action = actions[int(self.rng.integers(len(actions)))]
        return ground_action(action, request.context_text, info, self.rng)


class RandomAgent(_TextAgent):
    """A uniformly random admissible action (with probability ``garbage_rate`` random
    vocabulary words instead); its summaries, written by ``family``'s writer, keep no fact
    (omission rate 1; without a family it cannot summarize)."""

    def __init__(
        self,
        chat: ChatFormat,
        seed: int = 0,
        garbage_rate: float = 0.0,
        family: EnvFamily | None = None,
    ):
        super().__init__(chat, omission_rate=1.0, seed=seed, family=family)
        self.policy = RandomPolicy(vocabulary(), seed=seed, garbage_rate=garbage_rate)

    def act(self, request: TurnRequest) -> str:
        return self.policy.act(self.chat.decode(request.append), request.info)

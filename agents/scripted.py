"""Scripted agents behind the LM agent's interface (``cxsim.agent_api.Agent``).

They answer turn requests with text from the environments' scripted policies
(``cxsim.envs.scripted``), encoded with the chat format and ended with
``chat.end_id``; their log-probs are 0. Rollouts of them are the SFT data:
the trainable tokens of their segments are exactly the scripted actions and
summaries.

The environment oracles decide from the ground truth in ``info``. An agent
under compaction must act from what its context still holds, so
``ScriptedAgent`` grounds every action in the context: an action that names
the current value of a needed fact the context text no longer contains is
replaced by a uniform guess among the admissible actions of the same shape
(the same words except that value). A lost fact then costs exactly what it
costs a perfect reader: a guess.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

import cxsim.envs  # noqa: F401  (registers the cxsim/* environment ids)
from cxsim.agent_api import Agent, TurnRequest, TurnResponse
from cxsim.agents.chat import ChatFormat
from cxsim.envs import vocabulary
from cxsim.envs.scripted import Oracle, ScriptedSummarizer, oracle_for
from cxsim.envs.scripted import RandomAgent as RandomPolicy
from cxsim.strategies.base import TurnState


def ground_action(
    action: str, context_text: str, info: dict[str, Any], rng: np.random.Generator
) -> str:
    """``action`` if every needed fact value it names is in ``context_text``, else a guess.

    The guess is uniform over the admissible actions that agree with ``action``
    on every word except the positions holding lost fact values.
    """
    words = action.split()
    present = set(context_text.split())
    values = {info["key_facts"][name] for name in info["needed_facts"]}
    lost = [i for i, w in enumerate(words) if w in values and w not in present]
    if not lost:
        return action
    candidates = [
        a
        for a in info["admissible_actions"]
        if len(a.split()) == len(words)
        and all(
            w == v for i, (w, v) in enumerate(zip(a.split(), words, strict=True)) if i not in lost
        )
    ]
    return candidates[int(rng.integers(len(candidates)))] if candidates else action


class _TextAgent:
    """Shared plumbing: text per request -> tokens ended by ``end_id`` (cut at the cap)."""

    def __init__(self, chat: ChatFormat, omission_rate: float, seed: int):
        self.chat = chat
        self.summarizer = ScriptedSummarizer(omission_rate=omission_rate, seed=seed)
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
            responses.append(
                TurnResponse(
                    token_ids=ids,
                    logprobs=[0.0] * len(ids),
                    text=self.chat.decode(ids),
                    finished=ids[-1] == self.chat.end_id,
                )
            )
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
        super().__init__(chat, omission_rate, seed)
        self.env = gym.make(env_id)  # only names the oracle class
        self.epsilon = epsilon
        self.skip_rate = skip_rate
        self.oracles: dict[int, Oracle] = {}

    def act(self, request: TurnRequest) -> str:
        info = request.info
        if request.row not in self.oracles or info["step"] == 0:
            self.oracles[request.row] = oracle_for(self.env)
        observation = self.chat.decode(request.append)
        oracle = self.oracles[request.row]
        action = oracle.act(observation, info)
        instead = getattr(oracle, "skippable", {}).get(action)
        if instead is not None and self.skip_rate and self.rng.random() < self.skip_rate:
            action = instead
        if self.epsilon and self.rng.random() < self.epsilon and info["admissible_actions"]:
            actions = info["admissible_actions"]
            action = actions[int(self.rng.integers(len(actions)))]
        return ground_action(action, request.context_text, info, self.rng)


class RandomAgent(_TextAgent):
    """A uniformly random admissible action (with probability ``garbage_rate`` random
    vocabulary words instead); its summaries keep no fact (omission rate 1)."""

    def __init__(self, chat: ChatFormat, seed: int = 0, garbage_rate: float = 0.0):
        super().__init__(chat, omission_rate=1.0, seed=seed)
        self.policy = RandomPolicy(vocabulary(), seed=seed, garbage_rate=garbage_rate)

    def act(self, request: TurnRequest) -> str:
        return self.policy.act(self.chat.decode(request.append), request.info)


class CompactingOracle:
    """A scripted agent that also decides when to compact (``self-compaction``): before an
    ``act`` request for which ``asks(turn)`` holds it answers ``request_text`` (the strategy's
    compaction request) instead of asking ``agent`` for an action; every other request goes
    to ``agent``.

    It follows each row's context from its requests and its own responses, as an LM agent's
    cache does: ``turn`` is the window's length before the assistant header, the compactions
    since the episode began (a window restarted right after a summary request) and the
    actions sent to the environment since the window restarted.
    """

    def __init__(
        self,
        agent: Agent,
        chat: ChatFormat,
        request_text: str,
        asks: Callable[[TurnState], bool],
    ):
        self.agent = agent
        self.chat = chat
        self.request = [*chat.encode(request_text), chat.end_id]
        self.header = len(chat.assistant_prefix())
        self.asks = asks
        self.rows: dict[int, _Followed] = {}

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        decided: list[TurnResponse | None] = []
        for request in requests:
            row = self.follow(request)
            turn = TurnState(row.length - self.header, row.compactions, row.new_steps)
            if request.kind == "act" and self.asks(turn):
                ids = self.request[: request.max_new_tokens]
                text = self.chat.decode(ids)
                decided.append(
                    TurnResponse(ids, [0.0] * len(ids), text, ids[-1] == self.chat.end_id)
                )
            else:
                decided.append(None)
        passed = [r for r, d in zip(requests, decided, strict=True) if d is None]
        answers = iter(self.agent.respond(passed) if passed else [])
        responses = [d if d is not None else next(answers) for d in decided]
        for request, response, decision in zip(requests, responses, decided, strict=True):
            row = self.rows[request.row]
            row.length += len(response.token_ids)
            row.new_steps += int(request.kind == "act" and decision is None)
            row.last = request.kind
        return responses

    def follow(self, request: TurnRequest) -> _Followed:
        """The row's state once ``request`` is appended to its context."""
        row = self.rows.setdefault(request.row, _Followed())
        if request.reset:
            row.compactions = row.compactions + 1 if row.last == "summarize" else 0
            row.length = row.new_steps = 0
        row.length += len(request.append)
        return row


@dataclass
class _Followed:
    """What ``CompactingOracle`` knows of one row's context."""

    length: int = 0
    compactions: int = 0
    new_steps: int = 0
    last: str = ""


class FoldingOracle:
    """A scripted agent that also opens and closes child windows (``folding``): every request
    goes to ``agent``; for an ``act`` request, ``move(request, proposed)`` may replace the
    proposed action's text with another response (the strategy's branching call or its
    return word), which is encoded, ended with ``chat.end_id`` and cut to the request's cap
    (a branching call drops trailing goal words first)."""

    def __init__(
        self,
        agent: Agent,
        chat: ChatFormat,
        move: Callable[[TurnRequest, str], str | None],
    ):
        self.agent = agent
        self.chat = chat
        self.move = move

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        responses = self.agent.respond(requests)
        out = []
        for request, response in zip(requests, responses, strict=True):
            text = self.move(request, response.text) if request.kind == "act" else None
            out.append(response if text is None else self.answer(text, request.max_new_tokens))
        return out

    def answer(self, text: str, cap: int) -> TurnResponse:
        words = text.split()
        while len(words) > 1 and len(self.chat.encode(" ".join(words))) + 1 > cap:
            words.pop()  # the goal's last words, so that the call ends within the cap
        ids = [*self.chat.encode(" ".join(words)), self.chat.end_id][:cap]
        return TurnResponse(
            ids, [0.0] * len(ids), self.chat.decode(ids), ids[-1] == self.chat.end_id
        )


class NotingOracle:
    """A scripted agent that also keeps notes (``memory-notes``): before an ``act`` request,
    ``note(request, noted)`` may name a fact to note, (fact, value, words), given the row's
    notes so far in the episode (``noted``: (fact, value) in order); it then answers
    ``<note_word> <words>`` (ended by ``chat.end_id``) instead of asking ``agent``, if that
    fits the request's cap. Every other request goes to ``agent``. A row's notes restart
    with its episode (a request that resets the context before the first step)."""

    def __init__(
        self,
        agent: Agent,
        chat: ChatFormat,
        note_word: str,
        note: Callable[[TurnRequest, list[tuple[str, str]]], tuple[str, str, str] | None],
    ):
        self.agent = agent
        self.chat = chat
        self.note_word = note_word
        self.note = note
        self.noted: dict[int, list[tuple[str, str]]] = {}

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        decided: list[TurnResponse | None] = []
        for request in requests:
            if request.reset and request.info.get("step") == 0:
                self.noted[request.row] = []
            noted = self.noted.setdefault(request.row, [])
            fact = self.note(request, noted) if request.kind == "act" else None
            ids = [] if fact is None else self.encoded(f"{self.note_word} {fact[2]}")
            if fact is None or len(ids) > request.max_new_tokens:
                decided.append(None)
                continue
            noted.append((fact[0], fact[1]))
            decided.append(TurnResponse(ids, [0.0] * len(ids), self.chat.decode(ids), True))
        passed = [r for r, d in zip(requests, decided, strict=True) if d is None]
        answers = iter(self.agent.respond(passed) if passed else [])
        return [d if d is not None else next(answers) for d in decided]

    def encoded(self, text: str) -> list[int]:
        return [*self.chat.encode(text), self.chat.end_id]

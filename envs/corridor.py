"""The corridor engine behind KeyRecall and FactUpdate.

Time: ``reset`` shows the task at step 0; action ``t`` produces observation
``t``. Facts are shown at step ``s0`` (0, or 1 when an early action reveals
them), the corridor runs through step ``q - 1`` and the first question is
shown at step ``q = s0 + memory_length``. The world clock never waits: a
malformed action in the corridor gets an error line followed by that step's
corridor text, so every fact, revision and decoy is still delivered on time
and the memory length is exact whatever the agent does.

Questions are answered one per action (``answer <value>``). With
``credit_length = c`` the reward arrives ``c`` actions after the last answer
(an epilogue of ``next``), so the decisive action and its reward are ``c``
steps apart. All corridor text is generated at reset: ``step`` only indexes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cxsim.envs.base import TextEnv, corrupt, draw_lengths, words_of
from cxsim.envs.scripted import fact_types, shown_facts

MAX_VALUES = 32
VALUES = tuple(f"k{i}" for i in range(1, MAX_VALUES + 1))
MIN_WORDS = 3

FILLER_SENTENCES = (
    "you walk down a long hall .",
    "the lamp on the wall flickers .",
    "a cold wind moves the dust .",
    "you pass a row of old doors .",
    "water drips from the roof .",
    "a rat runs past your feet .",
    "the floor is made of gray stone .",
    "you hear steps far away .",
    "a torch burns low in its holder .",
    "the hall turns to the left .",
    "there is a painting of a ship .",
    "an empty chair stands by the wall .",
    "the air smells of smoke and rain .",
    "you see a window with no glass .",
    "a bell rings somewhere above you .",
    "the path goes on into the dark .",
    "moss grows between the stones .",
    "a small table holds a cup .",
    "you step over a broken plank .",
    "the walls are covered in old maps .",
)
ENDING_WORDS = words_of("noted . walk on with next to finish . done : correct wrong .")
CORRIDOR_ERRORS = (
    "no question yet",
    "answer the question",
    "not allowed now",
    "the box is behind you",
)


def _filler_stream(seed: int = 0, repeats: int = 12) -> tuple[list[str], list[int]]:
    """A fixed shuffled stream of filler sentences and the word index where each starts;
    corridor text is a slice that starts at a sentence."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(FILLER_SENTENCES)) for _ in range(repeats)])
    words: list[str] = []
    starts: list[int] = []
    for i in order:
        starts.append(len(words))
        words.extend(FILLER_SENTENCES[i].split())
    return words, starts


FILLER, FILLER_STARTS = _filler_stream()


@dataclass
class Plan:
    """What an episode will show, drawn at reset by the concrete environment."""

    task: str
    facts: dict[str, str]
    needed: list[str]
    questions: list[str]  # one question text per needed fact, in order
    s0: int
    # corridor step -> sentences to weave in; step -> (fact, new value)
    events: dict[int, list[str]] = field(default_factory=dict)
    revisions: dict[int, list[tuple[str, str]]] = field(default_factory=dict)


class CorridorEnv(TextEnv):
    """Facts, a corridor of distracting text, then questions (see module docstring)."""

    def __init__(
        self,
        *,
        memory_length: int,
        credit_length: int,
        num_values: int,
        obs_words_mean: float,
        obs_words_std: float,
        horizon: int | None,
        noise: float,
        error_penalty: float,
        render_mode: str | None,
        num_questions: int,
        early_action: bool,
    ) -> None:
        if memory_length < 1:
            raise ValueError(f"memory_length={memory_length} must be at least 1")
        if credit_length < 0:
            raise ValueError(f"credit_length={credit_length} must be >= 0")
        if not 2 <= num_values <= MAX_VALUES:
            raise ValueError(f"num_values={num_values} must be in [2, {MAX_VALUES}]")
        if obs_words_mean < MIN_WORDS or obs_words_std < 0:
            raise ValueError(
                f"obs_words_mean={obs_words_mean} must be >= {MIN_WORDS} and "
                f"obs_words_std={obs_words_std} >= 0"
            )
        self.memory_length = memory_length
        self.credit_length = credit_length
        self.num_values = num_values
        self.obs_words_mean = obs_words_mean
        self.obs_words_std = obs_words_std
        self._early = early_action
        s0 = 1 if early_action else 0
        # The last action that can matter: answers end at q + num_questions, rewards c later.
        self.min_horizon = s0 + memory_length + num_questions + credit_length
        if horizon is None:
            horizon = self.min_horizon + 8
        if horizon < self.min_horizon:
            raise ValueError(
                f"horizon={horizon} is shorter than an errorless episode ({self.min_horizon} steps)"
            )
        super().__init__(
            horizon=horizon, noise=noise, error_penalty=error_penalty, render_mode=render_mode
        )
        self.values = VALUES[:num_values]
        self._answer_actions = [f"answer {v}" for v in self.values]
        self._max_words = int(obs_words_mean + 4 * obs_words_std) + 1
        # Sentence starts that leave room for the longest observation.
        self._n_starts = sum(s + self._max_words <= len(FILLER) for s in FILLER_STARTS)
        if self._n_starts < 1:
            raise ValueError(f"obs_words_mean + 4 * obs_words_std must be below {len(FILLER)}")
        self._plan: Plan | None = None

    # -- hooks for KeyRecall / FactUpdate ------------------------------------
    def _draw_plan(self, rng: np.random.Generator) -> Plan:
        raise NotImplementedError

    def _reveal(self) -> str:
        """The observation of the early action (KeyRecall's ``open box``)."""
        raise NotImplementedError

    # -- episode generation -----------------------------------------------------
    def _corridor_text(self, rng: np.random.Generator, n: int) -> list[str]:
        lengths = draw_lengths(
            rng, n, self.obs_words_mean, self.obs_words_std, MIN_WORDS, self._max_words
        )
        picks = rng.integers(0, self._n_starts, size=n).tolist()
        texts = []
        for length, pick in zip(lengths, picks, strict=True):
            start = FILLER_STARTS[pick]
            words = corrupt(FILLER[start : start + length], self.noise, rng)
            texts.append(" ".join(words))
        return texts

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        rng = self.np_random
        plan = self._draw_plan(rng)
        self._plan = plan
        self._q = plan.s0 + self.memory_length
        n_corr = self._q - 1  # corridor observations at steps 1 .. q-1
        corridor = self._corridor_text(rng, n_corr + self.credit_length)
        for step, sentences in plan.events.items():
            # Event sentences lead (filler starts at a sentence, so the text stays readable);
            # filler fills the rest of the drawn length.
            extra = " ".join(sentences)
            filler = corridor[step - 1].split()
            keep = filler[: max(0, len(filler) - len(extra.split()))]
            corridor[step - 1] = " ".join([extra, *keep])
        self._corridor = corridor[:n_corr]
        self._epilogue = corridor[n_corr:]
        self._facts = dict(plan.facts)
        self._needed = list(plan.needed)
        self._shown = {n: (-1 if self._early else 0) for n in plan.facts}
        self._revised = {n: [] for n in plan.facts}
        self._needed_step = {n: self._q + j for j, n in enumerate(plan.needed)}
        self._t = 0
        self._phase = "corridor"
        self._question = 0
        self._answers: list[str] = []
        self._opened = False
        self._done_at = -1
        self._success = False
        self._last_obs = plan.task
        return plan.task, self._info()

    # -- transitions ---------------------------------------------------------------
    def _world_obs(self) -> str:
        """What the world shows at the current step (after the clock advanced)."""
        t = self._t
        if t < self._q:
            for name, value in self._plan.revisions.get(t, ()):
                self._facts[name] = value
                self._revised[name].append(t)
            return self._corridor[t - 1]
        self._phase = "query"
        return self._plan.questions[0]

    def _act(self, words: list[str]) -> tuple[str, float, bool, str | None]:
        t = self._t
        if self._phase == "corridor":
            if self._early and t == 1 and words == ["open", "box"]:
                self._opened = True
                self._world_obs()
                for name in self._facts:
                    self._shown[name] = 1
                return self._reveal(), 0.0, False, None
            if words == ["next"]:
                return self._world_obs(), 0.0, False, None
            reason = "the box is behind you" if words == ["open", "box"] else "no question yet"
            return self._error(reason, self._world_obs())
        if self._phase == "query":
            question = self._plan.questions[self._question]
            if len(words) != 2 or words[0] != "answer" or words[1] not in self.values:
                # The question waits: later questions are needed one step later.
                for j in range(self._question, len(self._needed)):
                    self._needed_step[self._needed[j]] += 1
                return self._error("answer the question", question)
            self._answers.append(words[1])
            self._question += 1
            if self._question < len(self._needed):
                return "noted . " + self._plan.questions[self._question], 0.0, False, None
            self._phase = "epilogue"
            self._done_at = t + self.credit_length
            if self.credit_length == 0:
                return self._finish()
            return "noted . walk on with next to finish .", 0.0, False, None
        if self._phase == "epilogue":
            if t >= self._done_at:
                return self._finish()
            obs = self._epilogue[t - self._done_at + self.credit_length - 1]
            if words == ["next"]:
                return obs, 0.0, False, None
            return self._error("not allowed now", obs)
        return self._error("not allowed now")

    def _finish(self) -> tuple[str, float, bool, str | None]:
        correct = all(a == self._facts[n] for a, n in zip(self._answers, self._needed, strict=True))
        self._phase = "done"
        self._success = correct
        return ("done : correct ." if correct else "done : wrong ."), float(correct), True, None

    def summary_stated(self, summary: str, info: dict[str, Any]) -> dict[str, bool]:
        """Needed fact -> whether ``summary`` holds a value word (``k1`` ...) for it, right or
        wrong, over the facts shown before it was written (as ``summary_recall``). Every fact
        here takes its value from the same words, so a value word counts for each of them."""
        stated = any(word in self.values for word in summary.split())
        return {name: stated for name in shown_facts(info)}

    def fact_types(self, info: dict[str, Any]) -> dict[str, str]:
        """Needed fact shown so far -> ``key`` (its value as first shown) or ``revised`` (a
        revision in the corridor changed it), at ``info``'s moment (``scripted.fact_types``)."""
        return fact_types(info)

    def _admissible(self) -> list[str]:
        if self._phase == "corridor":
            return ["open box", "next"] if self._early and self._t == 0 else ["next"]
        if self._phase == "query":
            return list(self._answer_actions)
        if self._phase == "epilogue":
            return ["next"]
        return []

    def _state(self) -> dict[str, Any]:
        asked = self._phase == "query"
        return {
            "env": self.env_name,
            "phase": self._phase,
            "query_fact": self._needed[self._question] if asked else None,
            "answers": list(self._answers),
            "opened": self._opened,
        }

    @classmethod
    def _corridor_vocabulary(cls) -> set[str]:
        return (
            set(FILLER)
            | set(VALUES)
            | ENDING_WORDS
            | words_of("next answer open box", *CORRIDOR_ERRORS)
        )

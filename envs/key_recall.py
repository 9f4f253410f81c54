"""KeyRecall: remember one key across a long corridor, then answer a question."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np

from cxsim.envs.base import ERROR_WORDS, NOISE_WORD, words_of
from cxsim.envs.corridor import CorridorEnv, Plan
from cxsim.envs.family import EnvFamily
from cxsim.envs.scripted import KEY_SUMMARY_WORDS, CorridorOracle, key_recall_summary

PASSIVE_TASKS = (
    "task : remember the key . the key is {v} . say next to walk on . at the end , say answer and the key .",
    "the key is {v} . keep it in mind . walk on with next . when a question comes , say answer and the key .",
    "task : you are given a key . the key is {v} . walk on with next and answer the question at the end .",
)
ACTIVE_TASKS = (
    "task : a box holds the key . say open box now to see it . then walk on with next . at the end , say answer and the key .",
    "a closed box with the key in it is here . open box first , then walk on with next and answer the question at the end .",
)
REVISION_NOTE = " the key may change ; keep the latest ."
REVEAL = "you open the box . the key is {v} ."
QUESTIONS = (
    "the corridor ends . question : what is the key ?",
    "a guard stops you . question : which key do you hold ?",
    "you reach a door . question : what is the key ?",
)
REVISION = "news : the key is now {v} ."
DECOYS = ("a sign says the lock code is {v} .", "a note says the gate key is {v} .")


def _length_range(low: int | None, high: int | None) -> tuple[int, int] | None:
    """``(min, max)`` of the horizon dial, or None when it is off; raises on a bad pair."""
    if low is None and high is None:
        return None
    if low is None or high is None:
        raise ValueError(
            "give both memory_length_min and memory_length_max (the range each episode's "
            f"memory length is drawn from), or neither; got {low} and {high}"
        )
    if not 1 <= low <= high:
        raise ValueError(
            f"memory_length_min={low} and memory_length_max={high} must satisfy 1 <= min <= max"
        )
    return int(low), int(high)


class KeyRecall(CorridorEnv):
    """Remember a key shown early, walk a corridor of distracting text, answer a question.

    ## Description
    The main training task for tiny language models. The key (one of
    ``num_values`` values ``k1 .. kN``, chance = 1/N) is shown in the task text
    (``variant="passive"``) or revealed only if the first action is
    ``open box`` (``variant="active"``: credit must reach that early action).
    ``memory_length`` steps after the key is shown, a question asks for it.
    Decoys (other codes in the corridor) and revisions (``news : the key is now
    k5 .``; only the latest value counts) are off by default.

    ## Observation
    Text: the task at reset; then corridor text whose length in words is drawn
    from normal(``obs_words_mean``, ``obs_words_std``) clipped to
    [3, mean + 4 std]; then the question. A malformed action gets ``error :
    <reason> .`` followed by what the world shows at that step anyway.

    ## Actions
    Text: ``next`` (walk on), ``answer <value>`` (once the question is shown),
    ``open box`` (active variant, first action only). Anything else, including
    empty or unknown words, is an error observation; it never raises.

    ## Rewards
    1.0 at the end if the answer equals the key's latest value, else 0.0;
    ``-error_penalty`` for each malformed action (default 0).

    ## Episode end
    Terminated ``credit_length`` steps after the answer (immediately by
    default); truncated when ``horizon`` steps pass without an answer.

    ## Arguments
    ``variant`` ("passive" | "active"), ``memory_length`` (steps from the key
    shown to the question), ``credit_length`` (steps from the answer to the
    reward), ``num_values``, ``obs_words_mean`` / ``obs_words_std``
    (compaction pressure), ``num_decoys``, ``num_revisions``, ``noise``
    (probability a corridor word becomes ``#``), ``error_penalty``,
    ``horizon`` (default: an errorless episode + 8, of the longest memory
    length). Presets in ``PRESETS``.

    ``memory_length_min`` / ``memory_length_max`` (both or neither; default
    off): the horizon dial. Each reset draws the episode's memory length
    uniformly from ``[min, max]`` with the env's seeded RNG, in place of
    ``memory_length``, so one batch mixes short episodes (one window) and long
    ones (many compactions). ``reset(options={"memory_length": n})`` fixes one
    episode's length inside the range (the window sizing plays the longest).

    ## Version history
    * v0: initial version.
    """

    env_name: ClassVar[str] = "key_recall"
    family: ClassVar[EnvFamily] = EnvFamily(
        oracle=CorridorOracle,
        summary=key_recall_summary,
        goal="the key",
        notes={"key": "the key is {value}"},
        words=KEY_SUMMARY_WORDS,
        commits=("answer",),
    )
    system_prompt: ClassVar[str] = (
        "you walk a corridor . remember the key . say next to walk on . "
        "when asked , say answer and the key ."
    )
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "easy": {"memory_length": 4, "num_values": 4, "obs_words_mean": 10.0, "obs_words_std": 3.0},
        "default": {
            "memory_length": 12,
            "num_values": 8,
            "obs_words_mean": 20.0,
            "obs_words_std": 5.0,
        },
        "hard": {
            "memory_length": 24,
            "num_values": 16,
            "obs_words_mean": 30.0,
            "obs_words_std": 10.0,
            "num_decoys": 2,
            "num_revisions": 1,
            "noise": 0.05,
        },
    }

    def __init__(
        self,
        variant: Literal["passive", "active"] = "passive",
        memory_length: int = 12,
        credit_length: int = 0,
        num_values: int = 8,
        obs_words_mean: float = 20.0,
        obs_words_std: float = 5.0,
        num_decoys: int = 0,
        num_revisions: int = 0,
        noise: float = 0.0,
        error_penalty: float = 0.0,
        horizon: int | None = None,
        render_mode: str | None = None,
        memory_length_min: int | None = None,
        memory_length_max: int | None = None,
    ) -> None:
        if variant not in ("passive", "active"):
            raise ValueError(f"variant={variant!r}; choose 'passive' or 'active'")
        self.memory_length_range = _length_range(memory_length_min, memory_length_max)
        if self.memory_length_range is not None:
            memory_length = self.memory_length_range[1]  # horizon and checks: the longest
            if num_decoys + num_revisions > 0 and self.memory_length_range[0] < 2:
                raise ValueError(
                    "decoys and revisions need every memory length >= 2: raise memory_length_min"
                )
        self._fixed_length: int | None = None
        if 1 + num_decoys + num_revisions > num_values:
            raise ValueError(
                f"1 + num_decoys + num_revisions = {1 + num_decoys + num_revisions} distinct "
                f"values needed but num_values={num_values}; raise num_values"
            )
        if num_decoys + num_revisions > 0 and memory_length < 2:
            raise ValueError("decoys and revisions need memory_length >= 2 (a corridor step)")
        self.variant = variant
        self.num_decoys = num_decoys
        self.num_revisions = num_revisions
        super().__init__(
            memory_length=memory_length,
            credit_length=credit_length,
            num_values=num_values,
            obs_words_mean=obs_words_mean,
            obs_words_std=obs_words_std,
            horizon=horizon,
            noise=noise,
            error_penalty=error_penalty,
            render_mode=render_mode,
            num_questions=1,
            early_action=variant == "active",
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        length = (options or {}).get("memory_length")
        if length is not None:
            low, high = self.memory_length_range or (self.memory_length,) * 2
            if not low <= length <= high:
                raise ValueError(
                    f"reset option memory_length={length} must lie in [{low}, {high}] "
                    "(memory_length_min / memory_length_max)"
                )
        self._fixed_length = length
        return super().reset(seed=seed, options=options)

    def longest_episode_options(self) -> dict[str, Any] | None:
        """Reset options that give this env's longest episode (the horizon dial's longest
        memory length), for the window sizing; None when every episode has one length."""
        if self.memory_length_range is None:
            return None
        return {"memory_length": self.memory_length_range[1]}

    def _draw_plan(self, rng: np.random.Generator) -> Plan:
        if self.memory_length_range is not None:  # the horizon dial: this episode's length
            low, high = self.memory_length_range
            drawn = int(rng.integers(low, high + 1))
            self.memory_length = drawn if self._fixed_length is None else self._fixed_length
        values = [self.values[i] for i in rng.permutation(self.num_values)]
        key = values[0]
        tasks = ACTIVE_TASKS if self._early else PASSIVE_TASKS
        task = tasks[int(rng.integers(len(tasks)))].format(v=key)
        if self.num_revisions:
            task += REVISION_NOTE
        question = QUESTIONS[int(rng.integers(len(QUESTIONS)))]
        s0 = 1 if self._early else 0
        q = s0 + self.memory_length
        n_events = self.num_revisions + self.num_decoys
        steps = np.sort(rng.integers(s0 + 1, q, size=n_events)).tolist() if n_events else []
        kinds = rng.permutation(["r"] * self.num_revisions + ["d"] * self.num_decoys).tolist()
        plan = Plan(task=task, facts={"key": key}, needed=["key"], questions=[question], s0=s0)
        revision_values = iter(values[1 : 1 + self.num_revisions])
        decoy_values = iter(values[1 + self.num_revisions :])
        for step, kind in zip(steps, kinds, strict=True):
            if kind == "r":
                value = next(revision_values)
                plan.events.setdefault(step, []).append(REVISION.format(v=value))
                plan.revisions.setdefault(step, []).append(("key", value))
            else:
                template = DECOYS[int(rng.integers(len(DECOYS)))]
                plan.events.setdefault(step, []).append(template.format(v=next(decoy_values)))
        self._initial_key = key
        return plan

    def _reveal(self) -> str:
        return REVEAL.format(v=self._initial_key)

    @classmethod
    def vocabulary(cls) -> list[str]:
        words = cls._corridor_vocabulary() | words_of(
            cls.system_prompt,
            *PASSIVE_TASKS,
            *ACTIVE_TASKS,
            REVISION_NOTE,
            REVEAL,
            *QUESTIONS,
            REVISION,
            *DECOYS,
            *ERROR_WORDS,
        )
        words.add(NOISE_WORD)
        return sorted(w for w in words if "{" not in w)

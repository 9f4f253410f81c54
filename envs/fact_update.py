"""FactUpdate: several codes, some revised in the corridor, look-alike decoys."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from cxsim.envs.base import ERROR_WORDS, NOISE_WORD, words_of
from cxsim.envs.corridor import CorridorEnv, Plan
from cxsim.envs.family import EnvFamily
from cxsim.envs.scripted import CODE_SUMMARY_WORDS, CorridorOracle, fact_update_summary

NAMES = ("red", "blue", "green", "gold", "gray", "pink", "white", "black")
TASK_HEAD = "task : remember the codes ."
FACT = "the {n} code is {v} ."
TASK_TAIL = (
    "codes may change later ; keep the latest . walk on with next and answer each question .",
    "some codes will change ; only the latest counts . say next to walk on , then answer each question .",
)
REVISION = "update : the {n} code is now {v} ."
DECOYS = ("a note says the {n} code is {v} .", "someone says the {n} code is {v} .")
QUESTION = "question : what is the {n} code ?"
# Revision and decoy sentences alike: the names and values are the only difference.


class FactUpdate(CorridorEnv):
    """Several codes shown at the start, some revised later, decoys; answer the latest values.

    ## Description
    ``num_facts`` codes (``the red code is k4 .``) are shown in the task text.
    In the corridor, ``num_revisions`` updates (``update : the red code is now
    k7 .``) change codes and ``num_decoys`` look-alike sentences mention codes
    of other colours that are never asked. After ``memory_length`` steps,
    ``num_questions`` questions ask for codes one at a time; only each code's
    latest value counts. Every value mentioned in an episode is distinct, so a
    value word identifies its fact.

    ## Observation
    Text: the task at reset; corridor text of normal(``obs_words_mean``,
    ``obs_words_std``) words (clipped to [3, mean + 4 std]) carrying the
    revisions and decoys; then the questions. A malformed action gets
    ``error : <reason> .`` followed by what the world shows anyway.

    ## Actions
    Text: ``next`` in the corridor, ``answer <value>`` for each question.
    Anything else is an error observation; it never raises.

    ## Rewards
    1.0 at the end if every answer equals the latest value of its code, else
    0.0; ``-error_penalty`` for each malformed action (default 0).

    ## Episode end
    Terminated ``credit_length`` steps after the last answer; truncated at
    ``horizon`` steps.

    ## Arguments
    ``num_facts``, ``num_questions`` (codes asked, <= num_facts),
    ``num_revisions``, ``num_decoys``, ``memory_length``, ``credit_length``,
    ``num_values``, ``obs_words_mean`` / ``obs_words_std``, ``noise``,
    ``error_penalty``, ``horizon``. Presets in ``PRESETS``; the defaults are the
    calibrated ``default`` preset (2 codes, 1 asked, 2 revisions, no decoy). The defaults
    before calibration: ``num_facts=3, num_questions=2, num_revisions=3, num_decoys=2``.
    The ``hard`` preset is calibrated too (3 codes, 1 asked, 3 revisions, 2 decoys, memory
    18, 24±6 words, no noise); the hand-chosen one before: ``num_facts=4, num_questions=4,
    num_revisions=6, num_decoys=4, memory_length=24, num_values=24, obs_words_mean=30.0,
    obs_words_std=10.0, noise=0.05``.

    ## Version history
    * v0: initial version.
    """

    env_name: ClassVar[str] = "fact_update"
    family: ClassVar[EnvFamily] = EnvFamily(
        oracle=CorridorOracle,
        summary=fact_update_summary,
        goal="codes",
        notes={"*": "the {name} code is {value}"},
        words=CODE_SUMMARY_WORDS,
        commits=("answer",),
    )
    system_prompt: ClassVar[str] = (
        "remember the codes . codes may change ; keep the latest . say next to walk on . "
        "when asked , say answer and the code ."
    )
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "easy": {
            "num_facts": 2,
            "num_questions": 1,
            "num_revisions": 1,
            "num_decoys": 0,
            "memory_length": 6,
            "obs_words_mean": 12.0,
            "obs_words_std": 3.0,
        },
        "default": {  # calibrated: docs/results/calibration/FactUpdate-default.toml (0.28 on 8 seeds)
            "num_facts": 2,
            "num_questions": 1,
            "num_revisions": 2,
            "num_decoys": 0,
            "memory_length": 12,
            "obs_words_mean": 20.0,
            "obs_words_std": 5.0,
        },
        "hard": {  # calibrated: docs/results/calibration/FactUpdate-hard.toml (0.068 on 8 seeds)
            "num_facts": 3,
            "num_questions": 1,
            "num_revisions": 3,
            "num_decoys": 2,
            "memory_length": 18,
            "num_values": 24,
            "obs_words_mean": 24.0,
            "obs_words_std": 6.0,
            "noise": 0.0,
        },
    }

    def __init__(
        self,
        num_facts: int = 2,
        num_questions: int = 1,
        num_revisions: int = 2,
        num_decoys: int = 0,
        memory_length: int = 12,
        credit_length: int = 0,
        num_values: int = 16,
        obs_words_mean: float = 20.0,
        obs_words_std: float = 5.0,
        noise: float = 0.0,
        error_penalty: float = 0.0,
        horizon: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        if not 1 <= num_questions <= num_facts <= len(NAMES) - 1:
            raise ValueError(
                f"need 1 <= num_questions ({num_questions}) <= num_facts ({num_facts}) "
                f"<= {len(NAMES) - 1}"
            )
        if num_facts + num_revisions + num_decoys > num_values:
            raise ValueError(
                f"num_facts + num_revisions + num_decoys = {num_facts + num_revisions + num_decoys}"
                f" distinct values needed but num_values={num_values}; raise num_values"
            )
        if num_revisions + num_decoys > 0 and memory_length < 2:
            raise ValueError("revisions and decoys need memory_length >= 2 (a corridor step)")
        self.num_facts = num_facts
        self.num_questions = num_questions
        self.num_revisions = num_revisions
        self.num_decoys = num_decoys
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
            num_questions=num_questions,
            early_action=False,
        )

    def _draw_plan(self, rng: np.random.Generator) -> Plan:
        values = iter([self.values[i] for i in rng.permutation(self.num_values)])
        names = [NAMES[i] for i in rng.permutation(len(NAMES))]
        facts = {n: next(values) for n in names[: self.num_facts]}
        decoy_names = names[self.num_facts :]
        needed = [names[i] for i in rng.permutation(self.num_facts)[: self.num_questions]]
        tail = TASK_TAIL[int(rng.integers(len(TASK_TAIL)))]
        task = " ".join([TASK_HEAD, *(FACT.format(n=n, v=v) for n, v in facts.items()), tail])
        plan = Plan(
            task=task,
            facts=facts,
            needed=needed,
            questions=[QUESTION.format(n=n) for n in needed],
            s0=0,
        )
        n_events = self.num_revisions + self.num_decoys
        if n_events:
            steps = np.sort(rng.integers(1, self.memory_length, size=n_events)).tolist()
            kinds = rng.permutation(["r"] * self.num_revisions + ["d"] * self.num_decoys)
            # Revisions favour needed facts (two in three) so that they matter for the answer.
            for step, kind in zip(steps, kinds.tolist(), strict=True):
                if kind == "r":
                    pool = needed if rng.random() < 2 / 3 else list(facts)
                    name = pool[int(rng.integers(len(pool)))]
                    value = next(values)
                    plan.events.setdefault(step, []).append(REVISION.format(n=name, v=value))
                    plan.revisions.setdefault(step, []).append((name, value))
                else:
                    name = decoy_names[int(rng.integers(len(decoy_names)))]
                    template = DECOYS[int(rng.integers(len(DECOYS)))]
                    plan.events.setdefault(step, []).append(template.format(n=name, v=next(values)))
        return plan

    @classmethod
    def vocabulary(cls) -> list[str]:
        words = (
            cls._corridor_vocabulary()
            | set(NAMES)
            | words_of(
                cls.system_prompt,
                TASK_HEAD,
                FACT,
                *TASK_TAIL,
                REVISION,
                *DECOYS,
                QUESTION,
                *ERROR_WORDS,
            )
        )
        words.add(NOISE_WORD)
        return sorted(w for w in words if "{" not in w)

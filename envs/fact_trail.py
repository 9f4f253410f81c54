"""FactTrail: the needed codes arrive in observations, at a dialled place in the corridor.

Every needed fact of KeyRecall and FactUpdate is in the task text, so every strategy that
keeps the task keeps it too. Here the task only names the codes to find; each arrives in an
observation, at a place set by ``fact_position``, a share of the corridor (0: its first steps,
before any compaction; 0.6: between the first two compactions at the derived budget of two
codes with the other dials off, where the first window, which also holds the task, ends near
the corridor's middle; 1: its last steps, in the window of the questions),
with the dials that tell context strategies apart: look-alike distractors, revisions,
``num_facts`` codes needed together, codes behind a door a sign points to (two hops), and
sub-tasks (a gate whose word is needed only until the gate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from cxsim.envs.base import ERROR_WORDS, NOISE_WORD, words_of
from cxsim.envs.corridor import CorridorEnv, Plan
from cxsim.envs.family import EnvFamily
from cxsim.envs.scripted import TRAIL_SUMMARY_WORDS, TrailOracle, fact_trail_summary, shown_facts
from cxsim.envs.scripted import fact_types as code_types

NAMES = ("red", "blue", "green", "gold", "gray", "pink", "white", "black")
TASK = (
    "task : find {codes} on your walk . codes may change later ; keep the latest . "
    "say next to walk on , then answer each question ."
)
FACTS = ("a sign says the {n} code is {v} .", "on the wall : the {n} code is {v} .")
"""A code arriving; a distractor (a code never asked) reads the same."""
POINTER = "a sign says the {n} code is behind door {v} ."
DOORS = "you reach a row of doors for the {n} code . say open and a door ."
OPENED = "you open door {v} . the code here is {c} ."
EMPTY = "you open door {v} . it is empty ."
GATE_NOTICE = "a guard stands by the gate ."
GATE_WORD = "the guard says the word is {v} ."
GATE = "you reach the gate . the guard stops you . say pass and the word ."
PASSED = "you pass the guard ."
STOPPED = "the guard says wrong ."
REVISION = "update : the {n} code is now {v} ."
QUESTION = "question : what is the {n} code ?"
OPEN, PASS = "open", "pass"
SUBTASK_GOAL = "gate"
"""The goal a sub-task names in ``state["subtask"]`` (``folding``'s oracle branches with it)."""
SPECIAL_ERRORS = {OPEN: "open a door", PASS: "say pass and the word"}
POSITIONS = {"early": 0.0, "middle": 0.6, "late": 1.0}
"""``fact_position`` by name (``--env.kwargs`` takes numbers: 0, 0.6, 1)."""
HOP, DISTRACTOR, KEY = "hop", "distractor", "key"
"""Fact types besides ``key`` / ``revised`` (``cxsim.envs.scripted.fact_types``)."""


def door_fact(code: str) -> str:
    """The hop fact of ``code``: the door it is behind (``red door``)."""
    return f"{code} door"


def gate_fact(index: int) -> str:
    """The word of sub-task ``index`` (``gate 1``), needed only until that gate."""
    return f"gate {index + 1}"


@dataclass
class Trail:
    """What a FactTrail episode shows besides the corridor's plan (steps are env steps)."""

    arrivals: dict[int, list[str]] = field(default_factory=dict)
    """step -> facts first shown at that step (codes, pointers, gate words, distractors)."""
    expects: dict[int, tuple[str, str]] = field(default_factory=dict)
    """step -> (verb, fact) for a step whose action must be ``<verb> <value of fact>``."""
    prompts: dict[int, str] = field(default_factory=dict)
    """step -> the sentence that ends its observation (a door row, a gate)."""
    behind: dict[str, str] = field(default_factory=dict)
    """hop code -> its value, shown when the right door is opened."""
    distractors: dict[str, str] = field(default_factory=dict)
    subtasks: dict[str, tuple[int, int]] = field(default_factory=dict)
    """gate fact -> the step its notice opens the sub-task and the step of its pass."""


class FactTrail(CorridorEnv):
    """Codes named in the task arrive in the corridor; answer their latest values.

    ## Description
    The task names ``num_facts`` codes to find (``find the red code and the gold code``);
    each arrives in its own corridor observation (``a sign says the red code is k4 .``),
    in a block of consecutive steps whose place is ``fact_position`` (see ``block_start``).
    ``num_distractors`` codes of colours never asked read the same; ``num_revisions``
    updates change arrived codes later; ``num_hops`` codes arrive as a pointer (``the red
    code is behind door k5``) and are read at a row of doors in the last corridor steps by
    opening that door; ``num_subtasks`` gates each open a sub-task (``a guard stands by the gate .``), show
    a word the next step that the gate asks for ``subtask_length`` steps later (``pass
    k9``), and that is needed nowhere else. Then one
    question per code; every value of an episode is distinct.

    ## Observation
    Text: the task at reset; corridor text (``obs_words_mean`` / ``obs_words_std`` words)
    led by the step's sentences and ended by a door row's or gate's prompt; the questions.

    ## Actions
    ``next`` in the corridor; ``open <door>`` after a door row; ``pass <word>`` at a gate;
    ``answer <value>`` for each question. Anything else is an error observation.

    ## Rewards
    1.0 at the end if every answer is its code's latest value and every gate was passed,
    else 0.0; ``-error_penalty`` per malformed action.

    ## Episode end
    Terminated ``credit_length`` steps after the last answer; truncated at ``horizon``.

    ## Arguments
    ``num_facts``, ``fact_position``, ``num_distractors``, ``num_revisions``,
    ``num_hops``, ``num_subtasks``, ``subtask_length``, and the corridor's
    ``memory_length``, ``credit_length``, ``num_values``, ``obs_words_mean`` /
    ``obs_words_std``, ``noise``, ``error_penalty``, ``horizon``. Presets in ``PRESETS``;
    the defaults are the calibrated ``default`` preset (one code, a distractor, a revision).
    Every dial on, the defaults before calibration (bases at 0.00): ``num_facts=2,
    num_distractors=2, num_revisions=1, num_hops=1, num_subtasks=1``. The ``hard`` preset is
    calibrated too (one code at position 0, 3 distractors, a revision, no hop or gate, memory
    20); the hand-chosen one before (bases at 0.00): ``num_facts=3, fact_position=0.0,
    num_distractors=4, num_revisions=2, num_hops=2, num_subtasks=2, memory_length=28,
    num_values=24, obs_words_mean=20.0, obs_words_std=6.0``.

    ## Version history
    * v0: initial version.
    """

    env_name: ClassVar[str] = "fact_trail"
    family: ClassVar[EnvFamily] = EnvFamily(
        oracle=TrailOracle,
        summary=fact_trail_summary,
        goal="codes",
        notes={"*": "the {name} code is {value}"},
        words=TRAIL_SUMMARY_WORDS,
        commits=("answer",),
    )
    system_prompt: ClassVar[str] = (
        "find the codes on your walk . codes may change ; keep the latest . say next to walk "
        "on . when asked , say answer and the code ."
    )
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "easy": {  # calibrated: docs/results/calibration/FactTrail-easy.toml (0.39 on 8 seeds)
            "num_facts": 1,
            "num_distractors": 0,
            "num_revisions": 0,
            "num_hops": 0,
            "num_subtasks": 0,
            "memory_length": 8,
            "obs_words_mean": 10.0,
            "obs_words_std": 3.0,
        },
        "default": {  # calibrated: docs/results/calibration/FactTrail-default.toml (0.35 on 8 seeds)
            "num_facts": 1,
            "num_distractors": 1,
            "num_revisions": 1,
            "num_hops": 0,
            "num_subtasks": 0,
        },
        "hard": {  # calibrated: docs/results/calibration/FactTrail-hard.toml (0.062 on 8 seeds)
            "num_facts": 1,
            "fact_position": 0.0,
            "num_distractors": 3,
            "num_revisions": 1,
            "num_hops": 0,
            "num_subtasks": 0,
            "memory_length": 20,
            "num_values": 24,
            "obs_words_mean": 20.0,
            "obs_words_std": 6.0,
        },
    }

    def __init__(
        self,
        num_facts: int = 1,
        fact_position: float | str = 0.6,
        num_distractors: int = 1,
        num_revisions: int = 1,
        num_hops: int = 0,
        num_subtasks: int = 0,
        subtask_length: int = 3,
        memory_length: int = 16,
        credit_length: int = 0,
        num_values: int = 16,
        obs_words_mean: float = 16.0,
        obs_words_std: float = 4.0,
        noise: float = 0.0,
        error_penalty: float = 0.0,
        horizon: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        position = POSITIONS.get(fact_position, fact_position)
        if not isinstance(position, (int, float)) or not 0.0 <= position <= 1.0:
            raise ValueError(
                f"fact_position={fact_position!r} must be in [0, 1] or one of {list(POSITIONS)}"
            )
        self.num_facts = num_facts
        self.fact_position = float(position)
        self.num_distractors = num_distractors
        self.num_revisions = num_revisions
        self.num_hops = num_hops
        self.num_subtasks = num_subtasks
        self.subtask_length = subtask_length
        self.memory_length = memory_length
        self._check_dials(num_values)
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
            num_questions=num_facts,
            early_action=False,
        )
        self._trail = Trail()

    def _check_dials(self, num_values: int) -> None:
        k, hops, gates = self.num_facts, self.num_hops, self.num_subtasks
        if not 1 <= k <= len(NAMES) - self.num_distractors:
            raise ValueError(
                f"num_facts={k} + num_distractors={self.num_distractors} must be in "
                f"[1, {len(NAMES)}] (each distractor is a colour never asked)"
            )
        if min(self.num_distractors, self.num_revisions, hops, gates) < 0:
            raise ValueError("num_distractors, num_revisions, num_hops, num_subtasks must be >= 0")
        if hops > k or (self.num_revisions and hops >= k):
            raise ValueError(
                f"num_hops={hops} must be <= num_facts={k}, and < it with revisions (a revision "
                "changes a code that is not behind a door)"
            )
        if self.subtask_length < 1:
            raise ValueError(f"subtask_length={self.subtask_length} must be >= 1")
        values = k + hops + self.num_revisions + self.num_distractors + gates
        if values > num_values:
            raise ValueError(f"{values} distinct values needed but num_values={num_values}")
        if self.block_start() < 1 or self.open_steps() < gates * (self.subtask_length + 3):
            raise ValueError(
                f"memory_length={self.memory_length} is too short for {k} codes, {hops} door "
                f"rows, {gates} gates of {self.subtask_length} steps and the revisions; raise it"
            )

    # -- where things go (env steps; the corridor is steps 1 .. memory_length - 1) -----------
    def open_steps(self) -> int:
        """Corridor steps before the door rows (each row takes its step and the next)."""
        return self.memory_length - 1 - 2 * self.num_hops

    def block_start(self) -> int:
        """First step of the block of ``num_facts`` arrivals: ``1 + round(fact_position *
        (latest - 1))``, where the latest start leaves a step for revisions after the block
        and the door rows at the end."""
        latest = self.open_steps() - (1 if self.num_revisions else 0) - self.num_facts + 1
        return 1 + round(self.fact_position * (latest - 1))

    def _draw_plan(self, rng: np.random.Generator) -> Plan:
        values = iter([self.values[i] for i in rng.permutation(self.num_values)])
        names = [NAMES[i] for i in rng.permutation(len(NAMES))]
        asked, others = names[: self.num_facts], names[self.num_facts :]
        trail = Trail()
        codes = " and ".join(f"the {n} code" for n in asked)
        order = [asked[i] for i in rng.permutation(len(asked))]
        plan = Plan(TASK.format(codes=codes), {}, order, [QUESTION.format(n=n) for n in order], 0)
        hops = set(asked[len(asked) - self.num_hops :])
        start = self.block_start()
        for j, name in enumerate(asked):
            step, value = start + j, next(values)
            plan.facts[name] = value
            if name in hops:
                plan.facts[door_fact(name)] = door = next(values)
                sentence, shown = POINTER.format(n=name, v=door), door_fact(name)
            else:
                template = FACTS[int(rng.integers(len(FACTS)))]
                sentence, shown = template.format(n=name, v=value), name
            plan.events.setdefault(step, []).append(sentence)
            trail.arrivals.setdefault(step, []).append(shown)
        self._place_doors(trail, [n for n in asked if n in hops], plan)
        self._place_gates(trail, rng, values, plan)
        arrived = {name: start + j for j, name in enumerate(asked) if name not in hops}
        self._place_revisions(rng, values, arrived, plan)
        for name in others[: self.num_distractors]:
            step = int(rng.integers(1, self.open_steps() + 1))
            trail.distractors[name] = value = next(values)
            template = FACTS[int(rng.integers(len(FACTS)))]
            plan.events.setdefault(step, []).append(template.format(n=name, v=value))
            trail.arrivals.setdefault(step, []).append(name)
        self._trail = trail
        return plan

    def _place_doors(self, trail: Trail, hops: list[str], plan: Plan) -> None:
        for j, name in enumerate(hops):
            row = self.open_steps() + 1 + 2 * j
            trail.prompts[row] = DOORS.format(n=name)
            trail.expects[row + 1] = (OPEN, door_fact(name))
            trail.behind[name] = plan.facts[name]

    def _place_gates(self, trail: Trail, rng: np.random.Generator, values: Any, plan: Plan) -> None:
        span = self.subtask_length + 3  # the notice, the word, the walk, the gate, the pass
        slack = self.open_steps() - self.num_subtasks * span
        gaps = np.diff(np.sort(rng.integers(0, slack + 1, size=self.num_subtasks)), prepend=0)
        step = 1
        for g, gap in enumerate(gaps.tolist()):
            step += gap
            name = gate_fact(g)
            plan.facts[name] = next(values)
            plan.events.setdefault(step, []).append(GATE_NOTICE)
            plan.events.setdefault(step + 1, []).append(GATE_WORD.format(v=plan.facts[name]))
            trail.arrivals.setdefault(step + 1, []).append(name)
            trail.prompts[step + 1 + self.subtask_length] = GATE
            trail.expects[step + self.subtask_length + 2] = (PASS, name)
            trail.subtasks[name] = (step, step + self.subtask_length + 2)
            step += span

    def _place_revisions(
        self, rng: np.random.Generator, values: Any, arrived: dict[str, int], plan: Plan
    ) -> None:
        codes = list(arrived)
        for _ in range(self.num_revisions):
            name = codes[int(rng.integers(len(codes)))]
            step = int(rng.integers(arrived[name] + 1, self.open_steps() + 1))
            value = next(values)
            plan.events.setdefault(step, []).append(REVISION.format(n=name, v=value))
            plan.revisions.setdefault(step, []).append((name, value))

    # -- the episode -------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        task, _ = super().reset(seed=seed, options=options)
        trail = self._trail
        for step, prompt in trail.prompts.items():
            self._corridor[step - 1] = f"{self._corridor[step - 1]} {prompt}"
        self._facts |= trail.distractors
        self._shown = dict.fromkeys(self._facts, -1)
        self._revised = {n: [] for n in self._facts}
        for step, (_, name) in trail.expects.items():
            self._needed_step[name] = step
        self._failed = False
        return task, self._info()

    def _world_obs(self) -> str:
        for name in self._trail.arrivals.get(self._t, ()):
            if self._shown[name] < 0:
                self._shown[name] = self._t
        return super()._world_obs()

    def _act(self, words: list[str]) -> tuple[str, float, bool, str | None]:
        expected = self._trail.expects.get(self._t)
        if self._phase != "corridor" or expected is None:
            return super()._act(words)
        verb, name = expected
        world = self._world_obs()
        if len(words) != 2 or words[0] != verb or words[1] not in self.values:
            self._failed |= verb == PASS
            return self._error(SPECIAL_ERRORS[verb], world)
        right = words[1] == self._facts[name]
        if verb == PASS:
            self._failed |= not right
            return f"{PASSED if right else STOPPED} {world}", 0.0, False, None
        code = name.removesuffix(" door")
        if not right:
            return f"{EMPTY.format(v=words[1])} {world}", 0.0, False, None
        if self._shown[code] < 0:
            self._shown[code] = self._t
        opened = OPENED.format(v=words[1], c=self._trail.behind[code])
        return f"{opened} {world}", 0.0, False, None

    def _finish(self) -> tuple[str, float, bool, str | None]:
        obs, reward, terminated, error = super()._finish()
        if self._failed and self._success:
            self._success = False
            return "done : wrong .", 0.0, terminated, error
        return obs, reward, terminated, error

    def _info(self, error: str | None = None) -> dict[str, Any]:
        """The base info, with ``needed_facts`` = the door and gate facts still to be used
        (in the order they are needed), then the codes asked (``fact_needed_step`` over
        those alone)."""
        info = super()._info(error)
        pending = sorted(
            (step, name) for step, (_, name) in self._trail.expects.items() if self._t < step
        )
        info["needed_facts"] = [name for _, name in pending] + info["needed_facts"]
        needed = info["fact_needed_step"] | {name: step for step, name in pending}
        info["fact_needed_step"] = {name: needed[name] for name in info["needed_facts"]}
        return info

    def _admissible(self) -> list[str]:
        expected = self._trail.expects.get(self._t + 1)
        if self._phase == "corridor" and expected is not None:
            return [f"{expected[0]} {v}" for v in self.values]
        return super()._admissible()

    def _state(self) -> dict[str, Any]:
        """The corridor's state, what the next action must be at a door row or a gate
        (``expects``, ``expects_fact``), and with sub-tasks the one open now: ``subtask``
        (its goal words, None when none is open) and ``subtask_step`` (the step it opened)."""
        expected = self._trail.expects.get(self._t + 1) if self._phase == "corridor" else None
        state = super()._state() | {
            "expects": None if expected is None else expected[0],
            "expects_fact": None if expected is None else expected[1],
        }
        if self.num_subtasks:
            opened = [s for s, end in self._trail.subtasks.values() if s <= self._t < end]
            state["subtask"] = SUBTASK_GOAL if opened else None
            state["subtask_step"] = opened[0] if opened else -1
        return state

    def fact_types(self, info: dict[str, Any]) -> dict[str, str]:
        """Fact shown so far -> its type at ``info``'s moment: ``hop`` (a door a sign points
        to), ``key`` or ``revised`` (a code, ``scripted.fact_types``; a gate's word is a
        ``key``), and ``distractor`` for a code never asked (not a needed fact, so summary
        recall and survival do not count it)."""
        types = code_types(info)
        for name in shown_facts(info):
            if name.endswith(" door"):
                types[name] = HOP
        step = info.get("step", 0)
        for name, shown in info["fact_shown_step"].items():
            if name in NAMES and name not in info["needed_facts"] and 0 <= shown <= step:
                types[name] = DISTRACTOR
        return types

    @classmethod
    def vocabulary(cls) -> list[str]:
        words = (
            cls._corridor_vocabulary()
            | set(NAMES)
            | words_of(
                cls.system_prompt,
                TASK.replace("{codes}", "the code and"),
                *FACTS,
                POINTER,
                DOORS,
                OPENED,
                EMPTY,
                GATE_NOTICE,
                GATE_WORD,
                GATE,
                SUBTASK_GOAL,
                PASSED,
                STOPPED,
                REVISION,
                QUESTION,
                *SPECIAL_ERRORS.values(),
                *ERROR_WORDS,
                OPEN,
                PASS,
            )
        )
        words.add(NOISE_WORD)
        return sorted(w for w in words if "{" not in w)

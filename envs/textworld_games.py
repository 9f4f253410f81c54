"""TextWorld's generated quests as a cxsim environment (``cxsim/TextWorld-v0``).

A family from outside the project: Microsoft's TextWorld writes a small house (``rooms``),
puts ``objects`` in it and draws a quest of ``quest_length`` actions; the game compiles to
Inform 7 and TextWorld plays it, tracking which actions finish the quest. This module needs
the optional extra (``pip install 'cxsim[textworld]'``): without it, importing the module,
and so ``gymnasium.make("cxsim/TextWorld-v0")`` or ``cxsim run --env.env-id
cxsim/TextWorld-v0``, stops with one line that says so (``MissingExtra``).

Games are generated on first use into a cache folder (``cache_dir``; by default
``$CXSIM_TEXTWORLD_CACHE`` or ``<temp>/cxsim-textworld``), one folder per dial setting and
game, written under a temporary name and renamed, so processes that share the cache never
read half a game. Seed ``s`` plays game ``s mod num_games``, so an episode is a function of
its seed.

The class declares its family (``cxsim.envs.family.EnvFamily``) for the scripted agents: the
oracle plays the commands TextWorld says finish the quest from the current state
(``policy_commands``), and the scripted summary lists the commands left, each fact it lost
written ``unknown``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, ClassVar

from cxsim.envs.base import ERROR_WORDS, NOISE_WORD, TextEnv, words_of
from cxsim.envs.family import EnvFamily
from cxsim.envs.textworld_text import (
    closed_words,
    mentions,
    normalise,
    require_textworld,
    short_names,
    shorten,
    suite_words,
)

textworld = require_textworld()  # the one-line refusal without the extra, at import

META_VERBS = frozenset(
    ("quit", "restart", "restore", "save", "undo", "script", "unscript", "transcript",
     "verbose", "brief", "superbrief", "score", "version", "notify", "about", "help", "hint",
     "goal")
)  # fmt: skip
"""Commands about the game rather than in it: refused as ``error : not allowed now .``"""

WON, LOST = "done : you won .", "done : you lost ."
SUMMARY_TEXT = "summary : to do : then , unknown nothing ."
CACHE_ENV = "CXSIM_TEXTWORLD_CACHE"
GENERATION_TRIES = 8
"""Seeds tried per game before the dials are refused (a quest may not fit a small house)."""
INFOS = textworld.EnvInfos(admissible_commands=True, policy_commands=True, won=True, lost=True)
INFOS.entities = True

_IDLE: dict[Path, list[Any]] = {}
"""Started TextWorld games no environment is playing, by game file (starting one reads and
checks the game's logic; resetting one that ran is a hundred times cheaper)."""


def default_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "cxsim-textworld")


def game_file(cache: Path, rooms: int, objects: int, quest_length: int, index: int) -> Path:
    """The compiled game ``index`` of these dials, generated into ``cache`` if absent."""
    folder = cache / f"rooms{rooms}-objects{objects}-quest{quest_length}" / f"game{index}"
    path = folder / "game.z8"
    if path.is_file():
        return path
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".game{index}-"))
    try:
        _generate(work / "game.z8", rooms, objects, quest_length, index)
        with contextlib.suppress(OSError):  # another process finished it first
            work.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


def _generate(path: Path, rooms: int, objects: int, quest_length: int, index: int) -> None:
    from textworld.generator.chaining import QuestGenerationError

    for attempt in range(GENERATION_TRIES):
        options = textworld.GameOptions()
        options.nb_rooms, options.nb_objects = rooms, objects
        options.quest_length = quest_length
        options.seeds = 1 + index * GENERATION_TRIES + attempt
        options.path = str(path)
        options.force_recompile = True
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                textworld.make(options)
            return
        except (QuestGenerationError, ValueError):
            continue
    raise ValueError(
        f"TextWorld found no quest of length {quest_length} in {GENERATION_TRIES} tries for "
        f"{rooms} room(s) and {objects} object(s): add rooms or objects, or shorten the quest"
    )


def _started(path: Path) -> Any:
    """TextWorld's player of the game at ``path`` (without Jericho's warning that it does not
    track TextWorld games' scores itself: TextWorld does)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return textworld.start(str(path), request_infos=INFOS)


class PlanOracle:
    """The commands TextWorld says finish the quest from the current state, first one first
    (``look`` when it says none: the quest is over)."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        plan = info["state"]["plan"]
        return plan[0] if plan else "look"


def plan_summary(kept: dict[str, str], info: dict[str, Any]) -> str:
    """``summary : to do : take key , then unlock box with key .``: the commands left, each
    needed fact's value the summarizer did not keep written ``unknown``."""
    lost = {info["key_facts"][n] for n in info["needed_facts"] if n not in kept}
    steps = [
        " ".join("unknown" if w in lost else w for w in c.split()) for c in info["state"]["plan"]
    ]
    return "summary : to do : " + (" , then ".join(steps) or "nothing") + " ."


class TextWorldGames(TextEnv):
    """A TextWorld quest: do what the goal says in a generated house, one command a step.

    ## Description
    TextWorld generates a house of ``rooms`` rooms with ``objects`` objects and a quest of
    ``quest_length`` actions (go somewhere, take, open, unlock, put something somewhere,
    eat); the task text states the goal and describes the first room. ``num_games`` games
    are generated per dial setting; seed ``s`` plays game ``s mod num_games``.

    ## Observation
    Text: the game's answer to each command, lowercased, one space between words and
    punctuation; a room header ``-= Spare Room =-`` reads ``spare room :``. A word outside
    the vocabulary (the suite's text grammars and engine messages) is written ``#``.

    ## Actions
    Text: a game command (``go south``, ``take key``, ``unlock box with key``). Any word of
    an entity's name names it. Empty text, a word outside the vocabulary or a command
    about the game (``quit``, ``save``, ...) is an error observation; it never raises.
    A command the game does not understand gets the game's own answer.

    ## Rewards
    1.0 when the quest is done, else 0.0; ``-error_penalty`` per malformed action.

    ## Episode end
    Terminated when the quest is done (``done : you won .``) or lost; truncated at
    ``horizon`` steps.

    ## Arguments
    ``rooms``, ``objects``, ``quest_length``, ``num_games``, ``cache_dir``,
    ``error_penalty``, ``horizon`` (default ``3 * quest_length + 6``). The default preset in
    ``PRESETS``. Facts: each entity the winning commands name (the thing to take, the
    direction to go, ...), its value the one word that names it in this game.

    ## Version history
    * v0: initial version (TextWorld 1.7.0).
    """

    env_name: ClassVar[str] = "textworld"
    family: ClassVar[EnvFamily] = EnvFamily(
        oracle=PlanOracle, summary=plan_summary, words=SUMMARY_TEXT.split()
    )
    system_prompt: ClassVar[str] = (
        "play the text game . do what the goal says , one command at a time ."
    )
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "default": {"rooms": 2, "objects": 3, "quest_length": 2},
    }
    """Only the default, the registered id's (the constructor's defaults), calibrated by
    ``cxsim calibrate`` for a fresh word-level model (docs/results/calibration/
    TextWorld-default.toml, whose flags carry its recipe); other houses via kwargs."""

    def __init__(
        self,
        rooms: int = 2,
        objects: int = 3,
        quest_length: int = 2,
        num_games: int = 16,
        cache_dir: str | None = None,
        error_penalty: float = 0.0,
        horizon: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        if rooms < 1 or objects < 1 or quest_length < 1 or num_games < 1:
            raise ValueError(
                f"rooms ({rooms}), objects ({objects}), quest_length ({quest_length}) and "
                f"num_games ({num_games}) must each be at least 1"
            )
        self.rooms, self.objects, self.quest_length = rooms, objects, quest_length
        self.num_games = num_games
        self.cache = Path(cache_dir) if cache_dir else default_cache()
        super().__init__(
            horizon=horizon or 3 * quest_length + 6,
            error_penalty=error_penalty,
            render_mode=render_mode,
        )
        self._game: Any = None
        self._path: Path | None = None
        self._index = -1
        self._plan: list[str] = []
        self._commands: list[str] = []
        self._over = False
        self._names: dict[str, str] = {}

    @classmethod
    def vocabulary(cls) -> list[str]:
        words = suite_words() | words_of(cls.system_prompt, WON, LOST, SUMMARY_TEXT, *ERROR_WORDS)
        return sorted(words | {NOISE_WORD})

    # -- gymnasium API ---------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if options and "game" in options:
            index = int(options["game"]) % self.num_games
        elif seed is not None:
            index = seed % self.num_games
        else:
            index = int(self.np_random.integers(self.num_games))
        self._start(index)
        state = self._game.reset()
        self._names = short_names(state["entities"])
        task = closed_words(state.feedback, self._vocab)
        self._t, self._success, self._over = 0, False, False
        self._track(state)
        self._plan_facts(task)
        self._last_obs = task
        return task, self._info()

    def close(self) -> None:
        self._release()
        super().close()

    # -- the game ----------------------------------------------------------------------
    def _start(self, index: int) -> None:
        path = game_file(self.cache, self.rooms, self.objects, self.quest_length, index)
        if path != self._path:
            self._release()
            idle = _IDLE.get(path)
            self._game = idle.pop() if idle else _started(path)
            self._path = path
        self._index = index

    def _release(self) -> None:
        if self._game is not None and self._path is not None:
            _IDLE.setdefault(self._path, []).append(self._game)
        self._game, self._path = None, None

    def _track(self, state: Any) -> None:
        """The plan and the admissible commands after ``state`` (normalised, in-vocabulary)."""
        self._plan = [shorten(normalise(c), self._names) for c in state["policy_commands"] or []]
        commands = (normalise(c) for c in state["admissible_commands"] or [])
        self._commands = sorted(c for c in commands if set(c.split()) <= self._vocab)

    def _plan_facts(self, task: str) -> None:
        """The facts of this game: each entity the winning commands name, in order."""
        self._facts, self._needed, self._needed_step = {}, [], {}
        by_length = sorted(self._names, key=len, reverse=True)
        for step, command in enumerate(self._plan, start=1):
            rest = f" {command} "
            for name in by_length:
                short = self._names[name]
                if mentions(rest, short) and name not in self._facts:
                    self._facts[name] = short
                    self._needed.append(name)
                    self._needed_step[name] = step
                rest = rest.replace(f" {short} ", " | ")
        self._shown = {n: (0 if mentions(task, v) else -1) for n, v in self._facts.items()}
        self._revised = {n: [] for n in self._facts}

    def _act(self, words: list[str]) -> tuple[str, float, bool, str | None]:
        if self._over:
            return self._error("not allowed now")
        if words[0] in META_VERBS:
            return self._error("not allowed now")
        try:
            state, _, _ = self._game.step(" ".join(words))
        except Exception:  # the game engine refused the text: never a crash
            return self._error("not allowed now")
        obs = closed_words(state.feedback, self._vocab) or "nothing ."
        self._track(state)
        for name, value in self._facts.items():
            if self._shown[name] < 0 and mentions(obs, value):
                self._shown[name] = self._t
        if state["won"] or state["lost"]:
            self._success, self._over = bool(state["won"]), True
            self._commands = []
            return f"{obs} {WON if self._success else LOST}", float(self._success), True, None
        return obs, 0.0, False, None

    def _admissible(self) -> list[str]:
        return list(self._commands)

    def _state(self) -> dict[str, Any]:
        return {"env": self.env_name, "game": self._index, "plan": list(self._plan)}

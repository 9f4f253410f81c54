"""What an environment family tells cxsim about itself: :class:`EnvFamily`.

An environment class declares its family as a class attribute::

    class MyEnv(gym.Env):
        family: ClassVar[EnvFamily] = EnvFamily(
            oracle=MyOracle,  # a fresh oracle per episode: .act(observation, info) -> action
            summary=my_summary,  # (kept facts, info) -> the summary text
            goal="word",  # what folding's scripted oracle branches with: find word
            commits=("say",),  # the actions that commit: folding's root takes them
            notes={"word": "the word is {value}"},  # memory-notes' note of a fact
            words=("summary", ":", "the", "word", "is", "unknown", "."),
        )

and so gets what cxsim's own families get: window sizes derived from its oracle's episodes
(``cxsim.compaction.fit_sizes``), the oracle pre-flight (``cxsim.preflight``) and SFT
demonstrations under every context strategy (their scripted agents play its oracle and write
its summaries). ``family_of(env)`` reads the declaration from an env made by
``gymnasium.make`` (the unwrapped env's attribute); an env without one has no oracle, and
its window sizes must all be given.

The summary writer is given the needed facts the scripted summarizer kept (fact name ->
current value: those whose value is still a word of the context, each dropped with the
omission rate) and the ``info`` of the moment; it writes every fact it did not keep as
unknown, so a summary never recovers a lost fact. ``words`` lists every word the summary
writer writes besides the facts' values; the goal's and the notes' words count too
(:meth:`EnvFamily.written_words`): a word-level policy's tokenizer must hold them all
(the pre-flight refuses in one line naming those it lacks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Protocol

import gymnasium as gym

DEFAULT_GOAL = "the task"
"""The goal folding's scripted oracle branches with when the family names none."""
ANY_FACT = "*"
"""The key of :attr:`EnvFamily.notes` whose sentence notes any fact without its own."""


class Oracle(Protocol):
    """An environment's scripted policy: the action to take, decided from ``info``."""

    def act(self, observation: str, info: dict[str, Any]) -> str: ...


SummaryWriter = Callable[[dict[str, str], dict[str, Any]], str]
"""(kept facts: name -> current value, info) -> the summary text."""


@dataclass(frozen=True)
class EnvFamily:
    """One environment family's scripted knowledge, declared with its env class."""

    oracle: Callable[[], Oracle]
    """Makes a fresh oracle (one per episode); it solves the task from ``info`` alone."""
    summary: SummaryWriter
    """The scripted summary of the kept facts (module docstring)."""
    goal: str = DEFAULT_GOAL
    """What folding's scripted oracle branches with (``find <goal>``)."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """memory-notes' scripted note of a needed fact: fact name (or ``*``: any fact) -> a
    sentence with ``{name}`` and ``{value}`` in it; a fact without one is not noted."""
    words: Iterable[str] = ()
    """Every word :attr:`summary` writes besides the facts' values."""
    commits: Iterable[str] = ()
    """The first words of the oracle's actions that commit to a solution (``answer``): folding's
    scripted oracle explores in a child window and returns before one, taking it in the root.
    None declared: its child window never returns."""

    def __post_init__(self) -> None:
        for name in ("oracle", "summary"):
            if not callable(getattr(self, name)):
                raise TypeError(f"EnvFamily.{name} must be callable, got {getattr(self, name)!r}")
        if not self.goal.split():
            raise ValueError("EnvFamily.goal is empty: give the words folding branches with")
        for fact, sentence in self.notes.items():
            try:
                sentence.format(name=fact, value="v")
            except (KeyError, IndexError) as error:
                raise ValueError(
                    f"EnvFamily.notes[{fact!r}] = {sentence!r} names {error}; a note sentence "
                    "may use {name} and {value} only"
                ) from None
        object.__setattr__(self, "notes", MappingProxyType(dict(self.notes)))
        object.__setattr__(self, "words", tuple(sorted(set(self.words))))
        object.__setattr__(self, "commits", tuple(self.commits))

    def note(self, name: str, value: str) -> str | None:
        """The scripted note of fact ``name`` = ``value`` (None: the family notes none)."""
        sentence = self.notes.get(name, self.notes.get(ANY_FACT))
        return None if sentence is None else sentence.format(name=name, value=value)

    def written_words(self) -> set[str]:
        """Every word the family's scripted agents write besides fact values and names:
        :attr:`words`, the goal's and the note sentences' own words."""
        notes = {w for s in self.notes.values() for w in s.split() if "{" not in w}
        return {*self.words, *self.goal.split(), *notes}


def family_of(env: gym.Env) -> EnvFamily | None:
    """The family ``env`` declares (read from the unwrapped env), None when it declares none."""
    family = getattr(env.unwrapped, "family", None)
    return family if isinstance(family, EnvFamily) else None


def declared_words(env: gym.Env) -> list[str]:
    """Every word ``env`` declares it writes or accepts (read from the unwrapped env): its
    ``vocabulary()`` (when it has one), its ``system_prompt`` and its family's
    :meth:`~EnvFamily.written_words`; the words a word-level policy's tokenizer must hold."""
    unwrapped = env.unwrapped
    listed = getattr(unwrapped, "vocabulary", None)
    words = [
        *(listed() if callable(listed) else ()),
        *str(getattr(unwrapped, "system_prompt", "")).split(),
    ]
    family = family_of(env)
    return words + (sorted(family.written_words()) if family is not None else [])


@lru_cache(maxsize=64)
def family_of_id(env_id: str) -> EnvFamily | None:
    """The family the env registered as ``env_id`` declares (one instance made with its
    registered keyword arguments, then closed)."""
    env = gym.make(env_id)
    try:
        return family_of(env)
    finally:
        env.close()


def require_family(env: gym.Env, env_id: str) -> EnvFamily:
    """``env``'s family, or a ValueError saying that ``env_id`` declares none."""
    family = family_of(env)
    if family is None:
        raise no_family_error(env_id)
    return family


def require_family_of_id(env_id: str) -> EnvFamily:
    """:func:`family_of_id`, or a ValueError saying that ``env_id`` declares none."""
    family = family_of_id(env_id)
    if family is None:
        raise no_family_error(env_id)
    return family


def no_family_error(env_id: str) -> ValueError:
    """The error for an env without a family where its scripted agents are needed."""
    return ValueError(
        f"{env_id} declares no EnvFamily, so it has no scripted oracle or summaries: give its "
        "class the attribute family = cxsim.envs.EnvFamily(oracle=..., summary=...) "
        '(docs/environments.md, "Your own environment")'
    )

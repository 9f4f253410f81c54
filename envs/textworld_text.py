"""TextWorld's text in cxsim's form: the optional extra, normalised words, a closed vocabulary.

TextWorld (``pip install 'cxsim[textworld]'``) writes mixed-case prose with a banner, a
prompt and a status line; cxsim's environments speak lowercase words and symbols separated
by single spaces (``envs/base.py``). This module holds what turns one into the other and
needs no TextWorld to import:

* ``require_textworld()`` imports the suite or raises ``MissingExtra``, one line that names
  the extra to install;
* ``normalise(text)`` keeps the words and the punctuation ``. , : ; ? ! ( )`` of the game's
  text, lowercased, without the banner, the prompt, the status line or what follows
  ``*** The End ***``; a room header ``-= Spare Room =-`` becomes ``spare room :``;
* ``suite_words()`` is every word the suite's text grammars (the house theme) and its game
  engine's messages can print: the closed vocabulary. A word outside it is written as
  ``#`` (the environments' corrupted word), so the vocabulary holds whatever a game prints;
* ``short_names(entities)`` gives each entity of a game one word that names it alone
  (Inform 7, TextWorld's game language, understands any word of a multi-word name), so
  that a fact is one word, as in cxsim's own environments.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from types import ModuleType

from cxsim.envs.base import NOISE_WORD

EXTRA = "textworld"
REFUSAL = "cxsim/TextWorld-v0 needs TextWorld, an optional extra: pip install 'cxsim[textworld]'"


class MissingExtra(ImportError, ValueError):
    """The optional extra is not installed (a ValueError too: the CLI shows it in one line)."""


def require_textworld() -> ModuleType:
    """The ``textworld`` package, or ``MissingExtra`` with the one-line install hint."""
    try:
        import textworld
    except ImportError as error:
        raise MissingExtra(REFUSAL) from error
    return textworld


WORD = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*|[.,:;?!()]")
ROOM_HEADER = re.compile(r"-=\s*(.*?)\s*=-")
THE_END = "***"

ENGINE_TEXT = """
you can't see any such thing . that's not a verb i recognise . you can't go that way .
i only understood you as far as wanting to . you have to be more specific ! you are carrying :
nothing . you are empty-handed . taken . dropped . opened . closed . you open the , revealing
you close the . you unlock the . you lock the . you put the on the . you put the into the .
that's already open . that's already closed . that's not something you can open . it seems to be
locked . you need to take the first . the is fixed in place . you eat the . not bad . that's
plainly inedible . you lack the nerve to attempt this . that would be less than courteous .
you can only do that to something animate . you see nothing unexpected in that direction .
your score has just gone up by one point . you scored out of a possible , in turns .
what do you want to ? which do you mean , or the ? you can't reach into the . you would have to
first . you're already in the . there is nothing on the . the is empty . you don't have that .
you aren't carrying anything . you have lost . you have won . the end . inventory look examine
take drop put open close lock unlock insert eat go north south east west with from into on in
goal look around . you find nothing of interest . that doesn't seem to fit the lock . you need a
key . that doesn't seem to be something you can unlock . you can't put something on itself .
putting things on the is not allowed . that can't contain things . you can't see inside , since
the is closed . is closed . is open . is locked . the is now open . unlocked . locked .
you jump on the spot . you drop the on the ground . i didn't understand that sentence .
a substantial moment . closets studys
"""
"""Messages of the game engine (Inform 7's library and TextWorld's rules) that the text
grammars do not hold, as the games print them (collected by playing random and oracle
commands on generated games); with the grammars, the vocabulary."""


def normalise(text: str) -> str:
    """The game's text as cxsim words: see the module docstring (no OOV mapping here)."""
    prompt = text.rfind("\n>")
    if prompt >= 0:
        text = text[:prompt]
    end = text.find(THE_END)
    if end >= 0:
        text = text[:end]
    text = ROOM_HEADER.sub(lambda m: f" {m.group(1)} : ", text)
    return " ".join(WORD.findall(text.lower()))


def _grammar_folder() -> Path:
    return Path(require_textworld().__file__).parent / "generator" / "data" / "text_grammars"


@cache
def suite_words() -> frozenset[str]:
    """Every word of the house theme's text grammars and of ``ENGINE_TEXT``, normalised."""
    words: set[str] = set(normalise(ENGINE_TEXT).split())
    for path in sorted(_grammar_folder().glob("house_*.twg")):
        words.update(normalise(path.read_text()).split())
    return frozenset(words)


def closed_words(text: str, known: frozenset[str]) -> str:
    """``normalise(text)`` with every word outside ``known`` written as ``#``."""
    return " ".join(w if w in known else NOISE_WORD for w in normalise(text).split())


def short_names(entities: list[str]) -> dict[str, str]:
    """Each normalised entity name -> one word of it that no other entity's name holds (its
    last such word: the noun, in TextWorld's names); a name with no such word keeps its
    whole text. Directions and one-word names are their own short name."""
    names = [normalise(e) for e in entities]
    counts: dict[str, int] = {}
    for name in names:
        for word in set(name.split()):
            counts[word] = counts.get(word, 0) + 1
    out = {}
    for name in names:
        unique = [w for w in name.split() if counts[w] == 1 and w not in ("the", "of")]
        out[name] = unique[-1] if unique else name
    return out


def shorten(command: str, names: dict[str, str]) -> str:
    """``command`` (normalised) with each entity name in it replaced by its short name,
    longest names first, whole words only."""
    padded = f" {command} "
    for name in sorted(names, key=len, reverse=True):
        padded = padded.replace(f" {name} ", f" {names[name]} ")
    return padded.strip()


def mentions(text: str, phrase: str) -> bool:
    """Whether ``phrase`` (words) appears in ``text`` (words) as whole words."""
    return f" {phrase} " in f" {text} "

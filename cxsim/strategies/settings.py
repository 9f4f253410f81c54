"""A strategy's settings: the keywords its constructor takes, set per run.

A registered strategy is an instance built with its defaults (``Folding()``: ``max_depth``
and ``max_branches``; ``MemoryNotes()``: ``max_notes`` and ``max_note_tokens``;
``SelfCompaction()``: ``threshold_draw``). ``--compaction.strategy-options max_depth 2`` (or
``compaction.strategy-options = { max_depth = 2 }`` in a study file) asks for the same
strategy built with those settings: :func:`configured` builds it, once per distinct setting,
from the registered instance's own values with the options laid over them, so
``self-compaction-drawn`` with no option is itself. A keyword the constructor does not take
fails in one line that lists those it does. A plug-in strategy's settings are its own
constructor's keywords, read the same way.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from cxsim.strategies.base import ContextStrategy

NOT_SETTINGS = ("name",)
"""Constructor keywords that are not settings (a registry entry's name)."""
FLAG = "--compaction.strategy-options"


def setting_names(strategy: ContextStrategy) -> tuple[str, ...]:
    """The settings ``strategy``'s class takes: its constructor's named keywords, less
    :data:`NOT_SETTINGS`; none when it takes ``**kwargs`` only or none at all."""
    try:
        parameters = inspect.signature(type(strategy).__init__).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(
        p.name
        for p in parameters
        if p.kind in kinds and p.name != "self" and p.name not in NOT_SETTINGS
    )


def settings_of(strategy: ContextStrategy) -> dict[str, Any]:
    """The values ``strategy`` holds for its settings (those it keeps as attributes)."""
    return {n: getattr(strategy, n) for n in setting_names(strategy) if hasattr(strategy, n)}


def configured(strategy: ContextStrategy, options: Mapping[str, Any]) -> ContextStrategy:
    """``strategy`` built again with ``options`` over its own settings; itself when there
    are none. A ValueError in one line for an option it does not take or a value its
    constructor refuses."""
    if not options:
        return strategy
    return _build(strategy, tuple(sorted(options.items())))


@lru_cache(maxsize=64)
def _build(strategy: ContextStrategy, options: tuple[tuple[str, Any], ...]) -> ContextStrategy:
    names = setting_names(strategy)
    for key, _ in options:
        if key not in names:
            takes = f"takes {', '.join(names)}" if names else "takes no settings"
            near = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(f"{FLAG} {key}: {strategy.name} {takes}{hint}")
    built = dict(settings_of(strategy))
    built.update(options)
    if "name" in inspect.signature(type(strategy).__init__).parameters:
        built["name"] = strategy.name  # a registry entry's own name (self-compaction-drawn)
    try:
        return type(strategy)(**built)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{FLAG} for {strategy.name}: {error}") from None

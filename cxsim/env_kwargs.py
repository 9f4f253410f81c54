"""An environment's keyword arguments checked against its constructor, before any work.

``--env.kwargs memory_lenght 5`` (or ``env.kwargs = { memory_lenght = 5 }`` in a study file)
would otherwise pass every config check and fail inside ``gymnasium.make``, after the run
folder is written. :func:`check_env_kwargs` reads the registered id's entry point from
``gymnasium.envs.registry`` and its constructor's signature, and raises a one-line
``ValueError`` that names the closest parameter it takes. An entry point that takes
``**kwargs``, or whose signature cannot be read, accepts any name.

:func:`check_env_configs` applies it to every :class:`~cxsim.config.EnvConfig` inside a
parsed config (the commands call it on what they parse, :mod:`cxsim.cli`). :data:`EnvKwargs`
is the flag's type: KEY VALUE pairs parsed to ints, floats and bools.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import tyro


def parse_scalar(text: str) -> int | float | bool:
    """An env keyword's value as the command line writes it: true/false, an int, else a
    float; a ValueError otherwise."""
    if text in ("True", "true", "False", "false"):
        return text in ("True", "true")
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    raise ValueError(f"env kwarg value {text!r} is not an int, float or bool")


def parse_pairs(args: list[str], flag: str) -> dict[str, int | float | bool]:
    """``KEY VALUE ...`` as the flag ``flag`` takes them: each value an int, float or bool."""
    if len(args) % 2:
        raise ValueError(f"{flag} takes KEY VALUE pairs; got {args}")
    return {key: parse_scalar(value) for key, value in zip(args[::2], args[1::2], strict=True)}


def key_value_flag(flag: str) -> Any:
    """A dict field's type as one flag of ``KEY VALUE`` pairs (``flag`` names it in errors)."""
    return Annotated[
        dict[str, int | float | bool],
        tyro.constructors.PrimitiveConstructorSpec(
            nargs="*",
            metavar="KEY VALUE ...",
            instance_from_str=lambda args: parse_pairs(args, flag),
            is_instance=lambda x: isinstance(x, dict),
            str_from_instance=lambda d: [s for k, v in d.items() for s in (k, str(v))],
        ),
    ]


EnvKwargs = key_value_flag("--env.kwargs")
"""Env keyword arguments as one flag of KEY VALUE pairs (replacing the defaults as a whole)."""


MAKE_KWARGS: tuple[str, ...] = ("max_episode_steps", "disable_env_checker")
"""Keywords ``gymnasium.make`` takes itself rather than passing to the constructor."""


def registered_id(env_id: str) -> str:
    """``env_id`` without its ``module:`` prefix (the module is imported by then:
    ``cxsim.config.check_env_id``)."""
    return env_id.rpartition(":")[2]


def accepted_kwargs(env_id: str) -> tuple[str, ...] | None:
    """The keyword names the registered ``env_id``'s constructor takes, in order; None when
    it takes any (``**kwargs``) or its signature cannot be read."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    import cxsim.envs  # noqa: F401  (registers the cxsim ids)

    spec = gym.registry.get(registered_id(env_id))
    if spec is None or spec.entry_point is None:
        return None
    creator: Callable[..., Any] = (
        load_env_creator(spec.entry_point)
        if isinstance(spec.entry_point, str)
        else spec.entry_point
    )
    try:
        parameters = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):  # a builtin or an object without a readable signature
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in parameters if p.kind in keyword)


def check_env_kwargs(env_id: str, kwargs: Mapping[str, Any], flag: str = "--env.kwargs") -> None:
    """Raises a one-line ``ValueError`` naming ``flag`` when a key of ``kwargs`` is not a
    keyword the registered ``env_id``'s constructor (or ``gymnasium.make``) takes, e.g.
    ``--env.kwargs: cxsim/KeyRecall-v0 takes no 'memory_lenght'; did you mean
    'memory_length'? (it takes: ...)``."""
    taken = accepted_kwargs(env_id)
    if taken is None:
        return
    known = (*taken, *MAKE_KWARGS)
    for key in kwargs:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"{flag}: {registered_id(env_id)} takes no {key!r}{hint} (it takes: {', '.join(taken)})"
        )


def check_env_configs(config: Any) -> None:
    """:func:`check_env_kwargs` on every ``EnvConfig`` in ``config``: the object itself,
    and the fields of dataclasses and the items of tuples, lists and dicts, recursively."""
    import sys

    config_module = sys.modules.get("cxsim.config")
    if config_module is None:  # no EnvConfig was ever made
        return
    env_config = config_module.EnvConfig
    seen: set[int] = set()
    stack = [config]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, env_config):
            check_env_kwargs(item.env_id, item.kwargs)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack += [getattr(item, f.name) for f in dataclasses.fields(item)]
        elif isinstance(item, (tuple, list)):
            stack += list(item)
        elif isinstance(item, dict):
            stack += list(item.values())

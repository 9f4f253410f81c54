"""Names and values of a study file: the keys each table takes, a flag-named group's values
checked against its config's field types, and the one-line errors (:class:`StudyError`)."""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import fields
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
"""Setting, arm, claim, check and budget names: they name folders and ``--only`` items."""


class StudyError(ValueError):
    """A study file that cannot run as written: one line naming the key and what to change."""


def check_keys(table: Any, allowed: tuple[str, ...], where: str, what: str) -> None:
    if not isinstance(table, dict):
        raise StudyError(f"{where}: expected a table")
    for key in table:
        if key not in allowed:
            raise StudyError(unknown(key, allowed, where, what))


def unknown(key: str, allowed: Any, where: str, what: str) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    hint = f"did you mean {close[0]}?" if close else f"{what} takes: {', '.join(allowed)}"
    return f"{where}: unknown key {key!r} ({hint})"


def check_name(name: str, where: str) -> None:
    if not NAME.fullmatch(name):
        raise StudyError(f"{where}: the name {name!r} may hold letters, digits, - and _ only")


def table_of(raw: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise StudyError(f"{where}: {key} holds [{key}.NAME] tables")
    return value


def text_of(
    table: dict[str, Any], key: str, where: str, default: str = "", required: bool = False
) -> str:
    if key not in table:
        if required:
            raise StudyError(f"{where}: {key} is missing")
        return default
    value = table[key]
    if not isinstance(value, str):
        raise StudyError(f"{where}: {key} = {value!r} must be text (in quotes)")
    return value


def split_groups(
    table: Any, where: str, groups: tuple[str, ...], own: tuple[str, ...]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """A table's config groups (``ppo.lam = 1`` and ``"ppo.lam" = 1`` alike) and its own keys."""
    if not isinstance(table, dict):
        raise StudyError(f"{where}: expected a table")
    found: dict[str, dict[str, Any]] = {}
    mine: dict[str, Any] = {}
    for key, value in table.items():
        group, dot, rest = key.partition(".")
        if dot:
            value = {rest: value}
        if group in groups:
            if not isinstance(value, dict):
                raise StudyError(f"{where}: {key} is a table of {key}.* keys")
            found.setdefault(group, {}).update(value)
        elif group in own and not dot:
            mine[group] = value
        else:
            leaf = next(iter(value), "") if isinstance(value, dict) else ""
            shown = f"{group}.{leaf}" if leaf else key
            close = difflib.get_close_matches(group, [*groups, *own], n=1)
            if close and close[0] in groups and leaf:
                hint = f"did you mean {close[0]}.{leaf}?"
            elif close:
                hint = f"did you mean {close[0]}?"
            else:
                hint = "this table takes " + ", ".join([*own, *(f"{g}.*" for g in groups)])
            raise StudyError(f"{where}: unknown key {shown!r} ({hint})")
    return found, mine


def normalised(table: dict[str, Any]) -> dict[str, Any]:
    return {key.replace("-", "_"): value for key, value in table.items()}


@cache
def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def build_group(group: str, default: Any, table: dict[str, Any], where: str) -> dict[str, Any]:
    """``table``'s keys as field names of ``default``'s config, with values of the flags'
    types (the config's own validation runs where the values are set into it)."""
    hints = type_hints(type(default))
    names = [f.name for f in fields(default)]
    changes = {}
    for key, value in table.items():
        attr = key.replace("-", "_")
        shown = f"{group}.{key}"
        if attr not in names:
            flags = [f"{group}.{n.replace('_', '-')}" for n in names]
            command = "cxsim train" if group == "ppo" else "cxsim run"
            close = difflib.get_close_matches(f"{group}.{key.replace('_', '-')}", flags, n=1)
            hint = f"did you mean {close[0]}?" if close else f"`{command} --help` lists the names"
            raise StudyError(f"{where}: unknown key {shown!r} ({hint})")
        changes[attr] = coerce(value, hints[attr], f"{where}: {shown}")
    return changes


def coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` (as TOML gives it) as a value of type ``hint``; StudyError otherwise."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return coerce(value, args[0], where)
    if origin in (Union, types.UnionType):
        if value == "None" and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return coerce(value, option, where)
            except StudyError:
                pass
        raise StudyError(f"{where} = {value!r}: expected {described(hint)}")
    if origin is Literal:
        if value in args:
            return value
        raise StudyError(f"{where} = {value!r}: choose one of {', '.join(map(str, args))}")
    if origin is tuple:
        if not isinstance(value, list):
            raise StudyError(f'{where} = {value!r}: expected a list, e.g. ["compacted"]')
        return tuple(coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise StudyError(f"{where} = {value!r}: expected a table, e.g. {{ memory_length = 5 }}")
        return {str(k): coerce(v, args[1], f"{where}.{k}") for k, v in value.items()}
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and number and isinstance(value, int):
        return value
    if hint is float and number:
        return float(value)
    if hint is str and isinstance(value, str):
        return value
    raise StudyError(f"{where} = {value!r}: expected {described(hint)}")


def described(hint: Any) -> str:
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return described(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join('"None"' if a is type(None) else described(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    return {bool: "true or false", int: "an integer", float: "a number", str: "text"}.get(
        hint, str(hint)
    )


def first_line(error: BaseException) -> str:
    text = str(error).strip().strip("'\"")
    return text.splitlines()[0] if text else type(error).__name__

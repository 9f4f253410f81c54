"""TOML text from plain Python data, for the files cxsim writes for people to read and reuse
(``cxsim calibrate``'s presets); Python reads TOML (``tomllib``) but writes none.

:func:`toml_text` takes a dict: its scalar, list and :class:`Inline` values are written as
``key = value`` lines, a dict value as a ``[table]`` section after them, and a list of dicts
as an array of tables (``[[name]]``). A key with dots whose parts are bare words is written
as a dotted key (``env.env-id = ...``, the form study files use); any other key that is
not a bare word is quoted. ``None`` has no TOML form and is refused.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class Inline(dict):
    """A dict written inline, ``{ a = 1, b = 2 }``, where a plain dict would be a section."""


def toml_text(table: dict[str, Any], comments: tuple[str, ...] = ()) -> str:
    """The TOML for ``table``, led by ``comments`` (one ``# line`` each)."""
    lines = [f"# {c}".rstrip() for c in comments]
    if lines:
        lines.append("")
    body = section(table, ())
    lines += body[1:] if body[:1] == [""] else body  # a file of sections alone
    return "\n".join(lines).rstrip("\n") + "\n"


def section(table: dict[str, Any], path: tuple[str, ...]) -> list[str]:
    """A table's own ``key = value`` lines, then its sub-tables and arrays of tables."""
    lines = []
    nested = []
    for key, value in table.items():
        if is_table(value) or is_table_array(value):
            nested.append((key, value))
        else:
            lines.append(f"{key_text(key)} = {value_text(value)}")
    for key, value in nested:
        inner = (*path, key)
        header = ".".join(key_text(k) for k in inner)
        items = value if isinstance(value, list) else [value]
        for item in items:
            body = section(item, inner)
            if isinstance(value, list):
                lines += ["", f"[[{header}]]", *body]
            elif body[:1] == [""]:  # sub-tables only: their headers define this one
                lines += body
            else:
                lines += ["", f"[{header}]", *body]
    return lines


def is_table(value: Any) -> bool:
    return isinstance(value, dict) and not isinstance(value, Inline)


def is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(is_table(v) for v in value)


def key_text(key: str) -> str:
    """A bare key, a dotted key of bare parts, or a quoted key."""
    if BARE_KEY.fullmatch(key) or all(BARE_KEY.fullmatch(p) for p in key.split(".")):
        return key
    return json.dumps(key)


def value_text(value: Any) -> str:
    """One TOML value: a string, bool, int, float (``nan``, ``inf``), array or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{key_text(str(k))} = {value_text(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise ValueError(f"{value!r} ({type(value).__name__}) has no TOML form")

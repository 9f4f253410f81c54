"""TOML text from plain data (cxsim/toml_text.py): what it writes reads back the same."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cxsim.studies.load import read_toml
from cxsim.toml_text import Inline, toml_text


def toml_data(text: str) -> dict:
    """``text`` read as TOML (tomllib, or tomli on Python 3.10)."""
    return read_toml(Path("read.toml"), text)


def test_tables_arrays_of_tables_inline_tables_and_dotted_keys_read_back():
    data = {
        "name": 'a "quoted" name\nover two lines',
        "ratio": 0.25,
        "count": 3,
        "on": True,
        "seeds": [0, 1, 2],
        "settings": {
            "easy-one": {
                "env.env-id": "cxsim/FactTrail-v0",
                "env.kwargs": Inline({"num_facts": 2, "fact_position": 0.6}),
                "sft.omission-rate": 0.5,
            }
        },
        "search": {
            "odd key": "quoted",
            "empty": Inline({}),
            "rows": [{"mean": 0.4, "made": Inline({"sft": 2})}, {"mean": 0.1, "made": {}}],
        },
    }
    text = toml_text(data, comments=("a comment",))
    assert text.startswith("# a comment\n\nname = ")
    assert "\n[settings.easy-one]\nenv.env-id = " in text and "[settings]\n" not in text
    back = toml_data(text)
    assert back["name"] == data["name"] and back["seeds"] == [0, 1, 2]
    assert back["settings"]["easy-one"]["env"] == {
        "env-id": "cxsim/FactTrail-v0",
        "kwargs": {"num_facts": 2, "fact_position": 0.6},
    }
    assert back["search"]["odd key"] == "quoted" and back["search"]["empty"] == {}
    assert back["search"]["rows"] == [{"mean": 0.4, "made": {"sft": 2}}, {"mean": 0.1, "made": {}}]


def test_nan_and_infinity_read_back_and_none_is_refused():
    back = toml_data(toml_text({"recall": [math.nan, math.inf]}))
    assert math.isnan(back["recall"][0]) and back["recall"][1] == math.inf
    with pytest.raises(ValueError, match="has no TOML form"):
        toml_text({"policy": None})

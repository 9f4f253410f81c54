"""The shipped presets that come from ``cxsim calibrate`` are what their records chose: each
record in docs/results/calibration names a preset (``FactTrail-default``), and the family's
``PRESETS`` entry, its registered id and, for the default, the constructor's defaults build
the env the record's ``full-kwargs`` and ``[settings]`` build: the same oracle episodes
(issue #39). A record may be made by kwargs over the family's default id (SimRepo-easy: the
default id with every dial given); its preset's own id builds it all the same. A default
record is compared with what every command runs for the id: ``PRESETS['default']`` with
``DEFAULT_KWARGS`` over it (KeyRecall-v0: the main job's task)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from cxsim.envs import _VARIANT_KWARGS as VARIANT_KWARGS
from cxsim.envs import ENV_CLASSES, OUTSIDE_IDS
from cxsim.envs.defaults import DEFAULT_KWARGS
from cxsim.envs.scripted import oracle_for, play
from cxsim.studies.calibration_preset import make_env
from cxsim.studies.load import read_toml

ALL_RECORDS = sorted((Path(__file__).parents[1] / "docs/results/calibration").glob("*.toml"))
RECORDS = [p for p in ALL_RECORDS if read_toml(p)["env-id"] not in OUTSIDE_IDS]
"""The records of cxsim's own families."""
OUTSIDE_RECORDS = [p for p in ALL_RECORDS if read_toml(p)["env-id"] in OUTSIDE_IDS]
"""The records of families from outside (their modules need an optional extra)."""


def test_the_calibrated_records_are_there() -> None:
    names = {p.stem for p in ALL_RECORDS}
    assert {
        "FactTrail-easy",
        "FactTrail-default",
        "FactUpdate-default",
        "SimRepo-easy",
        "SimRepo-default",
        "SimRepo-hard",
        "KeyRecall-easy",
        "KeyRecall-default",
        "KeyRecall-hard",
        "FactUpdate-easy",
        "FactUpdate-hard",
        "FactTrail-hard",
        "KeyRecallActive-easy",
        "KeyRecallActive-default",
        "KeyRecallActive-hard",
        "TextWorld-default",
    } <= names


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_each_record_is_its_shipped_preset(path: Path) -> None:
    raw = read_toml(path)
    family, preset = raw["preset"].rsplit("-", 1)
    cls = ENV_CLASSES[family]
    env_id = f"cxsim/{family}-v0" if preset == "default" else f"cxsim/{family}-{preset}-v0"
    run_with = DEFAULT_KWARGS.get(env_id, {})  # what every command passes with no --env.kwargs
    variant = VARIANT_KWARGS.get(family, {})  # KeyRecallActive: KeyRecall's presets, active
    assert {**cls.PRESETS[preset], **variant, **run_with} == raw["search"]["full-kwargs"]
    assert raw["env-id"] in (env_id, f"cxsim/{family}-v0")
    assert gym.registry[env_id].kwargs == {**cls.PRESETS[preset], **variant}
    shipped = [gym.make(env_id, **run_with)]
    if preset == "default":
        shipped.append(cls(**variant, **run_with))
    recorded = make_env(path)
    for env in shipped:
        for seed in range(4):
            mine, theirs = (play(e, oracle_for(e), seed=seed) for e in (env, recorded))
            assert [mine.task, *mine.observations] == [theirs.task, *theirs.observations]


@pytest.mark.parametrize("path", OUTSIDE_RECORDS, ids=lambda p: p.stem)
def test_an_outside_familys_record_is_its_shipped_preset(path: Path) -> None:
    """An outside id is registered without kwargs (its module needs the extra), so its
    class's constructor defaults are its default preset: the record's kwargs are that
    preset's, the constructor's defaults say the same, and both build the same oracle
    episodes."""
    import importlib
    import inspect

    pytest.importorskip("textworld")
    raw = read_toml(path)
    preset = raw["preset"].rsplit("-", 1)[1]
    assert preset == "default"  # only the default of an outside family is registered
    module, _, name = OUTSIDE_IDS[raw["env-id"]].partition(":")
    cls = getattr(importlib.import_module(module), name)
    shipped = cls.PRESETS[preset]
    assert {**shipped, **raw["search"]["full-kwargs"]} == shipped
    defaults = inspect.signature(cls).parameters
    assert {key: defaults[key].default for key in shipped} == shipped
    recorded, made = make_env(path), gym.make(raw["env-id"])
    for seed in range(2):
        mine, theirs = (play(e, oracle_for(e), seed=seed) for e in (made, recorded))
        assert [mine.task, *mine.observations] == [theirs.task, *theirs.observations]

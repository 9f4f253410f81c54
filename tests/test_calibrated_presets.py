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

from cxsim.calibration_preset import make_env
from cxsim.envs import _VARIANT_KWARGS as VARIANT_KWARGS
from cxsim.envs import ENV_CLASSES
from cxsim.envs.defaults import DEFAULT_KWARGS
from cxsim.envs.scripted import oracle_for, play
from cxsim.studies.load import read_toml

RECORDS = sorted((Path(__file__).parents[1] / "docs/results/calibration").glob("*.toml"))


def test_the_calibrated_records_are_there() -> None:
    names = {p.stem for p in RECORDS}
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

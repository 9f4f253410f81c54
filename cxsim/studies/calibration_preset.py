"""A calibrated preset: the TOML file ``cxsim calibrate`` writes, and reading it back.

The file is a study file's setting plus the search that chose it::

    preset = "FactTrail-default"          # the name; also the settings table's
    env-id = "cxsim/FactTrail-v0"
    protocol = "compacted"                # the strategy its Pass@1 was measured under
    pass-at-1 = 0.41                      # the chosen candidate's mean over the seeds
    flags = "--env.env-id cxsim/FactTrail-v0 --env.kwargs num_facts 3 ... --sft.omission-rate 0.25"

    [settings.FactTrail-default]          # a study file's [settings.NAME] table, as it is
    policy = "pretrained"
    env.env-id = "cxsim/FactTrail-v0"
    env.kwargs = { num_facts = 3, fact_position = 0.6 }
    sft.omission-rate = 0.25

    [search]                              # the record: band, seeds, rule, commit, wall time
    ...
    [[search.candidates]]                 # every candidate scored: dials, Pass@1 per seed, ...

``flags`` is the command line's form of the same setting (``cxsim run``, ``cxsim sft``,
``cxsim train`` and ``cxsim eval`` take it; ``eval`` takes the ``--env.*``,
``--compaction.*`` and ``--eval.*`` ones); the ``[settings.NAME]`` table pastes into a study
file unchanged. :func:`load_preset` reads it with the study file's own parser
(:func:`cxsim.studies.settings.parse_settings`), so a preset that loads is one a study
runs; :func:`make_env` builds its environment. ``env.kwargs`` holds what goes with the id
(the registered preset's own kwargs lie under it); ``[search]`` also lists the full kwargs
(``full-kwargs``), ready to become a family's ``PRESETS`` entry.
"""

from __future__ import annotations

import shlex
from dataclasses import fields
from pathlib import Path
from typing import Any

from cxsim.config import EnvConfig
from cxsim.studies.spec import GROUPS, Setting
from cxsim.toml_text import Inline, toml_text

RECIPE_GROUPS = ("compaction", "sft", "eval")
"""The groups a preset records where they differ from a study's defaults (the env always)."""
SKIPPED = {("eval", "seed")}
"""Fields a study sets itself (each study seed is the evaluation seed)."""
ALWAYS = {("compaction", "protocol"), ("sft", "omission_rate")}
"""Fields written even at a study's default: the strategy and the omission rate calibrated."""


def toml_value(value: Any) -> Any:
    """A config value in a study file's form: tuples as lists, None as ``"None"``."""
    if value is None:
        return "None"
    if isinstance(value, tuple):
        return [toml_value(v) for v in value]
    if isinstance(value, dict):
        return Inline({str(k): toml_value(v) for k, v in value.items()})
    return value


def group_changes(group: str, config: Any) -> dict[str, Any]:
    """The fields of ``config`` that differ from the study's default for ``group`` (and those
    of :data:`ALWAYS`), keyed by their flag names (``omission-rate``)."""
    default = GROUPS[group]
    return {
        f.name.replace("_", "-"): getattr(config, f.name)
        for f in fields(config)
        if (group, f.name) not in SKIPPED
        and ((group, f.name) in ALWAYS or getattr(config, f.name) != getattr(default, f.name))
    }


def setting_table(setting: Setting) -> dict[str, Any]:
    """``setting`` as a study file's ``[settings.NAME]`` table: its policy, its task, and the
    keys of its compaction, SFT and evaluation that differ from a study's defaults."""
    table: dict[str, Any] = {
        "policy": toml_value(setting.policy),
        "env.env-id": setting.env.env_id,
        "env.kwargs": toml_value(dict(setting.env.kwargs)),
    }
    for group in RECIPE_GROUPS:
        changes = group_changes(group, getattr(setting, group))
        table |= {f"{group}.{key}": toml_value(value) for key, value in changes.items()}
    return table


def setting_flags(setting: Setting) -> str:
    """The same setting as command-line flags (``--policy`` included)."""
    from cxsim.studies.commands import flag

    words = ["--policy", str(setting.policy)]
    words += flag("env.env-id", setting.env.env_id) + flag("env.kwargs", dict(setting.env.kwargs))
    for group in RECIPE_GROUPS:
        for key, value in group_changes(group, getattr(setting, group)).items():
            words += flag(f"{group}.{key}", value)
    return shlex.join(words)


def full_kwargs(env: EnvConfig) -> dict[str, Any]:
    """Every keyword the env is built with: the registered id's own, then ``env.kwargs``."""
    import gymnasium as gym

    import cxsim.envs  # noqa: F401  (registers the ids)
    from cxsim.env_kwargs import registered_id

    spec = gym.registry.get(registered_id(env.env_id))
    registered = dict(spec.kwargs) if spec is not None else {}
    return {**registered, **dict(env.kwargs)}


def preset_text(
    name: str, setting: Setting, pass_at_1: float, search: dict[str, Any], comments: tuple[str, ...]
) -> str:
    """The preset file's text: the head, the ``[settings.NAME]`` table, the ``[search]``."""
    protocol = setting.eval.protocols[0]
    head = {
        "preset": name,
        "env-id": setting.env.env_id,
        "protocol": protocol,
        "pass-at-1": pass_at_1,
        "flags": setting_flags(setting),
    }
    table = {**head, "settings": {name: setting_table(setting)}, "search": search}
    return toml_text(table, comments)


def record_text(search: dict[str, Any], comments: tuple[str, ...]) -> str:
    """A search's record alone (no candidate fell in the band, so no preset)."""
    return toml_text({"search": search}, comments)


def load_preset(path: str | Path) -> Setting:
    """The preset at ``path`` as a study setting (its env, compaction, SFT, evaluation and
    policy), read and checked by the study file's parser; one line when it is not a preset
    (a search's record without a pick among them)."""
    from cxsim.studies.load import read_toml
    from cxsim.studies.settings import parse_settings
    from cxsim.studies.values import StudyError

    path = Path(path)
    raw = read_toml(path)
    name = raw.get("preset")
    settings = raw.get("settings")
    if not isinstance(name, str) or not isinstance(settings, dict) or name not in settings:
        raise StudyError(
            f"{path.name} holds no preset (no `preset` naming a [settings.NAME] table); a "
            "calibration whose candidates all missed the band writes only its [search] record"
        )
    (setting,) = parse_settings({name: settings[name]}, (), {}, path.parent, path.name)
    return setting


def make_env(path: str | Path, **overrides: Any) -> Any:
    """The preset's environment (``gymnasium.make`` of its id and kwargs, ``overrides`` on
    top)."""
    import gymnasium as gym

    import cxsim.envs  # noqa: F401  (registers the ids)

    env = load_preset(path).env
    return gym.make(env.env_id, **{**dict(env.kwargs), **overrides})

"""cxsim.envs: Gymnasium text environments with known ground truth.

Importing this package registers ``cxsim/<Name>-v0`` (the default preset) and
``cxsim/<Name>-easy-v0`` / ``cxsim/<Name>-hard-v0`` for every environment
(``KeyRecallActive`` is KeyRecall's active variant), and the families from outside the
project (``OUTSIDE_IDS``), whose modules need an optional extra and are imported only when
an environment is made.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from cxsim.envs.base import TextEnv
from cxsim.envs.fact_trail import FactTrail
from cxsim.envs.fact_update import FactUpdate
from cxsim.envs.family import EnvFamily, family_of
from cxsim.envs.key_recall import KeyRecall
from cxsim.envs.sim_repo import SimRepo
from cxsim.envs.vocab import ENV_CLASSES, env_class, vocabulary

_VARIANT_KWARGS: dict[str, dict[str, Any]] = {"KeyRecallActive": {"variant": "active"}}

OUTSIDE_IDS: dict[str, str] = {"cxsim/TextWorld-v0": "cxsim.envs.textworld_games:TextWorldGames"}
"""Registered id -> entry point of each family from outside the project. Its module imports
the suite behind an optional extra (``pip install 'cxsim[textworld]'``) and refuses in one
line without it; its words are not in ``vocabulary()`` (docs/environments.md)."""


def _register() -> None:
    for name, cls in ENV_CLASSES.items():
        entry = f"{cls.__module__}:{cls.__name__}"
        for preset, kwargs in cls.PRESETS.items():
            env_id = f"cxsim/{name}-v0" if preset == "default" else f"cxsim/{name}-{preset}-v0"
            if env_id not in gym.registry:
                kwargs = {**kwargs, **_VARIANT_KWARGS.get(name, {})}
                gym.register(env_id, entry_point=entry, kwargs=kwargs)
    for env_id, entry in OUTSIDE_IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=entry)


_register()

__all__ = [
    "ENV_CLASSES",
    "OUTSIDE_IDS",
    "EnvFamily",
    "FactTrail",
    "FactUpdate",
    "KeyRecall",
    "SimRepo",
    "TextEnv",
    "env_class",
    "family_of",
    "vocabulary",
]

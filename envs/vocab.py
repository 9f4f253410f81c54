"""The closed word list of the cxsim environments (for a word-level tokenizer)."""

from __future__ import annotations

import gymnasium as gym

from cxsim.envs.base import TextEnv
from cxsim.envs.fact_trail import FactTrail
from cxsim.envs.fact_update import FactUpdate
from cxsim.envs.key_recall import KeyRecall
from cxsim.envs.sim_repo import SimRepo

OBSERVATION_PLACEHOLDER = "( truncated )"
"""What stands in for an observation a context strategy masked (``observation-masking``): words
every cxsim tokenizer already holds (SimRepo writes them), so the shipped checkpoint reads them."""

# Registered name (without preset suffix) -> class.
ENV_CLASSES: dict[str, type[TextEnv]] = {
    "KeyRecall": KeyRecall,
    "KeyRecallActive": KeyRecall,
    "FactUpdate": FactUpdate,
    "FactTrail": FactTrail,
    "SimRepo": SimRepo,
}


def env_class(env_id: str) -> type[TextEnv]:
    """The environment class behind a registered cxsim id."""
    name = gym.spec(env_id).entry_point.partition(":")[2]
    return {c.__name__: c for c in ENV_CLASSES.values()}[name]


def vocabulary(env_ids: list[str] | None = None) -> list[str]:
    """Sorted union of the vocabularies of ``env_ids`` (all cxsim envs by default), with
    every word their families' scripted agents write (``EnvFamily.written_words``), plus
    the masked-observation placeholder."""
    classes = set(ENV_CLASSES.values()) if env_ids is None else {env_class(i) for i in env_ids}
    words = set(OBSERVATION_PLACEHOLDER.split())
    for cls in classes:
        words.update(cls.vocabulary(), cls.family.written_words())
    return sorted(words)

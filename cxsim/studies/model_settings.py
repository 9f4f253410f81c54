"""How a study's policies compute and are rendered: the keys ``precision``,
``gradient-checkpointing`` and ``chat.*``, at the top of a study file (every setting) or in a
``[settings.NAME]`` table (that setting, key by key over the file's), as ``cxsim run``'s
``--precision``, ``--gradient-checkpointing`` and ``--chat.*`` flags.

:class:`ModelSettings` is what a setting runs with; every stage of its units takes it (SFT,
PPO, evaluation, and a stage 0 its setting's) as the commands' two groups,
:meth:`ModelSettings.for_policy` (:class:`cxsim.model_group.Model`) and
:meth:`ModelSettings.compute` (:class:`cxsim.compute.Compute`). :meth:`ModelSettings.recorded`,
the values that differ from the defaults, enters the cache keys of the setting's folder and
of a stage 0's (:mod:`cxsim.studies.unit_files`, :mod:`cxsim.studies.stage0`): at the
defaults it adds nothing, so a folder made before these keys existed keeps its name, and a
bf16 run never shares a float32 run's folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from cxsim.compute import Compute
from cxsim.model_group import Model
from cxsim.model_options import ChatOptions, Precision
from cxsim.studies.values import (
    StudyError,
    build_group,
    coerce,
    first_line,
    split_groups,
    type_hints,
)

OWN_KEYS = ("precision", "gradient_checkpointing")
"""The model settings' own keys (``gradient-checkpointing`` is taken too); their group: ``chat``."""
CHAT = "chat"
"""The group of the chat options (:class:`cxsim.model_options.ChatOptions`): ``chat.system-role``."""
FILE_KEYS = (*OWN_KEYS, "gradient-checkpointing", CHAT)
"""The top-level keys of a study file that set every setting's model settings."""


@dataclass(frozen=True)
class ModelSettings:
    """How a setting's policies compute and how a chat template renders their turns."""

    precision: Precision = "fp32"
    """``fp32``, or ``bf16``: bfloat16 autocast over float32 weights, in every stage."""
    gradient_checkpointing: bool = False
    """Recompute decoder activations in the backward pass of SFT and PPO (less memory)."""
    chat: ChatOptions = field(default_factory=ChatOptions)
    """How the policy's chat template renders turns (a policy with a template only)."""

    def for_policy(self, policy: str | None) -> Model:
        """The model group of a unit that starts from ``policy``: rendered with these chat
        options."""
        return Model(policy, self.chat)

    def compute(self, device: str) -> Compute:
        """How a unit of the setting computes on ``device``: these settings, one thread (each
        unit is one single-threaded process)."""
        return Compute(
            device=device,
            precision=self.precision,
            gradient_checkpointing=self.gradient_checkpointing,
            threads=1,
        )

    def recorded(self) -> dict[str, Any]:
        """The settings that differ from the defaults, as a cache key holds them (as ``cxsim
        run``'s settings.json records them): empty at the defaults."""
        default = ModelSettings()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        }


def spelled(table: dict[str, Any]) -> dict[str, Any]:
    """A table with ``gradient-checkpointing`` spelled ``gradient_checkpointing`` (both are
    taken)."""
    return {k.replace("-", "_") if k.startswith("gradient") else k: v for k, v in table.items()}


def file_model_settings(raw: dict[str, Any], where: str) -> ModelSettings:
    """The model settings a study file's top level gives every setting."""
    given = spelled({k: v for k, v in raw.items() if k in FILE_KEYS})
    groups, own = split_groups(given, where, (CHAT,), OWN_KEYS)
    return model_settings(own, groups.get(CHAT, {}), where)


def model_settings(
    own: dict[str, Any],
    chat: dict[str, Any],
    where: str,
    over: ModelSettings | None = None,
) -> ModelSettings:
    """``own`` (``precision``, ``gradient_checkpointing``) and ``chat`` (the ``chat.*`` keys)
    set over ``over`` (the file's, else the defaults), key by key; a bad name or value is one
    line naming the key."""
    over = over if over is not None else ModelSettings()
    hints = type_hints(ModelSettings)
    changes = {k: coerce(v, hints[k], f"{where}: {k.replace('_', '-')}") for k, v in own.items()}
    chat_changes = build_group(CHAT, over.chat, chat, where)
    try:
        return replace(over, chat=replace(over.chat, **chat_changes), **changes)
    except (ValueError, TypeError) as error:
        raise StudyError(f"{where}: {CHAT}: {first_line(error)}") from error

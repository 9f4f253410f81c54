"""A study file's ``[settings.NAME]``, ``[arms.NAME]`` and ``[stage0.NAME]`` tables, parsed
and validated into :class:`~cxsim.studies.spec.Setting`, :class:`~cxsim.studies.spec.Arm` and
:class:`~cxsim.studies.spec.Stage0` (every key: docs/reference/study-files.md): a setting's
groups over the command line's defaults with the budget on top, the arms it trains, its
starting policy, a stage 0 attached by name, and ``bases_from`` checked against the setting
it borrows from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from cxsim.config import SFTConfig
from cxsim.env_kwargs import check_env_kwargs
from cxsim.pipeline.presets import DEFAULT_PRESET, PRESETS
from cxsim.pretrained import PRETRAINED, SHIPPED
from cxsim.studies.model_settings import CHAT, OWN_KEYS, ModelSettings, model_settings, spelled
from cxsim.studies.sides import ORACLE
from cxsim.studies.spec import (
    ARM_PREFIX,
    BASE,
    COPY_LOSS,
    GROUPS,
    SETTING_OWN,
    STAGE0_OWN,
    STAGE0_PREFIX,
    STAGE0_SEEDS,
    Arm,
    Setting,
    Stage0,
    copy_loss,
    parse_seeds,
    spelled_own,
)
from cxsim.studies.stages import stage0_sft_config
from cxsim.studies.values import (
    StudyError,
    build_group,
    check_name,
    first_line,
    normalised,
    split_groups,
    text_of,
)


def parse_arms(raw: dict[str, Any], where: str) -> tuple[Arm, ...]:
    if not raw:
        raise StudyError(f"{where}: name at least one arm ([arms.NAME] with a preset)")
    arms = []
    for name, table in raw.items():
        here = f"{where}: arms.{name}"
        check_name(name, here)
        if name == BASE:
            raise StudyError(f"{here}: {BASE!r} names each seed's SFT base; call the arm otherwise")
        if name == ORACLE:
            raise StudyError(
                f"{here}: {ORACLE!r} names the env's scripted oracle; call the arm otherwise"
            )
        groups, own = split_groups(table, here, ("ppo",), ("about", "preset"))
        preset = own.get("preset", DEFAULT_PRESET)
        if preset not in PRESETS:
            raise StudyError(
                f"{here}: preset = {preset!r} is not a preset of cxsim/pipeline/presets.py; "
                f"choose one of: {', '.join(PRESETS)}"
            )
        changes = build_group("ppo", GROUPS["ppo"], groups.get("ppo", {}), here)
        about = own.get("about", "")
        if not isinstance(about, str):
            raise StudyError(f"{here}: about is text")
        arms.append(Arm(name, preset, tuple(changes.items()), about))
    return tuple(arms)


def parse_settings(
    raw: dict[str, Any],
    arms: tuple[Arm, ...],
    budget: dict[str, dict[str, Any]],
    folder: Path,
    where: str,
    model: ModelSettings | None = None,
) -> tuple[Setting, ...]:
    """The ``[settings.NAME]`` tables, each group over the command line's defaults with the
    budget on top; ``model``: the file's model settings, which a setting's own keys change."""
    if not raw:
        raise StudyError(f"{where}: name at least one setting ([settings.NAME])")
    arm_names = [a.name for a in arms]
    settings = []
    for name, table in raw.items():
        here = f"{where}: settings.{name}"
        check_name(name, here)
        if name == ARM_PREFIX.removesuffix(":"):
            raise StudyError(
                f"{here}: 'arm' is kept for --only arm:NAME; call the setting otherwise"
            )
        groups, own = split_groups(spelled(table), here, (*GROUPS, CHAT), (*SETTING_OWN, *OWN_KEYS))
        built = {}
        for group, default in GROUPS.items():
            values = {**normalised(groups.get(group, {})), **normalised(budget.get(group, {}))}
            changes = build_group(group, default, values, here)
            try:
                built[group] = replace(default, **changes)
                if group == "env":
                    check_env_kwargs(built[group].env_id, built[group].kwargs, "env.kwargs")
            except (ValueError, TypeError, KeyError) as error:
                raise StudyError(f"{here}: {group}: {first_line(error)}") from error
        chosen = own.get("arms", arm_names)
        if not isinstance(chosen, list) or not all(isinstance(a, str) for a in chosen):
            raise StudyError(f'{here}: arms is a list of arm names, e.g. ["compactionrl"]')
        for arm in chosen:
            if arm not in arm_names:
                raise StudyError(
                    f"{here}: arms names {arm!r}, which is not an [arms.NAME] "
                    f"table; choose from: {', '.join(arm_names)}"
                )
        if len(set(chosen)) != len(chosen):
            raise StudyError(f"{here}: arms lists a name twice")
        about = own.get("about", "")
        if not isinstance(about, str):
            raise StudyError(f"{here}: about is text")
        policy = starting_policy(own.get("policy", PRETRAINED), folder, here, stage0=True)
        bases_from = own.get("bases_from", "")
        if not isinstance(bases_from, str):
            raise StudyError(f"{here}: bases_from is the name of another setting, in quotes")
        settings.append(
            Setting(
                name,
                policy=policy,
                arms=tuple(chosen),
                about=about,
                bases_from=bases_from,
                model=model_settings(
                    {k: own[k] for k in OWN_KEYS if k in own}, groups.get(CHAT, {}), here, model
                ),
                **built,
            )
        )
    return tuple(settings)


def starting_policy(value: Any, folder: Path, where: str, stage0: bool = False) -> str | None:
    """A shipped checkpoint's name (``pretrained``, ``pretrained-chat``), ``"None"`` (a fresh
    model) or a folder, relative to the study file's; with ``stage0``, also
    ``stage0:NAME`` (kept as it is)."""
    if not isinstance(value, str):
        also = ', "stage0:NAME"' if stage0 else ""
        raise StudyError(f'{where}: policy is text: "pretrained", "None"{also} or a folder')
    if value in SHIPPED:
        return value
    if value == "None":
        return None
    if stage0 and value.startswith(STAGE0_PREFIX):
        return value
    return str((folder / value).absolute()) if not Path(value).is_absolute() else value


def parse_stage0(
    raw: dict[str, Any],
    settings: tuple[Setting, ...],
    budget: dict[str, Any],
    folder: Path,
    where: str,
) -> tuple[Stage0, ...]:
    """The ``[stage0.NAME]`` tables, with the budget's ``stage0.*`` keys over each."""
    stages = []
    for name, table in raw.items():
        here = f"{where}: stage0.{name}"
        check_name(name, here)
        groups, own = split_groups(spelled_own(table), here, ("sft",), STAGE0_OWN)
        users = [s.name for s in settings if s.policy == STAGE0_PREFIX + name]
        if not users:
            raise StudyError(
                f'{here}: no setting starts from it; name it in one (policy = "stage0:{name}") '
                "or remove the table"
            )
        task = text_of(own, "setting", here, default=users[0])
        task_setting = next((s for s in settings if s.name == task), None)
        if task_setting is None:
            names = ", ".join(s.name for s in settings)
            raise StudyError(
                f"{here}: setting = {task!r}: name the setting whose task and compaction its "
                f"demonstrations use; choose one of: {names}"
            )
        values = {**normalised(groups.get("sft", {})), **normalised(budget.get("sft", {}))}
        try:
            sft = replace(SFTConfig(), **build_group("sft", GROUPS["sft"], values, here))
        except (ValueError, TypeError, KeyError) as error:
            raise StudyError(f"{here}: sft: {first_line(error)}") from error
        seeds = budget.get("seeds", own.get("seeds", list(STAGE0_SEEDS)))
        stage = Stage0(
            name=name,
            setting=task,
            env=task_setting.env,
            compaction=task_setting.compaction,
            sft=sft,
            policy=starting_policy(own.get("policy", "None"), folder, here),
            seeds=parse_seeds(seeds, f"{here}: seeds"),
            copy_loss=copy_loss(budget.get("copy_loss", own.get("copy_loss", COPY_LOSS)), here),
            about=text_of(own, "about", here),
            model=task_setting.model,
        )
        try:
            stage0_sft_config(stage, stage.seeds[0], Path(), "cpu")  # the SFT stage's checks
        except (ValueError, TypeError, KeyError, FileNotFoundError) as error:
            raise StudyError(f"{here}: {first_line(error)}") from error
        stages.append(stage)
    return tuple(stages)


def attach_stage0(
    settings: tuple[Setting, ...], stages: tuple[Stage0, ...], where: str
) -> tuple[Setting, ...]:
    """Each setting whose policy is ``stage0:NAME`` with that stage; an unknown name fails."""
    by_name = {s.name: s for s in stages}
    attached = []
    for setting in settings:
        if setting.policy is not None and setting.policy.startswith(STAGE0_PREFIX):
            name = setting.policy.removeprefix(STAGE0_PREFIX)
            if name not in by_name:
                choices = ", ".join(by_name) or "none: add a [stage0.NAME] table"
                raise StudyError(
                    f"{where}: settings.{setting.name}: policy = {setting.policy!r} names no "
                    f"[stage0.{name}] table; choose: {choices}"
                )
            setting = replace(setting, stage0=by_name[name])
        attached.append(setting)
    return tuple(attached)


def check_bases_from(settings: tuple[Setting, ...], where: str) -> None:
    """``bases_from`` names another setting that makes its own bases, with the same task,
    compaction, SFT, starting checkpoint and model settings."""
    by_name = {s.name: s for s in settings}
    for setting in settings:
        if not setting.bases_from:
            continue
        here = f"{where}: settings.{setting.name}: bases_from = {setting.bases_from!r}"
        other = by_name.get(setting.bases_from)
        if other is None or other is setting:
            names = ", ".join(n for n in by_name if n != setting.name)
            raise StudyError(f"{here}: name another setting; choose one of: {names}")
        if other.bases_from:
            raise StudyError(
                f"{here}: that setting uses the bases of {other.bases_from!r}; name that one"
            )
        for group in ("env", "compaction", "sft", "policy", "model"):
            if getattr(setting, group) != getattr(other, group):
                raise StudyError(
                    f"{here}: its {group} differs from that setting's; bases are shared only "
                    "between settings with the same task, compaction, SFT, policy and model "
                    "settings (precision, gradient-checkpointing, chat.*)"
                )

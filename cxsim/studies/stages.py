"""What one (setting, seed, arm) of a study means for the main job: ``cxsim run``'s config for
a seed of a setting, a stage-0 candidate's SFT config, and an arm's PPO config."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from cxsim.config import EvalConfig, PPOConfig
from cxsim.pipeline.presets import DEFAULT_PRESET
from cxsim.pretrained import PRETRAINED
from cxsim.studies.values import StudyError, first_line

if TYPE_CHECKING:
    from cxsim.pipeline import run as run_entry
    from cxsim.pipeline import sft as sft_entry
    from cxsim.studies.spec import Arm, Setting, Stage0


def starting_point(setting: Setting, start: str | None = None) -> str | None:
    """What a seed's SFT starts from: the setting's policy; for a stage-0 setting, ``start``
    (the stage's checkpoint), or, while it is not made, the shipped checkpoint in its stead
    (a saved model alike, for the checks)."""
    if setting.stage0 is None:
        return setting.policy
    return start if start is not None else PRETRAINED


def main_job_config(
    setting: Setting,
    seed: int,
    seed_dir: Path,
    device: str,
    preset: str = DEFAULT_PRESET,
    start: str | None = None,
) -> run_entry.Config:
    """``cxsim run``'s config for one seed of a setting: SFT seed, training seed and evaluation
    tasks all ``seed``, with the setting's model settings (precision, gradient checkpointing,
    chat options); the study's stage configs are derived from it. ``start``: a stage-0
    setting's checkpoint (:func:`starting_point`)."""
    from cxsim.pipeline import run as run_entry

    return run_entry.Config(
        run_dir=str(seed_dir),
        presets=(preset,),
        seeds=(seed,),
        sft_seed=seed,
        env=setting.env,
        compaction=setting.compaction,
        sft=setting.sft,
        ppo=setting.ppo,
        eval=replace(setting.eval, seed=seed),
        progress_bar=False,
        model=setting.model.for_policy(starting_point(setting, start)),
        compute=setting.model.compute(device),
    )


def stage0_sft_config(stage: Stage0, seed: int, folder: Path, device: str) -> sft_entry.Config:
    """The SFT of one stage-0 candidate (``cxsim sft``'s config, SFT seed ``seed``): the main
    job's SFT stage on the stage's task and compaction, from its policy, into ``folder/sft``."""
    from cxsim.pipeline import run as run_entry

    rc = run_entry.Config(
        run_dir=str(folder),
        seeds=(seed,),
        sft_seed=seed,
        env=stage.env,
        compaction=stage.compaction,
        sft=stage.sft,
        eval=EvalConfig(protocols=("compacted",), seed=seed),
        progress_bar=False,
        model=stage.model.for_policy(stage.policy),
        compute=stage.model.compute(device),
    )
    return run_entry.sft_config(rc)


def arm_ppo(setting: Setting, arm: Arm) -> PPOConfig:
    """An arm's PPO config in a setting: the setting's ``ppo``, the preset's changes
    (``cxsim run``'s ``preset_ppo``), then the arm's own keys."""
    from cxsim.pipeline import run as run_entry

    where = f"arms.{arm.name} in settings.{setting.name}"
    try:
        rc = main_job_config(setting, 0, Path(), "cpu", arm.preset)
        return replace(run_entry.preset_ppo(rc, arm.preset), **arm.overrides)
    except (ValueError, TypeError, KeyError, FileNotFoundError) as error:
        raise StudyError(f"{where}: {first_line(error)}") from error


def under(setting: Setting, protocol: str | None) -> Setting:
    """The setting evaluated under ``protocol`` alone (None: its own protocols)."""
    if protocol is None:
        return setting
    return replace(setting, eval=replace(setting.eval, protocols=(protocol,)))

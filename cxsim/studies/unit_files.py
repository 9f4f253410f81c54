"""Where a study's units put their files in the runs folder: the folder of a setting (keyed
by what its SFT bases depend on), of a seed, of an arm's training, and each evaluation's file
(under the setting's protocols, under a claim's protocol, or with another arm's summaries).
:mod:`cxsim.studies.runner` makes them; :mod:`cxsim.studies.commands`, ``cxsim verdicts`` and
``cxsim stability`` read the same paths.

The runs folder (``--runs-dir``)::

    stage0-<name>-<hash>/p<seed>/sft/   a stage-0 candidate (``[stage0.NAME]``,
                                        :mod:`cxsim.studies.stage0`)
    stage0-<name>-<hash>/chosen-<hash>.json   the candidate that copies, and those tried
                                        (hash of the candidate seeds and copy loss)
    <setting>-<hash>/settings.json      what the hash stands for: task, compaction, SFT,
                                        starting checkpoint, device, and precision,
                                        gradient checkpointing and chat options when set
    <setting>-<hash>/env.json           the keyword arguments the env was built with, its
                                        registered preset's included (:func:`check_env_record`)
    <setting>-<hash>/s<seed>/sft/       the seed's SFT base (a ``bases_from`` setting: in
                                        that setting's folder, with its evaluation)
    <setting>-<hash>/s<seed>/train/<arm>-<hash of the arm's PPO config>/
    <setting>-<hash>/s<seed>/eval/<arm>-<hash of its PPO and eval configs>.json
    <setting>-<hash>/s<seed>/eval/<arm>@<protocol>-<hash>.json   under a claim's protocol
    <setting>-<hash>/s<seed>/eval/<arm>+<summarizer>@<protocol>-<hash>.json   the arm acting,
                                        the summarizer arm's policy writing the summaries
    <setting>-<hash>/s<seed>/eval/<arm>[+<summarizer>]@<protocol>[@<env>]-<hash>.json   the
                                        oracle acting, a scripted summarizer (scripted-P),
                                        or an [eval_envs.NAME] (beside the base for the oracle)
    studies/<stem>-<hash of the file's path>/predictions.json   each claim's prediction as
                                        first seen, the study file's own (a shared runs
                                        folder never mixes two files' records)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym

from cxsim.config import EnvConfig
from cxsim.studies.sides import ORACLE, evaluated_apart, scripted_rate
from cxsim.studies.spec import BASE, Arm, Setting, Side, Study
from cxsim.studies.stage0 import stage0_settings
from cxsim.studies.stages import arm_ppo, under
from cxsim.tables import config_tag


def base_settings(setting: Setting, device: str) -> dict[str, Any]:
    """What a seed's SFT base depends on besides the seed (the setting folder's hash); a
    stage-0 setting's policy is the stage's settings; the model settings where they differ
    from the defaults (a folder made before them keeps its name)."""
    policy: Any = setting.policy
    if setting.stage0 is not None:  # what its checkpoint depends on
        stage = setting.stage0
        policy = {**stage0_settings(stage), "seeds": stage.seeds, "copy_loss": stage.copy_loss}
    return {
        "env": setting.env,
        "compaction": setting.compaction,
        "sft": setting.sft,
        "policy": policy,
        "device": device,
        **setting.model.recorded(),
    }


def setting_folder(runs_dir: str | Path, setting: Setting, device: str) -> Path:
    return Path(runs_dir) / config_tag(setting.name, base_settings(setting, device))


def seed_folder(runs_dir: str | Path, setting: Setting, seed: int, device: str) -> Path:
    return setting_folder(runs_dir, setting, device) / f"s{seed}"


def base_folder(runs_dir: str | Path, setting: Setting, seed: int, device: str) -> Path:
    """The seed folder holding the seed's SFT base and its evaluations: the setting's own,
    or that of the setting it takes its bases from (same task, compaction, SFT and start,
    so the same hash)."""
    tag = config_tag(setting.bases_owner, base_settings(setting, device))
    return Path(runs_dir) / tag / f"s{seed}"


def train_folder(seed_dir: Path, setting: Setting, arm: Arm) -> Path:
    return seed_dir / "train" / config_tag(arm.name, arm_ppo(setting, arm))


def eval_file(
    seed_dir: Path, setting: Setting, arm: Arm | None, protocol: str | None = None
) -> Path:
    """An evaluation's file: under the setting's protocols, or ``protocol`` alone."""
    ppo = None if arm is None else arm_ppo(setting, arm)
    name = (BASE if arm is None else arm.name) + (f"@{protocol}" if protocol else "")
    evaluation = under(setting, protocol).eval
    return seed_dir / "eval" / f"{config_tag(name, {'ppo': ppo, 'eval': evaluation})}.json"


def unit_eval_file(
    runs_dir: str | Path,
    setting: Setting,
    arm: Arm | None,
    seed: int,
    device: str,
    protocol: str | None = None,
) -> Path:
    """Where a unit's evaluation goes: the base's beside the base, an arm's in its setting."""
    seed_dir = (base_folder if arm is None else seed_folder)(runs_dir, setting, seed, device)
    return eval_file(seed_dir, setting, arm, protocol)


def swap_eval_file(
    runs_dir: str | Path,
    setting: Setting,
    arm: Arm | None,
    summarizer: Arm | None,
    seed: int,
    device: str,
    protocol: str,
) -> Path:
    """Where the evaluation of ``arm`` acting with ``summarizer``'s summaries goes: beside the
    acting arm's own (the base's beside the base)."""
    seed_dir = (base_folder if arm is None else seed_folder)(runs_dir, setting, seed, device)
    settings = {
        "acting": None if arm is None else arm_ppo(setting, arm),
        "writing": None if summarizer is None else arm_ppo(setting, summarizer),
        "eval": under(setting, protocol).eval,
    }
    name = f"{unit_name(arm)}+{unit_name(summarizer)}@{protocol}"
    return seed_dir / "eval" / f"{config_tag(name, settings)}.json"


def unit_name(arm: Arm | None) -> str:
    return BASE if arm is None else arm.name


def scripted_side_file(
    runs_dir: str | Path,
    setting: Setting,
    side: Side,
    arms: dict[str, Arm],
    env: EnvConfig | None,
    seed: int,
    device: str,
) -> Path:
    """Where a side with the oracle acting, a scripted summarizer or another env goes: beside
    the acting arm's evaluations (the oracle's and the base's beside the base), named
    ``<arm>[+<summarizer>]@<protocol>[@<env>]-<hash>.json``, the hash over the acting and
    writing agents' settings, the evaluation and the env (``arms``: the study's by name)."""

    def settings_of(name: str) -> Any:
        if name in ("", BASE):
            return None
        if name == ORACLE or scripted_rate(name) is not None:
            return name
        return arm_ppo(setting, arms[name])

    acting = side.arm if side.arm in (BASE, ORACLE) else None
    seed_dir = (base_folder if acting else seed_folder)(runs_dir, setting, seed, device)
    settings = {
        "acting": settings_of(side.arm),
        "writing": settings_of(side.summarizer),
        "eval": under(setting, side.protocol).eval,
        "env": env,
    }
    name = side.arm + (f"+{side.summarizer}" if side.summarizer else "") + f"@{side.protocol}"
    name = (name + (f"@{side.env}" if side.env else "")).replace(":", "-")
    return seed_dir / "eval" / f"{config_tag(name, settings)}.json"


def policy_swap(side: Side) -> bool:
    """A side evaluated as the Table 1 swap always was (:func:`swap_eval_file`): a policy
    acting, another policy writing the summaries, on the setting's own env."""
    scripted = scripted_rate(side.summarizer) is not None
    return bool(side.summarizer) and not (scripted or side.arm == ORACLE or side.env)


def side_eval_file(study: Study, side: Side, runs_dir: str | Path, seed: int, device: str) -> Path:
    """The evaluation file of one side of a claim on one seed."""
    setting = study.setting(side.setting)
    if evaluated_apart(side) and not policy_swap(side):
        env = None
        if side.env:
            env = next(e for e in study.eval_envs if e.name == side.env).env_of(setting.env)
        arms = {a.name: a for a in study.arms}
        return scripted_side_file(runs_dir, setting, side, arms, env, seed, device)
    arm = None if side.arm == BASE else study.arm(side.arm)
    if side.summarizer:
        summarizer = None if side.summarizer == BASE else study.arm(side.summarizer)
        return swap_eval_file(runs_dir, setting, arm, summarizer, seed, device, side.protocol)
    protocol = None if side.protocol in setting.eval.protocols else side.protocol
    return unit_eval_file(runs_dir, setting, arm, seed, device, protocol)


def env_record(env: EnvConfig) -> dict[str, Any] | None:
    """The keyword arguments ``env`` builds its environment with: the registered id's own
    (its preset's) with the config's over them; None for an id Gymnasium cannot look up."""
    from cxsim.tracking import to_jsonable

    try:
        spec = gym.spec(env.env_id)
    except Exception:  # a plug-in id whose module is not imported here: nothing to compare
        return None
    return to_jsonable({"env_id": env.env_id, "kwargs": {**spec.kwargs, **env.kwargs}})


def check_env_record(folder: Path, env: EnvConfig) -> None:
    """A setting folder's ``env.json``: written when missing; when present, the env must
    still be built as it records. The folder's name hashes the settings as written, so a
    preset changed since (``cxsim/FactUpdate-v0`` made the calibrated default) would reuse
    runs of the old one; a ValueError in one line says so instead."""
    record = env_record(env)
    if record is None:
        return
    path = folder / "env.json"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return
    made = json.loads(path.read_text())
    if made != record:
        raise ValueError(
            f"the runs in {folder} were made with {env.env_id} built from {made['kwargs']}; "
            f"it is now built from {record['kwargs']} (its preset changed): write the kwargs "
            "out in the study file, or use another --runs-dir"
        )

"""A cache of ``cxsim verdicts`` made before the study engine ran it, adopted once.

That cache held one folder per setting named after a hash of its settings
(``<preset>[-<setting>]-<hash>/``, found by the ``settings.json`` inside), with
``pretrain/p<seed>/sft``, then per seed ``s<seed>/sft``, ``s<seed>/train/<arm>-s<seed>``
and ``s<seed>/verdicts/eval-*.json``. :func:`adopt_old_runs` copies its result files to
where the study engine reads them, so a rerun trains nothing it already has.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cxsim.studies.spec import Setting, Study

OLD_ARMS: tuple[str, ...] = (
    "compactionrl", "ppo-single", "no-summary-training", "segment-mean-loss",
    "no-cross-segment", "stitched", "supo", "segment-scope", "fixed-lambda", "local-fixed-lambda",
    "local-segment-scope",
)  # fmt: skip
"""The main setting's arms when that cache was made: a folder recorded ``arms`` only when
its setting's differed."""
OLD_PRETRAIN_SEEDS = tuple(range(1000, 1008))
"""The stage-0 seeds and copy loss that cache recorded for a run without a stage 0."""
OLD_COPY_LOSS = 0.01


def old_settings(
    study: Study, setting: Setting, device: str, start_seed: int | None = None
) -> dict[str, Any]:
    """What the folder of ``setting`` was named after in that cache (its ``settings.json``):
    the setting's configs, its evaluation with every protocol (the claims then chose theirs),
    and the stage 0 (recorded by the main setting only; a credit setting recorded the seed
    its stage 0 started from instead)."""
    from cxsim.config import EvalConfig

    stage = setting.stage0
    main = setting.name == study.settings[0].name
    settings: dict[str, Any] = {
        "env": setting.env, "compaction": setting.compaction, "sft": setting.sft,
        "ppo": setting.ppo, "eval": replace(setting.eval, protocols=EvalConfig().protocols),
        "device": device, "pretrain": stage.sft if stage is not None and main else None,
        "pretrain_seeds": stage.seeds if stage is not None else OLD_PRETRAIN_SEEDS,
        "copy_loss": stage.copy_loss if stage is not None else OLD_COPY_LOSS,
    }  # fmt: skip
    if setting.arms != OLD_ARMS:
        settings["arms"] = setting.arms
    if not main and start_seed is not None:
        settings["start_seed"] = start_seed
    return settings


def agrees(recorded: Any, wanted: Any) -> bool:
    """Every key ``recorded`` holds has the value ``wanted`` gives it (keys the configs gained
    since it was recorded are left out of the comparison)."""
    if isinstance(recorded, dict) and isinstance(wanted, dict):
        return all(k in wanted and agrees(v, wanted[k]) for k, v in recorded.items())
    return recorded == wanted


def old_folder(runs_dir: Path, name: str, settings: dict[str, Any]) -> Path | None:
    """``runs_dir/<name>-<8 hex>`` whose ``settings.json`` records ``settings``; None if none."""
    from cxsim.tracking import to_jsonable

    wanted = json.loads(json.dumps(to_jsonable(settings)))
    for folder in sorted(runs_dir.glob(f"{name}-*")):
        recorded = folder / "settings.json"
        if (
            re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{8}}", folder.name)
            and recorded.is_file()
            and agrees(json.loads(recorded.read_text()), wanted)
        ):
            return folder
    return None


def adopt(old: Path, new: Path, evaluation: bool = False) -> int:
    """Copy the result file ``old`` to ``new`` unless ``new`` exists (an evaluation's
    ``results`` from ``{protocol: result}`` to the list ``cxsim eval`` writes); 1 if copied."""
    if new.is_file() or not old.is_file():
        return 0
    new.parent.mkdir(parents=True, exist_ok=True)
    if not evaluation:
        shutil.copyfile(old, new)
        return 1
    made = json.loads(old.read_text())
    return write_new(
        new, {**made, "results": list(made["results"].values()), "adopted_from": str(old)}
    )


def write_new(path: Path, data: dict[str, Any]) -> int:
    """Write ``data`` to ``path`` unless a file is there; 1 if written."""
    from cxsim.tracking import write_json

    if path.is_file():
        return 0
    write_json(path, data)
    return 1


def adopt_old_runs(study: Study, preset: str, runs_dir: Path, device: str) -> int:
    """Copy the results of a cache made before the study engine ran ``cxsim verdicts`` (under
    ``runs_dir``: ``<preset>[-<setting>]-<hash>/`` with ``pretrain/p<seed>/sft``, then per
    seed ``s<seed>/sft``, ``s<seed>/train/<arm>-s<seed>``, ``s<seed>/verdicts/eval-*.json``)
    to where the study engine reads them, once: a file already there is kept. Only result
    files are copied; the policies they name stay where they are. Returns how many."""
    from cxsim.studies.spec import BASE, SWAP_PROTOCOL
    from cxsim.studies.stage0 import chosen_file, stage0_folder
    from cxsim.studies.unit_files import (
        base_folder,
        seed_folder,
        setting_folder,
        swap_eval_file,
        train_folder,
        unit_eval_file,
    )

    main = old_folder(runs_dir, preset, old_settings(study, study.settings[0], device))
    if main is None:
        return 0
    copied, start_seed = 0, None
    for stage in study.stage0:
        tried = []
        for seed in stage.seeds:
            old = main / "pretrain" / f"p{seed}" / "sft" / "results.json"
            new = stage0_folder(runs_dir, stage, device) / f"p{seed}" / "sft" / "results.json"
            copied += adopt(old, new)
            if not old.is_file():
                break
            made = json.loads(old.read_text())
            loss = float(made["final"]["losses/heldout_execution"])
            copies = loss <= stage.copy_loss
            tried.append({"seed": seed, "heldout_execution": loss, "copies": copies,
                          "sft_wall_time_s": float(made["wall_time_s"])})  # fmt: skip
            if copies:  # the old run's choice, as the study engine records it
                start_seed = seed
                chosen = {"stage0": stage.name, "policy": made["policy"], "seed": seed,
                          "copy_loss": stage.copy_loss, "tried": tried}  # fmt: skip
                copied += write_new(chosen_file(runs_dir, stage, device), chosen)
                break
    for setting in study.settings:
        folder = main
        if setting is not study.settings[0]:
            settings = old_settings(study, setting, device, start_seed)
            folder = old_folder(runs_dir, f"{preset}-{setting.name}", settings)
        if folder is None:
            continue
        arms = {a: study.arm(a) for a in setting.arms}
        for seed_dir in sorted(folder.glob("s*")):
            if not seed_dir.name[1:].isdigit():
                continue
            seed = int(seed_dir.name[1:])
            evals = seed_dir / "verdicts"
            if not setting.bases_from:  # a setting that reuses bases has neither of these
                base = base_folder(runs_dir, setting, seed, device)
                copied += adopt(seed_dir / "sft" / "results.json", base / "sft" / "results.json")
                copied += adopt(
                    evals / "eval-base.json",
                    unit_eval_file(runs_dir, setting, None, seed, device),
                    True,
                )
            new_seed = seed_folder(runs_dir, setting, seed, device)
            for name, arm in arms.items():
                old = seed_dir / "train" / f"{name}-s{seed}" / "results.json"
                copied += adopt(old, train_folder(new_seed, setting, arm) / "results.json")
                copied += adopt(
                    evals / f"eval-{name}.json",
                    unit_eval_file(runs_dir, setting, arm, seed, device),
                    True,
                )
            for name, arm in {BASE: None, **arms}.items():
                single = unit_eval_file(runs_dir, setting, arm, seed, device, "single")
                copied += adopt(evals / f"eval-{name}-single.json", single, True)
                swap = swap_eval_file(runs_dir, setting, None, arm, seed, device, SWAP_PROTOCOL)
                copied += adopt(evals / f"eval-t1-{name}.json", swap, True)
    invocations = setting_folder(runs_dir, study.settings[0], device) / "invocations.json"
    copied += adopt(main / "invocations.json", invocations)
    return copied

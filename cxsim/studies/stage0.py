"""A stage 0: the checkpoint that settings' SFT bases start from, made once and shared.

A ``[stage0.NAME]`` table (:class:`cxsim.studies.spec.Stage0`) names candidate seeds and a
copy loss. Each candidate is the main job's SFT with the stage's settings and its own SFT
seed (:func:`make_stage0_candidate`, one call with plain arguments); :func:`make_stage0`
makes them through the study's executor, a batch at a time, in seed order, until one's
held-out execution loss is at most the copy loss, and takes the first that copies (none
copies: a one-line error that says what to change). Its files, in the runs folder::

    stage0-<name>-<hash>/p<seed>/sft/   a candidate (the hash: the stage's task, compaction,
                                        SFT, starting policy and device)
    stage0-<name>-<hash>/chosen-<hash>.json   the candidate that copies, and those tried
                                        (hash of the candidate seeds and copy loss)

each read when it is there and made otherwise, so that more candidate seeds or another copy
loss reuse the candidates made. :func:`cxsim.studies.runner.run_study` makes every stage 0
its settings start from before any SFT base; a base then starts from the chosen checkpoint
(:func:`stage0_policy`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cxsim.studies.calls import cached_stage, mapped
from cxsim.studies.executors import Executor
from cxsim.studies.spec import Stage0
from cxsim.studies.stages import stage0_sft_config
from cxsim.studies.values import StudyError
from cxsim.tables import cached_json, config_tag


def stage0_settings(stage: Stage0) -> dict[str, Any]:
    """What a stage-0 candidate's SFT depends on besides its seed (and the device); the model
    settings where they differ from the defaults."""
    return {
        "env": stage.env,
        "compaction": stage.compaction,
        "sft": stage.sft,
        "policy": stage.policy,
        **stage.model.recorded(),
    }


def stage0_folder(runs_dir: str | Path, stage: Stage0, device: str) -> Path:
    """The stage's candidates, ``p<seed>/sft/`` each: more candidate seeds or another copy
    loss reuse the candidates made."""
    settings = {**stage0_settings(stage), "device": device}
    return Path(runs_dir) / config_tag(f"stage0-{stage.name}", settings)


def chosen_file(runs_dir: str | Path, stage: Stage0, device: str) -> Path:
    """The stage's choice among its candidates, for its candidate seeds and copy loss."""
    tag = config_tag("chosen", {"seeds": stage.seeds, "copy_loss": stage.copy_loss})
    return stage0_folder(runs_dir, stage, device) / f"{tag}.json"


def make_stage0_candidate(stage: Stage0, seed: int, runs_dir: str, device: str) -> dict[str, Any]:
    """One stage-0 candidate (cached): SFT with the stage's settings, SFT seed ``seed``; its
    held-out execution loss, whether that copies, and its policy folder."""
    from cxsim.pipeline import sft as sft_entry

    began = time.perf_counter()
    made: list[str] = []
    cfg = stage0_sft_config(
        stage, seed, stage0_folder(runs_dir, stage, device) / f"p{seed}", device
    )
    result = cached_stage(
        Path(cfg.run_dir) / "results.json", lambda: sft_entry.run_sft(cfg), made, "stage0"
    )
    loss = float(result["final"]["losses/heldout_execution"])
    return {
        "setting": f"stage0.{stage.name}",
        "seed": seed,
        "made": made,
        "heldout_execution": loss,
        "copies": loss <= stage.copy_loss,
        "policy": result["policy"],
        "sft_wall_time_s": float(result["wall_time_s"]),
        "wall_time_s": time.perf_counter() - began,
    }


def make_stage0(
    stage: Stage0, runs_dir: str, device: str, executor: Executor
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The stage's checkpoint (:func:`chosen_file`, cached): the first candidate seed, in order,
    whose model copies, candidates made ``executor.workers`` at a time; returns it (policy,
    seed, every candidate tried with its loss) and the candidate calls made now. None
    copies: a one-line error that says what to change."""
    chosen_path = chosen_file(runs_dir, stage, device)
    if chosen_path.is_file():
        return cached_json(chosen_path, dict), []
    tried: list[dict[str, Any]] = []
    seeds = list(stage.seeds)
    for first in range(0, len(seeds), executor.workers):
        batch = [
            (stage, seed, runs_dir, device) for seed in seeds[first : first + executor.workers]
        ]
        tried += mapped(executor, make_stage0_candidate, batch, "candidate")
        copies = [t for t in tried if t["copies"]]
        if copies:
            chosen = {
                "stage0": stage.name,
                "policy": copies[0]["policy"],
                "seed": copies[0]["seed"],
                "copy_loss": stage.copy_loss,
                "tried": [
                    {k: t[k] for k in ("seed", "heldout_execution", "copies", "sft_wall_time_s")}
                    for t in tried[: tried.index(copies[0]) + 1]
                ],
            }
            return cached_json(chosen_path, lambda c=chosen: c), tried
    losses = ", ".join(f"{t['seed']}: {t['heldout_execution']:.4f}" for t in tried)
    raise StudyError(
        f"stage0.{stage.name}: no candidate seed learned to copy (held-out execution loss <= "
        f"{stage.copy_loss:g}; {losses}); add candidate seeds (seeds) or sft.epochs"
    )


def stage0_policy(stage: Stage0, runs_dir: str, device: str) -> str:
    """The stage's checkpoint, made already (:func:`make_stage0` runs before any base)."""
    chosen = chosen_file(runs_dir, stage, device)
    if not chosen.is_file():
        raise StudyError(
            f"stage0.{stage.name} is not made yet under {runs_dir}: run the study "
            "(cxsim study), which makes it before any SFT base"
        )
    return str(cached_json(chosen, dict)["policy"])

"""Running a study: (setting, seed, arm) units through the main job's machinery, cached.

A unit is one call of :func:`run_unit` with plain arguments (frozen dataclasses of
:mod:`cxsim.studies.spec`, a seed, two strings), so that any executor can map units;
:func:`run_study` maps them with an executor of :mod:`cxsim.studies.executors` (this
machine's processes, ``--jobs`` at a time, or Ray tasks), logging one line per finished
call. Seeds' SFT bases are made first (:func:`make_base`, through the same executor), so
that two arms of one seed running side by side never both make the base they share.

Each stage is the main job's (``cxsim run``'s stage configs, experiments/run.py): SFT
(experiments/sft.py ``run_sft``), PPO from that base (experiments/train.py ``train``) and
evaluation of the last checkpoint (experiments/evaluate.py ``evaluate``). Seed s is the SFT
seed, the training seed and the evaluation seed of every arm, as in ``cxsim verdicts``.

The runs folder (``--runs-dir``)::

    <setting>-<hash>/settings.json      what the hash stands for: task, compaction, SFT,
                                        starting checkpoint, device
    <setting>-<hash>/s<seed>/sft/       the seed's SFT base
    <setting>-<hash>/s<seed>/train/<arm>-<hash of the arm's PPO config>/
    <setting>-<hash>/s<seed>/eval/<arm>-<hash of its PPO and eval configs>.json
    predictions.json                    each claim's prediction as first seen

Every stage is read when its file is there and made otherwise (cxsim/tables.py
``cached_json``): a rerun with more seeds or arms makes only what is new, a killed study
resumes, and a changed setting or arm gets new folders beside the old ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cxsim.studies.executors import Executor, LocalExecutor
from cxsim.studies.spec import BASE, Arm, Selection, Setting, Study, arm_ppo, main_job_config
from cxsim.tables import cached_json, config_tag
from cxsim.tracking import say, write_json

if TYPE_CHECKING:
    from cxsim.experiments import evaluate as evaluate_entry
    from cxsim.experiments import sft as sft_entry
    from cxsim.experiments import train as train_entry

STAGES = ("sft", "train", "eval")

# -- where a unit's files go ----------------------------------------------------------------


def base_settings(setting: Setting, device: str) -> dict[str, Any]:
    """What a seed's SFT base depends on besides the seed (the setting folder's hash)."""
    return {
        "env": setting.env,
        "compaction": setting.compaction,
        "sft": setting.sft,
        "policy": setting.policy,
        "device": device,
    }


def setting_folder(runs_dir: str | Path, setting: Setting, device: str) -> Path:
    return Path(runs_dir) / config_tag(setting.name, base_settings(setting, device))


def seed_folder(runs_dir: str | Path, setting: Setting, seed: int, device: str) -> Path:
    return setting_folder(runs_dir, setting, device) / f"s{seed}"


def train_folder(seed_dir: Path, setting: Setting, arm: Arm) -> Path:
    return seed_dir / "train" / config_tag(arm.name, arm_ppo(setting, arm))


def eval_file(seed_dir: Path, setting: Setting, arm: Arm | None) -> Path:
    ppo = None if arm is None else arm_ppo(setting, arm)
    name = BASE if arm is None else arm.name
    return seed_dir / "eval" / f"{config_tag(name, {'ppo': ppo, 'eval': setting.eval})}.json"


# -- the stage configs (the main job's) -----------------------------------------------------


def sft_config(setting: Setting, seed: int, seed_dir: Path, device: str) -> sft_entry.Config:
    """The seed's SFT base: ``cxsim run``'s SFT stage (SFT seed ``seed``)."""
    from cxsim.experiments import run as run_entry

    return run_entry.sft_config(main_job_config(setting, seed, seed_dir, device))


def train_config(
    setting: Setting, arm: Arm, seed: int, seed_dir: Path, base_policy: str, device: str
) -> train_entry.Config:
    """An arm's PPO from the seed's base: ``cxsim run``'s training stage for the arm's preset,
    with the arm's PPO config (:func:`cxsim.studies.spec.arm_ppo`), training seed ``seed``."""
    from cxsim.experiments import run as run_entry

    rc = main_job_config(setting, seed, seed_dir, device, arm.preset)
    made = run_entry.train_config(rc, base_policy, arm.preset, seed)
    run_dir = train_folder(seed_dir, setting, arm)
    return replace(made, ppo=arm_ppo(setting, arm), run_dir=str(run_dir))


def eval_config(
    setting: Setting, seed: int, seed_dir: Path, policy: str, out: Path, device: str
) -> evaluate_entry.Config:
    """``cxsim run``'s evaluation of ``policy`` on the seed's tasks (evaluation seed ``seed``)."""
    from cxsim.experiments import run as run_entry

    return run_entry.eval_config(main_job_config(setting, seed, seed_dir, device), policy, out)


# -- units ----------------------------------------------------------------------------------


def cached_stage(
    path: Path, compute: Callable[[], dict[str, Any]], made: list[str], stage: str
) -> dict[str, Any]:
    """``cached_json``, noting in ``made`` the stages this call had to compute."""
    if not path.is_file():
        made.append(stage)
    return cached_json(path, compute)


def make_base(setting: Setting, seed: int, runs_dir: str, device: str) -> dict[str, Any]:
    """The seed's SFT base (cached); what was made and its results."""
    from cxsim.experiments import sft as sft_entry

    began = time.perf_counter()
    made: list[str] = []
    cfg = sft_config(setting, seed, seed_folder(runs_dir, setting, seed, device), device)
    sft = cached_stage(
        Path(cfg.run_dir) / "results.json", lambda: sft_entry.run_sft(cfg), made, "sft"
    )
    return {
        "setting": setting.name,
        "seed": seed,
        "made": made,
        "sft": sft,
        "wall_time_s": time.perf_counter() - began,
    }


def run_unit(
    setting: Setting, arm: Arm | None, seed: int, runs_dir: str, device: str
) -> dict[str, Any]:
    """One (setting, seed, arm) unit: the seed's SFT base (made if missing), the arm's PPO
    from it (``arm`` None: the base itself, untrained) and its evaluation, each cached.
    Returns plain data: what was made now, the evaluation per protocol, the training's
    ``final`` figures (mean of its last iterations) and where everything is."""
    from cxsim.experiments import evaluate as evaluate_entry
    from cxsim.experiments import train as train_entry

    began = time.perf_counter()
    name = BASE if arm is None else arm.name
    seed_dir = seed_folder(runs_dir, setting, seed, device)
    base = make_base(setting, seed, runs_dir, device)
    made = list(base["made"])
    policy = base["sft"]["policy"]
    trained, train_dir = None, ""
    if arm is not None:
        cfg = train_config(setting, arm, seed, seed_dir, policy, device)
        train_dir = cfg.run_dir
        trained = cached_stage(
            Path(train_dir) / "results.json", lambda: train_entry.train(cfg), made, "train"
        )
        policy = trained["policy"]
    out = eval_file(seed_dir, setting, arm)
    evaluated = cached_stage(
        out,
        lambda: evaluate_entry.evaluate(
            eval_config(setting, seed, seed_dir, policy, out, device), label=name
        ),
        made,
        "eval",
    )
    training = None
    if trained is not None:
        training = {
            "run_dir": train_dir,
            "iterations_done": int(trained["iterations_done"]),
            "wall_time_s": float(trained["wall_time_s"]),
            "final": trained["final"],
            "ppo": trained["config"]["ppo"],
        }
    wall = time.perf_counter() - began
    return {
        "setting": setting.name,
        "arm": name,
        "seed": seed,
        "made": made,
        "wall_time_s": wall,
        "policy": policy,
        "eval_file": str(out),
        "eval": {r["protocol"]: r for r in evaluated["results"]},
        "eval_wall_time_s": float(evaluated["wall_time_s"]),
        "sft": {
            "run_dir": str(Path(base["sft"]["policy"]).parent),
            "wall_time_s": float(base["sft"]["wall_time_s"]),
            "compaction": base["sft"]["config"]["compaction"],  # the sizes the pre-flight derived
        },
        "train": training,
    }


# -- the study ------------------------------------------------------------------------------


def log(message: str) -> None:
    say(f"[study {time.strftime('%H:%M:%S')}] {message}")


def run_study(
    study: Study,
    selection: Selection,
    runs_dir: str,
    device: str = "cpu",
    jobs: int = 1,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """Every selected unit on every seed (cached), bases first, through ``executor`` (None:
    this machine's processes, ``jobs`` at a time, closed on return); returns the units'
    results as ``runs[setting][arm]`` (one dict per seed, in seed order), the predictions as
    first recorded, and how many stages of each kind this call made."""
    if executor is None:
        own = LocalExecutor(jobs)
        try:
            return run_study(study, selection, runs_dir, device, executor=own)
        finally:
            own.close()
    predictions = record_predictions(study, selection, runs_dir, device)
    settings = {s.name: s for s in study.settings}
    for name in dict.fromkeys(s for s, _ in selection.pairs):
        folder = setting_folder(runs_dir, settings[name], device)
        cached_json(folder / "settings.json", lambda n=name: base_settings(settings[n], device))
    bases = [
        (settings[s], seed, runs_dir, device)
        for s in dict.fromkeys(s for s, _ in selection.pairs)
        for seed in study.seeds
    ]
    log(
        f"{len(bases)} SFT bases ({len(study.seeds)} seeds), then {len(selection.pairs)} arms "
        f"per seed, on {executor.name} ({executor.workers} at once)"
    )
    made = mapped(executor, make_base, bases, "SFT base")
    units = [
        (settings[s], None if a == BASE else study.arm(a), seed, runs_dir, device)
        for s, a in selection.pairs
        for seed in study.seeds
    ]
    results = mapped(executor, run_unit, units, "")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for result in results:
        runs.setdefault(result["setting"], {}).setdefault(result["arm"], []).append(result)
    counts = {stage: 0 for stage in STAGES}
    for item in [*made, *results]:  # bases are made in the first pass, never by a unit
        for stage in item["made"]:
            counts[stage] += 1
    return {"runs": runs, "predictions": predictions, "made": counts}


def mapped(
    executor: Executor, fn: Callable[..., dict[str, Any]], calls: list[tuple[Any, ...]], what: str
) -> list[dict[str, Any]]:
    """``[fn(*c) for c in calls]`` through ``executor``, in order; one log line per call as
    it finishes (``what`` names a call; empty: its arm)."""
    results: list[dict[str, Any]] = [{} for _ in calls]
    for done, (index, result) in enumerate(executor.map(fn, calls), start=1):
        results[index] = result
        stages = ", ".join(result["made"]) or "read from the cache"
        log(
            f"[{done}/{len(calls)}] {result['setting']}, seed {result['seed']}, "
            f"{what or result['arm']}: {stages} ({result['wall_time_s']:.0f}s)"
        )
    return results


def record_predictions(
    study: Study, selection: Selection, runs_dir: str, device: str
) -> dict[str, dict[str, Any]]:
    """``predictions.json`` in the runs folder: each selected claim's prediction and predicted
    size as first seen (with the date, and whether either side's evaluations already existed
    then), and any later change of them. Written before any unit runs."""
    import json

    path = Path(runs_dir) / "predictions.json"
    record: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.is_file() else {}
    now = time.strftime("%Y-%m-%d %H:%M")
    for claim in selection.claims:
        key = f"{claim.setting}:{claim.name}"
        said = {"prediction": claim.prediction, "predicted_size": claim.predicted_size}
        seen = record.get(key)
        if seen is None:
            setting = study.setting(claim.setting)
            sides = [
                None if a == BASE else study.arm(a) for a in (claim.treatment, claim.reference)
            ]
            existed = any(
                eval_file(seed_folder(runs_dir, setting, seed, device), setting, arm).is_file()
                for seed in study.seeds
                for arm in sides
            )
            record[key] = {**said, "first_seen": now, "results_existed": existed, "changes": []}
        elif {k: seen[k] for k in said} != said and (
            not seen["changes"] or {k: seen["changes"][-1][k] for k in said} != said
        ):
            seen["changes"].append({**said, "seen": now})
    write_json(path, record)
    return record

"""Running a study: (setting, seed, arm) units through the main job's machinery, cached.

A unit is one call of :func:`run_unit` with plain arguments (frozen dataclasses of
:mod:`cxsim.studies.spec`, a seed, two strings, the extra protocols), so that any executor
can map units; :func:`run_study` maps them with an executor of :mod:`cxsim.studies.executors`
(this machine's processes, ``--jobs`` at a time, or Ray tasks), logging one line per finished
call (:func:`cxsim.studies.calls.mapped`). A stage 0 is made first
(:func:`cxsim.studies.stage0.make_stage0`: its candidates through the executor, a batch at a
time, until one copies), then the seeds' SFT bases (:func:`make_base`), so that two arms of
one seed running side by side never both make what they share; after every unit, the claim
sides whose summaries another arm writes (:func:`run_swap`: one policy acting, another
summarizing, under ``external-summarizer``).

Each stage is the main job's (``cxsim run``'s stage configs, cxsim/pipeline/run.py): SFT
(cxsim/pipeline/sft.py ``run_sft``), PPO from that base (cxsim/pipeline/train.py ``train``) and
evaluation of the last checkpoint (cxsim/pipeline/evaluate.py ``evaluate``). Seed s is the SFT
seed, the training seed and the evaluation seed of every arm, as in ``cxsim verdicts``.

Where each stage's files go in the runs folder (``--runs-dir``):
:mod:`cxsim.studies.unit_files`. Every stage is read when its file is there and made
otherwise (cxsim/tables.py ``cached_json``): a rerun with more seeds or arms makes only what
is new, a killed study resumes, and a changed setting or arm gets new folders beside the old
ones.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cxsim.plugin_checks import within
from cxsim.studies.calls import cached_stage, log, mapped
from cxsim.studies.executors import Executor, LocalExecutor
from cxsim.studies.history import actor_reductions
from cxsim.studies.selection import Selection, apart_sides, check_tuning_seeds, extra_protocols
from cxsim.studies.side_runs import merge_side, run_side, side_calls, unit_policy
from cxsim.studies.spec import BASE, Arm, Setting, Side, Stage0, Study
from cxsim.studies.stage0 import make_stage0, stage0_policy
from cxsim.studies.stages import arm_ppo, main_job_config, under
from cxsim.studies.unit_files import (
    base_folder,
    base_settings,
    check_env_record,
    policy_swap,
    seed_folder,
    setting_folder,
    side_eval_file,
    swap_eval_file,
    train_folder,
    unit_eval_file,
    unit_name,
)
from cxsim.studies.where import is_own_cache, own_files
from cxsim.tables import cached_json
from cxsim.tracking import write_json

if TYPE_CHECKING:
    from cxsim.pipeline import evaluate as evaluate_entry
    from cxsim.pipeline import sft as sft_entry
    from cxsim.pipeline import train as train_entry
    from cxsim.studies.outcomes import Runs

STAGES = ("sft", "train", "eval")

# -- the stage configs (the main job's) -----------------------------------------------------


def sft_config(
    setting: Setting, seed: int, seed_dir: Path, device: str, start: str | None = None
) -> sft_entry.Config:
    """The seed's SFT base: ``cxsim run``'s SFT stage (SFT seed ``seed``), from ``start``
    for a stage-0 setting (the stage's checkpoint)."""
    from cxsim.pipeline import run as run_entry

    return run_entry.sft_config(main_job_config(setting, seed, seed_dir, device, start=start))


def train_config(
    setting: Setting, arm: Arm, seed: int, seed_dir: Path, base_policy: str, device: str
) -> train_entry.Config:
    """An arm's PPO from the seed's base: ``cxsim run``'s training stage for the arm's preset,
    with the arm's PPO config (:func:`cxsim.studies.stages.arm_ppo`), training seed ``seed``."""
    from cxsim.pipeline import run as run_entry

    rc = main_job_config(setting, seed, seed_dir, device, arm.preset)
    made = run_entry.train_config(rc, base_policy, arm.preset, seed)
    run_dir = train_folder(seed_dir, setting, arm)
    return replace(made, ppo=arm_ppo(setting, arm), run_dir=str(run_dir))


def eval_config(
    setting: Setting, seed: int, seed_dir: Path, policy: str, out: Path, device: str
) -> evaluate_entry.Config:
    """``cxsim run``'s evaluation of ``policy`` on the seed's tasks (evaluation seed ``seed``)."""
    from cxsim.pipeline import run as run_entry

    return run_entry.eval_config(main_job_config(setting, seed, seed_dir, device), policy, out)


# -- units ----------------------------------------------------------------------------------


def start_of(setting: Setting, runs_dir: str, device: str) -> str | None:
    """What the setting's SFT bases start from: its policy, or its stage 0's checkpoint."""
    if setting.stage0 is None:
        return setting.policy
    return stage0_policy(setting.stage0, runs_dir, device)


def make_base(setting: Setting, seed: int, runs_dir: str, device: str) -> dict[str, Any]:
    """The seed's SFT base (cached; a ``bases_from`` setting's in that setting's folder);
    what was made and its results."""
    from cxsim.pipeline import sft as sft_entry

    began = time.perf_counter()
    made: list[str] = []
    start = start_of(setting, runs_dir, device)
    cfg = sft_config(setting, seed, base_folder(runs_dir, setting, seed, device), device, start)
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


def training_summary(trained: dict[str, Any], train_dir: str) -> dict[str, Any]:
    """What a unit keeps of its PPO run's results.json: where it is, its length and time, its
    ``final`` figures, its reductions over the actor iterations, its PPO settings as run, and
    under ``--ppo.keep-best`` which version was evaluated."""
    training = {
        "run_dir": train_dir,
        "iterations_done": int(trained["iterations_done"]),
        "wall_time_s": float(trained["wall_time_s"]),
        "final": trained["final"],
        **actor_reductions(trained.get("history", [])),
        "ppo": trained["config"]["ppo"],
    }
    if "best_policy" in trained:
        training["best_policy"] = trained["best_policy"]
    return training


def run_unit(
    setting: Setting,
    arm: Arm | None,
    seed: int,
    runs_dir: str,
    device: str,
    protocols: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One (setting, seed, arm) unit: the seed's SFT base (made if missing), the arm's PPO
    from it (``arm`` None: the base itself, untrained) and its evaluation, each cached;
    ``protocols``: more protocols to evaluate it under, each its own evaluation (a claim's
    protocol its setting does not evaluate). Returns plain data: what was made now, the
    evaluation per protocol, the training's ``final`` figures (mean of its last
    iterations), its reductions and success curve (:mod:`cxsim.studies.history`) and where
    everything is."""
    from cxsim.pipeline import evaluate as evaluate_entry
    from cxsim.pipeline import train as train_entry

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
        where = f"study setting {setting.name!r}, arm {arm.name!r}, seed {seed}"
        trained = cached_stage(
            Path(train_dir) / "results.json",
            lambda: within(where, lambda: train_entry.train(cfg)),
            made,
            "train",
        )
        policy = trained["policy"]
    evaluations = []
    for protocol in (None, *protocols):
        out = unit_eval_file(runs_dir, setting, arm, seed, device, protocol)
        evaluated_setting = under(setting, protocol)
        evaluations.append(
            cached_stage(
                out,
                lambda s=evaluated_setting, o=out: evaluate_entry.evaluate(
                    eval_config(s, seed, seed_dir, policy, o, device), label=name
                ),
                made,
                "eval",
            )
        )
    out = unit_eval_file(runs_dir, setting, arm, seed, device)
    training = None if trained is None else training_summary(trained, train_dir)
    wall = time.perf_counter() - began
    return {
        "setting": setting.name,
        "arm": name,
        "seed": seed,
        "made": made,
        "wall_time_s": wall,
        "policy": policy,
        "eval_file": str(out),
        "eval": {r["protocol"]: r for e in evaluations for r in e["results"]},
        "eval_wall_time_s": sum(float(e["wall_time_s"]) for e in evaluations),
        "sft": {
            "run_dir": str(Path(base["sft"]["policy"]).parent),
            "wall_time_s": float(base["sft"]["wall_time_s"]),
            "compaction": base["sft"]["config"]["compaction"],  # the sizes the pre-flight derived
        },
        "train": training,
    }


def evaluate_with_summarizer(
    cfg: evaluate_entry.Config, summarizer_policy: str, label: str
) -> dict[str, Any]:
    """``cxsim eval`` of ``cfg.policy`` (``cfg.eval.protocols``, each one whose summaries
    another agent writes), with the policy at ``summarizer_policy`` writing the summaries;
    the same JSON payload, written to ``cfg.out``."""
    from cxsim.pipeline import evaluate as evaluate_entry

    return evaluate_entry.evaluate(cfg, label, summarizer_policy=summarizer_policy)


def run_swap(
    setting: Setting,
    arm: Arm | None,
    summarizer: Arm | None,
    seed: int,
    runs_dir: str,
    device: str,
    protocol: str,
) -> dict[str, Any]:
    """One side with a summarizer on one seed (cached): ``arm``'s policy (None: the base)
    acting under ``protocol`` while ``summarizer``'s writes the summaries, both made
    already. Returns plain data keyed as the side's evaluation (:attr:`Side.evaluation`)."""
    began = time.perf_counter()
    made: list[str] = []
    acting = unit_policy(setting, arm, seed, runs_dir, device)
    writing = unit_policy(setting, summarizer, seed, runs_dir, device)
    out = swap_eval_file(runs_dir, setting, arm, summarizer, seed, device, protocol)
    seed_dir = seed_folder(runs_dir, setting, seed, device)
    cfg = eval_config(under(setting, protocol), seed, seed_dir, acting, out, device)
    label = f"{unit_name(arm)} with {unit_name(summarizer)}'s summaries"
    evaluation = cached_stage(
        out, lambda: evaluate_with_summarizer(cfg, writing, label), made, "eval"
    )
    key = Side(setting.name, unit_name(arm), protocol, unit_name(summarizer)).evaluation
    return {
        "setting": setting.name,
        "arm": unit_name(arm),
        "label": label,
        "seed": seed,
        "made": made,
        "wall_time_s": time.perf_counter() - began,
        "eval": {key: evaluation["results"][0]},
        "eval_wall_time_s": float(evaluation["wall_time_s"]),
    }


# -- the study ------------------------------------------------------------------------------


def run_study(
    study: Study,
    selection: Selection,
    runs_dir: str,
    device: str = "cpu",
    jobs: int = 1,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """Every selected unit on every seed (cached), stage 0 and bases first, through
    ``executor`` (None: this machine's processes, ``jobs`` at a time, closed on return);
    returns the units' results as ``runs[setting][arm]`` (one dict per seed, in seed order;
    an evaluation with another arm's summaries under the acting arm's ``eval``),
    each stage 0's checkpoint (its chosen file), the predictions as first recorded, and how
    many stages of each kind this call made."""
    check_tuning_seeds(study, selection)  # before any work, the executor's start included
    if executor is None:
        own = LocalExecutor(jobs)
        try:
            return run_study(study, selection, runs_dir, device, executor=own)
        finally:
            own.close()
    settings = {s.name: s for s in study.settings}
    selected = list(dict.fromkeys(s for s, _ in selection.pairs))
    owners = list(dict.fromkeys(settings[s].bases_owner for s in selected))
    record_settings([settings[n] for n in dict.fromkeys([*selected, *owners])], runs_dir, device)
    predictions = record_predictions(study, selection, runs_dir, device)
    stages = {
        s.stage0.name: s.stage0 for s in (settings[n] for n in owners) if s.stage0 is not None
    }
    stage0, made = make_every_stage0(stages, runs_dir, device, executor)
    bases = [(settings[s], seed, runs_dir, device) for s in owners for seed in study.seeds]
    log(
        f"{len(bases)} SFT bases ({len(study.seeds)} seeds), then {len(selection.pairs)} arms "
        f"per seed, on {executor.name} ({executor.workers} at once)"
    )
    made += mapped(executor, make_base, bases, "SFT base")
    runs, done = run_units(study, selection, runs_dir, device, executor)
    swapped = run_swaps(study, selection, runs, runs_dir, device, executor)
    counts = made_counts([*made, *done, *swapped], with_stage0=bool(stages))
    return {"runs": runs, "stage0": stage0, "predictions": predictions, "made": counts}


def record_settings(settings: list[Setting], runs_dir: str, device: str) -> None:
    """Each setting folder's ``settings.json``: what its hash stands for (written once)."""
    for setting in settings:
        folder = setting_folder(runs_dir, setting, device)
        cached_json(folder / "settings.json", lambda s=setting: base_settings(s, device))
        check_env_record(folder, setting.env)


def make_every_stage0(
    stages: dict[str, Stage0], runs_dir: str, device: str, executor: Executor
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Each stage 0 in turn (:func:`cxsim.studies.stage0.make_stage0`: its candidates through
    ``executor`` until one copies); returns each stage's chosen checkpoint by name, and the
    results of the candidates made or read."""
    chosen: dict[str, dict[str, Any]] = {}
    made: list[dict[str, Any]] = []
    for name, stage in stages.items():
        log(f"stage0.{name}: candidate seeds {list(stage.seeds)} until one copies")
        chosen[name], candidates = make_stage0(stage, runs_dir, device, executor)
        made += candidates
        log(f"stage0.{name}: seed {chosen[name]['seed']}'s checkpoint")
    return chosen, made


def run_units(
    study: Study, selection: Selection, runs_dir: str, device: str, executor: Executor
) -> tuple[Runs, list[dict[str, Any]]]:
    """Every selected (setting, arm) on every seed through ``executor`` (:func:`run_unit`),
    a base shared between settings (``bases_from``) with the same evaluations run once;
    returns the results as ``runs[setting][arm]`` and the results of the units run."""
    settings = {s.name: s for s in study.settings}
    units = [
        (
            settings[s],
            None if a == BASE else study.arm(a),
            seed,
            runs_dir,
            device,
            extra_protocols(study, selection, s, a),
        )
        for s, a in selection.pairs
        for seed in study.seeds
    ]
    keys = [(unit_eval_file(runs_dir, u[0], u[1], u[2], device), u[5]) for u in units]
    first = {key: i for i, key in reversed(list(enumerate(keys)))}
    distinct = sorted(set(first.values()))
    done = dict(
        zip(distinct, mapped(executor, run_unit, [units[i] for i in distinct], ""), strict=True)
    )
    results = [
        {**done[first[key]], "setting": unit[0].name} for unit, key in zip(units, keys, strict=True)
    ]
    runs: Runs = {}
    for result in results:
        runs.setdefault(result["setting"], {}).setdefault(result["arm"], []).append(result)
    return runs, list(done.values())


def run_swaps(
    study: Study,
    selection: Selection,
    runs: Runs,
    runs_dir: str,
    device: str,
    executor: Executor,
) -> list[dict[str, Any]]:
    """The sides evaluated apart from the units, on every seed, through ``executor``: a
    policy acting with another's summaries (:func:`run_swap`), the oracle acting, a
    scripted summarizer or another env (:func:`cxsim.studies.side_runs.run_side`); each
    one's evaluation goes into the acting arm's results in ``runs`` (the oracle's made
    there), beside its own evaluations. Returns the sides' results."""
    settings = {s.name: s for s in study.settings}
    sides = apart_sides(selection)
    swaps = [
        (
            settings[side.setting],
            None if side.arm == BASE else study.arm(side.arm),
            None if side.summarizer == BASE else study.arm(side.summarizer),
            seed,
            runs_dir,
            device,
            side.protocol,
        )
        for side in sides
        if policy_swap(side)
        for seed in study.seeds
    ]
    others = side_calls(study, tuple(s for s in sides if not policy_swap(s)), runs_dir, device)
    swapped = mapped(executor, run_swap, swaps, "") + mapped(executor, run_side, others, "")
    for swap in swapped:
        merge_side(runs, study, swap)
    return swapped


def made_counts(results: list[dict[str, Any]], with_stage0: bool) -> dict[str, int]:
    """How many stages of each kind ``results`` made (``stage0`` counted when the study has
    one)."""
    counts = {stage: 0 for stage in (*STAGES, *(("stage0",) if with_stage0 else ()))}
    for item in results:
        for stage in item["made"]:
            counts[stage] += 1
    return counts


def record_predictions(
    study: Study, selection: Selection, runs_dir: str, device: str
) -> dict[str, dict[str, Any]]:
    """The study file's ``predictions.json`` (:func:`cxsim.studies.where.own_files`: keyed by
    the file, so two files sharing ``--runs-dir`` never mix theirs): each selected claim's
    prediction and predicted size as first seen (with the date, and whether either side's
    evaluations already existed then), and any later change of them. Written before any unit
    runs. A record at the runs folder's root, from before the key, is read only in the file's
    own folder's cache, where no other file wrote."""
    import json

    path = own_files(runs_dir, study.path) / "predictions.json"
    before_key = Path(runs_dir) / "predictions.json"
    if not path.is_file() and before_key.is_file() and is_own_cache(runs_dir, study.path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(before_key.read_text())
    record: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.is_file() else {}
    now = time.strftime("%Y-%m-%d %H:%M")
    for claim in selection.claims:
        key = f"{claim.setting}:{claim.name}"
        said = claim.commitments
        seen = record.get(key)
        if seen is None:
            existed = any(
                side_eval_file(study, side, runs_dir, seed, device).is_file()
                for seed in study.seeds
                for side in claim.sides
            )
            record[key] = {**said, "first_seen": now, "results_existed": existed, "changes": []}
        elif {k: seen.get(k) for k in said} != said and (
            not seen["changes"] or {k: seen["changes"][-1].get(k) for k in said} != said
        ):
            seen["changes"].append({**said, "seen": now})
    write_json(path, record)
    return record

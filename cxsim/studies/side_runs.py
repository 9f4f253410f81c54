"""The sides a study evaluates apart from its units (:func:`cxsim.studies.sides.evaluated_apart`)
that name a scripted agent or another env: the oracle acting, the scripted summarizer at an
omission rate writing the summaries, an ``[eval_envs.NAME]`` environment. Each is one call of
:func:`run_side` with plain arguments, made after every arm it needs is trained, through the
study's executor, and cached like every evaluation (:func:`cxsim.studies.unit_files.scripted_side_file`).

Each is ``cxsim eval``'s evaluation (cxsim/pipeline/evaluate.py ``evaluate``) with the
setting's configs for the seed: ``--agent oracle`` in the chat format of the seed's SFT base
(``--tokenizer`` its folder) for the oracle, ``--omission-rate P`` for ``scripted:P``, another
policy as the summarizer for an arm's summaries, and ``--env.*`` of the eval env with the
window sized on the setting's own task (the sizes its runs were trained with). A side whose
two agents are policies on the setting's own env is the Table 1 swap
(:func:`cxsim.studies.runner.run_swap`), cached where it always was.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cxsim.studies.calls import cached_stage
from cxsim.studies.sides import ORACLE, EvalEnv, scripted_rate
from cxsim.studies.spec import BASE, Arm, Setting, Side, Study
from cxsim.studies.stages import main_job_config, under
from cxsim.studies.unit_files import (
    base_folder,
    scripted_side_file,
    seed_folder,
    train_folder,
    unit_name,
)
from cxsim.studies.values import StudyError
from cxsim.tables import cached_json

if TYPE_CHECKING:
    from cxsim.pipeline import evaluate as evaluate_entry
    from cxsim.studies.outcomes import Runs


def unit_policy(setting: Setting, arm: Arm | None, seed: int, runs_dir: str, device: str) -> str:
    """The policy a unit made: the seed's SFT base (``arm`` None) or the arm's last
    checkpoint, read from its results (the study makes them before an evaluation needs them)."""
    if arm is None:
        path = base_folder(runs_dir, setting, seed, device) / "sft" / "results.json"
    else:
        path = train_folder(seed_folder(runs_dir, setting, seed, device), setting, arm)
        path = path / "results.json"
    if not path.is_file():
        raise StudyError(
            f"settings.{setting.name}, seed {seed}: {unit_name(arm)} is not made yet under "
            f"{runs_dir}; run the study, which makes every arm before the evaluations that "
            "swap summarizers"
        )
    return str(cached_json(path, dict)["policy"])


def side_config(
    setting: Setting,
    side: Side,
    arms: dict[str, Arm],
    env: Any,
    seed: int,
    runs_dir: str,
    device: str,
    out: Path,
) -> tuple[evaluate_entry.Config, str | None]:
    """``cxsim eval``'s config of a side on one seed, and the policy writing its summaries
    (None: the protocol's own writer, the scripted one at the side's omission rate)."""
    from cxsim.pipeline import run as run_entry

    def policy_of(name: str) -> str:
        return unit_policy(setting, None if name == BASE else arms[name], seed, runs_dir, device)

    base = policy_of(BASE)
    acting = base if side.arm == ORACLE else policy_of(side.arm)
    evaluated = under(setting, side.protocol)
    seed_dir = seed_folder(runs_dir, setting, seed, device)
    cfg = run_entry.eval_config(main_job_config(evaluated, seed, seed_dir, device), acting, out)
    if side.arm == ORACLE:  # the env's oracle, in the chat format of the seed's base
        cfg = replace(cfg, model=replace(cfg.model, policy=None), agent="oracle", tokenizer=base)
    rate = scripted_rate(side.summarizer)
    if rate is not None:
        cfg = replace(cfg, omission_rate=rate)
    if env is not None:
        cfg = replace(cfg, env=env)
    writer = policy_of(side.summarizer) if side.summarizer and rate is None else None
    return cfg, writer


def run_side(
    setting: Setting,
    side: Side,
    arms: tuple[Arm, ...],
    eval_env: EvalEnv | None,
    seed: int,
    runs_dir: str,
    device: str,
) -> dict[str, Any]:
    """One side with the oracle, a scripted summarizer or another env on one seed (cached):
    the arms it names made already (``arms``: the study's). Returns plain data keyed as the
    side's evaluation (:attr:`Side.evaluation`), as :func:`cxsim.studies.runner.run_swap`."""
    from cxsim.pipeline import evaluate as evaluate_entry

    began = time.perf_counter()
    made: list[str] = []
    by_name = {a.name: a for a in arms}
    env = None if eval_env is None else eval_env.env_of(setting.env)
    out = scripted_side_file(runs_dir, setting, side, by_name, env, seed, device)
    cfg, writer = side_config(setting, side, by_name, env, seed, runs_dir, device, out)
    label = side.arm + (f" with {side.summarizer}'s summaries" if side.summarizer else "")
    label += f" on {side.env}" if side.env else ""
    sized_on = setting.env if env is not None else None
    evaluation = cached_stage(
        out,
        lambda: evaluate_entry.evaluate(cfg, label, summarizer_policy=writer, sized_on=sized_on),
        made,
        "eval",
    )
    return {
        "setting": setting.name,
        "arm": side.arm,
        "label": label,
        "seed": seed,
        "made": made,
        "wall_time_s": time.perf_counter() - began,
        "eval": {side.evaluation: evaluation["results"][0]},
        "eval_wall_time_s": float(evaluation["wall_time_s"]),
        "eval_file": str(out),
    }


def side_calls(study: Study, sides: tuple[Side, ...], runs_dir: str, device: str) -> list[tuple]:
    """:func:`run_side`'s arguments for each of ``sides`` on every seed."""
    envs = {e.name: e for e in study.eval_envs}
    return [
        (study.setting(s.setting), s, study.arms, envs.get(s.env), seed, runs_dir, device)
        for s in sides
        for seed in study.seeds
    ]


def merge_side(runs: Runs, study: Study, result: dict[str, Any]) -> None:
    """Put a side's evaluation into its acting arm's results in ``runs``, beside its own
    evaluations; the oracle's results, made by no unit, start as the seed base's (its SFT,
    no training, no evaluation of its own)."""
    by_arm = runs[result["setting"]]
    if result["arm"] not in by_arm:  # the oracle
        by_arm[result["arm"]] = [
            {**unit, "arm": result["arm"], "made": [], "policy": None, "train": None,
             "eval": {}, "eval_wall_time_s": 0.0, "eval_file": result["eval_file"]}
            for unit in by_arm[BASE]
        ]  # fmt: skip
    seeds = by_arm[result["arm"]]
    index = list(study.seeds).index(result["seed"])
    unit = seeds[index]
    seeds[index] = {
        **unit,
        "eval": {**unit["eval"], **result["eval"]},
        "eval_wall_time_s": unit["eval_wall_time_s"] + result["eval_wall_time_s"],
    }

"""``cxsim tables`` as a study: tables.toml (this package's) at ``--preset``'s budget, narrowed to the
chosen tables and changed by the flags given (:func:`tables_study`), and the study's unit
results as the per-seed results the page reads (:func:`page_runs`).

The file holds every cell of the tables: the rows as arms of the setting ``main``, Table 1
as sides with a fixed executor (``oracle`` or ``base``) and another summarizer
(``scripted:P``, ``compactionrl``, ``base``) under ``external-summarizer``, Table 2's last
column as sides evaluated under Single on ``[eval_envs.one-window]``. A flag that differs
from the preset's default (``--ppo.iterations 3``, ``--one-window-kwargs memory_length 3``,
``--policy DIR``, ``--precision bf16``) changes the setting as the file's key would; ``--tables``,
``--omission-rates`` and ``--executors`` keep a subset of the file's rows and cells.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cxsim.paper_tables.tables_page import ONE_WINDOW
from cxsim.paper_tables.tables_seeds import PageSetup

if TYPE_CHECKING:
    from cxsim.paper_tables.tables import Config
    from cxsim.studies.spec import Setting, Side, Study

SETTING = "main"
"""The study file's one setting."""
ONE_WINDOW_ENV = "one-window"
"""The study file's ``[eval_envs.NAME]`` of Table 2's last column."""
TABLE1_PROTOCOL = "external-summarizer"


def changed_setting(cfg: Config, preset: Config, setting: Setting) -> Setting:
    """The file's setting with each flag that differs from the preset's default put over
    it: the task, compaction, SFT, PPO, evaluation, starting policy and model settings."""
    from cxsim.studies.model_settings import ModelSettings

    changes: dict[str, Any] = {
        name: getattr(cfg, name)
        for name in ("env", "compaction", "sft", "ppo")
        if getattr(cfg, name) != getattr(preset, name)
    }
    if cfg.eval != preset.eval:  # Compacted first: the study's first protocol
        protocols = sorted(cfg.eval.protocols, key=lambda p: p != "compacted")
        changes["eval"] = replace(cfg.eval, protocols=tuple(protocols), seed=None)
    policy = cfg.model.policy
    if policy != preset.model.policy:
        changes["policy"] = None if policy is None else str(Path(policy).absolute())
    compute = cfg.compute
    model = ModelSettings(compute.precision, compute.gradient_checkpointing, cfg.model.chat)
    if model != ModelSettings(preset.compute.precision, preset.compute.gradient_checkpointing,
                              preset.model.chat):  # fmt: skip
        changes["model"] = model
    return replace(setting, arms=cfg.rows, **changes)


def kept_side(cfg: Config, side: Side) -> bool:
    """Whether a claim side or evaluation belongs to the chosen tables and cells: its rows
    trained, Table 1's executor and summarizer chosen, Single and the one-window task asked."""
    from cxsim.studies.sides import ORACLE, scripted_rate

    rows = ("base", ORACLE, *cfg.rows)
    rate = scripted_rate(side.summarizer)
    if side.arm not in rows or (rate is None and side.summarizer not in ("", *rows)):
        return False
    if side.summarizer and (1 not in cfg.tables or side.arm not in cfg.executors):
        return False
    if rate is not None and not any(abs(rate - p) < 1e-9 for p in cfg.omission_rates):
        return False
    if side.env and (2 not in cfg.tables or not cfg.one_window_kwargs):
        return False
    return side.protocol in (TABLE1_PROTOCOL, *cfg.eval.protocols)


def file_rates(study: Study) -> tuple[float, ...]:
    """The scripted summarizers' omission rates the file evaluates, in its order."""
    from cxsim.studies.sides import scripted_rate

    sides = (*study.evaluations, *(s for c in study.claims for s in c.sides))
    rates = (scripted_rate(s.summarizer) for s in sides)
    return tuple(dict.fromkeys(r for r in rates if r is not None))


def tables_study(cfg: Config, preset: Config) -> Study:
    """The tables' study file (``cfg.study``) at the budget ``cfg.preset`` on ``cfg``'s seeds,
    changed by the flags that differ from ``preset`` (the preset's defaults) and narrowed to
    the chosen tables and Table 1 cells; one line naming a rate or table the file lacks."""
    from cxsim.studies.load import load_study
    from cxsim.studies.values import StudyError

    study = load_study(cfg.study, seeds=list(cfg.seed_list), budget=cfg.preset)
    rates = file_rates(study)
    missing = [p for p in cfg.omission_rates if not any(abs(p - r) < 1e-9 for r in rates)]
    if missing and 1 in cfg.tables:
        raise StudyError(
            f"--omission-rates {missing[0]:g}: {Path(cfg.study).name} evaluates the scripted "
            f"summarizer at {', '.join(f'{r:g}' for r in rates)}; add evaluations to it for others"
        )
    setting = changed_setting(cfg, preset, study.setting(SETTING))
    envs = study.eval_envs
    if cfg.one_window_kwargs != preset.one_window_kwargs:
        envs = tuple(
            replace(e, kwargs=dict(cfg.one_window_kwargs)) if e.name == ONE_WINDOW_ENV else e
            for e in envs
        )
    claims = tuple(c for c in study.claims if all(kept_side(cfg, s) for s in c.sides))
    return replace(
        study,
        settings=(setting,),
        arms=tuple(a for a in study.arms if a.name in cfg.rows),
        claims=claims,
        evaluations=tuple(e for e in study.evaluations if kept_side(cfg, e)),
        eval_envs=envs,
    )


SIZES = ("budget", "threshold", "max_response_tokens", "max_summary_tokens")
"""The compaction sizes the pre-flight derives when the file leaves them unset."""


def page_setup(
    cfg: Config, study: Study, runs: dict[str, dict[str, list[dict[str, Any]]]]
) -> PageSetup:
    """What the page says about the run: the study's setting, as plain settings, with the
    compaction sizes the runs were made with (the first seed's SFT base records them)."""
    setting = study.setting(SETTING)
    made = runs[SETTING]["base"][0]["sft"]["compaction"]
    compaction = replace(setting.compaction, **{name: made[name] for name in SIZES})
    one_window = next((e for e in study.eval_envs if e.name == ONE_WINDOW_ENV), None)
    kwargs = {} if one_window is None or not cfg.one_window_kwargs else dict(one_window.kwargs)
    return PageSetup(
        preset=cfg.preset, seeds=study.seeds, tables=cfg.tables, rows=cfg.rows,
        env=setting.env, compaction=compaction, sft=setting.sft, ppo=setting.ppo,
        eval=setting.eval, one_window_kwargs=kwargs, omission_rates=cfg.omission_rates,
        executors=cfg.executors, jobs=cfg.jobs,
    )  # fmt: skip


# -- the study's results as the page's ------------------------------------------------------


def evaluation_key(arm: str, key: str) -> tuple[str, str, str]:
    """Where a unit's evaluation goes on the page: (``eval`` or ``external``, the page's name,
    the protocol), from the arm and the study's evaluation key (:attr:`Side.evaluation`)."""
    rest, _, env = key.partition("@")
    protocol, _, summarizer = rest.partition("+")
    if summarizer:
        rate = summarizer.removeprefix("scripted:")
        name = f"scripted-{float(rate):g}" if rate != summarizer else summarizer
        return "external", f"{arm}+{name}", protocol
    return "eval", f"{arm}/{ONE_WINDOW}" if env else arm, protocol


def seed_run(by_arm: dict[str, list[dict[str, Any]]], index: int) -> dict[str, Any]:
    """One seed's results as the page reads them: the SFT base's wall time, each trained
    row's ``final`` figures and history, each evaluation by the page's name."""
    run: dict[str, Any] = {"sft": {}, "train": {}, "eval": {}, "external": {}}
    for arm, results in by_arm.items():
        unit = results[index]
        if arm == "base":
            run["sft"] = {"wall_time_s": float(unit["sft"]["wall_time_s"])}
        if unit["train"] is not None:
            trained = json.loads((Path(unit["train"]["run_dir"]) / "results.json").read_text())
            run["train"][arm] = {
                "final": unit["train"]["final"],
                "history": trained["history"],
                "wall_time_s": float(unit["train"]["wall_time_s"]),
            }
        wall = float(unit["eval_wall_time_s"])  # counted once, on the arm's first entry
        for key, result in unit["eval"].items():
            group, name, protocol = evaluation_key(arm, key)
            entry = run[group].setdefault(name, {"results": {}, "wall_time_s": wall})
            entry["results"][protocol] = result
            wall = 0.0
    return run


def page_runs(study: Study, runs: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict]:
    """The study's unit results (``run_study``'s ``runs``) as the page's per-seed results
    (:class:`cxsim.paper_tables.tables_seeds.Seeds`), in seed order."""
    by_arm = runs[SETTING]
    return [seed_run(by_arm, index) for index in range(len(study.seeds))]

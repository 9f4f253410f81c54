"""A study file read whole: the TOML's top-level keys, each table parsed and validated
(:mod:`cxsim.studies.spec`, :mod:`cxsim.studies.settings`, :mod:`cxsim.studies.claims`,
:mod:`cxsim.studies.checks`), every
arm's PPO config checked, and the seeds and budget applied, before any run
(:func:`load_study`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from cxsim.studies.checks import budget_checks, parse_checks
from cxsim.studies.claims import parse_claims, parse_evaluations
from cxsim.studies.correction import CORRECTIONS
from cxsim.studies.model_settings import FILE_KEYS, file_model_settings
from cxsim.studies.settings import (
    attach_stage0,
    check_bases_from,
    parse_arms,
    parse_settings,
    parse_stage0,
)
from cxsim.studies.sides import parse_eval_envs
from cxsim.studies.spec import (
    BASE,
    FIGURE_KEYS,
    Arm,
    Figure,
    Setting,
    Stage0,
    Study,
    parse_budgets,
    parse_seeds,
)
from cxsim.studies.stages import arm_ppo
from cxsim.studies.stats import METRICS
from cxsim.studies.values import StudyError, check_keys, table_of, text_of

TOP_KEYS = (
    "title",
    "question",
    "seeds",
    "diagnostics",
    "settings",
    "stage0",
    "arms",
    "claims",
    "budgets",
    "metrics",
    "figure",
    "checks",
    "reading",
    "tuning_seeds",
    "correction",
    "eval_envs",
    "evaluations",
    *FILE_KEYS,
)


def read_toml(path: Path, text: str | None = None) -> dict[str, Any]:
    """The file's table (``text``: the file's text as recorded, instead of reading it); a
    missing file or bad TOML is one line."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError as error:
            raise StudyError(
                "reading a study file needs Python 3.11 or later (tomllib), or "
                "`pip install tomli` on Python 3.10"
            ) from error
    if text is None and not path.is_file():
        raise FileNotFoundError(f"no study file at {path}; pass the path of a .toml file")
    try:
        return tomllib.loads(path.read_text() if text is None else text)
    except tomllib.TOMLDecodeError as error:
        raise StudyError(f"{path.name} is not valid TOML: {error}") from error


def load_study(
    path: str | Path, seeds: str | None = None, budget: str | None = None, text: str | None = None
) -> Study:
    """Parse and validate the study file at ``path``: every key, every name, every config
    and every (setting, arm) PPO config, before any run. ``seeds`` (``a:b``) replaces the
    file's seeds; ``budget`` names a ``[budgets.NAME]`` table set over every setting;
    ``text``: the file's text as a page's artefact recorded it (the path still names it and
    the folder its relative paths start from).

    The file's folder goes on the import path (after the current folder), so that an arm's
    ``ppo.estimator = "my_module:name"`` finds a module kept next to the file."""
    path = Path(path).absolute()
    raw = read_toml(path, text)
    where = path.name
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)
    check_keys(raw, TOP_KEYS, where, "a study file")
    budgets = parse_budgets(raw.get("budgets", {}), where)
    chosen_budget = budget_table(budgets, budget, where)
    for table in budgets.values():  # every budget's eval envs name the file's
        parse_eval_envs(raw.get("eval_envs", {}), table["eval_envs"], where)
    eval_envs = parse_eval_envs(raw.get("eval_envs", {}), chosen_budget.get("eval_envs", {}), where)
    arms = parse_arms(table_of(raw, "arms", where), where)
    settings = parse_settings(
        table_of(raw, "settings", where),
        arms,
        chosen_budget,
        path.parent,
        where,
        file_model_settings(raw, where),
    )
    stage0 = parse_stage0(
        table_of(raw, "stage0", where),
        settings,
        chosen_budget.get("stage0", {}),
        path.parent,
        where,
    )
    settings = attach_stage0(settings, stage0, where)
    check_bases_from(settings, where)
    check_arm_ppo(settings, arms, where)
    claims = parse_claims(raw.get("claims", []), settings, where, eval_envs)
    evaluations = parse_evaluations(raw.get("evaluations", []), settings, where, eval_envs)
    study_seeds = parse_study_seeds(raw, seeds, stage0, where)
    tuning = raw.get("tuning_seeds")
    tuning_seeds = () if tuning is None else parse_seeds(tuning, f"{where}: tuning_seeds")
    correction = text_of(raw, "correction", where, default="none")
    if correction not in CORRECTIONS:
        raise StudyError(
            f"{where}: correction = {correction!r}; choose one of: {', '.join(CORRECTIONS)} "
            "(holm: Holm-Bonferroni over the page's claims)"
        )
    return Study(
        path=str(path),
        title=text_of(raw, "title", where, default=path.stem),
        question=text_of(raw, "question", where),
        seeds=study_seeds,
        settings=settings,
        arms=arms,
        claims=claims,
        diagnostics=parse_diagnostics(raw.get("diagnostics", []), where),
        budget=budget,
        stage0=stage0,
        checks=budget_checks(
            parse_checks(raw.get("checks", []), settings, where), chosen_budget, budget, where
        ),
        metrics=parse_metrics(raw.get("metrics", []), where),
        reading=text_of(raw, "reading", where),
        figure=parse_figure(raw.get("figure"), arms, where),
        tuning_seeds=tuning_seeds,
        correction=correction,
        evaluations=evaluations,
        eval_envs=tuple(eval_envs.values()),
    )


def budget_table(
    budgets: dict[str, dict[str, dict[str, Any]]], budget: str | None, where: str
) -> dict[str, dict[str, Any]]:
    """The ``[budgets.NAME]`` table ``--budget`` names (empty without one)."""
    if budget is not None and budget not in budgets:
        choices = ", ".join(budgets) or "none: add a [budgets.NAME] table"
        raise StudyError(f"--budget {budget}: {where} has no [budgets.{budget}]; choose: {choices}")
    return budgets.get(budget or "", {})


def check_arm_ppo(settings: tuple[Setting, ...], arms: tuple[Arm, ...], where: str) -> None:
    """Every arm's PPO config in every setting that runs it, with the main job's own checks."""
    for setting in settings:
        for name in setting.arms:
            try:
                arm_ppo(setting, next(a for a in arms if a.name == name))
            except StudyError as error:
                raise StudyError(f"{where}: {error}") from error


def parse_study_seeds(
    raw: dict[str, Any], seeds: str | None, stage0: tuple[Stage0, ...], where: str
) -> tuple[int, ...]:
    """The study's seeds: ``--seeds`` or else the file's ``seeds``; none of them a stage 0's
    candidate seed (its demonstrations must be tasks no seed uses)."""
    seed_text = seeds if seeds is not None else raw.get("seeds")
    if seed_text is None:
        raise StudyError(f'{where}: name the seeds (seeds = "0:8"), or pass --seeds a:b')
    seed_where = "--seeds" if seeds is not None else f"{where}: seeds"
    study_seeds = parse_seeds(seed_text, seed_where)
    for stage in stage0:
        shared = sorted(set(stage.seeds) & set(study_seeds))
        if shared:
            raise StudyError(
                f"{seed_where}: seed {shared[0]} is also a candidate seed of stage0.{stage.name}, "
                "whose demonstrations must be tasks no seed uses; pick other seeds"
            )
    return study_seeds


def parse_metrics(raw: Any, where: str) -> tuple[str, ...]:
    """``metrics = ["pass_at_1", "tokens_processed"]``: keys of METRICS."""
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise StudyError(f'{where}: metrics is a list such as ["pass_at_1", "model_calls"]')
    for key in raw:
        if key not in METRICS:
            raise StudyError(f"{where}: metrics: {key!r}; choose from: {', '.join(METRICS)}")
    return tuple(raw)


def parse_figure(raw: Any, arms: tuple[Arm, ...], where: str) -> Figure | None:
    """``[figure]``: ``x`` and ``y`` (keys of METRICS) and optionally one ``arm``."""
    if raw is None:
        return None
    here = f"{where}: figure"
    check_keys(raw, FIGURE_KEYS, here, "a figure")
    axes = {}
    for axis in ("x", "y"):
        axes[axis] = text_of(raw, axis, here, required=True)
        if axes[axis] not in METRICS:
            raise StudyError(f"{here}.{axis} = {axes[axis]!r}; choose from: {', '.join(METRICS)}")
    arm = text_of(raw, "arm", here)
    if arm and arm != BASE and arm not in [a.name for a in arms]:
        raise StudyError(
            f"{here}.arm = {arm!r} is no arm of the file; arms: " + ", ".join(a.name for a in arms)
        )
    return Figure(axes["x"], axes["y"], arm)


def parse_diagnostics(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(k, str) and "/" in k for k in raw):
        raise StudyError(
            f"{where}: diagnostics is a list of training history keys such as "
            '"credit/abs_adv_seg0" (docs/tensorboard.md lists them)'
        )
    return tuple(raw)

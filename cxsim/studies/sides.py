"""What a claim side or an ``[[evaluations]]`` entry may name besides a trained arm: the
scripted agents and the environments a study evaluates on without training there.

- ``oracle`` (reserved, like ``base``): the env family's scripted oracle acting
  (``cxsim.envs.family``; ``cxsim eval --agent oracle``), in the chat format of the seed's
  SFT base; it trains nothing and is evaluated only;
- ``scripted:P`` as a summarizer: the scripted summarizer dropping each needed fact with
  probability P (``cxsim.envs.scripted.ScriptedSummarizer``; ``cxsim eval --omission-rate P``),
  beside an arm's (or ``base``'s) policy as the summarizer;
- ``env = "NAME"``: the side evaluated on the ``[eval_envs.NAME]`` environment, its
  ``kwargs`` set over the side's setting's ``env.kwargs`` (the same id) or replacing them
  (another ``env-id``), with the window sizes the setting's runs were trained with.

A side that names one of them, or a summarizer, is evaluated apart from the units, after
every arm is trained (:mod:`cxsim.studies.side_runs`). This module parses them; it imports
nothing of :mod:`cxsim.studies.spec`, which imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cxsim.config import EnvConfig
from cxsim.studies.values import StudyError, check_keys, check_name, first_line, text_of

if TYPE_CHECKING:
    from cxsim.studies.spec import Side

ORACLE = "oracle"
"""The env family's scripted oracle as a side's acting agent (no arm may take the name)."""
SCRIPTED_PREFIX = "scripted:"
"""``summarizer = "scripted:0.3"``: the scripted summarizer at omission rate 0.3."""
EVAL_ENV_KEYS = ("about", "env-id", "env_id", "kwargs")
EVALUATION_KEYS = ("setting", "arm", "summarizer", "protocol", "env", "about")


@dataclass(frozen=True)
class EvalEnv:
    """``[eval_envs.NAME]``: an environment sides are evaluated on, relative to their
    setting's: ``kwargs`` set over the setting's ``env.kwargs`` key by key when the id is the
    setting's (``env_id`` empty), the id's own defaults replaced as a whole otherwise."""

    name: str
    env_id: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    about: str = ""

    def env_of(self, env: EnvConfig) -> EnvConfig:
        """The environment a side of a setting whose task is ``env`` is evaluated on."""
        if not self.env_id or self.env_id == env.env_id:
            return EnvConfig(env.env_id, {**env.kwargs, **self.kwargs})
        return EnvConfig(self.env_id, dict(self.kwargs))


def scripted_rate(name: str) -> float | None:
    """The omission rate of a ``scripted:P`` summarizer; None for any other name."""
    if not name.startswith(SCRIPTED_PREFIX):
        return None
    return float(name.removeprefix(SCRIPTED_PREFIX))


def check_summarizer(name: str, setting: str, evaluated: tuple[str, ...], where: str) -> None:
    """A summarizer is one of ``evaluated`` (``base`` and the setting's arms) or
    ``scripted:P`` with P in [0, 1]; one line naming the choices otherwise."""
    if name in evaluated:
        return
    if name.startswith(SCRIPTED_PREFIX):
        text = name.removeprefix(SCRIPTED_PREFIX)
        try:
            rate = float(text)
        except ValueError:
            rate = -1.0
        if 0.0 <= rate <= 1.0 and text.strip() == text:
            return
        raise StudyError(
            f"{where} = {name!r}: the scripted summarizer's omission rate is a number in [0, 1], "
            'e.g. "scripted:0.3"'
        )
    hint = ' (the oracle writes no summaries for others: "scripted:0" keeps every fact)'
    raise StudyError(
        f"{where} = {name!r} is not an arm of setting {setting}; choose one of: "
        f"{', '.join(evaluated)} or scripted:P (P in [0, 1])" + (hint if name == ORACLE else "")
    )


def parse_eval_envs(raw: Any, budget: dict[str, Any], where: str) -> dict[str, EvalEnv]:
    """``[eval_envs.NAME]`` tables (``env-id``, ``kwargs``, ``about``), each with the
    ``[budgets.X.eval_envs.NAME]`` keys of the budget applied over it, by name."""
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise StudyError(f"{where}: eval_envs holds [eval_envs.NAME] tables")
    if not isinstance(budget, dict) or not all(isinstance(v, dict) for v in budget.values()):
        raise StudyError(f"{where}: a budget's eval_envs holds [budgets.X.eval_envs.NAME] tables")
    for name in budget:
        if name not in raw:
            raise StudyError(
                f"{where}: the budget's eval_envs.{name} names no [eval_envs.{name}]; "
                f"eval envs: {', '.join(raw) or 'none'}"
            )
    envs = {}
    for name, table in raw.items():
        here = f"{where}: eval_envs.{name}"
        check_name(name, here)
        merged = {**table, **budget.get(name, {})}
        check_keys(merged, EVAL_ENV_KEYS, here, "an eval env")
        kwargs = merged.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise StudyError(f"{here}: kwargs is a table, e.g. {{ memory_length = 4 }}")
        env_id = text_of(merged, "env-id", here, default=text_of(merged, "env_id", here))
        envs[name] = EvalEnv(name, env_id, dict(kwargs), text_of(merged, "about", here))
    return envs


def side_env(eval_env: EvalEnv, env: EnvConfig, where: str) -> EnvConfig:
    """The environment ``eval_env`` makes of a setting's, checked (its id and keywords)."""
    from cxsim.env_kwargs import check_env_kwargs

    try:
        made = eval_env.env_of(env)
        check_env_kwargs(made.env_id, made.kwargs, f"eval_envs.{eval_env.name}.kwargs")
    except (ValueError, TypeError, KeyError) as error:
        raise StudyError(f"{where}: {first_line(error)}") from error
    return made


def check_side_env(name: str, envs: dict[str, EvalEnv], env: EnvConfig, where: str) -> str:
    """A side's ``env``: the name of an ``[eval_envs.NAME]`` whose environment the side's
    setting can make; empty when not given."""
    if not name:
        return ""
    if name not in envs:
        raise StudyError(
            f"{where}: env = {name!r} names no [eval_envs.{name}]; eval envs: "
            f"{', '.join(envs) or 'none (add an [eval_envs.NAME] table)'}"
        )
    side_env(envs[name], env, where)
    return name


def check_scripted_side(side: Side, env_id: str, where: str) -> None:
    """A side with the oracle acting or a scripted summarizer needs its env to declare a
    family (its scripted oracle and summary writer); one line saying so otherwise."""
    from cxsim.envs.family import require_family_of_id

    if side.arm != ORACLE and scripted_rate(side.summarizer) is None:
        return
    try:
        require_family_of_id(env_id)
    except Exception as error:  # any failure to make the env, in one line
        used = ORACLE if side.arm == ORACLE else side.summarizer
        raise StudyError(
            f"{where}: {used} needs the env's scripted agents: {first_line(error)}"
        ) from error


def evaluated_apart(side: Side) -> bool:
    """Whether a side is evaluated apart from its arm's unit: another agent writes its
    summaries, the oracle acts, or it is evaluated on another environment."""
    return bool(side.summarizer or side.arm == ORACLE or side.env)

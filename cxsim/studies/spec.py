"""A study file, parsed and validated into frozen dataclasses before any run.

The file is TOML (every key, with an example: docs/reference/study-files.md)::

    title = "A floor on the cross-segment correction"
    seeds = "0:8"                      # seeds 0..7; --seeds on the command line overrides it
    diagnostics = ["credit/abs_adv_seg0"]

    [settings.small]                   # a task and the budgets that make one seed's runs
    policy = "pretrained"
    env.env-id = "cxsim/KeyRecall-v0"
    env.kwargs = { memory_length = 5, num_values = 4 }
    compaction.budget = 160
    sft.episodes = 64
    ppo.iterations = 6
    eval.episodes = 64

    [arms.floored]                     # a preset of experiments/presets.py, then ppo.* keys
    preset = "compactionrl"
    ppo.estimator = "my_estimator:floored"

    [[claims]]
    name = "floor-helps"
    treatment = "floored"
    reference = "compactionrl"
    prediction = "small, positive; not resolved at 8 seeds"
    predicted_size = 0.03

    [budgets.smoke]                    # --budget smoke: set over every setting
    sft.episodes = 6

Inside ``env``, ``compaction``, ``sft``, ``ppo`` and ``eval`` a key is the command line's flag
without the leading ``--`` (``ppo.lambda-scope``, ``sft.heldout-episodes``; underscores are
taken too), and a value is checked against the flag's type here, then by the config's own
validation; ``"None"`` is None. A name the file gets wrong ends the command before any run
with one line naming the key (:class:`StudyError`).

A study's defaults are the command line's, except ``eval.protocols``: ``compacted`` only.
An arm's PPO settings are its setting's ``ppo`` table, then its preset's changes on top (as
``cxsim run --presets`` applies them), then the arm's own ``ppo`` keys.
"""

from __future__ import annotations

import difflib
import re
import sys
import types
import typing
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, PPOConfig, SFTConfig
from cxsim.experiments.presets import DEFAULT_PRESET, PRESETS
from cxsim.pretrained import PRETRAINED
from cxsim.studies.stats import METRICS

if TYPE_CHECKING:
    from cxsim.experiments import run as run_entry

BASE = "base"
"""The name of a seed's SFT base among the arms (evaluated as it is; no arm may take it)."""
ARM_PREFIX = "arm:"
"""``--only arm:NAME``: that arm in every setting that has it."""
DIRECTIONS = ("higher", "lower")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
"""Setting, arm, claim and budget names: they name folders and ``--only`` items."""

GROUPS: dict[str, Any] = {
    "env": EnvConfig(),
    "compaction": DEFAULT_COMPACTION,
    "sft": SFTConfig(),
    "ppo": PPOConfig(),
    "eval": EvalConfig(protocols=("compacted",)),
}
"""The config groups a setting sets, with a study's defaults (the command line's; evaluation
under Compacted only)."""
BUDGET_GROUPS = ("compaction", "sft", "ppo", "eval")
TOP_KEYS = ("title", "question", "seeds", "diagnostics", "settings", "arms", "claims", "budgets")
SETTING_KEYS = ("about", "policy", "arms", *GROUPS)
ARM_KEYS = ("about", "preset", "ppo")
CLAIM_KEYS = (
    "name",
    "setting",
    "treatment",
    "reference",
    "metric",
    "protocol",
    "direction",
    "prediction",
    "predicted_size",
    "statement",
)


class StudyError(ValueError):
    """A study file that cannot run as written: one line naming the key and what to change."""


@dataclass(frozen=True)
class Setting:
    """A task with the budgets that make one seed's runs: the SFT base, every arm's PPO from
    it, and the evaluations."""

    name: str
    env: EnvConfig
    compaction: CompactionConfig
    sft: SFTConfig
    ppo: PPOConfig
    """The PPO settings every arm starts from (its preset, then its own keys, on top)."""
    eval: EvalConfig
    """Evaluation; its ``seed`` is replaced by each study seed."""
    policy: str | None
    """What each seed's SFT starts from: ``pretrained``, a folder (absolute), None: fresh."""
    arms: tuple[str, ...]
    """The arms trained in this setting (besides the base)."""
    about: str = ""


@dataclass(frozen=True)
class Arm:
    """A way of training from the base: a preset plus PPO changes."""

    name: str
    preset: str
    ppo: tuple[tuple[str, Any], ...] = ()
    """``(PPOConfig field, value)`` pairs set over the preset."""
    about: str = ""

    @property
    def overrides(self) -> dict[str, Any]:
        return dict(self.ppo)


@dataclass(frozen=True)
class Claim:
    """Two evaluations of one setting paired by seed, with the prediction made before the run."""

    name: str
    setting: str
    treatment: str
    reference: str
    """Arm names, or ``base`` (the seed's SFT base)."""
    prediction: str
    metric: str = "pass_at_1"
    """A key of :data:`cxsim.studies.stats.METRICS`."""
    protocol: str = "compacted"
    direction: Literal["higher", "lower"] = "higher"
    """The claim: treatment above (``higher``) or below (``lower``) the reference."""
    predicted_size: float | None = None
    """The predicted size of treatment - reference in the claim's direction (>= 0)."""
    statement: str = ""


@dataclass(frozen=True)
class Study:
    """A parsed, validated study file."""

    path: str
    """The file (absolute)."""
    title: str
    question: str
    seeds: tuple[int, ...]
    settings: tuple[Setting, ...]
    arms: tuple[Arm, ...]
    claims: tuple[Claim, ...]
    diagnostics: tuple[str, ...]
    budget: str | None = None
    """The ``[budgets.NAME]`` applied over every setting (None: the settings as written)."""

    @property
    def stem(self) -> str:
        return Path(self.path).stem

    def setting(self, name: str) -> Setting:
        return next(s for s in self.settings if s.name == name)

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


@dataclass(frozen=True)
class Selection:
    """What one invocation runs (``--only``): (setting, arm) pairs and the claims they decide."""

    pairs: tuple[tuple[str, str], ...]
    """(setting, arm or ``base``), in the file's order."""
    claims: tuple[Claim, ...]


# -- the file -----------------------------------------------------------------------------


def read_toml(path: Path) -> dict[str, Any]:
    """The file's table; a missing file or bad TOML is one line."""
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
    if not path.is_file():
        raise FileNotFoundError(f"no study file at {path}; pass the path of a .toml file")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise StudyError(f"{path.name} is not valid TOML: {error}") from error


def load_study(path: str | Path, seeds: str | None = None, budget: str | None = None) -> Study:
    """Parse and validate the study file at ``path``: every key, every name, every config
    and every (setting, arm) PPO config, before any run. ``seeds`` (``a:b``) replaces the
    file's seeds; ``budget`` names a ``[budgets.NAME]`` table set over every setting.

    The file's folder goes on the import path (after the current folder), so that an arm's
    ``ppo.estimator = "my_module:name"`` finds a module kept next to the file."""
    path = Path(path).absolute()
    raw = read_toml(path)
    where = path.name
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)
    check_keys(raw, TOP_KEYS, where, "a study file")
    budgets = parse_budgets(raw.get("budgets", {}), where)
    if budget is not None and budget not in budgets:
        choices = ", ".join(budgets) or "none: add a [budgets.NAME] table"
        raise StudyError(f"--budget {budget}: {where} has no [budgets.{budget}]; choose: {choices}")
    arms = parse_arms(table_of(raw, "arms", where), where)
    settings = parse_settings(
        table_of(raw, "settings", where), arms, budgets.get(budget or "", {}), path.parent, where
    )
    for setting in settings:  # every arm's PPO, and the main job's own checks
        for name in setting.arms:
            try:
                arm_ppo(setting, next(a for a in arms if a.name == name))
            except StudyError as error:
                raise StudyError(f"{where}: {error}") from error
    claims = parse_claims(raw.get("claims", []), settings, where)
    seed_text = seeds if seeds is not None else raw.get("seeds")
    if seed_text is None:
        raise StudyError(f'{where}: name the seeds (seeds = "0:8"), or pass --seeds a:b')
    return Study(
        path=str(path),
        title=text_of(raw, "title", where, default=path.stem),
        question=text_of(raw, "question", where),
        seeds=parse_seeds(seed_text, "--seeds" if seeds is not None else f"{where}: seeds"),
        settings=settings,
        arms=arms,
        claims=claims,
        diagnostics=parse_diagnostics(raw.get("diagnostics", []), where),
        budget=budget,
    )


def parse_seeds(value: Any, where: str = "seeds") -> tuple[int, ...]:
    """``"a:b"`` (seeds a..b-1), ``"n"`` or an int (seed n), or a list of distinct ints."""
    if isinstance(value, bool):
        raise StudyError(f'{where} = {value!r}: write a range such as "0:8"')
    if isinstance(value, int):
        value = [value]
    if isinstance(value, list):
        if not value or not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
            raise StudyError(f"{where} = {value!r}: a list of seeds holds integers, e.g. [0, 3]")
        seeds = tuple(value)
    elif isinstance(value, str):
        found = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", value)
        if not found:
            raise StudyError(f"{where} {value!r}: write a:b (seeds a to b-1, e.g. 0:8) or one seed")
        first = int(found.group(1))
        end = int(found.group(2)) if found.group(2) is not None else first + 1
        if end <= first:
            raise StudyError(f"{where} {value!r}: a:b needs b > a (it means seeds a to b-1)")
        seeds = tuple(range(first, end))
    else:
        raise StudyError(f'{where} = {value!r}: write a range such as "0:8"')
    if min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise StudyError(f"{where} = {value!r}: seeds are distinct integers >= 0")
    return seeds


def parse_budgets(raw: Any, where: str) -> dict[str, dict[str, dict[str, Any]]]:
    if not isinstance(raw, dict):
        raise StudyError(f"{where}: budgets is a table of [budgets.NAME] tables")
    budgets = {}
    for name, table in raw.items():
        here = f"{where}: budgets.{name}"
        check_name(name, here)
        groups, _ = split_groups(table, here, BUDGET_GROUPS, ())
        for group, values in groups.items():  # the names and types now; the values per setting
            build_group(group, GROUPS[group], values, here)
        budgets[name] = groups
    return budgets


def parse_arms(raw: dict[str, Any], where: str) -> tuple[Arm, ...]:
    if not raw:
        raise StudyError(f"{where}: name at least one arm ([arms.NAME] with a preset)")
    arms = []
    for name, table in raw.items():
        here = f"{where}: arms.{name}"
        check_name(name, here)
        if name == BASE:
            raise StudyError(f"{here}: {BASE!r} names each seed's SFT base; call the arm otherwise")
        groups, own = split_groups(table, here, ("ppo",), ("about", "preset"))
        preset = own.get("preset", DEFAULT_PRESET)
        if preset not in PRESETS:
            raise StudyError(
                f"{here}: preset = {preset!r} is not a preset of experiments/presets.py; "
                f"choose one of: {', '.join(PRESETS)}"
            )
        changes = build_group("ppo", GROUPS["ppo"], groups.get("ppo", {}), here)
        about = own.get("about", "")
        if not isinstance(about, str):
            raise StudyError(f"{here}: about is text")
        arms.append(Arm(name, preset, tuple(changes.items()), about))
    return tuple(arms)


def parse_settings(
    raw: dict[str, Any],
    arms: tuple[Arm, ...],
    budget: dict[str, dict[str, Any]],
    folder: Path,
    where: str,
) -> tuple[Setting, ...]:
    if not raw:
        raise StudyError(f"{where}: name at least one setting ([settings.NAME])")
    arm_names = [a.name for a in arms]
    settings = []
    for name, table in raw.items():
        here = f"{where}: settings.{name}"
        check_name(name, here)
        if name == ARM_PREFIX.removesuffix(":"):
            raise StudyError(
                f"{here}: 'arm' is kept for --only arm:NAME; call the setting otherwise"
            )
        groups, own = split_groups(table, here, tuple(GROUPS), ("about", "policy", "arms"))
        built = {}
        for group, default in GROUPS.items():
            values = {**normalised(groups.get(group, {})), **normalised(budget.get(group, {}))}
            changes = build_group(group, default, values, here)
            try:
                built[group] = replace(default, **changes)
            except (ValueError, TypeError, KeyError) as error:
                raise StudyError(f"{here}: {group}: {first_line(error)}") from error
        chosen = own.get("arms", arm_names)
        if not isinstance(chosen, list) or not all(isinstance(a, str) for a in chosen):
            raise StudyError(f'{here}: arms is a list of arm names, e.g. ["compactionrl"]')
        for arm in chosen:
            if arm not in arm_names:
                raise StudyError(
                    f"{here}: arms names {arm!r}, which is not an [arms.NAME] "
                    f"table; choose from: {', '.join(arm_names)}"
                )
        if len(set(chosen)) != len(chosen):
            raise StudyError(f"{here}: arms lists a name twice")
        about = own.get("about", "")
        if not isinstance(about, str):
            raise StudyError(f"{here}: about is text")
        policy = starting_policy(own.get("policy", PRETRAINED), folder, here)
        settings.append(Setting(name, policy=policy, arms=tuple(chosen), about=about, **built))
    return tuple(settings)


def starting_policy(value: Any, folder: Path, where: str) -> str | None:
    """``pretrained``, ``"None"`` (a fresh model) or a folder, relative to the study file's."""
    if not isinstance(value, str):
        raise StudyError(f'{where}: policy is text: "pretrained", "None" or a folder')
    if value == PRETRAINED:
        return PRETRAINED
    if value == "None":
        return None
    return str((folder / value).absolute()) if not Path(value).is_absolute() else value


def parse_claims(raw: Any, settings: tuple[Setting, ...], where: str) -> tuple[Claim, ...]:
    if not isinstance(raw, list):
        raise StudyError(f"{where}: claims are [[claims]] tables")
    claims: list[Claim] = []
    for i, table in enumerate(raw, start=1):
        if not isinstance(table, dict):
            raise StudyError(f"{where}: claims are [[claims]] tables")
        here = f"{where}: claim {i}" + (f" ({table['name']})" if "name" in table else "")
        check_keys(table, CLAIM_KEYS, here, "a claim")
        name = text_of(table, "name", here, required=True)
        check_name(name, here)
        if any(c.name == name for c in claims):
            raise StudyError(f"{here}: another claim is named {name!r}; names must differ")
        names = [s.name for s in settings]
        default_setting = names[0] if len(names) == 1 else None
        setting_name = text_of(table, "setting", here, default=default_setting or "")
        if setting_name not in names:
            said = f"setting = {setting_name!r}" if setting_name else "no setting"
            raise StudyError(f"{here}: {said}; choose one of: {', '.join(names)}")
        setting = next(s for s in settings if s.name == setting_name)
        evaluated = (BASE, *setting.arms)
        sides = {}
        for side in ("treatment", "reference"):
            value = text_of(table, side, here, required=True)
            if value not in evaluated:
                raise StudyError(
                    f"{here}: {side} = {value!r} is not an arm of setting "
                    f"{setting.name}; choose one of: {', '.join(evaluated)}"
                )
            sides[side] = value
        if sides["treatment"] == sides["reference"]:
            raise StudyError(f"{here}: treatment and reference are the same; pair two arms")
        metric = text_of(table, "metric", here, default="pass_at_1")
        if metric not in METRICS:
            raise StudyError(f"{here}: metric = {metric!r}; choose one of: {', '.join(METRICS)}")
        protocol = text_of(table, "protocol", here, default="compacted")
        if protocol not in setting.eval.protocols:
            raise StudyError(
                f"{here}: protocol = {protocol!r} is not evaluated in setting {setting.name} "
                f"(eval.protocols = {list(setting.eval.protocols)}); add it there"
            )
        direction = text_of(table, "direction", here, default="higher")
        if direction not in DIRECTIONS:
            raise StudyError(f"{here}: direction = {direction!r}; choose higher or lower")
        prediction = text_of(table, "prediction", here)
        if not prediction.strip():
            raise StudyError(
                f'{here}: write the prediction before the run (prediction = "direction, size, '
                'why"); the page records when it was first seen'
            )
        size = table.get("predicted_size")
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, (int, float)) or size < 0
        ):
            raise StudyError(
                f"{here}: predicted_size = {size!r}: the predicted size of the difference in "
                "the claim's direction, a number >= 0"
            )
        claims.append(
            Claim(
                name,
                setting.name,
                sides["treatment"],
                sides["reference"],
                prediction,
                metric,
                protocol,
                direction,
                None if size is None else float(size),
                text_of(table, "statement", here),
            )
        )
    return tuple(claims)


def parse_diagnostics(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(k, str) and "/" in k for k in raw):
        raise StudyError(
            f"{where}: diagnostics is a list of training history keys such as "
            '"credit/abs_adv_seg0" (docs/tensorboard.md lists them)'
        )
    return tuple(raw)


# -- names and values ---------------------------------------------------------------------


def check_keys(table: Any, allowed: tuple[str, ...], where: str, what: str) -> None:
    if not isinstance(table, dict):
        raise StudyError(f"{where}: expected a table")
    for key in table:
        if key not in allowed:
            raise StudyError(unknown(key, allowed, where, what))


def unknown(key: str, allowed: Any, where: str, what: str) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    hint = f"did you mean {close[0]}?" if close else f"{what} takes: {', '.join(allowed)}"
    return f"{where}: unknown key {key!r} ({hint})"


def check_name(name: str, where: str) -> None:
    if not NAME.fullmatch(name):
        raise StudyError(f"{where}: the name {name!r} may hold letters, digits, - and _ only")


def table_of(raw: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise StudyError(f"{where}: {key} holds [{key}.NAME] tables")
    return value


def text_of(
    table: dict[str, Any], key: str, where: str, default: str = "", required: bool = False
) -> str:
    if key not in table:
        if required:
            raise StudyError(f"{where}: {key} is missing")
        return default
    value = table[key]
    if not isinstance(value, str):
        raise StudyError(f"{where}: {key} = {value!r} must be text (in quotes)")
    return value


def split_groups(
    table: Any, where: str, groups: tuple[str, ...], own: tuple[str, ...]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """A table's config groups (``ppo.lam = 1`` and ``"ppo.lam" = 1`` alike) and its own keys."""
    if not isinstance(table, dict):
        raise StudyError(f"{where}: expected a table")
    found: dict[str, dict[str, Any]] = {}
    mine: dict[str, Any] = {}
    for key, value in table.items():
        group, dot, rest = key.partition(".")
        if dot:
            value = {rest: value}
        if group in groups:
            if not isinstance(value, dict):
                raise StudyError(f"{where}: {key} is a table of {key}.* keys")
            found.setdefault(group, {}).update(value)
        elif group in own and not dot:
            mine[group] = value
        else:
            leaf = next(iter(value), "") if isinstance(value, dict) else ""
            shown = f"{group}.{leaf}" if leaf else key
            close = difflib.get_close_matches(group, [*groups, *own], n=1)
            if close and close[0] in groups and leaf:
                hint = f"did you mean {close[0]}.{leaf}?"
            elif close:
                hint = f"did you mean {close[0]}?"
            else:
                hint = "this table takes " + ", ".join([*own, *(f"{g}.*" for g in groups)])
            raise StudyError(f"{where}: unknown key {shown!r} ({hint})")
    return found, mine


def normalised(table: dict[str, Any]) -> dict[str, Any]:
    return {key.replace("-", "_"): value for key, value in table.items()}


@cache
def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def build_group(group: str, default: Any, table: dict[str, Any], where: str) -> dict[str, Any]:
    """``table``'s keys as field names of ``default``'s config, with values of the flags'
    types (the config's own validation runs where the values are set into it)."""
    hints = type_hints(type(default))
    names = [f.name for f in fields(default)]
    changes = {}
    for key, value in table.items():
        attr = key.replace("-", "_")
        shown = f"{group}.{key}"
        if attr not in names:
            flags = [f"{group}.{n.replace('_', '-')}" for n in names]
            command = "cxsim train" if group == "ppo" else "cxsim run"
            close = difflib.get_close_matches(f"{group}.{key.replace('_', '-')}", flags, n=1)
            hint = f"did you mean {close[0]}?" if close else f"`{command} --help` lists the names"
            raise StudyError(f"{where}: unknown key {shown!r} ({hint})")
        changes[attr] = coerce(value, hints[attr], f"{where}: {shown}")
    return changes


def coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` (as TOML gives it) as a value of type ``hint``; StudyError otherwise."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return coerce(value, args[0], where)
    if origin in (Union, types.UnionType):
        if value == "None" and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return coerce(value, option, where)
            except StudyError:
                pass
        raise StudyError(f"{where} = {value!r}: expected {described(hint)}")
    if origin is Literal:
        if value in args:
            return value
        raise StudyError(f"{where} = {value!r}: choose one of {', '.join(map(str, args))}")
    if origin is tuple:
        if not isinstance(value, list):
            raise StudyError(f'{where} = {value!r}: expected a list, e.g. ["compacted"]')
        return tuple(coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise StudyError(f"{where} = {value!r}: expected a table, e.g. {{ memory_length = 5 }}")
        return {str(k): coerce(v, args[1], f"{where}.{k}") for k, v in value.items()}
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and number and isinstance(value, int):
        return value
    if hint is float and number:
        return float(value)
    if hint is str and isinstance(value, str):
        return value
    raise StudyError(f"{where} = {value!r}: expected {described(hint)}")


def described(hint: Any) -> str:
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return described(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join('"None"' if a is type(None) else described(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    return {bool: "true or false", int: "an integer", float: "a number", str: "text"}.get(
        hint, str(hint)
    )


def first_line(error: BaseException) -> str:
    text = str(error).strip().strip("'\"")
    return text.splitlines()[0] if text else type(error).__name__


# -- what a (setting, seed, arm) means for the main job ------------------------------------


def main_job_config(
    setting: Setting, seed: int, seed_dir: Path, device: str, preset: str = DEFAULT_PRESET
) -> run_entry.Config:
    """``cxsim run``'s config for one seed of a setting: SFT seed, training seed and evaluation
    tasks all ``seed``; the study's stage configs are derived from it."""
    from cxsim.experiments import run as run_entry

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
        threads=1,
        progress_bar=False,
        device=device,
        policy=setting.policy,
    )


def arm_ppo(setting: Setting, arm: Arm) -> PPOConfig:
    """An arm's PPO config in a setting: the setting's ``ppo``, the preset's changes
    (``cxsim run``'s ``preset_ppo``), then the arm's own keys."""
    from cxsim.experiments import run as run_entry

    where = f"arms.{arm.name} in settings.{setting.name}"
    try:
        rc = main_job_config(setting, 0, Path(), "cpu", arm.preset)
        return replace(run_entry.preset_ppo(rc, arm.preset), **arm.overrides)
    except (ValueError, TypeError, KeyError, FileNotFoundError) as error:
        raise StudyError(f"{where}: {first_line(error)}") from error


def select(study: Study, only: tuple[str, ...] = ()) -> Selection:
    """The (setting, arm) pairs ``--only`` keeps (all without it), and the claims whose two
    sides are among them. Items: ``SETTING`` (its base and arms), ``SETTING:CLAIM`` (the two
    sides of that claim), ``arm:NAME`` (that arm wherever it is trained)."""
    every = [(s.name, a) for s in study.settings for a in (BASE, *s.arms)]
    if not only:
        return Selection(tuple(every), study.claims)
    chosen: set[tuple[str, str]] = set()
    settings = [s.name for s in study.settings]
    for item in only:
        if item.startswith(ARM_PREFIX):
            arm = item.removeprefix(ARM_PREFIX)
            pairs = {p for p in every if p[1] == arm and arm != BASE}
            if not pairs:
                names = ", ".join(a.name for a in study.arms)
                raise StudyError(f"--only {item}: no setting trains an arm {arm!r}; arms: {names}")
        elif ":" in item:
            setting, _, claim = item.partition(":")
            found = [c for c in study.claims if c.setting == setting and c.name == claim]
            if not found:
                names = ", ".join(f"{c.setting}:{c.name}" for c in study.claims) or "none"
                raise StudyError(f"--only {item}: no such claim; claims: {names}")
            pairs = {(setting, found[0].treatment), (setting, found[0].reference)}
        elif item in settings:
            pairs = {p for p in every if p[0] == item}
        else:
            raise StudyError(
                f"--only {item}: not a setting, SETTING:CLAIM or arm:NAME; settings: "
                + ", ".join(settings)
            )
        chosen |= pairs
    kept = tuple(p for p in every if p in chosen)
    claims = tuple(
        c for c in study.claims if {(c.setting, c.treatment), (c.setting, c.reference)} <= chosen
    )
    return Selection(kept, claims)

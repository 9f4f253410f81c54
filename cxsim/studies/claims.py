"""A study file's ``[[claims]]``, parsed and validated into :class:`~cxsim.studies.spec.Claim`
before any run: each side an arm (or ``base``, or ``oracle``) of the claim's setting or, as
``SETTING:ARM``, of another; the metric and protocol compared (``"own"``: each side under its
setting's first ``eval.protocols``); the direction (``same`` with a ``margin``); the prediction
written before the run; a side whose summaries another arm's policy or the scripted summarizer
writes (``treatment_summarizer``, the Table 1 swap) and the protocol it is evaluated under; the
``[eval_envs.NAME]`` both sides are evaluated on (``env``). The ``[[evaluations]]`` entries,
sides without a claim, are parsed here too (:func:`parse_evaluations`); the names a side may
take besides an arm's: :mod:`cxsim.studies.sides`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cxsim.studies.sides import (
    EVALUATION_KEYS,
    ORACLE,
    EvalEnv,
    check_scripted_side,
    check_side_env,
    check_summarizer,
)
from cxsim.studies.spec import BASE, OWN_PROTOCOL, SWAP_PROTOCOL, Claim, Setting, Side
from cxsim.studies.stats import CLAIM_METRICS, METRICS, THRESHOLD_METRIC, TRAINING_METRICS
from cxsim.studies.values import StudyError, check_keys, check_name, first_line, text_of

CLAIM_KEYS = (
    "name",
    "setting",
    "treatment",
    "reference",
    "metric",
    "protocol",
    "direction",
    "margin",
    "prediction",
    "predicted_size",
    "statement",
    "diagnostics",
    "treatment_summarizer",
    "reference_summarizer",
    "threshold",
    "env",
)
DIRECTIONS = ("higher", "lower", "same")


def parse_claims(
    raw: Any,
    settings: tuple[Setting, ...],
    where: str,
    eval_envs: dict[str, EvalEnv] | None = None,
) -> tuple[Claim, ...]:
    if not isinstance(raw, list):
        raise StudyError(f"{where}: claims are [[claims]] tables")
    claims: list[Claim] = []
    for i, table in enumerate(raw, start=1):
        if not isinstance(table, dict):
            raise StudyError(f"{where}: claims are [[claims]] tables")
        here = f"{where}: claim {i}" + (f" ({table['name']})" if "name" in table else "")
        claim = parse_claim(table, settings, claims, here)
        env = text_of(table, "env", here)
        if env and claim.metric in TRAINING_METRICS:
            raise StudyError(
                f"{here}: env goes with evaluation metrics; {claim.metric} is read from training"
            )
        for side in claim.sides:
            side_setting = settings_of(settings, side.setting)
            check_side_env(env, eval_envs or {}, side_setting.env, here)
            played = (eval_envs or {})[env].env_of(side_setting.env) if env else side_setting.env
            check_scripted_side(side, played.env_id, here)
        claims.append(replace(claim, env=env))
    return tuple(claims)


def settings_of(settings: tuple[Setting, ...], name: str) -> Setting:
    return next(s for s in settings if s.name == name)


def parse_claim(
    table: dict[str, Any], settings: tuple[Setting, ...], earlier: list[Claim], here: str
) -> Claim:
    """One ``[[claims]]`` table validated into a :class:`Claim`: its name and setting, its two
    sides and their summarizers, metric, protocols, direction, prediction and predicted size
    (``earlier``: the file's claims before it)."""
    check_keys(table, CLAIM_KEYS, here, "a claim")
    name = text_of(table, "name", here, required=True)
    check_name(name, here)
    setting = claim_setting(table, name, settings, earlier, here)
    sides, summarizers = claim_sides(table, setting, settings, here)
    metric = text_of(table, "metric", here, default="pass_at_1")
    if metric not in CLAIM_METRICS:
        raise StudyError(f"{here}: metric = {metric!r}; choose one of: {', '.join(CLAIM_METRICS)}")
    threshold = claim_threshold(table, metric, here)
    if metric in TRAINING_METRICS:
        check_training_sides(table, metric, sides, summarizers, here)
    protocol = text_of(table, "protocol", here, default="compacted")
    protocols = side_protocols(table, metric, protocol, sides, summarizers, here)
    direction = text_of(table, "direction", here, default="higher")
    if direction not in DIRECTIONS:
        raise StudyError(
            f"{here}: direction = {direction!r}; choose higher, lower or same (with a margin)"
        )
    margin = claim_margin(table, direction, here)
    prediction = text_of(table, "prediction", here)
    if not prediction.strip():
        raise StudyError(
            f'{here}: write the prediction before the run (prediction = "direction, size, '
            'why"); the page records when it was first seen'
        )
    size = predicted_size(table, direction, here)
    return Claim(
        name,
        setting.name,
        sides["treatment"][1],
        sides["reference"][1],
        prediction,
        metric,
        protocol,
        direction,
        size,
        text_of(table, "statement", here),
        margin,
        claim_diagnostics(table.get("diagnostics", []), here),
        treatment_setting=sides["treatment"][0].name,
        reference_setting=sides["reference"][0].name,
        treatment_protocol=protocols["treatment"],
        reference_protocol=protocols["reference"],
        treatment_summarizer=summarizers["treatment"],
        reference_summarizer=summarizers["reference"],
        threshold=threshold,
    )


def claim_setting(
    table: dict[str, Any],
    name: str,
    settings: tuple[Setting, ...],
    earlier: list[Claim],
    where: str,
) -> Setting:
    """The claim's setting (``setting``, optional when the file has one), where no earlier
    claim of that setting has the same name."""
    names = [s.name for s in settings]
    default_setting = names[0] if len(names) == 1 else None
    setting_name = text_of(table, "setting", where, default=default_setting or "")
    if setting_name not in names:
        said = f"setting = {setting_name!r}" if setting_name else "no setting"
        raise StudyError(f"{where}: {said}; choose one of: {', '.join(names)}")
    if any((c.setting, c.name) == (setting_name, name) for c in earlier):
        raise StudyError(
            f"{where}: another claim of setting {setting_name} is named {name!r}; names "
            "must differ within a setting"
        )
    return next(s for s in settings if s.name == setting_name)


def claim_sides(
    table: dict[str, Any], setting: Setting, settings: tuple[Setting, ...], where: str
) -> tuple[dict[str, tuple[Setting, str]], dict[str, str]]:
    """The treatment's and the reference's (setting, arm) (:func:`claim_side`) and summarizer
    (:func:`claim_summarizer`), by side; the two must differ."""
    sides: dict[str, tuple[Setting, str]] = {}
    for side in ("treatment", "reference"):
        sides[side] = claim_side(text_of(table, side, where, required=True), setting, settings)
        if isinstance(sides[side], str):
            raise StudyError(f"{where}: {side} = {sides[side]}")
    summarizers = {
        side: claim_summarizer(table, side, side_setting, where)
        for side, (side_setting, _) in sides.items()
    }
    if (sides["treatment"], summarizers["treatment"]) == (
        sides["reference"],
        summarizers["reference"],
    ):
        raise StudyError(f"{where}: treatment and reference are the same; pair two arms")
    return sides, summarizers


def side_protocols(
    table: dict[str, Any],
    metric: str,
    protocol: str,
    sides: dict[str, tuple[Setting, str]],
    summarizers: dict[str, str],
    where: str,
) -> dict[str, str]:
    """The protocol each side is evaluated under, by side: a training metric's the setting's
    first (nothing is evaluated), a side with a summarizer :func:`swap_protocol`, any other
    the claim's ``protocol`` (``"own"``: its setting's first), which the setting must be
    able to evaluate."""
    protocols = {}
    for side, (side_setting, _) in sides.items():
        if metric in TRAINING_METRICS:  # read from training: no evaluation of its own
            protocols[side] = side_setting.eval.protocols[0]
            continue
        if summarizers[side]:
            protocols[side] = swap_protocol(table, f"{side}_summarizer", where)
            continue
        protocols[side] = side_setting.eval.protocols[0] if protocol == OWN_PROTOCOL else protocol
        try:  # a protocol the setting does not evaluate is evaluated for this claim's arms
            replace(side_setting.eval, protocols=(protocols[side],))
        except (ValueError, TypeError, KeyError) as error:
            raise StudyError(
                f'{where}: protocol = {protocol!r}: {first_line(error)} (or "own": each '
                "side under its setting's first eval.protocols)"
            ) from error
    return protocols


def predicted_size(table: dict[str, Any], direction: str, where: str) -> float | None:
    """``predicted_size``: the predicted size of a higher or lower claim's difference, a
    number >= 0; a ``same`` claim takes none."""
    size = table.get("predicted_size")
    if size is not None and direction == "same":
        raise StudyError(
            f"{where}: predicted_size is for higher or lower claims; a same claim predicts "
            "no difference, and its margin says how close counts as the same"
        )
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, (int, float)) or size < 0
    ):
        raise StudyError(
            f"{where}: predicted_size = {size!r}: the predicted size of the difference in "
            "the claim's direction, a number >= 0"
        )
    return None if size is None else float(size)


def claim_threshold(table: dict[str, Any], metric: str, where: str) -> float | None:
    """``iterations_to_success``'s threshold: a training success rate in (0, 1], required with
    that metric and taken by no other."""
    threshold = table.get("threshold")
    if metric != THRESHOLD_METRIC:
        if threshold is not None:
            raise StudyError(f"{where}: threshold goes with metric = {THRESHOLD_METRIC!r}")
        return None
    if (
        threshold is None
        or isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not 0 < threshold <= 1
    ):
        raise StudyError(
            f"{where}: metric = {THRESHOLD_METRIC!r} needs threshold = a training success rate "
            f"in (0, 1], e.g. 0.8; got {threshold!r}"
        )
    return float(threshold)


def check_training_sides(
    table: dict[str, Any],
    metric: str,
    sides: dict[str, tuple[Setting, str]],
    summarizers: dict[str, str],
    where: str,
) -> None:
    """A training metric compares two trained arms, read from their training histories: no
    ``base`` side (it trains nothing), no summarizer and no protocol (nothing is evaluated)."""
    for side, (_, arm) in sides.items():
        if arm in (BASE, ORACLE):
            raise StudyError(
                f"{where}: {side} = {table[side]!r}: the {arm} trains nothing, so it has no "
                f"{metric}; compare two trained arms"
            )
        if summarizers[side]:
            raise StudyError(
                f"{where}: {side}_summarizer goes with evaluation metrics, not {metric}"
            )
    if "protocol" in table:
        raise StudyError(
            f"{where}: protocol goes with evaluation metrics; {metric} is read from training"
        )


def claim_summarizer(table: dict[str, Any], side: str, setting: Setting, where: str) -> str:
    """``treatment_summarizer`` / ``reference_summarizer``: an arm of the side's setting (or
    ``base``) whose policy writes that side's summaries; empty when not given."""
    key = f"{side}_summarizer"
    name = text_of(table, key, where)
    if name:
        check_summarizer(name, setting.name, (BASE, *setting.arms), f"{where}: {key}")
    return name


def swap_protocol(table: dict[str, Any], key: str, where: str) -> str:
    """The protocol of a side with a summarizer: the claim's ``protocol`` when given, else
    :data:`SWAP_PROTOCOL`; one whose policy writes its own summaries is refused."""
    from cxsim.strategies import STRATEGIES

    protocol = text_of(table, "protocol", where, default=SWAP_PROTOCOL)
    try:
        author = STRATEGIES[protocol].summary_by
    except (KeyError, ValueError) as error:
        raise StudyError(f"{where}: protocol = {protocol!r}: {first_line(error)}") from error
    if author != "summarizer":
        raise StudyError(
            f"{where}: {key} needs a protocol whose summaries another agent "
            f"writes; protocol = {protocol!r} has the acting policy write them (leave protocol "
            f"out for {SWAP_PROTOCOL}, or drop {key})"
        )
    return protocol


def claim_side(
    value: str, home: Setting, settings: tuple[Setting, ...]
) -> tuple[Setting, str] | str:
    """A claim side's (setting, arm): ``ARM`` (an arm of the claim's setting, or ``base``) or
    ``SETTING:ARM`` (of another setting); what is wrong with it, in words, otherwise."""
    setting = home
    arm = value
    if ":" in value:
        name, _, arm = value.partition(":")
        found = [s for s in settings if s.name == name]
        if not found:
            names = ", ".join(s.name for s in settings)
            return f"{value!r} names no setting {name!r}; settings: {names}"
        setting = found[0]
    evaluated = (BASE, ORACLE, *setting.arms)
    if arm not in evaluated:
        return (
            f"{value!r} is not an arm of setting {setting.name}; choose one of: "
            f"{', '.join(evaluated)} (or SETTING:ARM for another setting's)"
        )
    return setting, arm


def claim_margin(table: dict[str, Any], direction: str, where: str) -> float | None:
    """A ``same`` claim's margin (required, > 0); no other claim takes one."""
    margin = table.get("margin")
    if direction != "same":
        if margin is not None:
            raise StudyError(
                f'{where}: margin goes with direction = "same" (the arms do not differ by more '
                "than it); remove it or set that direction"
            )
        return None
    if margin is None:
        raise StudyError(
            f'{where}: direction = "same" needs a margin: how close counts as the same, in the '
            "metric's units (margin = 0.05, as on the verdict page)"
        )
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin <= 0:
        raise StudyError(f"{where}: margin = {margin!r}: a number > 0, e.g. 0.05")
    return float(margin)


def claim_diagnostics(raw: Any, where: str) -> tuple[str, ...]:
    """A claim's diagnostics: metric names (METRICS) or training history keys (with a /)."""
    if not isinstance(raw, list) or not all(
        isinstance(k, str) and (k in METRICS or "/" in k) for k in raw
    ):
        raise StudyError(
            f"{where}: diagnostics = {raw!r}: a list of evaluation metrics "
            f"({', '.join(METRICS)}) or training history keys such as "
            '"credit/abs_adv_seg0" (docs/tensorboard.md)'
        )
    return tuple(raw)


def parse_evaluations(
    raw: Any,
    settings: tuple[Setting, ...],
    where: str,
    eval_envs: dict[str, EvalEnv] | None = None,
) -> tuple[Side, ...]:
    """``[[evaluations]]``: sides evaluated besides the claims' (``setting``, ``arm``: an arm,
    ``base`` or ``oracle``; ``summarizer``, ``protocol``, ``env`` as a claim side's), each once."""
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise StudyError(f"{where}: evaluations are [[evaluations]] tables")
    sides: list[Side] = []
    for i, table in enumerate(raw, start=1):
        here = f"{where}: evaluation {i}"
        check_keys(table, EVALUATION_KEYS, here, "an evaluation")
        home = claim_setting({**table, "name": ""}, "", settings, [], here)
        found = claim_side(text_of(table, "arm", here, required=True), home, (home,))
        if isinstance(found, str):
            raise StudyError(f"{here}: arm = {found}")
        setting, arm = found
        summarizer = text_of(table, "summarizer", here)
        if summarizer:
            check_summarizer(summarizer, setting.name, (BASE, *setting.arms), f"{here}: summarizer")
            protocol = swap_protocol(table, "summarizer", here)
        else:
            protocol = text_of(table, "protocol", here, default=setting.eval.protocols[0])
            side_protocols(table, "pass_at_1", protocol, {"arm": (setting, arm)}, {"arm": ""}, here)
        env = check_side_env(text_of(table, "env", here), eval_envs or {}, setting.env, here)
        side = Side(setting.name, arm, protocol, summarizer, env)
        played = (eval_envs or {})[env].env_of(setting.env) if env else setting.env
        check_scripted_side(side, played.env_id, here)
        if side in sides:
            raise StudyError(f"{here}: the same evaluation as evaluation {sides.index(side) + 1}")
        sides.append(side)
    return tuple(sides)

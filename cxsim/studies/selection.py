"""What one invocation of a study runs (``--only``): the (setting, arm) pairs it makes, the
claims they decide, and what those claims add to a pair's evaluations (a protocol its setting
does not evaluate, a side whose summaries another arm writes)."""

from __future__ import annotations

from dataclasses import dataclass

from cxsim.studies.sides import ORACLE, evaluated_apart, scripted_rate
from cxsim.studies.spec import ARM_PREFIX, BASE, Claim, Side, Study
from cxsim.studies.values import StudyError


@dataclass(frozen=True)
class Selection:
    """What one invocation runs (``--only``): (setting, arm) pairs and the claims they decide."""

    pairs: tuple[tuple[str, str], ...]
    """(setting, arm or ``base``), in the file's order."""
    claims: tuple[Claim, ...]
    evaluations: tuple[Side, ...] = ()
    """The ``[[evaluations]]`` of the settings selected whole (no ``--only``, or ``--only
    SETTING``)."""


def select(study: Study, only: tuple[str, ...] = ()) -> Selection:
    """The (setting, arm) pairs ``--only`` keeps (all without it), and the claims whose two
    sides are among them (a claim under a protocol its setting does not evaluate: when
    named, or its whole setting is). Items: ``SETTING`` (its base and arms),
    ``SETTING:CLAIM`` (the two sides of that claim), ``arm:NAME`` (that arm wherever it is
    trained)."""
    every = [(s.name, a) for s in study.settings for a in (BASE, *s.arms)]
    if not only:
        return Selection(tuple(every), study.claims, study.evaluations)
    chosen: set[tuple[str, str]] = set()
    named: set[tuple[str, str]] = set()
    whole: set[str] = set()
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
            pairs = side_pairs(found[0])
            named.add((setting, claim))
        elif item in settings:
            pairs = {p for p in every if p[0] == item}
            whole.add(item)
        else:
            raise StudyError(
                f"--only {item}: not a setting, SETTING:CLAIM or arm:NAME; settings: "
                + ", ".join(settings)
            )
        chosen |= pairs
    kept = tuple(p for p in every if p in chosen)
    claims = tuple(
        c
        for c in study.claims
        if side_pairs(c) <= chosen
        and (
            all(
                side.protocol in study.setting(side.setting).eval.protocols
                and not evaluated_apart(side)
                for side in c.sides
            )
            or (c.setting, c.name) in named
            or {side.setting for side in c.sides} <= whole
        )
    )
    evaluations = tuple(  # with their whole setting only, not with one claim or arm
        e for e in study.evaluations if e.setting in whole and side_units(e) <= chosen
    )
    return Selection(kept, claims, evaluations)


def check_tuning_seeds(study: Study, selection: Selection) -> None:
    """Refuse, in one line, a run whose seeds include a tuning seed (``tuning_seeds``: the
    seeds the file's settings were chosen on) when it decides a claim: a verdict over seeds
    that tuned the settings would count their selection as evidence. Arms alone (``--only``
    without a claim) may run on them."""
    tuned = sorted(set(study.seeds) & set(study.tuning_seeds))
    if not tuned or not selection.claims:
        return
    shown = ", ".join(str(s) for s in tuned[:8]) + (", ..." if len(tuned) > 8 else "")
    raise StudyError(
        f"seeds {shown} are tuning seeds (tuning_seeds: the settings were chosen on them), so "
        f"no verdict may use them; run the claims on other seeds (--seeds "
        f"{max(study.tuning_seeds) + 1}:{max(study.tuning_seeds) + 1 + len(study.seeds)}), or "
        "--only arms that decide no claim"
    )


def side_pairs(claim: Claim) -> set[tuple[str, str]]:
    """The (setting, arm) pairs a claim needs made: its two sides' arms and summarizers."""
    return side_units(claim.treatment_side) | side_units(claim.reference_side)


def side_units(side: Side) -> set[tuple[str, str]]:
    """The (setting, arm) pairs a side needs made: its arm (the oracle acts in the chat
    format of the seed's base: the base) and its summarizer's (none for a scripted one)."""
    pairs = {(side.setting, BASE if side.arm == ORACLE else side.arm)}
    if side.summarizer and scripted_rate(side.summarizer) is None:
        pairs.add((side.setting, side.summarizer))
    return pairs


def extra_protocols(study: Study, selection: Selection, setting: str, arm: str) -> tuple[str, ...]:
    """The protocols the selected claims compare ``arm`` of ``setting`` under that the
    setting's ``eval.protocols`` lacks (each evaluated on its own, after those), in order;
    a side evaluated apart is not (:func:`apart_sides`)."""
    evaluated = study.setting(setting).eval.protocols
    sides = (*(side for c in selection.claims for side in c.sides), *selection.evaluations)
    wanted = [
        side.protocol
        for side in sides
        if (side.setting, side.arm) == (setting, arm) and not evaluated_apart(side)
    ]
    return tuple(dict.fromkeys(p for p in wanted if p not in evaluated))


def swapped_sides(selection: Selection) -> tuple[Side, ...]:
    """The selected claims' sides whose summaries another arm writes, each once, in order:
    evaluations made after every arm they name is trained."""
    return tuple(dict.fromkeys(s for c in selection.claims for s in c.sides if s.summarizer))


def apart_sides(selection: Selection) -> tuple[Side, ...]:
    """The selected claims' and evaluations' sides evaluated apart from the units (another
    agent's summaries, the oracle acting, another env), each once, in order: made after
    every arm they name is trained (:func:`cxsim.studies.sides.evaluated_apart`)."""
    sides = (*(s for c in selection.claims for s in c.sides), *selection.evaluations)
    return tuple(dict.fromkeys(s for s in sides if evaluated_apart(s)))

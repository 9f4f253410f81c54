"""The claims of ``cxsim verdicts`` as its page reads them: each claim of the verdict study
file (cxsim/paper_tables/verdicts.toml, where every claim is written once: its two
evaluations, statement and prediction, made before the runs) with what only the page adds,
the diagnostic that explains the row and the paper's own figures (:data:`PAGE_NOTES`).

verdicts.py (this package) makes the runs the study names; verdicts_page.py pairs them. The
page names an evaluation as an arm or ``base`` (Compacted), ``<arm>@single`` (Single),
``t1:<summarizer>`` (the Table 1 swap: the base acting, that arm's policy summarizing);
:func:`evaluation_side` reads such a name as a study side, :func:`evaluation_name` writes one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from cxsim.studies.spec import Claim as StudyClaim
    from cxsim.studies.spec import Study

BASE = "base"
SWAP = "t1:"
"""``t1:<summarizer>``: the base acting under external-summarizer, that policy summarizing."""
SINGLE = "@single"
SWAP_PROTOCOL = "external-summarizer"


@dataclass(frozen=True)
class Claim:
    """One row of the verdict page: two evaluations paired by seed."""

    key: str
    """Its name within its setting (``--only SETTING:KEY``)."""
    source: str
    """Where the claim comes from: ``Table N`` of the paper, or ``not in the paper``."""
    statement: str
    """The claim, in the direction the paper states it (treatment above reference)."""
    treatment: str
    reference: str
    """Evaluation names: an arm or ``base`` (Compacted), ``<arm>@single`` (Single),
    ``t1:<summarizer>`` (the base as executor, that summarizer's summaries)."""
    prediction: str
    """What the lab or a pilot predicts, written before the runs (direction, rough size)."""
    diagnostic: str
    """The figure that explains the row (a key of verdicts_cells.DIAGNOSTICS)."""
    kind: Literal["effect", "no-effect"] = "effect"
    """``effect``: reproduced when the interval excludes 0 in the claim's direction;
    ``no-effect`` (a claim that something does not change): reproduced when the interval
    lies within +/- :data:`NO_EFFECT_MARGIN`."""
    added: str = ""
    """Set when the row was added after a run: when, and where its prediction comes from."""
    paper: str = ""
    """What the paper reports for the claim (Compacted Pass@1 points, its Tables 1-4)."""
    setting: str = "main"
    """Where the claim is tested: ``main`` (the main job's task) or a credit setting
    (``credit``, ``credit-critic``: the first action decides the outcome)."""
    paper_share: tuple[float, float] | None = None
    """An ablation's effect in the paper as a share of CompactionRL's gain over its base
    (the smallest and largest share it reports); the page scales it by this run's gain, to
    show where this run's interval lies against the paper's size. None: not an ablation."""


NO_EFFECT_MARGIN = 0.05
"""A 'does not change' claim holds when the paired interval lies inside +/- this (the study
file's ``margin`` of its ``same`` claims)."""


@dataclass(frozen=True)
class PageNote:
    """What the page shows of a claim beyond the study file's."""

    diagnostic: str
    """The figure that explains the row (a key of verdicts_cells.DIAGNOSTICS)."""
    paper: str = ""
    """What the paper reports for the claim."""
    paper_share: tuple[float, float] | None = None
    """The paper's effect as a share of its gain (:attr:`Claim.paper_share`)."""
    added: str = ""
    """When the row was added after a run, and where its prediction comes from."""


CORRECTION_PAPER = "+3.8 / +2.0 (106B): 54% and 65% of the gain"
"""The paper's Table 4 row for the cross-segment correction."""
CORRECTION = PageNote("summary_credit", CORRECTION_PAPER, (0.54, 0.65))
CREDIT_CORRECTION = PageNote("first_window_credit", CORRECTION_PAPER, (0.54, 0.65))

PAGE_NOTES: dict[str, PageNote] = {
    "main:summarizer": PageNote(
        "summary_recall",
        "summarizer swap with a fixed executor: 6.5 points between the best and worst summarizer",
    ),
    "main:beats-base": PageNote(
        "summary_recall", "+5.5 / +6.8 (30B, SWE / TB2) and +7.0 / +3.1 (106B)"
    ),
    "main:beats-ppo-single": PageNote(
        "train_success",
        "56.0 vs 48.0 and 20.2 vs 12.4 (30B); 66.8 vs 62.5 and 24.5 vs 23.6 (106B)",
    ),
    "main:single-unchanged": PageNote(
        "single_end", "Single: -3.8 / +2.3 (30B, SWE / TB2), -0.5 / +3.5 (106B)"
    ),
    "main:summary-training": PageNote(
        "summary_recall", "+1.5 / +7.8 (30B), +2.3 / +3.0 (106B): 27% to 115% of the gain",
        (0.27, 1.15),
    ),
    "main:token-level-loss": PageNote(
        "summary_loss_share", "+6.8 / +3.2 (106B): 97% and 103% of the gain", (0.97, 1.03)
    ),
    "main:correction-fixed-lambda": CORRECTION,
    "main:correction-segment-scope": PageNote(
        "summary_credit", CORRECTION_PAPER, (0.54, 0.65),
        added="after the run of commit 31e5b81 (whose two other correction rows were not "
        "resolved), with the arm local-segment-scope; its prediction rests on the lab "
        "(docs/results/estimators.md) and the seed-0 pilot in the message of commit "
        "f835593, both from before any full run",
    ),
    "main:correction-rollout-scope": CORRECTION,
    "main:stitched": PageNote("summary_credit"),
    "main:group-broadcast": PageNote("critic_last_window"),
    "main:lambda-scope": PageNote("summary_credit"),
    "credit:correction-fixed-lambda": CREDIT_CORRECTION,
    "credit:correction-rollout-scope": CREDIT_CORRECTION,
    "credit:correction-segment-scope": CREDIT_CORRECTION,
    "credit:lambda-scope": PageNote("first_window_credit"),
    "credit-critic:correction-fixed-lambda": CREDIT_CORRECTION,
    "credit-critic:correction-rollout-scope": CREDIT_CORRECTION,
}  # fmt: skip
"""``SETTING:CLAIM`` -> what the page adds to that claim of the study file."""

SOURCE = re.compile(r"(?P<statement>.*) \((?P<source>Table \d|not in the paper)\)", re.DOTALL)
"""A study claim's statement ends with its source: ``... (Table 4)``, ``... (not in the
paper)``."""


def page_claim(claim: StudyClaim) -> Claim:
    """The page's row for a claim of the verdict study file (its note from
    :data:`PAGE_NOTES`); a claim the page cannot show fails in one line."""
    where = f"{claim.setting}:{claim.name}"
    note = PAGE_NOTES.get(where)
    split = SOURCE.fullmatch(claim.statement)
    if note is None or split is None:
        raise ValueError(
            f"claim {where} of the verdict study: "
            + ("give it a PAGE_NOTES entry (its diagnostic)" if note is None else
               "end its statement with its source, '(Table N)' or '(not in the paper)'")
        )  # fmt: skip
    same = claim.direction == "same"
    if same and claim.margin != NO_EFFECT_MARGIN:
        raise ValueError(f"claim {where}: a 'same' claim's margin is {NO_EFFECT_MARGIN}")
    treatment, reference = (
        evaluation_name(side.arm, side.protocol, side.summarizer) for side in claim.sides
    )
    return Claim(
        claim.name, split["source"], split["statement"], treatment, reference,
        claim.prediction, note.diagnostic, kind="no-effect" if same else "effect",
        added=note.added, paper=note.paper, setting=claim.setting, paper_share=note.paper_share,
    )  # fmt: skip


def page_claims(study: Study) -> tuple[Claim, ...]:
    """Every claim of the study as the page's rows, in the file's order."""
    return tuple(page_claim(claim) for claim in study.claims)


def evaluation_side(name: str) -> tuple[str, str, str]:
    """An evaluation name as (acting arm, protocol, summarizer arm or empty)."""
    if name.startswith(SWAP):
        return BASE, SWAP_PROTOCOL, name.removeprefix(SWAP)
    if name.endswith(SINGLE):
        return name.removesuffix(SINGLE), "single", ""
    return name, "compacted", ""


def evaluation_name(arm: str, protocol: str, summarizer: str = "") -> str:
    """The evaluation name of an arm under a protocol (with a summarizer): the inverse of
    :func:`evaluation_side`, for other protocols ``<arm>@<protocol>``."""
    if summarizer:
        return SWAP + summarizer if arm == BASE else f"{arm}+{SWAP}{summarizer}"
    return arm if protocol == "compacted" else f"{arm}@{protocol}"

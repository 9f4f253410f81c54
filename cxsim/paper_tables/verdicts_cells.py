"""The verdict page's cells: an arm's per-seed numbers from plain results, and for each
claim the diagnostic that explains it (:data:`DIAGNOSTICS`, named by
``verdicts_claims.Claim.diagnostic``), each a paired interval over seeds.

cxsim/paper_tables/verdicts_page.py lays them out; these functions read one setting's seeds
(``verdicts.page_runs``'s dicts) and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cxsim.diagnostics.tracking import informative_mean
from cxsim.paper_tables.tables_seeds import pass_prop
from cxsim.paper_tables.verdicts_claims import evaluation_side
from cxsim.tables import Interval, Proportion, fmt, mean_interval, seed_interval

if TYPE_CHECKING:
    from cxsim.paper_tables.verdicts_claims import Claim

Runs = list[dict[str, Any]]
"""One setting's seeds (``verdicts.page_runs``'s dicts, in seed order)."""
Settings = dict[str, Runs]
"""Setting name (``main``, ``credit``, ``credit-critic``: the verdict study's) -> its seeds."""

# -- per-seed numbers -------------------------------------------------------------------


def evaluation(run: dict[str, Any], name: str) -> dict[str, Any]:
    """One seed's result for an evaluation name of verdicts_claims.Claim."""
    return run["eval"][name]["results"][evaluation_side(name)[1]]


def passes(runs: Runs, name: str) -> list[Proportion]:
    return [pass_prop(evaluation(r, name)) for r in runs]


def evaluated(runs: Runs, *names: str) -> bool:
    """Whether the seeds hold every one of these evaluations (``--only`` may leave some out)."""
    return bool(runs) and all(n in runs[0]["eval"] for n in names)


def arm_of(name: str) -> str | None:
    """The trained arm behind an evaluation name (None for the base and Table 1 swaps)."""
    arm = name.removesuffix("@single")
    return None if arm == "base" or arm.startswith("t1:") else arm


def final(runs: Runs, name: str, key: str) -> list[float]:
    """``key`` of an arm's final training figures (mean of the last iterations), per seed."""
    arm = arm_of(name)
    if arm is None:
        return [math.nan] * len(runs)
    values = [r["train"][arm]["final"].get(key) for r in runs]
    return [math.nan if v is None else float(v) for v in values]


def segment_count(runs: Runs, arm: str) -> int:
    """1 + the largest segment index with a critic figure in the arm's histories."""
    prefix = "critic/mc_ev_seg"
    keys = {k for r in runs for h in r["train"][arm]["history"] for k in h}
    return 1 + max((int(k.removeprefix(prefix)) for k in keys if k.startswith(prefix)), default=-1)


def segment_label(k: int) -> str:
    """Segment index k: execution windows at even indices, summaries at odd ones."""
    return f"window {k // 2}" if k % 2 == 0 else f"summary {k // 2}"


# -- diagnostics: one cell per claim ----------------------------------------------------


def pair_cell(claim: Claim, values: Callable[[str], Interval], digits: int = 2) -> str:
    return f"{fmt(values(claim.treatment), digits)} vs {fmt(values(claim.reference), digits)}"


def diag_summary_recall(runs: Runs, claim: Claim) -> str:
    def recall(name: str) -> Interval:
        values = [evaluation(r, name).get("summary_recall") for r in runs]
        return mean_interval([math.nan if v is None else float(v) for v in values], (0.0, 1.0))

    return "summary recall (evaluation) " + pair_cell(claim, recall)


def diag_train_success(runs: Runs, claim: Claim) -> str:
    def success(name: str) -> Interval:
        return mean_interval(final(runs, name, "charts/success_rate"), (0.0, 1.0))

    return "training success, last iterations " + pair_cell(claim, success)


def diag_single_end(runs: Runs, claim: Claim) -> str:
    def single(name: str) -> Interval:
        return seed_interval(passes(runs, name))

    return "Single Pass@1 " + pair_cell(claim, single)


def diag_summary_loss_share(runs: Runs, claim: Claim) -> str:
    def share(name: str) -> Interval:
        arm = arm_of(name) or ""
        mode = "segment-mean" if arm == "segment-mean-loss" else "token-mean"
        return mean_interval(final(runs, name, f"weights/{mode}/summary_share"), (0.0, 1.0))

    return "loss share of summary tokens " + pair_cell(claim, share)


def credit_and_recall(runs: Runs, claim: Claim, credit_key: str, what: str, recall: str) -> str:
    """``what`` |advantage| (``credit_key``) and the training summary recall, both sides."""

    def credit(name: str) -> Interval:
        return mean_interval(final(runs, name, credit_key))

    def recalled(name: str) -> Interval:
        return mean_interval(final(runs, name, "compaction/summary_recall"), (0.0, 1.0))

    return (
        f"{what} |advantage| {pair_cell(claim, credit, 3)}; {recall} {pair_cell(claim, recalled)}"
    )


def diag_summary_credit(runs: Runs, claim: Claim) -> str:
    return credit_and_recall(
        runs, claim, "credit/abs_adv_summary", "summary", "training summary recall"
    )


def diag_first_window_credit(runs: Runs, claim: Claim) -> str:
    return credit_and_recall(
        runs, claim, "credit/abs_adv_seg0", "window 0",
        "training summary recall (the key is seen only if the box was opened)",
    )  # fmt: skip


def diag_critic_last_window(runs: Runs, claim: Claim) -> str:
    def ev(name: str) -> Interval:
        arm = arm_of(name)
        if arm is None:
            return mean_interval([])
        last = 2 * ((segment_count(runs, arm) - 1) // 2)
        key = f"critic/mc_ev_seg{last}"
        return mean_interval([informative_mean(r["train"][arm]["history"], key) for r in runs])

    return "critic explained variance, last window " + pair_cell(claim, ev)


DIAGNOSTICS: dict[str, Callable[[Runs, Claim], str]] = {
    "summary_recall": diag_summary_recall,
    "train_success": diag_train_success,
    "single_end": diag_single_end,
    "summary_loss_share": diag_summary_loss_share,
    "summary_credit": diag_summary_credit,
    "critic_last_window": diag_critic_last_window,
    "first_window_credit": diag_first_window_credit,
}

"""Summary omission: needed key facts a summary failed to carry (docs/diagnostics.md).

Input per rollout (``cxsim.rollout_records.RolloutRecord`` or a dict with these keys):
``summary_recall: list[dict[str, bool]]``, one dict per summary in time order,
mapping each needed fact already shown when the summary was written to whether the
summary kept its current value (``cxsim.envs.scripted.summary_recall``: a fact not
shown yet is in no summary's dict); and ``success: bool``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from cxsim.diagnostics._common import as_records, explained_variance, safe_div, to_floats


class RecallRecord(Protocol):
    success: bool
    summary_recall: Sequence[Mapping[str, bool]]


class StatedRecord(Protocol):
    success: bool
    summary_stated: Sequence[Mapping[str, bool]]


def summary_omission(records: Sequence[RecallRecord | Mapping]) -> dict[str, float]:
    """Omission rates of summaries, by compaction index, and success given omission.

    With ``m_j`` the needed facts missing from summary ``j`` and ``f_j`` the
    needed facts it should carry, those shown before it was written (summaries with
    ``f_j = 0`` count nowhere):

    - ``omission/overall`` = ``sum_j m_j / sum_j f_j`` (pooled over facts), with
      ``omission/overall_se`` = ``sqrt(p (1 - p) / sum_j f_j)``, the binomial
      standard error if facts were dropped independently;
    - ``omission/per_summary_mean`` = mean over summaries of ``m_j / f_j``;
    - ``omission/any`` = fraction of summaries missing at least one fact;
    - ``omission/compaction{k}`` = the pooled rate over the k-th summary of each
      rollout (k = 0: first compaction). A summarizer that never recovers a
      lost fact compounds: at rate p, a fact carried since compaction 0 is
      missing from summary k with probability ``1 - (1 - p)^(k + 1)``;
    - ``omission/success_if_omitted``: success rate of rollouts in which some
      summary missed a fact; ``omission/success_if_complete``: of rollouts that
      compacted and never missed one; ``omission/success_if_uncompacted``: of
      rollouts without a summary; ``omission/success_gap`` = complete - omitted;
      ``omission/rollouts_omitted``, ``omission/rollouts_complete`` (counts);
    - ``omission/num_summaries``, ``omission/num_facts`` (counts);
    - ``critic/ev_ceiling``: the explained variance of the outcome that knowing whether the
      last summary kept the needed facts allows (:func:`outcome_ceiling`), the bar a
      critic's explained variance at the last window is read against;
      ``critic/ev_ceiling_loo``: the same with each rollout's group rate taken from the
      other rollouts of the batch (leave one out), what a value that learned the rates
      elsewhere could explain: a group of 1 or 2 rollouts no longer explains itself.

    Keys whose group is empty are left out.
    """
    recs = as_records(records)
    m, f, k, group = summary_counts(recs)
    success = torch.tensor([bool(rec.success) for rec in recs], dtype=torch.float64)

    p = safe_div(m.sum(), f.sum())
    stats: dict[str, torch.Tensor] = {
        "omission/overall": p,
        "omission/overall_se": torch.sqrt(p * (1 - p) / f.sum()),
        "omission/per_summary_mean": (m / f).mean(),
        "omission/any": (m > 0).double().mean(),
        "omission/num_summaries": torch.tensor(float(len(m))),
        "omission/num_facts": f.sum(),
    }
    for c in range(int(k.max()) + 1 if len(k) else 0):
        sel = k == c
        stats[f"omission/compaction{c}"] = safe_div(m[sel].sum(), f[sel].sum())

    stats |= success_by_group(success, group)
    ceiling = outcome_ceiling(recs)
    if ceiling["ev_ceiling"] == ceiling["ev_ceiling"]:  # defined (outcomes vary)
        stats["critic/ev_ceiling"] = torch.tensor(ceiling["ev_ceiling"])
        stats["critic/ev_ceiling_loo"] = torch.tensor(ceiling["ev_ceiling_loo"])
    return to_floats(stats)


UNCOMPACTED, COMPLETE, OMITTED = 0, 1, 2
"""A rollout's group in :func:`summary_counts`: no summary; every summary kept every fact it
should; some summary missed one."""


def summary_counts(
    recs: Sequence[RecallRecord],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per summary with a needed fact: facts missing ``m`` and facts to carry ``f`` (float64),
    its compaction index ``k`` (long); per rollout its group (long: UNCOMPACTED, COMPLETE,
    OMITTED)."""
    missing: list[float] = []
    needed: list[float] = []
    index: list[int] = []
    group: list[int] = []
    for rec in recs:
        omitted = False
        for k, recall in enumerate(rec.summary_recall):
            if not recall:
                continue
            m = sum(not kept for kept in recall.values())
            missing.append(m)
            needed.append(len(recall))
            index.append(k)
            omitted = omitted or m > 0
        group.append(OMITTED if omitted else COMPLETE if rec.summary_recall else UNCOMPACTED)
    return (
        torch.tensor(missing, dtype=torch.float64),
        torch.tensor(needed, dtype=torch.float64),
        torch.tensor(index, dtype=torch.long),
        torch.tensor(group, dtype=torch.long),
    )


def success_by_group(success: torch.Tensor, group: torch.Tensor) -> dict[str, torch.Tensor]:
    """Success rate and size of each :func:`summary_counts` group, and the gap."""
    rate = {
        name: safe_div(success[group == g].sum(), (group == g).sum().double())
        for g, name in ((UNCOMPACTED, "uncompacted"), (COMPLETE, "complete"), (OMITTED, "omitted"))
    }
    return {
        "omission/success_if_omitted": rate["omitted"],
        "omission/success_if_complete": rate["complete"],
        "omission/success_if_uncompacted": rate["uncompacted"],
        "omission/success_gap": rate["complete"] - rate["omitted"],
        "omission/rollouts_omitted": (group == OMITTED).sum().double(),
        "omission/rollouts_complete": (group == COMPLETE).sum().double(),
    }


def last_summary_kept(rec: RecallRecord) -> bool:
    """The rollout's last summary kept every needed fact shown before it (False without one)."""
    return last_all(rec.summary_recall)


def last_all(per_summary: Sequence[Mapping[str, bool]]) -> bool:
    """The last summary's flags, one per needed fact shown before it, are all set (False
    without a summary, or with no fact to flag)."""
    return bool(per_summary and per_summary[-1]) and all(per_summary[-1].values())


def group_rates(success: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Each rollout's predicted success: the rate of its group (``group`` bool) in the batch."""
    pred = torch.full_like(success, float(success.mean()))
    for flag in (True, False):
        members = group == flag
        if bool(members.any()):
            pred[members] = success[members].mean()
    return pred


def outcome_and_group(
    recs: Sequence[Any], in_group: Callable[[Any], bool]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per rollout: success (float64 0/1) and whether ``in_group`` holds for it (bool): its
    last summary kept every needed fact (:func:`last_summary_kept`), or states a value for
    each (:func:`last_summary_stated`)."""
    success = torch.tensor([float(bool(r.success)) for r in recs], dtype=torch.float64)
    group = torch.tensor([in_group(r) for r in recs], dtype=torch.bool)
    return success, group


def outcome_ceiling(records: Sequence[RecallRecord | Mapping]) -> dict[str, float]:
    """What a value that knows only whether the last summary kept the needed facts can
    explain of the outcome: success in each group and ``ev_ceiling``, the explained
    variance of predicting each rollout's success by its group's rate (between-group over
    total variance; NaN when every outcome is equal). The critic at the last window sees
    no more of the past than that summary, so this is the most its value can explain
    there, on a task whose outcome is decided by the kept fact.

    The group rates are fitted on the same rollouts they explain, so a small group explains
    itself: two lost rollouts that both failed make ``success_if_lost`` 0 and their
    residual 0, whatever the true rate. ``ev_ceiling_loo`` predicts each rollout by its
    group's rate over the other rollouts (the batch's rate over the others when it is alone
    in its group), as a value fitted on earlier batches would, and measures both as the
    critic's explained variance is measured, ``1 - Var(y - pred) / Var(y)``."""
    success, kept = outcome_and_group(as_records(records), last_summary_kept)
    out = {"success": float(success.mean()), "kept_share": float(kept.double().mean())}
    pred = group_rates(success, kept)
    for flag, name in ((True, "kept"), (False, "lost")):
        if bool((kept == flag).any()):
            out[f"success_if_{name}"] = float(success[kept == flag].mean())
    out["ev_ceiling"] = between_groups_ev(success, pred)
    out["ev_ceiling_loo"] = leave_one_out_ev(success, kept) if success.var() > 0 else float("nan")
    return out


def between_groups_ev(success: torch.Tensor, pred: torch.Tensor) -> float:
    """``1 - sum (y - pred)^2 / sum (y - mean y)^2`` (NaN when every outcome is equal): with
    ``pred`` each group's own success rate, the share of the outcome's variance between the
    groups."""
    total = float(((success - success.mean()) ** 2).sum())
    residual = float(((success - pred) ** 2).sum())
    return 1.0 - residual / total if total > 0 else float("nan")


def last_summary_stated(rec: StatedRecord) -> bool:
    """The rollout's last summary states a value, right or wrong, for every needed fact
    shown before it (False without one)."""
    return last_all(rec.summary_stated)


def stated_ceiling(records: Sequence[StatedRecord]) -> dict[str, float]:
    """What a value that reads the last summary, and so knows whether it states a value for
    each needed fact but not whether that value is right, can explain of the outcome:
    ``critic/ev_ceiling_stated``, the share of the outcome's variance between the rollouts
    whose last summary states them all and the others, each group's rate fitted on the batch
    (as ``critic/ev_ceiling``). The critic at the last window sees that summary and nothing
    older, so a wrong value it states looks like the right one: where the policy writes a
    guess instead of ``unknown``, ``critic/ev_ceiling`` counts what no reader of the context
    can know and this does not. Empty when no record carries the flags (an environment
    without ``summary_stated``) or every outcome is equal."""
    if not any(r.summary_stated for r in records):
        return {}
    success, stated = outcome_and_group(records, last_summary_stated)
    ev = between_groups_ev(success, group_rates(success, stated))
    return {"critic/ev_ceiling_stated": ev} if ev == ev else {}


ONLINE_DECAY = 0.5
""":func:`online_ceiling`: each earlier batch counts this much less than the next."""
GROUP_TAGS = (
    "critic/ceiling_kept",
    "critic/ceiling_kept_successes",
    "critic/ceiling_lost",
    "critic/ceiling_lost_successes",
)
"""The batch's rollouts whose last summary kept (lost) the needed facts, and their
successes, as :func:`online_ceiling` logs them and reads them back from a run's history."""
STATED_GROUP_TAGS = (
    "critic/ceiling_stated",
    "critic/ceiling_stated_successes",
    "critic/ceiling_unstated",
    "critic/ceiling_unstated_successes",
)
"""The same for the rollouts whose last summary states (does not state) a value for every
needed fact, as :func:`online_stated_ceiling` logs them."""


def online_ceiling(
    records: Sequence[RecallRecord | Mapping],
    history: Sequence[Mapping[str, float]],
    decay: float = ONLINE_DECAY,
) -> dict[str, float]:
    """What a value that reads perfectly whether the last summary kept the needed facts, but
    knows each group's success rate only from the run's earlier batches, explains of this
    batch's outcome.

    Returns this batch's group counts (:data:`GROUP_TAGS`, the statistics later batches read
    back from ``history``, the run's earlier iterations with these tags) and, when an
    earlier batch has them, ``critic/ev_ceiling_online``: the explained variance (as the
    critic's is measured) of predicting each rollout's success by its group's success rate
    over the earlier batches, batch ``i`` back weighted ``decay ** (i - 1)``, as a critic
    trained on them would follow the policy (the earlier batches' overall rate for a group
    they never saw). ``critic/ev_ceiling`` fits the rates on the batch it explains;
    a critic cannot, so this is the bar it can be held to. Nothing is returned when no
    rollout carries summary recall (a task without needed facts)."""
    recs = as_records(records)
    if not any(r.summary_recall and any(r.summary_recall) for r in recs):
        return {}
    success, kept = outcome_and_group(recs, last_summary_kept)
    return online_group_ev(success, kept, history, GROUP_TAGS, "critic/ev_ceiling_online", decay)


def online_stated_ceiling(
    records: Sequence[StatedRecord | Mapping],
    history: Sequence[Mapping[str, float]],
    decay: float = ONLINE_DECAY,
) -> dict[str, float]:
    """:func:`online_ceiling` for the reader of :func:`stated_ceiling`: a value that knows
    whether the last summary states a value for every needed fact (not whether it is right),
    and each group's success rate only from the earlier batches
    (``critic/ev_ceiling_stated_online``, with the counts :data:`STATED_GROUP_TAGS`). The
    most a critic that reads the summary can be held to. Empty when no record carries the
    flags."""
    recs = as_records(records)
    if not any(r.summary_stated for r in recs):
        return {}
    success, stated = outcome_and_group(recs, last_summary_stated)
    tag = "critic/ev_ceiling_stated_online"
    return online_group_ev(success, stated, history, STATED_GROUP_TAGS, tag, decay)


def online_group_ev(
    success: torch.Tensor,
    group: torch.Tensor,
    history: Sequence[Mapping[str, float]],
    tags: Sequence[str],
    ev_tag: str,
    decay: float = ONLINE_DECAY,
) -> dict[str, float]:
    """This batch's counts under ``tags`` (members of the group, their successes, the
    others, their successes) and, when an earlier iteration of ``history`` has them,
    ``ev_tag``: the explained variance of predicting each rollout by its group's success rate
    over the earlier batches, batch ``i`` back weighted ``decay ** (i - 1)``."""
    now = (group.sum(), success[group].sum(), (~group).sum(), success[~group].sum())
    out = {tag: float(v) for tag, v in zip(tags, now, strict=True)}
    seen = torch.zeros(4, dtype=torch.float64)  # weighted sums, in ``tags`` order
    weight = 1.0
    for earlier in reversed(history):
        if tags[0] not in earlier:
            continue
        seen += weight * torch.tensor([float(earlier[t]) for t in tags], dtype=torch.float64)
        weight *= decay
    if float(seen[0] + seen[2]) == 0.0:
        return out
    overall = (seen[1] + seen[3]) / (seen[0] + seen[2])
    rate_in = seen[1] / seen[0] if float(seen[0]) > 0 else overall
    rate_out = seen[3] / seen[2] if float(seen[2]) > 0 else overall
    ev = explained_variance(torch.where(group, rate_in, rate_out), success)
    if ev == ev:  # defined (outcomes vary)
        out[ev_tag] = float(ev)
    return out


def leave_one_out_ev(outcome: torch.Tensor, group: torch.Tensor) -> float:
    """``1 - Var(y - pred) / Var(y)`` with ``pred[i]`` the mean outcome of the other members
    of ``i``'s group (bool ``group``), or of every other rollout when ``i`` is alone in it;
    NaN for fewer than 2 rollouts or equal outcomes."""
    n = len(outcome)
    if n < 2 or float(outcome.var()) == 0.0:
        return float("nan")
    pred = torch.empty_like(outcome)
    for flag in (True, False):
        members = group == flag
        size = int(members.sum())
        if size == 0:
            continue
        if size == 1:
            pred[members] = (outcome.sum() - outcome[members]) / (n - 1)
        else:
            pred[members] = (outcome[members].sum() - outcome[members]) / (size - 1)
    return float(explained_variance(pred, outcome))

"""Summary omission: rates pooled over facts, by compaction index, and success given omission."""

import math
import random
from types import SimpleNamespace

import gymnasium as gym
import pytest

import cxsim.envs  # noqa: F401  (registers the environment ids)
from cxsim.diagnostics import summary_omission
from cxsim.diagnostics.omission import (
    GROUP_TAGS,
    STATED_GROUP_TAGS,
    online_ceiling,
    online_stated_ceiling,
    outcome_ceiling,
    stated_ceiling,
)
from cxsim.envs.family import family_of
from cxsim.envs.scripted import ScriptedSummarizer, summary_recall


def _scripted_records(rate: float, num_rollouts: int, compound: bool, seed: int) -> list[dict]:
    """Rollouts with two summaries each, facts dropped like the scripted summarizer:
    each needed fact kept with probability ``1 - rate``; with ``compound`` a fact
    lost at the first compaction stays lost (the context no longer has it)."""
    rng = random.Random(seed)
    records = []
    for _ in range(num_rollouts):
        facts = [f"key{i}" for i in range(rng.randint(1, 4))]
        first = {f: rng.random() >= rate for f in facts}
        second = {f: (first[f] or not compound) and rng.random() >= rate for f in facts}
        records.append({"success": rng.random() < 0.5, "summary_recall": [first, second]})
    return records


def _within_three_se(measured: float, expected: float, num_facts: float) -> bool:
    se = math.sqrt(expected * (1 - expected) / num_facts)
    return abs(measured - expected) < 3 * se


def test_scripted_summarizer_at_0_3_measures_0_3():
    stats = summary_omission(_scripted_records(0.3, 1000, compound=False, seed=0))
    assert stats["omission/num_summaries"] == 2000
    n = stats["omission/num_facts"]
    assert _within_three_se(stats["omission/overall"], 0.3, n)
    assert _within_three_se(stats["omission/compaction0"], 0.3, n / 2)
    assert _within_three_se(stats["omission/compaction1"], 0.3, n / 2)
    assert stats["omission/overall_se"] == pytest.approx(
        math.sqrt(stats["omission/overall"] * (1 - stats["omission/overall"]) / n)
    )


def test_lost_facts_compound_by_compaction_index():
    stats = summary_omission(_scripted_records(0.3, 1000, compound=True, seed=1))
    n_per_index = stats["omission/num_facts"] / 2
    assert _within_three_se(stats["omission/compaction0"], 0.3, n_per_index)
    assert _within_three_se(stats["omission/compaction1"], 1 - 0.7**2, n_per_index)


def test_hand_counts_and_success_given_omission():
    records = [
        # omitted: some summary lost a fact (1 of 3 succeed)
        {"success": True, "summary_recall": [{"a": True, "b": False}]},
        {"success": False, "summary_recall": [{"a": True}, {"a": False}]},
        {"success": False, "summary_recall": [{"a": False, "b": False, "c": True, "d": True}]},
        # complete (2 of 2 succeed); an empty recall dict counts nowhere
        {"success": True, "summary_recall": [{"a": True}, {}]},
        {"success": True, "summary_recall": [{"a": True, "b": True}]},
        # uncompacted
        {"success": False, "summary_recall": []},
    ]
    stats = summary_omission(records)
    # summaries: 1/2, 0/1, 1/1, 2/4, 0/1, 0/2 -> 4 of 11 facts
    assert stats["omission/num_summaries"] == 6
    assert stats["omission/num_facts"] == 11
    assert stats["omission/overall"] == pytest.approx(4 / 11)
    assert stats["omission/per_summary_mean"] == pytest.approx((0.5 + 0 + 1 + 0.5 + 0 + 0) / 6)
    assert stats["omission/any"] == pytest.approx(3 / 6)
    assert stats["omission/compaction0"] == pytest.approx(3 / 10)
    assert stats["omission/compaction1"] == pytest.approx(1 / 1)
    assert stats["omission/success_if_omitted"] == pytest.approx(1 / 3)
    assert stats["omission/success_if_complete"] == 1.0
    assert stats["omission/success_if_uncompacted"] == 0.0
    assert stats["omission/success_gap"] == pytest.approx(2 / 3)
    assert stats["omission/rollouts_omitted"] == 3
    assert stats["omission/rollouts_complete"] == 2


def test_records_as_objects_and_empty_groups_left_out():
    class Record:
        def __init__(self, success, summary_recall):
            self.success = success
            self.summary_recall = summary_recall

    stats = summary_omission([Record(True, [{"a": True}]), Record(False, [{"a": True}])])
    assert stats["omission/overall"] == 0.0
    assert stats["omission/success_if_complete"] == 0.5
    assert "omission/success_if_omitted" not in stats
    assert "omission/success_gap" not in stats
    assert "omission/success_if_uncompacted" not in stats


def test_real_scripted_summarizer_at_0_3_measures_0_3():
    """End to end with the environments' scripted summarizer and summary_recall."""
    records = []
    for env_id in ("cxsim/KeyRecall-v0", "cxsim/FactUpdate-v0"):
        env = gym.make(env_id)
        summarizer = ScriptedSummarizer(omission_rate=0.3, seed=0, family=family_of(env))
        for seed in range(500):
            _, info = env.reset(seed=seed)
            context = " ".join(info["key_facts"].values())  # every current value present
            recall = [summary_recall(summarizer.summarize(context, info), info) for _ in range(2)]
            records.append({"success": True, "summary_recall": recall})
    stats = summary_omission(records)
    assert stats["omission/num_summaries"] == 2000
    assert _within_three_se(stats["omission/overall"], 0.3, stats["omission/num_facts"])


def test_ceiling_splits_success_by_what_the_last_summary_kept():
    def record(success: bool, kept: bool) -> SimpleNamespace:
        return SimpleNamespace(success=success, summary_recall=[{"key": True}, {"key": kept}])

    records = [record(True, True)] * 3 + [record(False, True)] + [record(False, False)] * 4
    out = outcome_ceiling(records)
    assert out["kept_share"] == 0.5 and out["success_if_kept"] == 0.75
    assert out["success_if_lost"] == 0.0 and out["success"] == 0.375
    # Var(R) = 0.234375; the split leaves 0.5 * 0.1875 -> 1 - 0.09375 / 0.234375
    assert out["ev_ceiling"] == pytest.approx(0.6)
    # the training diagnostic reports the same figure each iteration
    assert summary_omission(records)["critic/ev_ceiling"] == pytest.approx(0.6)
    assert "critic/ev_ceiling" not in summary_omission([record(True, True)] * 4)
    # leave one out: kept successes are predicted 2/3, the kept failure 1, the lost 0;
    # residuals (1/3, 1/3, 1/3, -1, 0, 0, 0, 0): 1 - (4/3) / 1.875 (sums of squares)
    assert out["ev_ceiling_loo"] == pytest.approx(1 - (4 / 3) / 1.875)
    assert summary_omission(records)["critic/ev_ceiling_loo"] == pytest.approx(
        out["ev_ceiling_loo"]
    )


def test_the_stated_ceiling_cannot_tell_a_wrong_value_from_the_right_one():
    def record(success: bool, kept: bool, stated: bool) -> SimpleNamespace:
        return SimpleNamespace(
            success=success, summary_recall=[{"key": kept}], summary_stated=[{"key": stated}]
        )

    # 3 right keys (all succeed), 3 wrong keys (all fail), 2 `unknown` (fail)
    records = [record(True, True, True)] * 3 + [record(False, False, True)] * 3
    records += [record(False, False, False)] * 2
    # knowing which keys are right explains it all; reading the summary, the 6 that state a
    # key succeed at 0.5: Var(R) = 0.234375, residual 6 x 0.25 / 8 -> 1 - 0.1875 / 0.234375
    assert outcome_ceiling(records)["ev_ceiling"] == pytest.approx(1.0)
    assert stated_ceiling(records)["critic/ev_ceiling_stated"] == pytest.approx(0.2)
    # one group: nothing between groups; equal outcomes or no flags: no figure
    one_group = [record(True, True, True), record(False, False, True)]
    assert stated_ceiling(one_group)["critic/ev_ceiling_stated"] == pytest.approx(0.0)
    assert stated_ceiling([record(True, True, True)] * 2) == {}
    assert stated_ceiling([SimpleNamespace(success=True, summary_stated=[])] * 2) == {}


def test_a_lost_summary_alone_in_its_group_does_not_explain_itself():
    def record(success: bool, kept: bool) -> SimpleNamespace:
        return SimpleNamespace(success=success, summary_recall=[{"key": kept}])

    records = [record(True, True)] * 6 + [record(False, True)] + [record(False, False)]
    out = outcome_ceiling(records)
    # fitted on itself the one lost rollout is predicted exactly (0), which explains 0.43;
    # from the others it is predicted 6/7, like every rollout: nothing is explained
    assert out["ev_ceiling"] == pytest.approx(1 - (42 / 49) / 1.5)
    assert out["ev_ceiling_loo"] < 0 < out["ev_ceiling"]


def test_the_online_ceiling_predicts_each_group_by_the_earlier_batches_rates():
    def record(success: bool, kept: bool) -> SimpleNamespace:
        return SimpleNamespace(success=success, summary_recall=[{"key": kept}])

    batch = [record(True, True)] * 3 + [record(False, True)] + [record(False, False)] * 4
    first = online_ceiling(batch, history=[])
    # the batch's own counts, in GROUP_TAGS order; nothing earlier to predict from
    assert [first[t] for t in GROUP_TAGS] == [4.0, 3.0, 4.0, 0.0]
    assert "critic/ev_ceiling_online" not in first
    # two earlier batches: the last kept 1 of 2 and lost 2 of 2 (weight 1), the one before
    # kept 4 of 4 and lost 0 of 2 (weight 1/2): kept rate (1 + 2) / (2 + 2) = 0.75, lost
    # rate (2 + 0) / (2 + 1) = 2/3; a row without the tags (another tag set) is skipped
    older = dict(zip(GROUP_TAGS, (4.0, 4.0, 2.0, 0.0), strict=True))
    last = dict(zip(GROUP_TAGS, (2.0, 1.0, 2.0, 2.0), strict=True))
    out = online_ceiling(batch, history=[older, {"charts/success_rate": 0.5}, last])
    # predictions 0.75 (kept) and 2/3 (lost) against outcomes 1,1,1,0 and 0,0,0,0:
    # residuals 0.25 x3, -0.75, -2/3 x4; Var(residual) / Var(outcome) over the 8 rollouts
    residual = [0.25] * 3 + [-0.75] + [-2 / 3] * 4
    mean = sum(residual) / 8
    var_residual = sum((r - mean) ** 2 for r in residual) / 8
    assert out["critic/ev_ceiling_online"] == pytest.approx(1 - var_residual / 0.234375)
    # this batch's own rates would explain 0.6 (the in-batch ceiling); the earlier ones less
    assert out["critic/ev_ceiling_online"] < outcome_ceiling(batch)["ev_ceiling"]
    # a task without needed facts logs nothing
    assert online_ceiling([SimpleNamespace(success=True, summary_recall=[{}])] * 2, []) == {}


def test_the_online_stated_ceiling_reads_the_stated_groups_of_the_earlier_batches():
    def record(success: bool, stated: bool) -> dict:
        return {"success": success, "summary_stated": [{"key": stated}]}

    # a wrong key is stated too: 2 of the 4 that state one succeed, none of the 4 that do not
    batch = [record(True, True)] * 2 + [record(False, True)] * 2 + [record(False, False)] * 4
    first = online_stated_ceiling(batch, history=[])
    assert [first[t] for t in STATED_GROUP_TAGS] == [4.0, 2.0, 4.0, 0.0]
    assert "critic/ev_ceiling_stated_online" not in first
    # the earlier batch says stated 3 of 4, not stated 2 of 4: predictions 0.75 and 0.5
    # against 1,1,0,0 and 0,0,0,0: residuals 0.25 x2, -0.75 x2, -0.5 x4 (mean -0.375),
    # Var = (2 x 0.625^2 + 2 x 0.375^2 + 4 x 0.125^2) / 8 = 0.140625; Var(outcome) 0.1875
    earlier = dict(zip(STATED_GROUP_TAGS, (4.0, 3.0, 4.0, 2.0), strict=True))
    out = online_stated_ceiling(batch, history=[earlier])
    assert out["critic/ev_ceiling_stated_online"] == pytest.approx(1 - 0.140625 / 0.1875)
    # the batch's own rates (0.5 and 0, a wider gap) explain more: the split fitted on itself
    own = stated_ceiling([SimpleNamespace(**r) for r in batch])["critic/ev_ceiling_stated"]
    assert own == pytest.approx(1 - (4 * 0.25 / 8) / 0.1875)
    assert out["critic/ev_ceiling_stated_online"] < own
    # kept and stated counts live under their own tags: one does not read the other's
    assert "critic/ev_ceiling_stated_online" not in online_stated_ceiling(
        batch, history=[dict(zip(GROUP_TAGS, (4.0, 3.0, 4.0, 1.0), strict=True))]
    )
    assert online_stated_ceiling([record(True, True)] * 2, history=[earlier]) == {
        t: v for t, v in zip(STATED_GROUP_TAGS, (2.0, 2.0, 0.0, 0.0), strict=True)
    }  # equal outcomes: counts only
    assert online_stated_ceiling([{"success": True, "summary_stated": []}] * 2, []) == {}

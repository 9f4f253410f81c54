"""What the study engine refuses (issue 37): no verdict from fewer than 3 paired seeds,
degenerate claims named as such, intervals of bounded figures clipped to their range,
Holm-Bonferroni over a page's claims (``correction = "holm"``), the training-history claim
metrics, and tuning seeds kept out of every verdict (``tuning_seeds``)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from cxsim.cli import main as cxsim
from cxsim.studies.correction import holm_adjusted
from cxsim.studies.history import actor_reductions, history_bounds, iterations_to, success_auc
from cxsim.studies.load import load_study
from cxsim.studies.outcomes import claim_comparisons, comparison
from cxsim.studies.selection import check_tuning_seeds, select
from cxsim.studies.spec import StudyError
from cxsim.studies.stats import compare, diagnostic

ROOT = Path(__file__).resolve().parent.parent

SETTING = """
[settings.small]
env.kwargs = { memory_length = 5, obs_words_mean = 6.0, obs_words_std = 1.0, num_values = 4 }
compaction.budget = 160
"""
ARMS = """
[arms.a]
preset = "compactionrl"
[arms.b]
preset = "compactionrl"
[arms.c]
preset = "compactionrl"
"""


def claim(name: str, treatment: str, reference: str = "base", extra: str = "") -> str:
    return (
        f'[[claims]]\nname = "{name}"\ntreatment = "{treatment}"\nreference = "{reference}"\n'
        f'prediction = "positive"\n{extra}'
    )


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def evaluation(rate: float | None, tasks: int = 20) -> dict[str, Any]:
    """One seed's evaluation: Pass@1 ``rate`` over ``tasks`` tasks (None: no tasks)."""
    if rate is None:
        return {"per_task_success": [], "pass_at_1": math.nan, "summary_recall": None}
    solved = round(rate * tasks)
    successes = [1.0] * solved + [0.0] * (tasks - solved)
    return {"per_task_success": successes, "pass_at_1": solved / tasks, "summary_recall": rate}


def unit(arm: str, seed: int, rate: float, train: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"setting": "small", "arm": arm, "seed": seed, "made": [],
            "eval": {"compacted": {**evaluation(rate), "protocol": "compacted"}},
            "train": train, "eval_file": f"small/{arm}/{seed}", "eval_wall_time_s": 1.0,
            "sft": {"run_dir": f"small/{seed}/sft", "wall_time_s": 1.0}}  # fmt: skip


def runs_of(rates: dict[str, list[float]], trains: dict[str, list[Any]] | None = None):
    trains = trains or {}
    return {"small": {
        arm: [unit(arm, s, r, (trains.get(arm) or [None] * len(values))[s])
              for s, r in enumerate(values)]
        for arm, values in rates.items()
    }}  # fmt: skip


# -- too few seeds ----------------------------------------------------------------------------


def test_a_two_seed_claim_gets_no_verdict():
    # a large, clean gain on 2 seeds: the t interval would exclude 0, but 2 seeds decide nothing
    c = compare([evaluation(0.9), evaluation(0.85)], [evaluation(0.1), evaluation(0.1)],
                "pass_at_1")  # fmt: skip
    assert c.difference.excludes_zero() and c.paired == 2
    assert c.verdict == "too few seeds (2 paired; a verdict needs 3)"
    assert not c.tested and math.isnan(c.p_value)
    # 3 seeds, but one side wrote no summary on seed 2: 2 paired seeds
    recall = compare(
        [evaluation(0.9), evaluation(0.8), evaluation(None)],
        [evaluation(0.2), evaluation(0.3), evaluation(0.1)],
        "summary_recall",
    )
    assert recall.paired == 2 and recall.verdict.startswith("too few seeds (2 paired")
    one = compare([evaluation(0.9)], [evaluation(0.1)], "pass_at_1")  # Newcombe's interval
    assert one.difference.method == "newcombe" and one.difference.excludes_zero()
    assert one.verdict == "too few seeds (1 paired; a verdict needs 3)"


# -- degenerate -------------------------------------------------------------------------------


def test_a_zero_spread_claim_is_degenerate_and_says_which_kind():
    def on(treatment: list[float], reference: list[float], direction: str = "higher"):
        margin = 0.05 if direction == "same" else None
        return compare([evaluation(x) for x in treatment], [evaluation(x) for x in reference],
                       "pass_at_1", direction, margin)  # fmt: skip

    shifted = on([0.5, 0.75, 0.3], [0.25, 0.5, 0.05])  # +0.25 on every seed
    assert shifted.per_seed == pytest.approx((0.25, 0.25, 0.25))
    assert shifted.difference.low == pytest.approx(shifted.difference.high)  # no width
    assert shifted.verdict == (
        "degenerate: the paired differences do not vary (+0.250 on every seed)"
    )
    equal = on([0.5, 0.75, 0.3], [0.5, 0.75, 0.3], "same")  # would read "reproduced" before
    assert equal.verdict == "degenerate: the two arms are equal on every seed"
    saturated = on([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])  # Pass@1 all 1 against all 0
    assert saturated.verdict == (
        "degenerate: both arms at the metric's floor or ceiling on every seed"
    )
    assert not any(c.tested for c in (shifted, equal, saturated))
    varied = on([0.5, 0.8, 0.3], [0.25, 0.5, 0.05])  # +0.25, +0.30, +0.25: a verdict
    assert varied.verdict == "reproduced" and varied.tested


# -- clipped intervals ------------------------------------------------------------------------


def test_a_diagnostic_interval_is_clipped_to_its_range(tmp_path: Path):
    from cxsim.studies.page import arm_lines

    # per seed 0.0, 1.0, 0.5: mean 0.5, sd 0.5, half width t(0.975, 2) 4.3027 * 0.5 / sqrt(3)
    # = 1.2421, so the t interval is [-0.742, 1.742]: a success rate clipped to [0, 1], an
    # advantage (unbounded) not
    finals = [{"charts/success_rate": v, "credit/abs_adv_seg0": v} for v in (0.0, 1.0, 0.5)]
    rate = diagnostic(finals, "charts/success_rate")
    assert (rate.mean, rate.low, rate.high) == (0.5, 0.0, 1.0)
    advantage = diagnostic(finals, "credit/abs_adv_seg0")
    assert advantage.low == pytest.approx(-0.7421, abs=1e-4)
    assert advantage.high == pytest.approx(1.7421, abs=1e-4)
    text = ('seeds = "0:3"\ndiagnostics = ["charts/success_rate", "credit/abs_adv_seg0"]\n'
            + SETTING + ARMS)  # fmt: skip
    study = load_study(write(tmp_path, text))
    trains = {"a": [{"final": f} for f in finals]}
    runs = runs_of({"base": [0.2, 0.3, 0.4], "a": [0.5, 0.6, 0.7]}, trains)
    selection = select(study, ("arm:a",))
    page = "\n".join(arm_lines(study, selection, runs))
    row = next(line for line in page.splitlines() if line.startswith("| `a` |"))
    assert row.endswith("| 0.500 [0.000, 1.000] | 0.500 [-0.742, 1.742] |")
    assert "clipped to the figure's range" in page


def test_every_fraction_of_the_tensorboard_reference_is_bounded():
    rows = re.findall(r"^\| `([^`]+)` \|[^\n]*\| fraction \|", (ROOT / "docs" / "tensorboard.md")
                      .read_text(), flags=re.M)  # fmt: skip
    assert "charts/success_rate" in rows and len(rows) > 20
    fill = {"{k}": "2", "{mode}": "token-mean", "{r}": "0.5x", "{protocol}": "compacted"}
    for tag in rows:
        key = tag
        for hole, value in fill.items():
            key = key.replace(hole, value)
        expected = (-1.0, 1.0) if key == "omission/success_gap" else (0.0, 1.0)
        assert history_bounds(key) == expected, key
    assert history_bounds("critic/explained_variance") == (-math.inf, math.inf)


# -- Holm over a page -------------------------------------------------------------------------


def test_holm_adjusts_a_hand_worked_page(tmp_path: Path):
    # holm_adjusted alone: p = (0.01, 0.04, 0.03); sorted 0.01, 0.03, 0.04 times 3, 2, 1:
    # 0.03, 0.06, 0.04 -> made non-decreasing: 0.03, 0.06, 0.06
    assert holm_adjusted([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # The page: three claims over 3 seeds, each arm against the base (20 tasks per seed).
    # Per-seed differences (mean d, spread e: d - e, d, d + e; sample sd e), t = sqrt(3) d / e
    # with 2 degrees of freedom, where the two-sided p is 1 - t / sqrt(t^2 + 2):
    #   a: 0.25, 0.30, 0.35: t = sqrt(3) * 6 = 10.392, p = 1 - 10.392 / 10.488 = 0.00913
    #   b: 0.20, 0.30, 0.40: t = sqrt(3) * 3 = 5.196, p = 1 - 5.196 / 5.385 = 0.03510
    #   c: 0.40, 0.65, 0.90: t = sqrt(3) * 2.6 = 4.503, p = 1 - 4.503 / 4.720 = 0.04594
    # Each alone excludes 0 (p < 0.05): all three reproduced without a correction. Holm, m = 3:
    # a: 3 * 0.00913 = 0.0274 <= 0.05, kept; b: 2 * 0.03510 = 0.0702 > 0.05, stop: b and c
    # (adjusted max(0.0702, 0.0459) = 0.0702) are not resolved after Holm.
    claims = claim("a-helps", "a") + claim("b-helps", "b") + claim("c-helps", "c")
    text = 'seeds = "0:3"\ncorrection = "holm"\n' + SETTING + ARMS + claims
    study = load_study(write(tmp_path, text))
    assert study.correction == "holm"
    base = [0.05, 0.10, 0.05]
    rates = {"base": base, "a": [0.30, 0.40, 0.40], "b": [0.25, 0.40, 0.45],
             "c": [0.45, 0.75, 0.95]}  # fmt: skip
    runs = runs_of(rates)
    selection = select(study)
    raw = {c.name: comparison(runs, c) for c in study.claims}
    assert [raw[n].p_value for n in ("a-helps", "b-helps", "c-helps")] == pytest.approx(
        [0.009133, 0.035099, 0.045938], abs=1e-6
    )
    assert all(c.verdict == "reproduced" for c in raw.values())
    held = {name: c for (_, name), c in claim_comparisons(study, selection, runs).items()}
    assert [held[n].adjusted_p for n in ("a-helps", "b-helps", "c-helps")] == pytest.approx(
        [0.027398, 0.070197, 0.070197], abs=1e-6
    )
    assert held["a-helps"].verdict == "reproduced"
    assert held["b-helps"].verdict == "not resolved after Holm (adjusted p 0.070 > 0.05)"
    assert held["c-helps"].verdict == "not resolved after Holm (adjusted p 0.070 > 0.05)"
    from cxsim.studies.page import summary
    from cxsim.studies.page_claims import claim_lines

    page = "\n".join(claim_lines(study, selection, runs))
    assert "p / Holm-adjusted p" in page and "| 0.009 / 0.027 |" in page
    assert (
        "**Holm-Bonferroni over the page**" in page and "the 3 claims tested (not refused)" in page
    )
    data = summary(study, selection, runs)
    assert data["correction"] == "holm"
    assert [c["verdict"].split(" (")[0] for c in data["claims"]] == [
        "reproduced", "not resolved after Holm", "not resolved after Holm",
    ]  # fmt: skip
    # without the key: no correction, the three verdicts as tested
    plain = load_study(write(tmp_path, text.replace('correction = "holm"\n', "")))
    assert all(
        c.verdict == "reproduced" for c in claim_comparisons(plain, selection, runs).values()
    )
    with pytest.raises(StudyError, match="correction = 'bonferroni'; choose one of: none, holm"):
        load_study(write(tmp_path, text.replace('"holm"', '"bonferroni"')))


def test_a_refused_claim_shows_no_test_power(tmp_path: Path):
    # two seeds with equal differences: a smallest detectable of 0 would read "powered: yes"
    from cxsim.studies.page_claims import claim_lines

    study = load_study(write(tmp_path, 'seeds = "0:2"\n' + SETTING + ARMS + claim("a-helps", "a")))
    runs = runs_of({"base": [0.0, 0.05], "a": [0.05, 0.10]})
    (c,) = claim_comparisons(study, select(study), runs).values()
    assert c.verdict.startswith("too few seeds") and c.detectable == pytest.approx(0.0)
    lines = "\n".join(claim_lines(study, select(study), runs)).split("\n")
    row = next(r for r in lines if r.startswith("| **a-helps**"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[5:9] == ["too few seeds (2 paired; a verdict needs 3)", "-", "-", "-"]


# -- training metrics -------------------------------------------------------------------------


def test_training_metrics_read_the_success_curve(tmp_path: Path):
    history = [{"warmup": 1.0, "charts/success_rate": 0.9}]  # a warm-up row: left out
    history += [{"warmup": 0.0, "charts/success_rate": r} for r in (0.2, 0.5, 0.8, 0.7)]
    curve = actor_reductions(history)["success_curve"]
    assert curve == [0.2, 0.5, 0.8, 0.7]
    assert success_auc(curve) == pytest.approx(0.55)
    assert iterations_to(curve, 0.8) == 3.0 and iterations_to(curve, 0.9) == 5.0  # never: 4 + 1
    text = 'seeds = "0:3"\n' + SETTING + ARMS
    auc = claim("auc", "a", "b", 'metric = "train_success_auc"\n')
    faster = claim("faster", "a", "b", 'metric = "iterations_to_success"\nthreshold = 0.8\n'
                   'direction = "lower"\n')  # fmt: skip
    study = load_study(write(tmp_path, text + auc + faster))
    curves = {
        "a": [[0.5, 0.9, 0.9], [0.8, 0.9, 1.0], [0.4, 0.85, 0.9]],  # reach 0.8: 2, 1, 2
        "b": [[0.1, 0.3, 0.6], [0.2, 0.9, 0.9], [0.1, 0.2, 0.3]],
    }  # 4 (never), 2, 4
    trains = {arm: [{"final": {}, "success_curve": c} for c in cs] for arm, cs in curves.items()}
    runs = runs_of({"base": [0.1] * 3, "a": [0.5] * 3, "b": [0.4] * 3}, trains)
    auc_c, faster_c = (comparison(runs, c) for c in study.claims)
    # AUC per seed: a 0.7667, 0.9, 0.7167; b 0.3333, 0.6667, 0.2; differences +0.433, +0.233,
    # +0.517. a's t interval is 0.794 +/- 4.3027 * 0.0948 / sqrt(3) = [0.559, 1.030]: clipped
    assert auc_c.per_seed == pytest.approx((0.43333, 0.23333, 0.51667), abs=1e-4)
    assert auc_c.treatment.low == pytest.approx(0.559, abs=1e-3)
    assert auc_c.treatment.high == 1.0
    assert auc_c.verdict == "reproduced"
    # iterations to 0.8: a 2, 1, 2 against b 4 (never: 3 + 1), 2, 4; differences -2, -1, -2:
    # mean -5/3, sd 1/sqrt(3), t = -5 at 2 degrees of freedom, p = 1 - 5 / sqrt(27) = 0.038
    assert faster_c.per_seed == (-2.0, -1.0, -2.0) and faster_c.verdict == "reproduced"
    assert faster_c.p_value == pytest.approx(1 - 5 / math.sqrt(27))
    from cxsim.studies.page_claims import metric_label

    assert metric_label(study.claims[1]) == "iterations_to_success >= 0.8 (training)"
    for bad, message in (
        (claim("x", "a", extra='metric = "train_success_auc"\n'), "the base trains nothing"),
        (claim("x", "a", "b", 'metric = "iterations_to_success"\n'), "needs threshold"),
        (claim("x", "a", "b", "threshold = 0.5\n"), "threshold goes with metric"),
        (claim("x", "a", "b", 'metric = "train_success_auc"\nprotocol = "single"\n'),
         "protocol goes with evaluation metrics"),
    ):  # fmt: skip
        with pytest.raises(StudyError, match=message):
            load_study(write(tmp_path, text + bad))


# -- tuning seeds -----------------------------------------------------------------------------


def test_tuning_seeds_are_refused_in_a_verdict(tmp_path: Path):
    text = 'seeds = "8:11"\ntuning_seeds = "0:8"\n' + SETTING + ARMS + claim("a-helps", "a")
    path = write(tmp_path, text)
    study = load_study(path)
    assert study.tuning_seeds == tuple(range(8)) and study.seeds == (8, 9, 10)
    check_tuning_seeds(study, select(study))  # seeds outside the tuning seeds: allowed
    overlapping = load_study(path, seeds="6:9")
    with pytest.raises(StudyError, match=r"^seeds 6, 7 are tuning seeds .*--seeds 8:11\)"):
        check_tuning_seeds(overlapping, select(overlapping))
    check_tuning_seeds(overlapping, select(overlapping, ("arm:b",)))  # decides no claim
    # the command refuses it in one line, before any run
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as stop:
        cxsim(["study", str(path), "--seeds", "0:3", "--runs-dir", str(runs)])
    message = str(stop.value)
    assert message.startswith("cxsim study: error: seeds 0, 1, 2 are tuning seeds")
    assert "\n" not in message and not runs.exists()
    # the page says which seeds tuned the settings
    from cxsim.studies.page import header_lines

    made_by = {"command": "cxsim study", "commit": "abc", "wall_time_s": 1.0,
               "runs_dir": str(runs), "device": "cpu"}  # fmt: skip
    header = "\n".join(header_lines(study, runs_of({"base": [0.1] * 3}), made_by, {}))
    assert "**Tuning seeds: 0, 1, 2, 3, 4, 5, 6, 7** (`tuning_seeds`)" in header
    with pytest.raises(StudyError, match="tuning_seeds"):
        load_study(write(tmp_path, text.replace('"0:8"', '"x"')))


def test_the_reference_pages_new_keys_parse_with_the_example(tmp_path: Path):
    import shutil

    from test_studies import code_blocks

    blocks = code_blocks(ROOT / "docs" / "reference" / "study-files.md", "toml")
    example, new = blocks[0], next(b for b in blocks if "tuning_seeds" in b)
    top, _, claims = new.partition("[[claims]]")
    shutil.copy(ROOT / "examples" / "my_estimator.py", tmp_path)
    text = top + example.replace('seeds = "0:8"\n', "") + "[[claims]]" + claims
    study = load_study(write(tmp_path, text))
    assert study.tuning_seeds == tuple(range(8)) and study.seeds == tuple(range(8, 16))
    assert study.correction == "holm"
    faster = study.claims[-1]
    assert (faster.metric, faster.threshold, faster.direction) == (
        "iterations_to_success", 0.8, "lower",
    )  # fmt: skip
    check_tuning_seeds(study, select(study))  # its own seeds: no tuning seed
    earlier = load_study(write(tmp_path, text), seeds="4:12")
    with pytest.raises(StudyError, match=r"^seeds 4, 5, 6, 7 are tuning seeds"):
        check_tuning_seeds(earlier, select(earlier))

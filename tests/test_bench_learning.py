"""The learning regression check (cxsim bench learning): the study file's checks on hand
figures, the command, and its pipeline."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from cxsim.experiments import bench_learning as bl
from cxsim.studies.checks import run_checks
from cxsim.studies.load import load_study
from cxsim.studies.selection import select

STUDY = load_study(bl.STUDY_FILE)
IN_RANGE = {
    "losses/first_log_ratio_max": 1e-6,
    "critic/explained_variance": 0.1,
    "compaction/summary_recall": 0.9,
    "weights/token-mean/summary_share": 0.64,
}
"""A trained run's figures inside every recorded range."""


def unit(seed: int, solved: float, figures: dict[str, float] | None) -> dict:
    """A unit result as the runner returns it: 100 tasks, ``solved`` of them solved."""
    tasks = [1.0] * round(100 * solved) + [0.0] * (100 - round(100 * solved))
    train = None
    if figures is not None:
        train = {"final": figures, "actor_max": figures, "actor_mean": figures}
    return {"seed": seed, "eval": {"compacted": {"per_task_success": tasks}}, "train": train}


def failed(pairs: list[tuple[float, float]], **changed: float) -> list[str]:
    """The checks that fail for seeds with (base, trained) Pass@1 and the last seed's
    figures changed by ``changed`` (keys with ``__`` for ``/``)."""
    last = {k.replace("__", "/"): v for k, v in changed.items()}
    runs = {"main": {
        "base": [unit(i, b, None) for i, (b, _) in enumerate(pairs)],
        "compactionrl": [unit(i, t, IN_RANGE | (last if i == len(pairs) - 1 else {}))
                         for i, (_, t) in enumerate(pairs)],
    }}  # fmt: skip
    return [c["name"] for c in run_checks(STUDY, select(STUDY), runs) if not c["passed"]]


def test_paired_gain_is_the_one_sided_t_bound_of_the_per_seed_gains() -> None:
    base, trained = [0.2, 0.25, 0.3, 0.2], [0.5, 0.4, 0.6, 0.35]
    gains = [0.3, 0.15, 0.3, 0.15]
    got = bl.paired_gain(base, trained)
    mean = sum(gains) / 4
    sd = math.sqrt(sum((g - mean) ** 2 for g in gains) / 3)
    assert got["mean"] == pytest.approx(0.225)
    assert got["lower95"] == pytest.approx(mean - 2.3533634 * sd / 2, abs=1e-6)
    assert got["p_value"] == pytest.approx(stats.ttest_rel(trained, base).pvalue / 2)
    assert got["seeds"] == 4


def test_the_study_file_holds_the_recorded_thresholds() -> None:
    checks = {c.name: c for c in STUDY.checks}
    assert (checks["mean-gain"].at_least, checks["every-seed-gains"].each_at_least) == (0.2, 0.1)
    assert checks["first-step-log-ratio"].range == (0.0, 1e-4)
    assert checks["first-step-log-ratio"].over == "max"
    assert STUDY.seeds == (0, 100) and STUDY.settings[0].eval.episodes == 128
    reduced = load_study(bl.STUDY_FILE, budget="reduced")
    assert [c.name for c in reduced.checks] == ["first-step-log-ratio", "summaries-in-the-loss"]


def test_a_clear_gain_with_diagnostics_in_range_passes() -> None:
    assert failed([(0.2, 0.45), (0.2, 0.47), (0.2, 0.49), (0.2, 0.51)]) == []


def test_no_gain_fails_both_learning_checks() -> None:
    pairs = [(0.25, 0.22), (0.25, 0.3), (0.25, 0.27), (0.25, 0.24)]
    assert failed(pairs) == ["mean-gain", "every-seed-gains"]


def test_a_gain_on_some_seeds_only_fails_the_per_seed_margin() -> None:
    # mean gain 0.27 clears its margin, but two seeds gained 0.05 and 0.08
    assert failed([(0.2, 0.7), (0.2, 0.25), (0.2, 0.65), (0.2, 0.28)]) == ["every-seed-gains"]


def test_a_diagnostic_out_of_range_or_missing_on_one_seed_fails_that_check() -> None:
    pairs = [(0.2, 0.5)] * 4
    assert failed(pairs, losses__first_log_ratio_max=1e-3) == ["first-step-log-ratio"]
    both = ["summary-loss-share", "summaries-in-the-loss"]
    assert failed(pairs, **{"weights__token-mean__summary_share": math.nan}) == both
    assert failed(pairs, **{"weights__token-mean__summary_share": 0.5}) == both[:1]


def test_the_command_prints_the_numbers_and_exits_1_on_a_failure(monkeypatch, capsys) -> None:
    pairs = [(0.25, 0.25), (0.25, 0.25)]
    runs = {"main": {"base": [unit(i, b, None) for i, (b, _) in enumerate(pairs)],
                     "compactionrl": [unit(i, t, IN_RANGE) for i, (_, t) in enumerate(pairs)]}}  # fmt: skip
    checks = run_checks(STUDY, select(STUDY), runs)
    seeds = [{"seed": i, "base": 0.25, "trained": 0.25, "wall_time_s": 1.0} for i in range(2)]
    result = {"seeds": seeds, "checks": checks, "passed": False, "wall_time_s": 3.0}
    monkeypatch.setattr(bl, "run_check", lambda cfg: result)
    with pytest.raises(SystemExit) as stop:
        bl.main(["--seeds", "0", "2"])
    assert stop.value.code == 1
    out = capsys.readouterr().out
    assert "FAIL mean-gain (main): compactionrl - base pass_at_1 per seed +0 +0; mean over " \
        "seeds +0 >= 0.2" in out  # fmt: skip
    assert "FAIL every-seed-gains (main)" in out and "ok   summary-recall (main)" in out
    assert "seed 1: base 0.250  trained 0.250  gain +0.000" in out
    assert "FAILED in 3s" in out


def test_bad_seed_and_job_counts_fail_before_any_work() -> None:
    with pytest.raises(ValueError, match="at least 2 seeds"):
        bl.Config(seeds=(1,))
    with pytest.raises(ValueError, match="distinct seeds"):
        bl.Config(seeds=(1, 1))
    with pytest.raises(ValueError, match="--jobs 0"):
        bl.Config(jobs=0)
    assert bl.Config().seed_list == (0, 100)
    assert bl.Config(mode="reduced").seed_list == (0,)


@pytest.mark.slow
def test_reduced_check_trains_evaluates_and_reads_its_diagnostics(tmp_path) -> None:
    cfg = bl.Config(mode="reduced", runs_dir=str(tmp_path / "runs"), jobs=1)
    result = bl.run_check(cfg)
    (seed,) = result["seeds"]
    assert 0.0 <= seed["base"] <= 1.0 and 0.0 <= seed["trained"] <= 1.0
    checks = {c["name"]: c for c in result["checks"]}
    assert list(checks) == ["first-step-log-ratio", "summaries-in-the-loss"]
    (ratio,) = checks["first-step-log-ratio"]["values"]
    (share,) = checks["summaries-in-the-loss"]["values"]
    assert 0.0 <= ratio < 1e-4  # sampling and scoring agree
    assert 0.0 < share < 1.0  # summaries are in the loss
    assert result["passed"], bl.report("reduced", result["seeds"], result["checks"])
    assert list((tmp_path / "runs").glob("main-*/s0/sft/results.json"))

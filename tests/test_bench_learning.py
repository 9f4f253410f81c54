"""The learning regression check (cxsim bench learning): its verdicts, and its pipeline."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from cxsim.experiments import bench_learning as bl

IN_RANGE = {name: (low + high) / 2 for name, (low, high) in bl.RANGES["full"].items()}


def seed_result(seed: int, base: float, trained: float, **diagnostics: float) -> dict:
    return {
        "seed": seed,
        "base": base,
        "trained": trained,
        "diagnostics": IN_RANGE | diagnostics,
        "wall_time_s": 1.0,
    }


def failed(checks: list[dict]) -> list[str]:
    return [c["check"] for c in checks if not c["passed"]]


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


def test_a_clear_gain_with_diagnostics_in_range_passes() -> None:
    seeds = [seed_result(i, 0.2, 0.45 + 0.02 * i) for i in range(4)]
    checks = bl.verdicts("full", seeds)
    assert failed(checks) == []
    assert len(checks) == 2 + len(bl.RANGES["full"])


def test_no_gain_fails_both_learning_checks() -> None:
    seeds = [seed_result(i, 0.25, t) for i, t in enumerate([0.22, 0.3, 0.27, 0.24])]
    assert failed(bl.verdicts("full", seeds)) == ["mean paired gain", "smallest per-seed gain"]


def test_a_gain_on_some_seeds_only_fails_the_per_seed_margin() -> None:
    # mean gain 0.27 clears its margin, but two seeds gained 0.05 and 0.08
    seeds = [seed_result(i, 0.2, t) for i, t in enumerate([0.7, 0.25, 0.65, 0.28])]
    assert failed(bl.verdicts("full", seeds)) == ["smallest per-seed gain"]


def test_a_diagnostic_out_of_range_or_missing_on_one_seed_fails_that_check() -> None:
    high = bl.RANGES["full"]["first_log_ratio_max"][1]
    seeds = [seed_result(i, 0.2, 0.5) for i in range(3)]
    seeds.append(seed_result(3, 0.2, 0.5, first_log_ratio_max=high * 10))
    assert failed(bl.verdicts("full", seeds)) == ["first_log_ratio_max"]
    seeds[3] = seed_result(3, 0.2, 0.5, summary_loss_share=float("nan"))
    assert failed(bl.verdicts("full", seeds)) == ["summary_loss_share"]


def test_the_command_prints_the_numbers_and_exits_1_on_a_failure(monkeypatch, capsys) -> None:
    seeds = [seed_result(i, 0.25, 0.25) for i in range(2)]
    checks = bl.verdicts("full", seeds)
    result = {"seeds": seeds, "checks": checks, "passed": False, "wall_time_s": 3.0}
    monkeypatch.setattr(bl, "run_check", lambda cfg: result)
    with pytest.raises(SystemExit) as stop:
        bl.main(["--seeds", "0", "2"])
    assert stop.value.code == 1
    out = capsys.readouterr().out
    assert "FAIL mean paired gain: +0.000 (allowed [0.2, 1])" in out
    assert "FAIL smallest per-seed gain: +0.000 (allowed [0.1, 1])" in out
    assert "seed 1: base 0.250  trained 0.250  gain +0.000" in out
    assert "FAILED in 3s" in out


def test_bad_seed_and_job_counts_fail_before_any_work() -> None:
    with pytest.raises(ValueError, match="at least 2 seeds"):
        bl.Config(seeds=(1,))
    with pytest.raises(ValueError, match="distinct seeds"):
        bl.Config(seeds=(1, 1))
    with pytest.raises(ValueError, match="--jobs 0"):
        bl.Config(jobs=0)
    assert bl.Config().seed_list == bl.SEEDS["full"] and len(bl.SEEDS["full"]) == 2
    assert bl.Config(mode="reduced").seed_list == (0,)


@pytest.mark.slow
def test_reduced_check_trains_evaluates_and_reads_its_diagnostics(tmp_path) -> None:
    cfg = bl.Config(mode="reduced", runs_dir=str(tmp_path / "runs"), jobs=1)
    result = bl.run_check(cfg)
    (seed,) = result["seeds"]
    figures = seed["diagnostics"]
    assert 0.0 <= seed["base"] <= 1.0 and 0.0 <= seed["trained"] <= 1.0
    assert 0.0 <= figures["first_log_ratio_max"] < 1e-4  # sampling and scoring agree
    assert 0.0 < figures["summary_loss_share"] < 1.0  # summaries are in the loss
    assert [c["check"] for c in result["checks"]] == list(bl.RANGES["reduced"])
    assert result["passed"], bl.report("reduced", result["seeds"], result["checks"])
    assert (tmp_path / "runs" / "s0" / "sft" / "results.json").is_file()

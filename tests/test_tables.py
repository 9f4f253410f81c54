"""Tables: the interval math on hand-computed numbers, and ``cxsim tables --preset smoke`` for real."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from cxsim.cli import main as cxsim
from cxsim.tables import (
    Interval,
    Proportion,
    cached_json,
    config_tag,
    detectable_difference,
    fmt,
    markdown_table,
    mean_interval,
    paired_difference,
    seed_interval,
    verdict,
)

# -- math ---------------------------------------------------------------------------------


def test_detectable_difference_has_the_stated_power():
    import numpy as np
    from scipy.stats import ttest_1samp

    diffs = [0.12, 0.05, 0.2, -0.02, 0.1, 0.15, 0.08, 0.01]
    delta = detectable_difference(diffs)
    sd = float(np.std(diffs, ddof=1))
    # a true shift of delta at that spread is detected in 80% of 8-seed experiments
    rng = np.random.default_rng(0)
    draws = rng.normal(delta, sd, size=(20000, 8))
    power = float((ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05).mean())
    assert power == pytest.approx(0.8, abs=0.015)
    assert detectable_difference(diffs, power=0.9) > delta
    assert detectable_difference([0.3, 0.3, 0.3]) == 0.0  # no spread: any shift shows
    assert math.isnan(detectable_difference([0.3]))
    assert detectable_difference([0.4, 0.1]) > 1.0  # two seeds detect only huge effects


def test_seed_interval_is_t_over_seeds():
    # values 0.3, 0.5, 0.4: mean 0.4, sd 0.1, t(2) = 4.3027 -> half width t * 0.1 / sqrt(3)
    x = seed_interval([Proportion(3, 10), Proportion(5, 10), Proportion(4, 10)])
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # scipy.stats.t.ppf(0.975, 2)
    assert x.method == "t" and x.n == 3
    assert x.mean == pytest.approx(0.4)
    assert (x.low, x.high) == pytest.approx((0.4 - half, 0.4 + half))


def test_t_intervals_are_clipped_to_the_range_of_a_proportion():
    x = seed_interval([Proportion(0, 10), Proportion(0, 10), Proportion(3, 10)])
    assert x.low == 0.0 and x.high < 1.0 and x.mean == pytest.approx(0.1)
    d = paired_difference([Proportion(10, 10), Proportion(0, 10)], [Proportion(0, 10)] * 2)
    assert (d.low, d.high) == (-1.0, 1.0)
    assert mean_interval([0.0, 0.1, 0.9], bounds=(0.0, 1.0)).low == 0.0


def test_seed_interval_one_seed_is_wilson_and_empty_seeds_drop():
    x = seed_interval([Proportion(0, 0), Proportion(8, 10)])  # the empty seed is left out
    assert x.method == "wilson" and x.n == 10
    # Wilson 8/10: (0.4902, 0.9433)
    assert (x.low, x.high) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert math.isnan(seed_interval([Proportion(0, 0)]).mean)


def test_paired_difference_newcombe_matches_the_published_example():
    # Newcombe (1998), method 10: 56/70 - 48/80 = 0.175... here 0.8 - 0.6 -> (0.0524, 0.3339)
    d = paired_difference([Proportion(56, 70)], [Proportion(48, 80)])
    assert d.method == "newcombe" and d.mean == pytest.approx(0.2)
    assert (d.low, d.high) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    assert d.excludes_zero()


def test_paired_difference_over_seeds_pairs_by_seed():
    # per-seed differences 0.2, 0.2, 0.2: zero variance -> a point interval
    a = [Proportion(5, 10), Proportion(6, 10), Proportion(7, 10)]
    b = [Proportion(3, 10), Proportion(4, 10), Proportion(5, 10)]
    d = paired_difference(a, b)
    assert d.method == "t" and (d.mean, d.low, d.high) == pytest.approx((0.2, 0.2, 0.2))
    with pytest.raises(ValueError, match="one entry per seed"):
        paired_difference(a, b[:2])


def test_formatting_and_verdicts():
    x = Interval(0.5, 0.25, 0.75, 3, "t")
    assert fmt(x) == "0.50 [0.25, 0.75]"
    assert fmt(Interval(0.1, -0.05, 0.2, 3, "t"), signed=True) == "+0.10 [-0.05, +0.20]"
    assert fmt(mean_interval([0.3])) == "0.30"  # one value: no interval
    assert fmt(mean_interval([math.nan])) == "-"
    assert verdict(Interval(0.2, 0.1, 0.3, 3, "t"), "up", "down").startswith("up (")
    assert verdict(Interval(-0.2, -0.3, -0.1, 3, "t"), "up", "down").startswith("down (")
    assert verdict(Interval(0.1, -0.1, 0.3, 3, "t"), "up", "down").startswith("no detectable")
    assert verdict(Interval(0.0, 0.0, 0.0, 3, "t"), "up", "down") == "equal on every seed (+0.00)"
    table = markdown_table(["a", "b"], [["1", "2"]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |"]
    with pytest.raises(ValueError, match="cells"):
        markdown_table(["a", "b"], [["1"]])


def test_cache_computes_once_and_tags_follow_settings(tmp_path: Path):
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"x": (1, 2), "y": math.nan}

    path = tmp_path / "a" / "r.json"
    first = cached_json(path, compute)
    assert cached_json(path, compute) == first == {"x": [1, 2], "y": None}
    assert len(calls) == 1
    assert config_tag("full", {"a": 1}) == config_tag("full", {"a": 1})
    assert config_tag("full", {"a": 1}) != config_tag("full", {"a": 2})


# -- the entry point ----------------------------------------------------------------------


def cells(page: str, first: str) -> list[str]:
    """The cells of the table row that starts with ``first``."""
    for line in page.splitlines():
        parts = [c.strip() for c in line.strip().strip("|").split("|")]
        if parts[0] == first:
            return parts
    raise AssertionError(f"no row {first!r} in the page")


def rows_starting(page: str, prefix: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in page.splitlines()
        if line.startswith(f"| {prefix}")
    ]


def mean_of(cell: str) -> float:
    return float(cell.split()[0])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("tables")
    runs = tmp_path_factory.mktemp("runs")
    cxsim(["tables", "--preset", "smoke", "--out-dir", str(out), "--runs-dir", str(runs)])
    return out, runs


@pytest.mark.slow
def test_smoke_writes_the_page_and_plots(smoke: tuple[Path, Path]):
    out, _ = smoke
    page = (out / "tables.md").read_text()
    for title in ("## Findings", "## Table 1", "## Table 2", "## Table 3", "## Table 4"):
        assert title in page
    assert "`cxsim tables --preset smoke --out-dir" in page
    assert "Wilson 95% interval" in page  # one seed
    # the sizes the runs used, the pre-flight's where the preset leaves them unset
    assert re.search(r"budget C = \d+, T_comp = \d+, at most \d+ compactions", page)
    assert re.search(r"\*\*Runtime\*\*: about \d+ min of wall time", page)
    for png in ("tables_learning_curves.png", "tables_omission.png", "tables_summarizers.png"):
        assert (out / png).stat().st_size > 5000, png
        assert f"]({png})" in page
    # five findings, each with a number
    findings = page.split("## Findings")[1].split("## Table 1")[0]
    assert len(re.findall(r"^- \*\*", findings, flags=re.M)) == 5


@pytest.mark.slow
def test_smoke_numbers_are_what_the_agents_guarantee(smoke: tuple[Path, Path]):
    page = (smoke[0] / "tables.md").read_text()
    # Table 1: the scripted summarizer keeps every fact at omission 0 and none at 1, and the
    # oracle succeeds whenever the summaries keep everything
    perfect = next(r for r in rows_starting(page, "oracle") if r[1] == "scripted, omission 0")
    assert mean_of(perfect[2]) == 1.0 and mean_of(perfect[3]) == 1.0
    for row in rows_starting(page, ""):
        if row[1] == "scripted, omission 1":
            assert mean_of(row[3]) == 0.0 and mean_of(row[4]) == 1.0
    # Table 2: no episode of the tiny task fits in one window, so Single is 0 for every model;
    # the one-window task (memory_length 2) fits: the oracle solves every episode under Single
    assert "the oracle's Single Pass@1 there: 1.00 [" in page  # 3 tasks: Wilson [0.44, 1]
    assert "Single Pass@1, one-window task |" in page
    for model in ("base (SFT)", "PPO w/o compaction", "CompactionRL"):
        single, compacted, _, over_base, one_window = cells(page, model)[1:6]
        assert (over_base == "-") == (model == "base (SFT)")
        assert mean_of(single) == 0.0
        assert 0.0 <= mean_of(one_window) <= 1.0
        low, high = map(float, re.findall(r"[-\d.]+", compacted)[1:3])
        assert 0.0 <= low <= mean_of(compacted) <= high <= 1.0
    # Table 4 has every ablation, each compared with CompactionRL
    for label in ("w/o token-level loss", "w/o cross-segment correction", "stitched GAE"):
        assert cells(page, label if label != "stitched GAE" else "stitched GAE (not in the paper)")


@pytest.mark.slow
def test_rerun_reuses_the_cache_and_runs_new_seeds_in_parallel(smoke: tuple[Path, Path], tmp_path):
    _, runs = smoke
    (cache,) = runs.glob("main-*")  # the study engine's setting folder
    (seed0,) = cache.glob("s0/train/compactionrl-*/results.json")
    before = seed0.stat().st_mtime_ns
    out = tmp_path / "two"
    cxsim(["tables", "--preset", "smoke", "--seeds", "2", "--tables", "2", "--jobs", "2",
           "--out-dir", str(out), "--runs-dir", str(runs)])  # fmt: skip
    assert seed0.stat().st_mtime_ns == before  # seed 0 read from the cache, not retrained
    assert json.loads(seed0.read_text())["iterations_done"] == 2
    assert (cache / "s1" / "sft" / "policy" / "config.json").is_file()  # its own SFT base
    page = (out / "tables.md").read_text()
    assert "K = 2 training seeds" in page and "## Table 1" not in page
    assert "Does Single-window success improve?" in page
    assert not (out / "tables_summarizers.png").exists()


def test_unknown_preset_and_bad_flags_fail_before_any_work(tmp_path: Path, capsys):
    with pytest.raises(SystemExit, match="unknown preset"):
        cxsim(["tables", "--preset", "huge", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="pass at least one seed"):  # one line, the reason
        cxsim(["tables", "--preset", "smoke", "--seeds", "0", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="pass at least one process"):
        cxsim(["tables", "--preset", "smoke", "--jobs", "0", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="b > a"):
        cxsim(["tables", "--preset", "smoke", "--seeds", "3:1", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="pass --device cuda"):  # Ray gives each task its GPU
        cxsim(["tables", "--preset", "smoke", "--executor", "ray", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="pass --executor ray too"):
        cxsim(["tables", "--preset", "smoke", "--ray-address", "host:6379",
               "--runs-dir", str(tmp_path)])  # fmt: skip
    assert not any(tmp_path.iterdir())


def test_the_device_is_checked_where_the_runs_go(tmp_path: Path):
    """``--device cuda`` names this machine's GPU for local runs, the cluster's under Ray:
    a head machine without one still sends its runs there."""
    import torch

    from cxsim.paper_tables import tables

    ray = tables.parse(["--executor", "ray", "--device", "cuda", "--runs-dir", str(tmp_path)])
    assert ray.compute.device == "cuda"  # each Ray task computes on its own GPU
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="CUDA is not available"):
            cxsim(["tables", "--device", "cuda", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="pass --device cuda"):
        cxsim(["tables", "--executor", "ray", "--device", "cuda:1", "--runs-dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_seeds_a_to_b_are_the_studys_seeds_and_the_tables_narrow_it(tmp_path: Path):
    from cxsim.paper_tables import tables
    from cxsim.paper_tables.tables_study import tables_study
    from cxsim.studies.selection import apart_sides, select

    cfg = tables.parse(["--preset", "smoke", "--seeds", "2:4", "--runs-dir", str(tmp_path)])
    assert cfg.seed_list == (2, 3)
    study = tables_study(cfg, tables.BUDGETS["smoke"])
    assert study.seeds == (2, 3) and study.setting("main").arms == cfg.rows
    narrow = tables.parse(["--preset", "smoke", "--tables", "1", "--omission-rates", "0", "1",
                           "--executors", "oracle"])  # fmt: skip
    study = tables_study(narrow, tables.BUDGETS["smoke"])
    assert study.setting("main").arms == ("compactionrl",)
    assert [s.evaluation for s in apart_sides(select(study))] == [
        "external-summarizer+scripted:0", "external-summarizer+scripted:1",
        "external-summarizer+compactionrl", "external-summarizer+base",
    ]  # fmt: skip
    assert {s.arm for s in apart_sides(select(study))} == {"oracle"}
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_cache_holding_every_stage_is_read_without_running_one(
    smoke: tuple[Path, Path], tmp_path: Path, monkeypatch
):
    """A second ``cxsim tables`` over the first one's runs folder makes nothing: every SFT
    base, training and evaluation is read from the study engine's cache."""
    from cxsim.pipeline import evaluate, sft, train

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a stage ran although its result is cached")

    for module, name in ((sft, "run_sft"), (train, "train"), (evaluate, "evaluate")):
        monkeypatch.setattr(module, name, refuse)
    first, runs = smoke
    out = tmp_path / "again"
    cxsim(["tables", "--preset", "smoke", "--out-dir", str(out), "--runs-dir", str(runs)])
    body = (out / "tables.md").read_text().split("## Findings")[1]
    assert body == (first / "tables.md").read_text().split("## Findings")[1]

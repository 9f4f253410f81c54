"""``cxsim calibrate``: the search's pick on a fake evaluator (grid and bisection), the preset
file read back into an env, a study and the command line, bad input refused before any work,
and one calibration end to end at a smoke budget."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cxsim.calibration import (
    Band,
    Candidate,
    Dial,
    Scored,
    check_search,
    grid,
    parse_band,
    parse_dial,
    pick,
    run_search,
)
from cxsim.cli import main as cxsim
from cxsim.studies import calibrate as calibrate_entry
from cxsim.studies.calibration_preset import load_preset, make_env
from cxsim.studies.load import read_toml

ENV_ID = "cxsim/FactTrail-easy-v0"
SMOKE = [
    "--sft.episodes", "4", "--sft.epochs", "1", "--sft.heldout-episodes", "2",
    "--eval.episodes", "4",
]  # fmt: skip
"""The smoke budget of the study files (studies/*.toml ``[budgets.smoke]``): seconds a base."""


def toml_data(text: str) -> dict:
    """``text`` read as TOML (tomllib, or tomli on Python 3.10)."""
    return read_toml(Path("read.toml"), text)


def fake(
    score: Callable[[Candidate], float], seeds: int = 2, calls: list | None = None
) -> Callable[[Sequence[Candidate]], list[Scored]]:
    """An evaluator giving each candidate ``score`` on every seed, noting what it scored."""

    def evaluate(candidates: Sequence[Candidate]) -> list[Scored]:
        if calls is not None:
            calls.append([c.index for c in candidates])
        return [Scored(c, (score(c),) * seeds, wall_time_s=1.0, made=("sft",)) for c in candidates]

    return evaluate


def by_facts(means: dict[int, float]) -> Callable[[Candidate], float]:
    return lambda c: means[dict(c.dials)["num_facts"]]


# -- the search -----------------------------------------------------------------------------


def test_grid_order_first_dial_slowest_omission_rates_fastest():
    candidates = grid([Dial("num_facts", (1, 2)), Dial("memory_length", (8, 12))], (0.0, 0.5))
    assert [c.index for c in candidates] == list(range(8))
    assert [c.label for c in candidates[:3]] == [
        "num_facts=1 memory_length=8 omission_rate=0.0",
        "num_facts=1 memory_length=8 omission_rate=0.5",
        "num_facts=1 memory_length=12 omission_rate=0.0",
    ]
    assert candidates[-1].folder_name == "num_facts-2_memory_length-12_omission_rate-0.5"


def test_grid_picks_the_mean_in_band_closest_to_its_middle():
    candidates = grid([Dial("num_facts", (1, 2, 3, 4))], (0.5,))
    means = {1: 0.9, 2: 0.55, 3: 0.35, 4: 0.05}
    outcome = run_search(candidates, Band(0.2, 0.6), fake(by_facts(means)))
    assert outcome.chosen is not None
    assert dict(outcome.chosen.candidate.dials) == {"num_facts": 3}  # 0.35 is 0.05 from 0.4
    assert len(outcome.scored) == outcome.candidates == 4


def test_a_tie_goes_to_the_candidate_listed_first_and_band_ends_count():
    candidates = grid([Dial("num_facts", (1, 2, 3))], (0.5,))
    outcome = run_search(candidates, Band(0.2, 0.6), fake(by_facts({1: 0.9, 2: 0.5, 3: 0.3})))
    assert outcome.chosen is not None and outcome.chosen.candidate.index == 1
    ends = [Scored(c, (m,)) for c, m in zip(candidates, (0.6, 0.7, 0.1), strict=True)]
    chosen = pick(ends, Band(0.2, 0.6))
    assert chosen is not None and chosen.candidate.index == 0  # 0.6 is inside


def test_no_mean_in_band_picks_none_and_names_the_nearest():
    candidates = grid([Dial("num_facts", (1, 2))], (0.5,))
    outcome = run_search(candidates, Band(0.2, 0.6), fake(by_facts({1: 0.95, 2: 0.7})))
    assert outcome.chosen is None
    assert dict(outcome.nearest(Band(0.2, 0.6)).candidate.dials) == {"num_facts": 2}


def test_bisection_scores_fewer_and_picks_what_the_grid_picks():
    values = tuple(range(1, 17))
    candidates = grid([Dial("num_facts", values)], (0.5,))
    falling = {v: 1.0 - v / 16 for v in values}  # 0.9375 .. 0.0, monotone
    calls: list = []
    bisected = run_search(
        candidates, Band(0.2, 0.6), fake(by_facts(falling), calls=calls), "bisect"
    )
    whole = run_search(candidates, Band(0.2, 0.6), fake(by_facts(falling)), "grid")
    assert bisected.chosen is not None and whole.chosen is not None
    assert (
        bisected.chosen.candidate == whole.chosen.candidate
    )  # num_facts 10: 0.375, 0.025 from 0.4
    assert calls[0] == [0, 15] and all(len(c) == 1 for c in calls[1:])
    assert len(bisected.scored) <= 2 + 4 < 16
    assert [s.candidate.index for s in bisected.scored] == sorted(
        s.candidate.index for s in bisected.scored
    )


def test_bisection_stops_after_the_ends_when_both_miss_on_one_side():
    candidates = grid([], (0.0, 0.25, 0.5, 0.75, 1.0))
    calls: list = []
    outcome = run_search(candidates, Band(0.2, 0.6), fake(lambda c: 0.9, calls=calls), "bisect")
    assert calls == [[0, 4]] and outcome.chosen is None


# -- the preset file ------------------------------------------------------------------------


def fake_calibration(tmp_path: Path, *flags: str, means: dict[int, float]) -> Path:
    out = tmp_path / "FactTrail-test.toml"
    argv = [
        "--env.env-id", ENV_ID, "--seeds", "3:5", "--dials", "num_facts=1,2,3",
        "--omission-rates", "0.25", "--runs-dir", str(tmp_path / "runs"), "--out", str(out),
        *flags
    ]  # fmt: skip
    cfg = calibrate_entry.parse(argv)
    calibrate_entry.calibrate(cfg, argv, evaluate=fake(by_facts(means)))
    return out


def test_the_preset_round_trips_into_an_env_a_study_and_the_command_line(tmp_path):
    out = fake_calibration(tmp_path, "--compaction.budget", "400", means={1: 0.9, 2: 0.4, 3: 0.1})
    raw = toml_data(out.read_text())
    assert raw["preset"] == "FactTrail-test" and raw["pass-at-1"] == pytest.approx(0.4)
    assert raw["search"]["seeds"] == [3, 4] and raw["search"]["commit"]
    rows = raw["search"]["candidates"]
    assert [r["pass-at-1"] for r in rows] == [[0.9, 0.9], [0.4, 0.4], [0.1, 0.1]]
    assert [r["chosen"] for r in rows] == [False, True, False]
    assert raw["search"]["full-kwargs"]["num_facts"] == 2
    assert raw["search"]["full-kwargs"]["memory_length"] == 8  # the easy preset's own

    setting = load_preset(out)
    assert setting.env.env_id == ENV_ID and dict(setting.env.kwargs) == {"num_facts": 2}
    assert setting.sft.omission_rate == 0.25 and setting.compaction.budget == 400
    env = make_env(out)
    assert env.unwrapped.num_facts == 2
    env.close()

    from cxsim.studies.load import load_study

    table = out.read_text().split("[search]")[0].split("\n[settings.FactTrail-test]\n")[1]
    study = tmp_path / "study.toml"
    study.write_text(
        f'seeds = "0:2"\n[arms.rl]\npreset = "compactionrl"\n[settings.calibrated]\n{table}'
    )
    (studied,) = load_study(study).settings
    assert (studied.env, studied.sft, studied.compaction) == (
        setting.env,
        setting.sft,
        setting.compaction,
    )

    import tyro

    from cxsim.pipeline import run as run_entry

    run_cfg = tyro.cli(run_entry.Config, args=shlex.split(raw["flags"]))
    assert dict(run_cfg.env.kwargs) == {"num_facts": 2} and run_cfg.sft.omission_rate == 0.25
    assert run_cfg.compaction.budget == 400


def test_no_pick_writes_the_record_alone_and_exits_1(tmp_path, monkeypatch, capsys):
    out = fake_calibration(tmp_path, means={1: 0.95, 2: 0.9, 3: 0.8})
    raw = toml_data(out.read_text())
    assert "preset" not in raw and raw["search"]["chosen"] == "none"
    with pytest.raises(ValueError, match="holds no preset"):
        load_preset(out)

    monkeypatch.setattr(
        calibrate_entry, "study_evaluator", lambda *a: fake(by_facts({1: 0.9, 2: 0.9}))
    )
    argv = [
        "calibrate", "--env.env-id", ENV_ID, "--dials", "num_facts=1,2", "--runs-dir",
        str(tmp_path / "r"), "--out", str(tmp_path / "none.toml")
    ]  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        cxsim(argv)
    assert "no candidate's mean Pass@1 fell in 0.2-0.6; nearest: num_facts=1" in str(stop.value)


# -- bad input, before any work -------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--dials", "num_fact=1,2"], "takes no 'num_fact'; did you mean 'num_facts'?"),
        (["--dials", "num_facts="], "the grid of num_facts is empty"),
        (["--dials", "num_facts"], "write NAME=v1,v2,..."),
        (["--dials", "num_facts=1,x"], "'x' is not a number"),
        (["--dials", "num_facts=1", "num_facts=2"], "num_facts is given twice"),
        (["--target", "0.2:1.5"], "within [0, 1]"),
        (["--target", "0.6:0.2"], "low < high"),
        (["--target", "half"], "write low:high"),
        (["--omission-rates", "1.5"], "must lie in [0, 1]"),
        (["--omission-rates", "0.5", "--sft.omission-rate", "0.2"], "not both"),
        (["--search", "bisect", "--dials", "num_facts=1,2", "memory_length=8,9"], "one axis"),
        (["--eval.protocols", "single"], "under --compaction.protocol"),
        (["--seeds", "3:1"], "needs b > a"),
        (["--name", "a b"], "letters, digits"),
    ],
)
def test_bad_input_fails_in_one_line_before_any_work(flags, says, tmp_path, capsys):
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as stop:
        cxsim(["calibrate", "--env.env-id", ENV_ID, "--runs-dir", str(runs), *flags])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert not runs.exists()


def test_a_candidate_the_env_refuses_fails_before_any_base(tmp_path):
    cfg = calibrate_entry.parse(
        [
            "--env.env-id",
            "cxsim/FactTrail-v0",
            "--dials",
            "num_hops=0,3",
            "--runs-dir",
            str(tmp_path / "runs"),
        ]
    )
    with pytest.raises(ValueError, match=r"--dials candidate num_hops=3 omission_rate=0\.5: "):
        calibrate_entry.calibrate(cfg)
    assert not (tmp_path / "runs").exists()


def test_the_parsers_on_their_own():
    assert parse_dial("fact_position=0,0.5,1") == Dial("fact_position", (0, 0.5, 1))
    assert parse_band("0.2:0.6") == Band(0.2, 0.6)
    check_search(ENV_ID, [Dial("num_facts", (1,))], (0.5,), "bisect")  # one candidate: fine
    with pytest.raises(ValueError, match="varies: num_facts, omission_rate"):
        check_search(ENV_ID, [Dial("num_facts", (1, 2))], (0.0, 0.5), "bisect")


# -- end to end -----------------------------------------------------------------------------


def test_a_smoke_calibration_end_to_end_then_a_free_rerun(tmp_path):
    out = tmp_path / "easy.toml"
    argv = [
        "calibrate", "--env.env-id", ENV_ID, "--seeds", "0:2", "--dials", "num_facts=1,2",
        "--target", "0:1", "--runs-dir", str(tmp_path / "runs"), "--out", str(out), "--quiet",
        *SMOKE
    ]  # fmt: skip
    cxsim(argv)
    first = toml_data(out.read_text())
    rows = first["search"]["candidates"]
    assert len(rows) == 2 and all(len(r["pass-at-1"]) == 2 for r in rows)
    assert all(0.0 <= p <= 1.0 for r in rows for p in r["pass-at-1"])
    assert all(r["made"] == {"sft": 2, "eval": 2} for r in rows)
    assert sum(r["chosen"] for r in rows) == 1
    assert load_preset(out).sft.episodes == 4
    cxsim(argv)  # every base and evaluation read from the runs folder
    again = toml_data(out.read_text())["search"]["candidates"]
    assert [r["pass-at-1"] for r in again] == [r["pass-at-1"] for r in rows]
    assert all(r["made"] == {} for r in again)

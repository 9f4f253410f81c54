"""``cxsim bench envs`` (experiments/bench_envs.py) on a tiny budget: what it counts and reports.

Its speed target is the benchmark's own check (``--min-steps-per-s``), not a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cxsim.experiments import bench_envs


def test_bench_envs_counts_episodes_and_successes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = [
        "--steps",
        "300",
        "--repeats",
        "1",
        "--pin-core",
        "None",
        "--min-steps-per-s",
        "None",
        "--out",
        str(out),
        "--env-ids",
        "cxsim/KeyRecall-v0",
        "cxsim/SimRepo-easy-v0",
    ]
    bench_envs.main(argv)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["env", "agent", "steps/s", "episodes", "success"]
    rows = [line.split() for line in lines[1:]]
    assert [r[:2] for r in rows] == [
        ["cxsim/KeyRecall-v0", "oracle"],
        ["cxsim/SimRepo-easy-v0", "oracle"],
    ]
    # the oracle's episodes are 13 steps (memory 12, then the answer) and 7 steps (SimRepo):
    # 300 steps finish 300 // 13 and 300 // 7 of them, every one solved
    assert [int(r[3]) for r in rows] == [300 // 13, 300 // 7]
    assert [float(r[4]) for r in rows] == [1.0, 1.0]
    results = json.loads(out.read_text())["results"]
    assert [r["env_id"] for r in results] == ["cxsim/KeyRecall-v0", "cxsim/SimRepo-easy-v0"]
    assert all(r["steps_per_s"] > 0 for r in results)


def test_bench_envs_exits_below_its_speed_target() -> None:
    argv = [
        "--steps",
        "50",
        "--repeats",
        "1",
        "--pin-core",
        "None",
        "--env-ids",
        "cxsim/KeyRecall-v0",
    ]
    with pytest.raises(
        SystemExit, match="below the target of 1000000000 steps/s: cxsim/KeyRecall-v0"
    ):
        bench_envs.main([*argv, "--min-steps-per-s", "1e9"])


def test_bench_envs_rejects_unknown_ids() -> None:
    with pytest.raises(ValueError, match="unknown env ids"):
        bench_envs.Config(env_ids=("cxsim/Nope-v0",))

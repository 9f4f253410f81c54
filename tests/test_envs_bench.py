"""Smoke test of ``cxsim bench envs`` (experiments/bench_envs.py) with a tiny budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cxsim.experiments import bench_envs


def test_bench_envs_reports_steps_per_second(
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
        "--out",
        str(out),
        "--env-ids",
        "cxsim/KeyRecall-v0",
        "cxsim/SimRepo-easy-v0",
    ]
    bench_envs.main(argv)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["env", "agent", "steps/s", "episodes", "success"]
    row = lines[1].split()
    assert row[0] == "cxsim/KeyRecall-v0" and row[1] == "oracle"
    assert float(row[2]) > 1000 and int(row[3]) > 10 and float(row[4]) == 1.0
    results = json.loads(out.read_text())["results"]
    assert [r["env_id"] for r in results] == ["cxsim/KeyRecall-v0", "cxsim/SimRepo-easy-v0"]


def test_bench_envs_rejects_unknown_ids() -> None:
    with pytest.raises(ValueError, match="unknown env ids"):
        bench_envs.Config(env_ids=("cxsim/Nope-v0",))

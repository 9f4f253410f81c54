"""Run tracking: the settings record of a run folder, log-friendly progress, --quiet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cxsim.config import SFTConfig
from cxsim.tracking import LineProgress, SettingsMismatch, claim_run_dir, flat_settings


def test_flat_settings_names_nested_fields():
    flat = flat_settings({"sft": SFTConfig(omission_rate=0.25), "seed": 3})
    assert flat["sft.omission_rate"] == 0.25 and flat["seed"] == 3


def test_claim_run_dir_records_resumes_refuses_and_overwrites(tmp_path: Path):
    run_dir = tmp_path / "run"
    claim_run_dir(run_dir, {"sft": SFTConfig(), "seed": 0})
    recorded = json.loads((run_dir / "settings.json").read_text())
    assert recorded["seed"] == 0
    (run_dir / "result.txt").write_text("kept")
    claim_run_dir(run_dir, {"sft": SFTConfig(), "seed": 0})  # equal settings: resume
    assert (run_dir / "result.txt").read_text() == "kept"
    with pytest.raises(SettingsMismatch, match=r"seed: 0 there, 1 now") as info:
        claim_run_dir(run_dir, {"sft": SFTConfig(), "seed": 1})
    assert "--run-dir" in str(info.value) and "--overwrite" in str(info.value)
    assert (run_dir / "result.txt").is_file()  # refused: nothing touched
    claim_run_dir(run_dir, {"sft": SFTConfig(), "seed": 1}, overwrite=True)
    assert not (run_dir / "result.txt").exists()
    assert json.loads((run_dir / "settings.json").read_text())["seed"] == 1


def test_line_progress_prints_summary_lines_not_a_bar(capsys):
    bar = LineProgress(total=4, desc="train", every_s=3600)
    bar.update()
    bar.set_postfix(success="0.50")
    assert capsys.readouterr().err == ""  # within every_s: silent
    bar.update(3)
    bar.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[train] 4/4 in" in err and "success=0.50" in err
    assert "\r" not in err

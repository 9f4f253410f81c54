"""Run tracking: the settings record of a run folder, log-friendly progress (showing the
step just finished), --quiet."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cxsim.checkpoint import TrainingState
from cxsim.config import PPOConfig, SFTConfig
from cxsim.distributed import DistContext
from cxsim.rollout_records import RolloutRecord
from cxsim.tracking import (
    LineProgress,
    SettingsMismatch,
    advance,
    claim_run_dir,
    flat_settings,
    to_jsonable,
    with_unrecorded,
)


def test_flat_settings_names_nested_fields():
    flat = flat_settings({"sft": SFTConfig(omission_rate=0.25), "seed": 3})
    assert flat["sft.omission_rate"] == 0.25 and flat["seed"] == 3


def test_settings_added_later_are_recorded_only_when_set(tmp_path: Path):
    # a run recorded before the critic variants existed, with the critic then the only one
    # (`last`, the actor's targets), still resumes with it, and its cache tag holds
    before = flat_settings({"ppo": PPOConfig(value_head="last", critic_lam=None)})
    assert "ppo.value_head" not in before and "ppo.critic_lam" not in before
    assert before["ppo.lam"] == 0.95  # settings without the mark are always recorded
    assert "ppo.value_loss" not in flat_settings({"ppo": PPOConfig()})  # at its default
    # the default critic since is told apart: a record without it stands for the old one
    default = flat_settings({"ppo": PPOConfig()})
    assert default["ppo.value_head"] == "context-ridge" and default["ppo.critic_lam"] == 1.0
    assert set(default) - set(before) == {"ppo.value_head", "ppo.critic_lam"}
    claim_run_dir(tmp_path / "old", {"ppo": PPOConfig(value_head="last", critic_lam=None)})
    with pytest.raises(
        SettingsMismatch, match=r"ppo\.critic_lam: null there, 1\.0 now.*value_head"
    ):
        claim_run_dir(tmp_path / "old", {"ppo": PPOConfig()})  # resumed at the new default
    claim_run_dir(tmp_path / "run", {"ppo": PPOConfig()})
    with pytest.raises(SettingsMismatch, match=r"ppo\.value_head"):
        claim_run_dir(tmp_path / "run", {"ppo": PPOConfig(value_head="prefix-mean")})
    # a record read back with what it left out: the two critics differ in exactly two fields
    old = with_unrecorded(to_jsonable(PPOConfig(value_head="last", critic_lam=None)), PPOConfig)
    new = with_unrecorded(to_jsonable(PPOConfig()), PPOConfig)
    assert (old["value_head"], old["critic_lam"], old["value_loss"]) == ("last", None, "mse")
    assert {k for k in new if new[k] != old[k]} == {"value_head", "critic_lam"}


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


def test_advance_writes_each_line_with_the_step_just_finished(capsys):
    bar = LineProgress(total=3, desc="sft", every_s=0.0)  # a line at every step
    for loss in ("0.30", "0.20", "0.10"):
        advance(bar, loss=loss)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("; ")[-1] for line in lines] == ["loss=0.30", "loss=0.20", "loss=0.10"]
    assert [line.split(" in ")[0] for line in lines] == ["[sft] 1/3", "[sft] 2/3", "[sft] 3/3"]


def record(rollout_id: int, success: bool) -> RolloutRecord:
    return RolloutRecord(
        rollout_id=rollout_id, seed=rollout_id, success=success, reward=float(success),
        terminated=True, truncated=False, end_reason="terminated", turns=6, compactions=2,
        summaries=[], summary_recall=[], tokens_generated=40, tokens_prefilled=90,
        tokens_summarised=10, peak_context=150,
    )  # fmt: skip


def test_training_progress_line_shows_the_iteration_just_finished(capsys):
    """``cxsim train``'s log line after iteration i carries iteration i's success rate and
    warm-up flag (it once showed iteration i-1's: a warm-up flag after the warm-up ended)."""
    from cxsim.pipeline.training_run import TrainingRun

    run = object.__new__(TrainingRun)  # the logging half of a run, without models
    run.cfg = SimpleNamespace(transcripts_every=1)
    run.ctx = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    run.writer, run.meter = None, None
    run.state = TrainingState(0, {}, {}, [], {})
    run.bar = LineProgress(total=3, desc="train", every_s=0.0)
    batches = [  # (warm-up, successes of 4 rollouts): 0.25, 0.50, 1.00
        (True, [True, False, False, False]),
        (False, [True, True, False, False]),
        (False, [True, True, True, True]),
    ]
    for iteration, (warmup, successes) in enumerate(batches):
        records = [record(i, ok) for i, ok in enumerate(successes)]
        run.log(iteration, warmup, {"losses/value": 0.1}, records)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and lines[-1].startswith("[train] 3/3 in")
    assert [line.split("; ")[-1] for line in lines] == [
        "success=0.25, warmup=True",
        "success=0.50, warmup=False",
        "success=1.00, warmup=False",
    ]
    assert [h["charts/success_rate"] for h in run.state.history] == [0.25, 0.5, 1.0]
    assert run.iteration == 3

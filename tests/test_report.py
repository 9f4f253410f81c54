"""``cxsim report`` on tiny real runs: a training run and a main-job run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cxsim.cli import main as cxsim

# The entry-point smoke settings (tests/test_entry_points.py): a short KeyRecall that compacts.
TINY_ENV = [
    "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
    "num_values", "4",
    "--compaction.budget", "160",
]  # fmt: skip
TINY_SFT = ["--sft.episodes", "6", "--sft.epochs", "1", "--sft.heldout-episodes", "2"]
TINY_PPO = [
    "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "2", "--ppo.critic-warmup", "1",
    "--ppo.minibatches", "1", "--ppo.epochs", "1",
]  # fmt: skip
QUIET = ["--no-progress-bar"]


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    cxsim(["sft", "--run-dir", str(root / "sft"), *TINY_ENV, *TINY_SFT, *QUIET])
    run_dir = root / "train"
    cxsim(["train", "--policy", str(root / "sft" / "policy"), "--run-dir", str(run_dir),
           *TINY_ENV, *TINY_PPO, *QUIET])  # fmt: skip
    return run_dir


def test_report_of_a_training_run(train_dir: Path, capsys):
    cxsim(["report", str(train_dir)])
    out = train_dir / "report"
    report = (out / "report.md").read_text()
    assert "report at" in capsys.readouterr().out
    assert (out / "curves.png").stat().st_size > 5000
    assert "![learning curves](curves.png)" in report
    history = json.loads((train_dir / "results.json").read_text())["history"]
    final = json.loads((train_dir / "results.json").read_text())["final"]
    # the final-metrics table carries the trainer's numbers, formatted to 3 significant digits
    row = next(line for line in report.splitlines() if line.startswith("| `charts/success_rate`"))
    assert row == f"| `charts/success_rate` | {final['charts/success_rate']:.3g} |"
    assert f"| compactionrl | {len(history)} |" in report
    for panel in (
        "charts/success_rate",
        "losses/policy",
        "omission",
        "compaction/compactions_mean",
    ):
        assert panel in report.split("Panels:")[1]


def test_report_of_a_main_job_with_out_dir(tmp_path: Path):
    run_dir = tmp_path / "main"
    cxsim(["run", "--run-dir", str(run_dir), *TINY_ENV, *TINY_SFT, *TINY_PPO,
           "--eval.episodes", "3", *QUIET])  # fmt: skip
    out = tmp_path / "pages"
    cxsim(["report", str(run_dir), "--out-dir", str(out)])
    report = (out / "report.md").read_text()
    assert "| compactionrl | compacted |" in report and "| base (SFT) | single |" in report
    assert "| compactionrl-s0 |" in report  # the training run found under train/
    assert (out / "curves.png").stat().st_size > 5000


def test_report_refuses_a_folder_without_results(tmp_path: Path):
    with pytest.raises(SystemExit, match="cxsim train"):  # one line, no traceback
        cxsim(["report", str(tmp_path)])


def test_notes_name_the_budget_the_pre_flight_derived():
    from cxsim.experiments.run import report_notes

    rows = [{"label": "base (SFT)", "protocol": "single", "pass_at_1": 0.0, "seeds": 1}]
    env = {"env_id": "cxsim/KeyRecall-v0", "kwargs": {"num_values": 4}}
    unsized = {"env": env, "compaction": {"budget": None}}  # the CLI default: derived later
    base = {"config": {"compaction": {"budget": 200}}}  # what the base evaluation ran with
    notes = report_notes(rows, {"config": unsized, "base": base})
    assert "filled the 200-token window" in notes
    assert "[2] Mean number of compactions" in notes and "[3] Fraction" in notes

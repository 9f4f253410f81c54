"""The ``cxsim`` command: dispatch, one-line errors, defaults that stay out of docs/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cxsim.cli import main as cxsim


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cxsim.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("train", "--policy", "no/such/policy"), "holds no policy checkpoint"),
        (("eval", "--agent", "oracle", "--bogus-flag", "1"), "Unrecognized options: --bogus-flag"),
    ],
)
def test_user_errors_are_one_line_without_traceback(args: tuple[str, ...], says: str):
    done = run_cli(*args)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0] and lines[0].startswith(f"cxsim {args[0]}: error:")
    assert "Traceback" not in done.stderr


def test_unknown_command_lists_every_command_with_bench():
    with pytest.raises(SystemExit) as info:
        cxsim(["foo"])
    for name in ("run", "train", "eval", "tables", "lab", "bench"):
        assert name in str(info.value.code)


def test_tables_and_lab_write_under_runs_by_default():
    from cxsim.experiments import lab, tables

    cfg = tables.parse([])
    assert cfg.preset == "smoke" and Path(cfg.out_dir).parts[0] == "runs"
    assert Path(cfg.runs_dir).parts[0] == "runs"
    assert tables.parse(["--out", "elsewhere"]).out_dir == "elsewhere"
    assert Path(lab.Config().output_dir).parts[0] == "runs"


def test_help_texts_are_rewrapped_as_sentences():
    from cxsim.cli import _unwrap

    text = (
        "GAE lambda, used only\n    with ``fixed``: at the default\n    scope.\n\n- one item\n- two"
    )
    assert (
        _unwrap(text)
        == "GAE lambda, used only with ``fixed``: at the default scope.\n\n- one item\n- two"
    )


def test_help_of_a_command_keeps_sentences_whole():
    done = run_cli("run", "--help")
    assert done.returncode == 0
    flat = " ".join(line.strip(" │") for line in done.stdout.splitlines())
    assert "at the default scope (rollout) and at segment, lambda is length-adaptive" in " ".join(
        flat.split()
    )


def test_quiet_prints_nothing(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("CXSIM_QUIET", "0")  # restored after the test
    out = tmp_path / "eval.json"
    cxsim(["eval", "--agent", "oracle", "--eval.episodes", "2", "--out", str(out), "--quiet"])
    said = capsys.readouterr()
    assert said.out == "" and said.err == ""
    assert out.is_file()  # the work was done


@pytest.mark.parametrize("command", ["run", "eval", "tables", "report", "lab", "bench"])
def test_help_does_not_import_torch(command: str):
    """torch's import costs seconds; its help must not wait for it (timings: cxsim bench help)."""
    from cxsim.experiments.bench_help import best_time

    _, torch_loaded = best_time([command, "--help"], repeats=1)
    assert not torch_loaded

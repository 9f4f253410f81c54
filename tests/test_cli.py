"""The ``cxsim`` command: dispatch, one-line errors, defaults that stay out of docs/."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
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
        (("report", "no/such/run"), "no/such/run/results.json not found"),  # raised at run time
        (
            ("eval", "--agent", "oracle", "--bogus-flag", "1"),
            "unrecognized options --bogus-flag, 1",
        ),
    ],
)
def test_user_errors_are_one_line_without_traceback(args: tuple[str, ...], says: str):
    done = run_cli(*args)
    assert done.returncode == 2  # a usage error, whatever the command
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0] and lines[0].startswith(f"cxsim {args[0]}: error:")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["nope"],  # an unknown command
        ["run", "--sft.epoch", "3"],  # tyro's parse error
        ["report", "no/such/run"],  # a missing file
        ["study", "no/such/study.toml"],  # was 1
        ["conform", "m.f", "--quantity", "local-gae", "--layout", "samples"],  # was 2 already
        ["train", "--preset", "nope"],  # a preset's name
    ],
)
def test_every_usage_error_exits_2_in_one_line(args: list[str], capsys):
    with pytest.raises(SystemExit) as stop:
        cxsim(args)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("cxsim"), err
    assert ": error: " in err


def test_a_failed_run_or_check_exits_1_with_its_reason(monkeypatch, capsys):
    import types

    from cxsim import cli

    failing = types.ModuleType("failing_command")

    def main(argv):
        raise SystemExit("1 of 2 checks failed: floor-helps")

    failing.main = main
    monkeypatch.setitem(sys.modules, "failing_command", failing)
    monkeypatch.setitem(cli.COMMANDS, "failing", ("failing_command", "a check that fails"))
    with pytest.raises(SystemExit) as stop:
        cxsim(["failing"])
    assert stop.value.code == "cxsim failing: error: 1 of 2 checks failed: floor-helps"
    done = subprocess.run(  # the status Python gives a message: 1
        [sys.executable, "-c", f"raise SystemExit({stop.value.code!r})"], capture_output=True
    )
    assert done.returncode == 1


def test_unknown_command_lists_every_command_with_bench():
    with pytest.raises(SystemExit) as info:
        cxsim(["foo"])
    for name in ("run", "train", "eval", "tables", "lab", "bench"):
        assert name in str(info.value)


def test_tables_and_lab_write_under_runs_by_default():
    from cxsim.lab import lab
    from cxsim.paper_tables import tables

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
    assert os.environ["CXSIM_QUIET"] == "0"  # the caller's setting is back after the command
    monkeypatch.delenv("CXSIM_QUIET")
    cxsim(["eval", "--agent", "oracle", "--eval.episodes", "2", "--out", str(out), "--quiet"])
    assert "CXSIM_QUIET" not in os.environ  # nor left set where it was unset


@pytest.mark.parametrize("command", ["run", "eval", "tables", "report", "lab", "bench"])
def test_help_does_not_import_torch(command: str):
    """torch's import costs seconds; its help must not wait for it (timings: cxsim bench help)."""
    from cxsim.experiments.bench_help import best_time

    _, torch_loaded = best_time([command, "--help"], repeats=1)
    assert not torch_loaded


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "--presets", "nope"],
         "cxsim run: error: invalid choice 'nope' for --presets; choose from compactionrl, "
         "ppo-single, "),
        (["run", "--seeds", "1", "1"],
         "cxsim run: error: --seeds has duplicates: (1, 1); see `cxsim run --help`"),
        (["run", "--sft.epochs", "x"],
         "cxsim run: error: --sft.epochs: 'x' is not an integer (usage: --sft.epochs INT); see "),
        (["run", "--sft.epoch", "3"],
         "cxsim run: error: unrecognized options --sft.epoch, 3 (did you mean --sft.epochs INT?)"),
        (["report"], "cxsim report: error: pass the run folder once: `cxsim report RUN_DIR`"),
        (["train", "--preset", "nope"], "cxsim train: error: unknown preset 'nope'; choose one of: "),
    ],
)  # fmt: skip
@pytest.mark.parametrize("drawing", ["utf-8 box", "plain"])
def test_each_error_says_its_kind_once_after_one_prefix(
    args: list[str], says: str, drawing: str, request
):
    if drawing == "plain":  # captured stdout is not UTF-8 to tyro: it draws dashes, no borders
        request.getfixturevalue("capsys")
    with pytest.raises(SystemExit) as info:
        cxsim(args)
    message = str(info.value)
    assert info.value.code == 2 and message.startswith(says), message
    assert "\n" not in message and message.count("error") == 1
    for repeated in ("Invalid choice", "Value error", "Error parsing", "helptext", "For full"):
        assert repeated not in message, message


def test_a_missing_value_is_named_once():
    import tyro

    from cxsim.cli import _one_line_parse_errors

    @dataclass(frozen=True)
    class Needs:
        folder: str
        """Where it goes."""

    with _one_line_parse_errors("cxsim x"), pytest.raises(SystemExit) as info:
        tyro.cli(Needs, args=[])
    assert str(info.value) == "cxsim x: error: missing --folder STR; see `cxsim x --help`"


def test_verdicts_help_names_the_study_file_it_runs(capsys):
    with pytest.raises(SystemExit) as info:
        cxsim(["verdicts", "--help"])
    assert info.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "--study STR" in said and "paper_tables/verdicts.toml" in said
    assert "--seeds {None}|STR" in said and "--preset STR" in said
    assert "--pretrain" not in said and "--sft." not in said  # the settings live in the file


def test_flags_named_in_the_method_page_exist():
    """docs/method.md's table of choices names flags a user will type."""
    import re
    from dataclasses import fields

    from cxsim.compaction import CompactionConfig
    from cxsim.config import PPOConfig

    page = (Path(__file__).parents[1] / "docs" / "method.md").read_text()
    named = set(re.findall(r"--(ppo|compaction)\.([a-z-]+)", page))
    assert len(named) >= 10
    known = {"ppo": PPOConfig, "compaction": CompactionConfig}
    for group, flag in sorted(named):
        names = {f.name for f in fields(known[group])}
        assert flag.replace("-", "_").removeprefix("no_") in names, f"--{group}.{flag}"

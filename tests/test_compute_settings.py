"""One ``Compute`` group (cxsim/compute.py) in every command config that offers --device,
--precision, --gradient-checkpointing or --threads (but the lab's and verdicts'): no command
declares those fields itself, the flags keep their names, and records keep them flat."""

from __future__ import annotations

import re
from dataclasses import astuple, fields
from typing import get_args, get_type_hints

import pytest
import tyro

from cxsim.cli import main as cxsim
from cxsim.compute import (
    Compute,
    CPUCompute,
    DeviceCompute,
    OneThreadCompute,
    SamplingCompute,
    StudyCompute,
)
from cxsim.paper_tables import tables as tables_entry
from cxsim.paper_tables import verdicts as verdicts_entry
from cxsim.pipeline import critic_probe as probe_entry
from cxsim.pipeline import evaluate as evaluate_entry
from cxsim.pipeline import pretrain as pretrain_entry
from cxsim.pipeline import run as run_entry
from cxsim.pipeline import sft as sft_entry
from cxsim.pipeline import train as train_entry
from cxsim.studies import calibrate as calibrate_entry
from cxsim.studies import study as study_entry
from cxsim.studies.commands import config_flags, field_values
from cxsim.tracking import RECORDED_FLAT, flatten_config, to_jsonable

OWN = {"device", "precision", "gradient_checkpointing", "threads"}
"""The group's fields: no command config declares one of them itself."""

COMMANDS = {  # command: (config, its group's type, the group's flags it offers)
    "run": (run_entry.Config, Compute, OWN),
    "sft": (sft_entry.Config, Compute, OWN),
    "train": (train_entry.Config, Compute, OWN),
    "eval": (evaluate_entry.Config, SamplingCompute, OWN - {"gradient_checkpointing"}),
    "tables": (tables_entry.Config, OneThreadCompute, OWN - {"threads"}),
    "pretrain": (pretrain_entry.Config, DeviceCompute, {"device"}),
    "calibrate": (calibrate_entry.Config, DeviceCompute, {"device"}),
    "study": (study_entry.Config, StudyCompute, {"device"}),
    "verdicts": (verdicts_entry.Config, StudyCompute, {"device"}),
    "critic-probe": (probe_entry.Config, CPUCompute, {"threads"}),
}


def help_flags(command: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    with pytest.raises(SystemExit) as info:
        cxsim([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out  # a flag's line opens with it (after a border, if drawn)
    defined = re.findall(r"^\W? +(--[a-z][\w.-]*)(?:, (--[a-z][\w.-]*))?", out, re.M)
    return {flag for pair in defined for flag in pair if flag}  # flags, not words of the text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_config_holds_the_one_compute_group(command: str):
    config, kind, _ = COMMANDS[command]
    flat = [f.name for f in fields(config) if f.metadata.get(RECORDED_FLAT)]
    assert flat in (["compute"], ["model", "compute"])  # and the Model group (test_model_group)
    assert not OWN & {f.name for f in fields(config)}  # no device field of its own
    hint = get_type_hints(config, include_extras=True)["compute"]
    assert get_args(hint) == (kind, tyro.conf.OmitArgPrefixes)  # --device, not --compute.device
    assert type(config.__dataclass_fields__["compute"].default_factory()) is kind


@pytest.mark.parametrize("command", COMMANDS)
def test_the_compute_flags_are_unchanged(command: str, capsys):
    _, _, offered = COMMANDS[command]
    flags = help_flags(command, capsys)
    expected = {f"--{name.replace('_', '-')}" for name in offered}
    if "gradient_checkpointing" in offered:
        expected.add("--no-gradient-checkpointing")
    hidden = {f"--{name.replace('_', '-')}" for name in OWN - offered}
    assert expected <= flags
    assert not hidden & flags
    assert not {f for f in flags if f.startswith("--compute")}
    if command in ("run", "train"):
        assert "--rollout-threads" in flags


def test_the_group_is_recorded_flat_and_hidden_fields_are_left_out():
    run = to_jsonable(run_entry.Config(compute=Compute(device="cpu", threads=2)))
    assert "compute" not in run
    assert {k: run[k] for k in OWN} == {
        "device": "cpu",
        "precision": "fp32",
        "gradient_checkpointing": False,
        "threads": 2,
    }
    evaluated = to_jsonable(evaluate_entry.Config(agent="oracle"))
    assert {"device", "precision", "threads"} <= evaluated.keys()
    assert "gradient_checkpointing" not in evaluated  # eval never recorded it
    assert flatten_config(sft_entry.Config())["device"] == "auto"
    words = config_flags(field_values(sft_entry.Config(compute=Compute(device="cpu"))),
                         sft_entry.Config, sft_entry.Config())  # fmt: skip
    assert words[-2:] == ["--device", "cpu"]  # as the study's commands wrote it before


def test_the_group_checks_its_values():
    with pytest.raises(ValueError, match="device must be"):
        Compute(device="gpu")
    with pytest.raises(ValueError, match="precision must be"):
        Compute(precision="fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threads must be"):
        Compute(threads=-1)
    assert OneThreadCompute(device="cpu", threads=3).per_run() == Compute(device="cpu")


def test_the_one_flag_groups_keep_their_commands_defaults_and_records():
    assert astuple(DeviceCompute()) == astuple(Compute(device="cpu"))  # pretrain, calibrate
    assert to_jsonable(DeviceCompute(device="auto")) == {"device": "auto"}
    assert to_jsonable(CPUCompute(threads=2)) == {"threads": 2}
    assert pretrain_entry.Config().compute.device == "cpu"
    assert study_entry.Config(file="x.toml").compute.device == "cpu"
    assert astuple(probe_entry.Config().compute) == astuple(Compute(device="cpu"))


def test_a_study_checks_its_device_where_its_runs_compute():
    with pytest.raises(ValueError, match="device must be"):
        DeviceCompute(device="gpu")  # pretrain, calibrate: this machine's
    StudyCompute(device="gpu")  # the study checks it: here, or for Ray's machines
    with pytest.raises(ValueError, match="device must be"):
        study_entry.Config(file="x.toml", compute=StudyCompute(device="gpu"))
    with pytest.raises(ValueError, match="--device auto with --executor ray"):
        study_entry.Config(file="x.toml", executor="ray", compute=StudyCompute(device="auto"))

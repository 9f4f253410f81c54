"""One ``Model`` group (cxsim/model_group.py: ``--policy`` and ``--chat.*``) in every command
config that takes a policy: no command declares those fields itself, each keeps its default
policy, the flags keep their names (no ``--model.`` prefix), records keep them flat, and a
bad value stops the command at config build, in one line."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
import tyro

from cxsim.cli import main as cxsim
from cxsim.model_group import Model, PolicyOnly, SavedModel, SavedPolicyOnly
from cxsim.model_options import ChatOptions
from cxsim.paper_tables import tables as tables_entry
from cxsim.pipeline import critic_probe as probe_entry
from cxsim.pipeline import evaluate as evaluate_entry
from cxsim.pipeline import run as run_entry
from cxsim.pipeline import sft as sft_entry
from cxsim.pipeline import train as train_entry
from cxsim.pretrained import PRETRAINED
from cxsim.studies import calibrate as calibrate_entry
from cxsim.studies.commands import config_flags, field_values
from cxsim.studies.model_settings import ModelSettings
from cxsim.tracking import RECORDED_FLAT, flatten_config, to_jsonable

COMMANDS = {  # command: (config, its group's type, its default policy, whether it offers --chat)
    "run": (run_entry.Config, Model, PRETRAINED, True),
    "sft": (sft_entry.Config, Model, PRETRAINED, True),
    "train": (train_entry.Config, SavedModel, "runs/sft/policy", True),
    "eval": (evaluate_entry.Config, Model, None, True),
    "tables": (tables_entry.Config, Model, None, True),
    "calibrate": (calibrate_entry.Config, PolicyOnly, PRETRAINED, False),
    "critic-probe": (probe_entry.Config, SavedPolicyOnly, "runs/sft/policy", False),
}
CHAT_FLAGS = {
    "--chat.observation-role",
    "--chat.system-role",
    "--chat.enable-thinking",
    "--chat.template-args",
}


def help_flags(command: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    """The flags ``cxsim COMMAND --help`` defines (each opens its line), not words of the text."""
    with pytest.raises(SystemExit) as info:
        cxsim([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    defined = re.findall(r"^\W? +(--[a-z][\w.-]*)(?:, (--[a-z][\w.-]*))?", out, re.M)
    return {flag for pair in defined for flag in pair if flag}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_with_a_policy_holds_the_one_model_group(command: str):
    config, kind, policy, _ = COMMANDS[command]
    own = {f.name: f for f in fields(config)}
    assert not {"policy", "chat"} & own.keys()  # no field of its own
    assert own["model"].metadata.get(RECORDED_FLAT)
    default = own["model"].default_factory()  # type: ignore[misc]
    assert type(default) is kind and default.policy == policy
    assert default.chat == ChatOptions()


@pytest.mark.parametrize("command", COMMANDS)
def test_the_model_flags_are_unchanged(command: str, capsys):
    _, _, _, chat = COMMANDS[command]
    flags = help_flags(command, capsys)
    assert "--policy" in flags
    assert (flags >= CHAT_FLAGS) if chat else not CHAT_FLAGS & flags
    assert not {f for f in flags if f.startswith("--model")}


def test_the_flags_parse_into_the_group():
    cfg = tyro.cli(run_entry.Config, args=["--policy", "None", "--chat.system-role", "merge"])
    assert cfg.model == Model(policy=None, chat=ChatOptions(system_role="merge"))
    train = tyro.cli(train_entry.Config, args=["--policy", "a/b", "--chat.template-args", "k=1"])
    assert train.model == SavedModel("a/b", ChatOptions(template_args=("k=1",)))
    probe = tyro.cli(probe_entry.Config, args=["--policy", "c/d"])
    assert probe.model.policy == "c/d"


def test_the_group_is_recorded_flat_as_before():
    chat = ChatOptions(system_role="merge")
    cfg = run_entry.Config(model=Model(policy=None, chat=chat))
    record = to_jsonable(cfg)
    assert "model" not in record
    assert record["policy"] is None and record["chat"]["system_role"] == "merge"
    assert list(record)[4:7] == ["policy", "chat", "device"]  # where the fields stood
    assert flatten_config(cfg)["chat.system_role"] == "merge"
    sft = run_entry.sft_config(cfg)
    words = config_flags(field_values(sft), sft_entry.Config, sft_entry.Config())
    at = words.index("--policy")  # no --model. prefix
    assert words[at : at + 4] == ["--policy", "None", "--chat.system-role", "merge"]
    assert "chat" not in to_jsonable(calibrate_entry.Config())  # its records never held it
    assert "chat" not in to_jsonable(probe_entry.Config())


def test_the_stages_pass_the_group_on():
    cfg = run_entry.Config(model=Model(chat=ChatOptions(observation_role="tool")))
    trained = run_entry.train_config(cfg, "p/q", "compactionrl", 0)
    assert trained.model == SavedModel("p/q", cfg.model.chat)
    evaluated = run_entry.eval_config(cfg, PRETRAINED, Path("e.json"))
    assert evaluated.model == Model(PRETRAINED, cfg.model.chat)
    assert run_entry.sft_config(cfg).model == cfg.model
    tables = tables_entry.Config(model=Model(policy=PRETRAINED))
    assert tables.run_config(Path("r"), 0).model == tables.model


def test_a_study_setting_gives_its_units_the_group_and_keeps_its_cache_keys():
    chat = ChatOptions(system_role="merge")
    settings = ModelSettings(chat=chat)
    assert settings.for_policy("x") == Model("x", chat)
    assert ModelSettings().recorded() == {}  # a folder made before these keys keeps its name
    assert settings.recorded() == {"chat": chat}
    assert ModelSettings(precision="bf16").compute("cpu").precision == "bf16"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["sft", "--chat.template-args", "novalue"], "template_args must be KEY=VALUE"),
        (["run", "--chat.observation-role", "system"], "--chat.observation-role"),
        (["sft", "--policy", "no/such/policy"], "holds no policy checkpoint"),
        (["eval", "--policy", "no/such/policy"], "holds no policy checkpoint"),
        (["eval"], "pass exactly one of --policy PATH or --agent"),
        (["calibrate", "--policy", "no/such/policy"], "holds no policy checkpoint"),
    ],
)
def test_a_bad_policy_or_chat_option_stops_the_command_in_one_line(
    args: list[str], says: str, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a command that started would write under runs/ here
    with pytest.raises(SystemExit) as stop:
        cxsim(args)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "runs").exists()  # before any work

"""Env keyword arguments checked against the env's constructor when the config is built:
a misspelled key ends the command in one line naming the close match, before any run folder
(``cxsim run``, ``cxsim train``) or study folder and predictions (``cxsim study``) exist."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from cxsim.cli import main as cxsim
from cxsim.config import EnvConfig
from cxsim.env_kwargs import accepted_kwargs, check_env_configs, check_env_kwargs
from cxsim.studies.load import load_study
from cxsim.studies.spec import StudyError


def test_a_misspelled_key_names_the_close_match_and_what_the_env_takes():
    with pytest.raises(ValueError) as info:
        check_env_kwargs("cxsim/KeyRecall-v0", {"num_values": 4, "memory_lenght": 5})
    message = str(info.value)
    assert message.startswith(
        "--env.kwargs: cxsim/KeyRecall-v0 takes no 'memory_lenght'; did you mean "
        "'memory_length'? (it takes: variant, memory_length, "
    )
    assert "\n" not in message and "num_values" in message
    with pytest.raises(ValueError, match=r"^env\.kwargs: cxsim/SimRepo-v0 takes no 'zzz' \(it"):
        check_env_kwargs("cxsim/SimRepo-v0", {"zzz": 1}, "env.kwargs")  # nothing close


def test_what_the_constructor_and_make_take_passes():
    check_env_kwargs("cxsim/KeyRecall-v0", {"memory_length": 5, "max_episode_steps": 9})
    check_env_kwargs("cxsim/FactUpdate-hard-v0", {"num_facts": 2, "noise": 0.0})
    assert accepted_kwargs("cxsim/SimRepo-v0")[:2] == ("num_files", "funcs_per_file")


class AnyKwargsEnv(gym.Env):
    def __init__(self, size: int = 1, **rest: object) -> None:
        self.size = size


class FixedEnv(gym.Env):
    def __init__(self, width: int = 1) -> None:
        self.width = width


def test_an_entry_point_taking_any_keyword_accepts_any_and_a_callable_is_read_too():
    gym.register("test-env-kwargs/Any-v0", entry_point=AnyKwargsEnv)
    gym.register("test-env-kwargs/Fixed-v0", entry_point=FixedEnv)
    try:
        assert accepted_kwargs("test-env-kwargs/Any-v0") is None
        check_env_kwargs("test-env-kwargs/Any-v0", {"anything": 1})
        with pytest.raises(ValueError, match="takes no 'widht'; did you mean 'width'"):
            check_env_kwargs("test-env-kwargs/Fixed-v0", {"widht": 2})
    finally:
        del gym.registry["test-env-kwargs/Any-v0"], gym.registry["test-env-kwargs/Fixed-v0"]


def test_every_env_config_inside_a_config_is_checked():
    good, bad = EnvConfig(), EnvConfig(kwargs={"memory_lenght": 5})
    check_env_configs({"envs": (good, [good])})
    with pytest.raises(ValueError, match="'memory_lenght'"):
        check_env_configs({"envs": (good, [bad])})


@pytest.mark.parametrize("command", ["run", "train"])
def test_the_command_refuses_it_before_writing_its_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
):
    run_dir = tmp_path / "run"
    argv = [command, "--env.kwargs", "memory_lenght", "5", "--run-dir", str(run_dir)]
    with pytest.raises(SystemExit) as stop:
        cxsim(argv)
    message = str(stop.value)
    assert stop.value.code == 2 and capsys.readouterr().err.strip() == message
    assert f"cxsim {command}: error: --env.kwargs: cxsim/KeyRecall-v0 takes no " in message
    assert "did you mean 'memory_length'?" in message and not run_dir.exists()


STUDY = """
seeds = "0:3"
[settings.small]
env.kwargs = { memory_lenght = 5, num_values = 4 }
[arms.a]
preset = "compactionrl"
[[claims]]
name = "a-helps"
treatment = "a"
reference = "base"
prediction = "positive"
"""


def test_a_study_file_with_the_mistake_fails_before_any_run_folder_or_prediction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    with pytest.raises(StudyError) as info:
        load_study(path)
    assert str(info.value).startswith(
        "study.toml: settings.small: env: env.kwargs: cxsim/KeyRecall-v0 takes no "
        "'memory_lenght'; did you mean 'memory_length'?"
    )
    runs, out = tmp_path / "runs", tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        cxsim(["study", str(path), "--runs-dir", str(runs), "--out", str(out)])
    message = str(stop.value)
    assert stop.value.code == 2 and capsys.readouterr().err.strip() == message
    assert "cxsim study: error: study.toml: settings.small: env: env.kwargs:" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.toml"]

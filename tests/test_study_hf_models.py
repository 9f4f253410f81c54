"""A study that runs a Hugging Face model with a chat template in bf16 autocast on the CPU, at
a smoke budget (issue 38): the file's ``precision``, ``gradient-checkpointing`` and ``chat.*``
keys reach every stage of every unit (SFT, PPO, evaluation), the page lists them, they key the
cache (a bf16 setting never shares a float32 one's folder), a second run reads everything
from the cache, and ``--print-commands`` writes them as flags that parse into the configs the
study runs. The model is a tiny Qwen2 with a BPE tokenizer and a ChatML template, built here
offline (tests/local_hf_models.py)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import tyro
from local_hf_models import save_hf_policy

from cxsim.cli import main as cxsim
from cxsim.model_options import ChatOptions
from cxsim.studies import runner, unit_files
from cxsim.studies.load import load_study
from cxsim.studies.model_settings import ModelSettings
from cxsim.studies.stage0 import stage0_folder
from cxsim.studies.values import StudyError
from cxsim.studies.where import own_files

STUDY = """
title = "A chat-templated model in bf16"
seeds = "0:1"
precision = "bf16"
chat.system-role = "merge"

[settings.chat]
about = "a tiny Qwen2 with a ChatML template, random weights: the pipeline, not a result"
policy = "model"
chat.template-args = ["tag=x"]
env.kwargs = { memory_length = 3, obs_words_mean = 4.0, obs_words_std = 1.0, num_values = 4 }
sft.episodes = 4
sft.epochs = 1
sft.heldout-episodes = 2
ppo.iterations = 2
ppo.critic-warmup = 0
ppo.rollouts-per-batch = 2
ppo.minibatches = 1
eval.episodes = 2

[arms.compactionrl]
preset = "compactionrl"
"""
"""One seed of one arm at a smoke budget (a handful of SFT episodes, 1 epoch, 2 PPO
iterations of 2 rollouts, 2 evaluation tasks) on a short KeyRecall."""

CHAT = ChatOptions(system_role="merge", template_args=("tag=x",))
"""The chat options the file gives the setting: the file's system role, the setting's
template argument."""


@pytest.fixture(scope="module")
def study_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hf-study")
    save_hf_policy("qwen2", folder / "model")
    path = folder / "hf.toml"
    path.write_text(STUDY)
    return path


@pytest.fixture(scope="module")
def first_run(study_file: Path) -> dict:
    runs, out = study_file.parent / "runs", study_file.parent / "page"
    cxsim(["study", str(study_file), "--runs-dir", str(runs), "--out", str(out), "--quiet"])
    return {"runs": runs, "out": out, **json.loads((out / "hf.json").read_text())}


def test_the_file_sets_bf16_and_the_chat_options_over_every_setting(study_file: Path):
    (setting,) = load_study(study_file).settings
    assert setting.model == ModelSettings(precision="bf16", chat=CHAT)
    assert setting.policy == str(study_file.parent / "model")


def test_every_stage_of_the_unit_ran_in_bf16_with_the_chat_options(first_run: dict):
    assert first_run["made_now"] == {"sft": 1, "train": 1, "eval": 2}
    runs = first_run["runs"]
    (setting_dir,) = runs.glob("chat-*")
    recorded = json.loads((setting_dir / "settings.json").read_text())
    assert recorded["precision"] == "bf16" and recorded["chat"]["system_role"] == "merge"
    assert "gradient_checkpointing" not in recorded  # at its default: not in the key
    sft = json.loads((setting_dir / "s0/sft/results.json").read_text())["config"]
    (train,) = setting_dir.glob("s0/train/compactionrl-*/results.json")
    trained = json.loads(train.read_text())["config"]
    evaluations = [json.loads(p.read_text())["config"] for p in setting_dir.glob("s0/eval/*.json")]
    assert len(evaluations) == 2  # the base and the arm
    for config in (sft, trained, *evaluations):
        assert config["precision"] == "bf16" and config["device"] == "cpu"
        assert config["chat"] == {
            "observation_role": "user",
            "system_role": "merge",
            "enable_thinking": None,
            "template_args": ["tag=x"],
        }
    saved = json.loads((setting_dir / "s0/sft/policy/config.json").read_text())
    assert saved["model_type"] == "qwen2"  # the local model, not a word-level one


def test_the_page_lists_the_model_settings(first_run: dict):
    page = (first_run["out"] / "hf.md").read_text()
    assert "in float32 unless its setting's model row says otherwise" in page
    (row,) = [line for line in page.splitlines() if line.startswith("| model |")]
    assert "precision bf16, gradient-checkpointing false" in row
    assert "chat.system-role merge" in row and "chat.template-args tag=x" in row


def test_a_second_run_reads_everything_from_the_cache(study_file: Path, first_run: dict):
    out = study_file.parent / "page-again"
    cxsim(["study", str(study_file), "--runs-dir", str(first_run["runs"]), "--out", str(out),
           "--quiet"])  # fmt: skip
    again = json.loads((out / "hf.json").read_text())
    assert again["made_now"] == {"sft": 0, "train": 0, "eval": 0}
    for arm in ("base", "compactionrl"):
        (before,), (after,) = (r["inputs"]["runs"]["chat"][arm] for r in (first_run, again))
        assert after["made"] == [] and after["eval_file"] == before["eval_file"]
        assert after["eval"] == before["eval"]  # the evaluations as cached


def test_the_same_study_in_float32_makes_its_own_runs_beside_them(
    study_file: Path, first_run: dict
):
    runs = first_run["runs"]
    fp32 = study_file.with_name("fp32.toml")
    fp32.write_text(STUDY.replace('precision = "bf16"', 'precision = "fp32"'))
    out = study_file.parent / "page-fp32"
    cxsim(["study", str(fp32), "--runs-dir", str(runs), "--out", str(out), "--quiet"])
    assert json.loads((out / "fp32.json").read_text())["made_now"] == {
        "sft": 1,
        "train": 1,
        "eval": 2,
    }
    losses = {}
    for folder in runs.glob("chat-*"):
        sft = json.loads((folder / "s0/sft/results.json").read_text())
        losses[sft["config"]["precision"]] = sft["final"]["losses/heldout_execution"]
    assert set(losses) == {"bf16", "fp32"}
    assert losses["bf16"] != losses["fp32"]  # the autocast ran: same data, other rounding
    (row,) = [r for r in (out / "fp32.md").read_text().splitlines() if r.startswith("| model |")]
    assert "precision fp32" in row and "chat.system-role merge" in row


def test_bf16_chat_and_gradient_checkpointing_each_key_the_cache(study_file: Path):
    def folders(text: str) -> tuple[Path, Path]:
        study_file.with_name("variant.toml").write_text(text)
        study = load_study(study_file.with_name("variant.toml"))
        (setting,) = study.settings
        seed_dir = unit_files.seed_folder("R", setting, 0, "cpu")
        return seed_dir, unit_files.train_folder(seed_dir, setting, study.arm("compactionrl"))

    as_written = folders(STUDY)
    variants = [
        STUDY.replace('precision = "bf16"', 'precision = "fp32"'),
        STUDY.replace('chat.system-role = "merge"\n', ""),
        STUDY.replace('policy = "model"', 'policy = "model"\ngradient-checkpointing = true'),
    ]
    made = {as_written, *(folders(text) for text in variants)}
    assert len({seed_dir for seed_dir, _ in made}) == 4


def test_print_commands_write_the_model_settings_as_flags_that_parse_back(
    study_file: Path, capsys: pytest.CaptureFixture[str]
):
    from cxsim.pipeline import sft as sft_entry
    from cxsim.pipeline import train as train_entry
    from cxsim.pipeline.presets import cli_with_preset, preset_ppo

    cxsim(["study", str(study_file), "--runs-dir", "R", "--print-commands"])
    commands = [
        shlex.split(line) for line in capsys.readouterr().out.splitlines() if line.startswith("cx")
    ]
    assert [c[1] for c in commands] == ["sft", "eval", "train", "eval"]
    for command in commands:
        assert "--precision bf16" in shlex.join(command)
        assert "--chat.system-role merge --chat.template-args tag=x" in shlex.join(command)
    sft = tyro.cli(sft_entry.Config, args=commands[0][2:])
    train = cli_with_preset(
        train_entry.Config,
        lambda p: train_entry.Config(preset=p, ppo=preset_ppo(p)),
        commands[2][2:],
    )
    study = load_study(study_file)
    (setting,) = study.settings
    seed_dir = own_files("R", study_file) / "replicate" / "chat" / "s0"
    assert sft == runner.sft_config(setting, 0, seed_dir, "cpu")
    base = str(Path(sft.run_dir) / "policy")
    made = runner.train_config(setting, study.arm("compactionrl"), 0, seed_dir, base, "cpu")
    assert train == replace(made, run_dir=str(seed_dir / "train" / "compactionrl"))


@pytest.mark.parametrize(
    ("top", "own", "said"),
    [
        ('precision = "bf17"', "", "hf.toml: precision = 'bf17': choose one of fp32, bf16"),
        ("", 'precision = "fp16"', "settings.a: precision = 'fp16': choose one of fp32, bf16"),
        ("", 'chat.system-role = "x"', "settings.a: chat.system-role = 'x': choose one of"),
        ('chat.sytem-role = "merge"', "", "unknown key 'chat.sytem-role' (did you mean chat."),
        ("", 'gradient-checkpointing = "yes"', "gradient-checkpointing = 'yes': expected true"),
        ("", 'chat.template-args = ["x"]', "settings.a: chat: template_args must be KEY=VALUE"),
        ("", 'precison = "bf16"', "settings.a: unknown key 'precison' (did you mean precision?)"),
    ],
)
def test_a_bad_model_key_fails_at_load_in_one_line_naming_it(
    tmp_path: Path, top: str, own: str, said: str
):
    path = tmp_path / "hf.toml"
    path.write_text(f'seeds = "0:2"\n{top}\n[settings.a]\n{own}\n[arms.c]\n')
    with pytest.raises(StudyError, match=re.escape(said)) as raised:
        load_study(path)
    assert "\n" not in str(raised.value)


def test_bases_and_a_stage0_take_the_model_settings_of_their_setting(tmp_path: Path):
    path = tmp_path / "hf.toml"
    common = '[stage0.s]\nsft.episodes = 4\n[settings.a]\npolicy = "stage0:s"\n'
    path.write_text(f'seeds = "0:2"\nprecision = "bf16"\n{common}[arms.c]\n')
    (stage,) = load_study(path).stage0
    assert stage.model == ModelSettings(precision="bf16")
    bf16_folder = stage0_folder("R", stage, "cpu")
    path.write_text(f'seeds = "0:2"\n{common}[arms.c]\n')
    assert stage0_folder("R", load_study(path).stage0[0], "cpu") != bf16_folder
    path.write_text('seeds = "0:2"\n[settings.a]\n[settings.b]\nbases_from = "a"\n'
                    'gradient-checkpointing = true\n[arms.c]\n')  # fmt: skip
    with pytest.raises(StudyError, match="its model differs from that setting's"):
        load_study(path)

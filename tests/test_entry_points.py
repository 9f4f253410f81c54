"""CPU smoke tests: every entry point runs for real on a tiny budget and writes what it promises."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tiny_settings import TINY_ENV

from cxsim.cli import main as cxsim

TINY_SFT = ["--sft.episodes", "6", "--sft.epochs", "1", "--sft.heldout-episodes", "2"]
TINY_PPO = [
    "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "1", "--ppo.critic-warmup", "1",
    "--ppo.minibatches", "1", "--ppo.epochs", "1",
]  # fmt: skip
TINY_EVAL = ["--eval.episodes", "3"]
QUIET = ["--no-progress-bar"]
CPU = ["--device", "cpu"]  # every entry point takes it; each test below passes it


def finite(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x)


@pytest.fixture(scope="module")
def sft_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sft")
    cxsim(["sft", "--run-dir", str(out), *CPU, *TINY_ENV, *TINY_SFT, *QUIET])
    return out


def test_sft_writes_a_loadable_policy(sft_dir: Path):
    results = json.loads((sft_dir / "results.json").read_text())
    assert (sft_dir / "policy" / "config.json").is_file()
    assert (sft_dir / "policy" / "tokenizer.json").is_file()
    assert results["trainable_tokens"] > 0 and results["segments"] > 0
    assert finite(results["final"]["losses/sft"])
    assert finite(results["final"]["losses/heldout_summary"])
    assert results["demonstrations"]["compaction/compactions_mean"] >= 1
    assert any(p.name.startswith("events") for p in (sft_dir / "tb").iterdir())
    assert results["config"]["device"] == "cpu"


def test_train_logs_checkpoints_and_results(sft_dir: Path, tmp_path: Path):
    run_dir = tmp_path / "train"
    cxsim(["train", "--policy", str(sft_dir / "policy"), "--run-dir", str(run_dir), *CPU,
           *TINY_ENV, *TINY_PPO, *QUIET])  # fmt: skip
    results = json.loads((run_dir / "results.json").read_text())
    assert results["iterations_done"] == 2 and len(results["history"]) == 2
    assert results["history"][0]["warmup"] == 1.0 and "losses/policy" not in results["history"][0]
    last = results["history"][-1]
    for key in ("losses/policy", "losses/value", "losses/approx_kl", "charts/success_rate"):
        assert finite(last[key]), key
    assert (Path(results["policy"]) / "config.json").is_file()
    assert (Path(results["checkpoint"]) / "critic").is_dir()
    assert results["config"]["preset"] == "compactionrl"
    assert results["config"]["device"] == "cpu"


def test_train_preset_and_override(sft_dir: Path, tmp_path: Path):
    run_dir = tmp_path / "supo"
    # its rollouts can all end alike: --ppo.no-skip-uniform-batches, so the actor steps
    cxsim(["train", "--preset", "supo", "--policy", str(sft_dir / "policy"),
           "--run-dir", str(run_dir), *TINY_ENV, *TINY_PPO, "--ppo.group-size", "2",
           "--ppo.no-skip-uniform-batches", *QUIET])  # fmt: skip
    results = json.loads((run_dir / "results.json").read_text())
    ppo = results["config"]["ppo"]
    assert ppo["estimator"] == "group-broadcast" and ppo["group_size"] == 2
    assert not (Path(results["checkpoint"]) / "critic").exists()  # no critic
    assert finite(results["history"][-1]["losses/policy"])


def test_train_says_when_it_skipped_updates(tmp_path: Path, capsys):
    # the shipped starting checkpoint, untrained, answers these 4 tiny tasks alike
    run_dir = tmp_path / "skips"
    cxsim(["train", "--policy", "pretrained", *CPU, "--run-dir", str(run_dir), *TINY_ENV,
           "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "1", "--ppo.critic-warmup", "0",
           "--ppo.minibatches", "1", "--no-progress-bar"])  # fmt: skip
    history = json.loads((run_dir / "results.json").read_text())["history"]
    skipped = sum(row["stability/skipped_update"] for row in history)
    said = capsys.readouterr().out
    assert skipped >= 1 and "losses/policy" not in history[-1]
    assert f"note: {int(skipped)} actor update(s) skipped" in said


def test_eval_policy_and_scripted_agent(sft_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "eval.json"
    cxsim(["eval", "--policy", str(sft_dir / "policy"), "--out", str(out), *CPU, *TINY_ENV,
           *TINY_EVAL])  # fmt: skip
    payload = json.loads(out.read_text())
    assert payload["config"]["device"] == "cpu"
    protocols = {r["protocol"]: r for r in payload["results"]}
    assert set(protocols) == {"single", "compacted"}
    for r in protocols.values():
        for key in ("episodes", "pass_at_1", "ci95_low", "ci95_high", "mean_compactions"):
            assert key in r
        assert r["ci95_low"] <= r["pass_at_1"] <= r["ci95_high"]
        assert "summary_recall" in r
    assert protocols["single"]["mean_compactions"] == 0
    assert "| compacted |" in capsys.readouterr().out

    oracle = tmp_path / "oracle.json"
    cxsim(["eval", "--agent", "oracle", "--out", str(oracle), *TINY_ENV, *TINY_EVAL])
    results = {r["protocol"]: r for r in json.loads(oracle.read_text())["results"]}
    assert results["compacted"]["pass_at_1"] == 1.0 and results["single"]["pass_at_1"] == 0.0
    assert results["compacted"]["summary_recall"] == 1.0


def test_run_main_job(tmp_path: Path, capsys):
    run_dir = tmp_path / "main"
    cxsim(["run", "--run-dir", str(run_dir), *CPU, *TINY_ENV, *TINY_SFT, *TINY_PPO, *TINY_EVAL,
           *QUIET])  # fmt: skip
    results = json.loads((run_dir / "results.json").read_text())
    assert results["config"]["device"] == "cpu"
    assert results["base"]["config"]["device"] == "cpu"  # passed on to every stage
    trained = json.loads((run_dir / "train" / "compactionrl-s0" / "results.json").read_text())
    assert trained["config"]["device"] == "cpu"
    labels = {(r["label"], r["protocol"]) for r in results["table"]}
    assert labels == {
        (m, p) for m in ("base (SFT)", "compactionrl") for p in ("single", "compacted")
    }
    report = (run_dir / "report.md").read_text()
    assert "| compactionrl | compacted |" in report
    assert (run_dir / "learning_curves.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "| base (SFT) | compacted |" in out
    assert "[run 1 of 4" in out and "[run 4 of 4" in out  # SFT, base eval, train, eval
    assert (run_dir / "final" / "policy" / "config.json").is_file()
    assert (run_dir / "report" / "curves.png").stat().st_size > 1000
    assert f"trained policy: {run_dir / 'final' / 'policy'}" in out
    assert "Chance level: 0.250" in report  # 1 / num_values 4 of the tiny task
    assert "Single is 0 for every model" in report  # the tiny task never fits one window
    budget = results["base"]["config"]["compaction"]["budget"]  # as the pre-flight derived it
    assert f"filled the {budget}-token window" in report and isinstance(budget, int)
    assert "compactions [2] | summary recall [3] |" in report  # one seed: no seed columns

    # other settings into the same folder: refused before any work, naming the setting
    made = (run_dir / "results.json").stat().st_mtime_ns
    with pytest.raises(SystemExit) as info:
        cxsim(["run", "--run-dir", str(run_dir), *TINY_ENV, *TINY_SFT, *TINY_PPO, *TINY_EVAL,
               "--sft.omission-rate", "0.65", *QUIET])  # fmt: skip
    message = str(info.value)
    assert "sft.omission_rate: 0.5 there, 0.65 now" in message and "--overwrite" in message
    assert "\n" not in message
    assert (run_dir / "results.json").stat().st_mtime_ns == made

    # equal settings resume: the SFT base and the training run are reused
    cxsim(["run", "--run-dir", str(run_dir), *TINY_ENV, *TINY_SFT, *TINY_PPO, *TINY_EVAL, *QUIET])
    assert "SFT: reusing the base" in capsys.readouterr().out
    resumed = json.loads((run_dir / "results.json").read_text())
    assert resumed["table"] == results["table"]


def test_invalid_configs_fail_before_any_work(tmp_path: Path, capsys):
    bad = [
        (["train", "--policy", str(tmp_path / "missing")], "cxsim sft"),
        (
            [
                "eval",
                "--agent",
                "oracle",
                "--compaction.budget",
                "200",
                "--compaction.threshold",
                "500",
            ],
            "threshold",
        ),
        (["eval", "--agent", "oracle", "--env.env-id", "cxsim/Nope-v0"], "unknown environment"),
        (["train", "--preset", "nope"], "unknown preset"),
    ]
    bad += [
        (["eval", "--agent", "oracle", "--device", "gpu"], "device must be auto, cpu, cuda"),
        (["run", "--policy", str(tmp_path / "missing")], "holds no policy"),
        (["tables", "--precision", "fp16"], "fp16"),
    ]
    for argv, message in bad:
        with pytest.raises((ValueError, FileNotFoundError, SystemExit)) as info:
            cxsim(argv)
        said = str(info.value) + capsys.readouterr().err  # tyro reports config errors on stderr
        assert message in said, (argv, said)
    assert not any(tmp_path.iterdir())


def test_tables_smoke_on_cpu(tmp_path: Path):
    out, runs = tmp_path / "page", tmp_path / "runs"
    cxsim(["tables", "--preset", "smoke", "--tables", "1", "--omission-rates", "0",
           "--executors", "oracle", "--out-dir", str(out), "--runs-dir", str(runs), *CPU])  # fmt: skip
    assert "Table 1" in (out / "tables.md").read_text()
    (trained,) = runs.glob("main-*/s0/train/compactionrl-*/results.json")
    assert json.loads(trained.read_text())["config"]["device"] == "cpu"
    (sft,) = runs.glob("main-*/s0/sft/results.json")
    assert json.loads(sft.read_text())["config"]["device"] == "cpu"
    # through the study engine: its layout, the file's predictions, Table 1's oracle cells
    assert list(runs.glob("studies/tables-*/predictions.json"))
    cells = sorted(p.name.rsplit("-", 1)[0] for p in runs.glob("main-*/s0/eval/oracle*.json"))
    assert cells == ["oracle+base@external-summarizer", "oracle+compactionrl@external-summarizer",
                     "oracle+scripted-0@external-summarizer"]  # fmt: skip


@pytest.mark.slow
def test_run_and_tables_start_sft_from_a_policy_dir(tmp_path: Path, capsys):
    from local_hf_models import save_hf_policy

    from cxsim.paper_tables import tables as tables_entry
    from cxsim.pipeline import run as run_entry

    base = tmp_path / "base"
    save_hf_policy("gpt2", base)
    hf = ["--policy", str(base), "--precision", "bf16", "--chat.system-role", "merge"]
    cfg = tables_entry.parse(["--preset", "smoke", *hf, *CPU])
    rc = cfg.run_config(tmp_path, 0)
    sft_cfg = run_entry.sft_config(rc)
    assert sft_cfg.model.policy == str(base)
    assert (sft_cfg.compute.precision, sft_cfg.compute.device) == ("bf16", "cpu")
    train_cfg = run_entry.train_config(rc, "p", "compactionrl", 0)
    assert (train_cfg.compute.precision, train_cfg.model.chat.system_role) == ("bf16", "merge")
    assert run_entry.eval_config(rc, str(base), tmp_path / "e.json").compute.precision == "bf16"

    # the main job from a local GPT-2: no budget flags, so the sizes come from its chat format
    run_dir = tmp_path / "main"
    cxsim(["run", "--run-dir", str(run_dir), "--policy", str(base), *CPU, *TINY_SFT, *TINY_PPO,
           *TINY_EVAL, *QUIET])  # fmt: skip
    sft = json.loads((run_dir / "sft" / "results.json").read_text())
    assert sft["config"]["policy"] == str(base)
    made = json.loads((run_dir / "sft" / "policy" / "config.json").read_text())
    assert made["model_type"] == "gpt2"  # the local model, not a fresh tiny preset
    assert sft["config"]["compaction"]["budget"] != 160
    settings = json.loads((run_dir / "settings.json").read_text())
    assert settings["policy"] == str(base)
    assert "[run 4 of 4" in capsys.readouterr().out

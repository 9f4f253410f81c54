"""``cxsim train`` on a chosen device and precision, end to end (docs/training.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cxsim.agents.models import load_policy
from cxsim.checkpoint import latest_checkpoint, load_state
from cxsim.cli import main as cli_main
from cxsim.ratio_check import BF16_RATIO_ATOL

TINY_ENV = [
    "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
    "num_values", "4",
    "--compaction.budget", "160",
]  # fmt: skip
ONE_ITERATION = [
    *TINY_ENV, "--ppo.rollouts-per-batch", "8", "--ppo.iterations", "1",
    "--ppo.critic-warmup", "0", "--ppo.minibatches", "1", "--no-progress-bar",
]  # fmt: skip


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A briefly cloned tiny policy: it solves some tasks, so advantages (and gradients) are
    not all zero."""
    run = tmp_path_factory.mktemp("sft")
    cli_main(
        ["sft", "--run-dir", str(run), "--device", "cpu", *TINY_ENV, "--sft.episodes", "24",
         "--sft.heldout-episodes", "2", "--sft.epochs", "2", "--no-progress-bar"]
    )  # fmt: skip
    return run / "policy"


def train(base: Path, run: Path, *flags: str) -> dict:
    cli_main(["train", "--policy", str(base), "--run-dir", str(run), *ONE_ITERATION, *flags])
    return json.loads((run / "results.json").read_text())


def test_device_cpu_runs_cxsim_train_end_to_end(base, tmp_path, capsys):
    results = train(base, tmp_path / "run", "--device", "cpu")
    out = capsys.readouterr().out
    assert "train: policy on cpu (fp32)" in out and "done: 1 iterations" in out
    last = results["history"][-1]
    assert last["losses/actor_grad_norm"] > 0  # a real update, not a zero-advantage one
    assert 0 <= last["losses/first_log_ratio_max"] < 1e-3  # fp32: sampling and scoring agree
    state = load_state(latest_checkpoint(tmp_path / "run"))
    assert ("cuda" in state.rng) == torch.cuda.is_available()  # no CUDA RNG without CUDA
    policy, _, _ = load_policy(results["policy"])
    assert policy.device.type == "cpu"


def test_bf16_on_cpu_keeps_float32_weights_and_adam_state(base, tmp_path, capsys):
    results = train(
        base, tmp_path / "run", "--device", "cpu", "--precision", "bf16",
        "--gradient-checkpointing",
    )  # fmt: skip
    assert "train: policy on cpu (bf16)" in capsys.readouterr().out
    last = results["history"][-1]
    assert last["losses/actor_grad_norm"] > 0 and last["losses/value"] > 0
    # bf16 rounding shows in the first ratio (fp32: below 1e-6) and stays inside the tolerance
    assert 1e-4 < last["losses/first_log_ratio_max"] < BF16_RATIO_ATOL
    state = load_state(latest_checkpoint(tmp_path / "run"))
    for name in ("actor", "critic"):
        moments = [m for s in state.optimizers[name]["state"].values() for m in s.values()]
        assert moments and all(m.dtype == torch.float32 for m in moments if m.numel() > 1), name
    after, _, _ = load_policy(results["policy"])
    before, _, _ = load_policy(base)
    assert all(p.dtype == torch.float32 for p in after.parameters())
    pairs = zip(after.parameters(), before.parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("--device", "gpu", "device must be auto, cpu, cuda or cuda:N"),
     ("--ppo.micro-batch-tokens", "0", "micro_batch_tokens=0 must be >= 1")],
)  # fmt: skip
def test_bad_device_and_budget_fail_before_any_work(tmp_path, flag, value, message):
    with pytest.raises(SystemExit, match=message):
        cli_main(["train", "--run-dir", str(tmp_path / "run"), flag, value])
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_device_cuda_without_cuda_says_so(base, tmp_path):
    with pytest.raises(SystemExit, match="CUDA is not available: use --device cpu"):
        train(base, tmp_path / "run", "--device", "cuda")

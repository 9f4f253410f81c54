"""Atomic checkpoints, RNG capture, and a training run killed with SIGKILL then resumed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_settings import TINY_ENV

from cxsim.agents import build_policy, build_tokenizer, default_tokenizer, load_policy
from cxsim.agents.critic import Critic
from cxsim.agents.models import save_policy
from cxsim.checkpoint import (
    TrainingState,
    UntrustedCheckpointError,
    capture_rng,
    convert_state,
    latest_checkpoint,
    list_checkpoints,
    load_state,
    restore_rng,
    save_checkpoint,
)
from cxsim.config import PPOConfig


def test_rng_roundtrip():
    state = capture_rng()
    a = (random.random(), np.random.rand(), torch.rand(2))
    restore_rng(state)
    b = (random.random(), np.random.rand(), torch.rand(2))
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])


def test_save_load_and_keep(tmp_path: Path):
    tokenizer = build_tokenizer(["a", "b"])
    policy = build_policy("tiny", tokenizer)
    critic = Critic.from_policy(policy)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for it in (1, 2, 3):
        state = TrainingState(it, {"actor": opt.state_dict()}, capture_rng(), [{"x": float(it)}])
        save_checkpoint(tmp_path, state, policy, tokenizer, critic, PPOConfig(), keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["iter-000002", "iter-000003"]
    latest = latest_checkpoint(tmp_path)
    assert load_state(latest).history == [{"x": 3.0}]
    loaded, _, _ = load_policy(latest / "policy")
    assert all(
        torch.equal(a, b) for a, b in zip(policy.parameters(), loaded.parameters(), strict=True)
    )
    assert Critic.from_pretrained(latest / "critic").head.weight.shape == (1, 64)
    assert json.loads((latest / "config.json").read_text())["estimator"] == "cross-segment"
    # a half-written checkpoint (temporary directory) is never picked up
    (tmp_path / "checkpoints" / ".tmp-iter-000009-x").mkdir()
    assert latest_checkpoint(tmp_path) == latest


def _train_cmd(policy: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "cxsim.cli", "train", "--policy", str(policy),
        "--run-dir", str(run_dir), *TINY_ENV,
        "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "3", "--ppo.critic-warmup", "1",
        "--ppo.minibatches", "1", "--ppo.epochs", "1", "--checkpoint-every", "1",
        "--keep-checkpoints", "5", "--threads", "1", "--no-progress-bar", "--ppo.keep-best",
        *extra,
    ]  # fmt: skip


def _comparable(history: list[dict]) -> list[dict]:
    # timings differ run to run: charts/*_seconds and the compute meter's compute/wall_*
    return [
        {k: v for k, v in h.items() if "seconds" not in k and "/wall_" not in k} for h in history
    ]


@pytest.mark.slow
def test_sigkill_then_resume_loses_nothing(tmp_path: Path):
    tokenizer = default_tokenizer()
    policy_dir = tmp_path / "base"
    save_policy(build_policy("tiny", tokenizer, seed=0), tokenizer, policy_dir)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    full = subprocess.Popen(_train_cmd(policy_dir, full_dir), env=env, stderr=subprocess.DEVNULL)
    killed = subprocess.Popen(
        _train_cmd(policy_dir, killed_dir), env=env, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 240
    while not (killed_dir / "checkpoints" / "iter-000002").is_dir():
        assert killed.poll() is None, "the run finished before it could be killed"
        assert time.time() < deadline, "no checkpoint within 240 s"
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not (killed_dir / "results.json").exists()
    assert latest_checkpoint(killed_dir).name in ("iter-000002", "iter-000003")

    subprocess.run(_train_cmd(policy_dir, killed_dir, "--resume"), env=env, check=True,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    assert full.wait(timeout=240) == 0
    resumed = json.loads((killed_dir / "results.json").read_text())
    reference = json.loads((full_dir / "results.json").read_text())
    assert resumed["iterations_done"] == reference["iterations_done"] == 4
    assert _comparable(resumed["history"]) == _comparable(reference["history"])
    # --ppo.keep-best: the best version as the checkpoint kept it, the same as uninterrupted
    assert resumed["best_policy"] == reference["best_policy"]
    assert resumed["policy"] == str(killed_dir / "best" / "policy")
    a, _, _ = load_policy(resumed["policy"])
    b, _, _ = load_policy(reference["policy"])
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_compute_meter_restores_per_rank_and_from_older_checkpoints():
    """The meter a resumed rank continues from: its own; the merged totals on rank 0 when
    the number of processes changed; and the single meter of checkpoints written before
    meters were kept per rank."""
    from dataclasses import asdict

    from cxsim.diagnostics import ComputeMeter
    from cxsim.distributed import DistContext
    from cxsim.pipeline.training_run import compute_meter

    policy = build_policy("tiny", default_tokenizer(), seed=0)
    meters = [ComputeMeter(rollouts=3, iterations=2), ComputeMeter(rollouts=5, iterations=2)]
    state = TrainingState(1, {}, {}, extra={"compute_per_rank": [asdict(m) for m in meters]})
    rank1 = DistContext(rank=1, world_size=2, local_rank=1, device=torch.device("cpu"))
    assert compute_meter(state, policy, None, rank1).rollouts == 5
    alone = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    assert compute_meter(state, policy, None, alone).rollouts == 8
    older = TrainingState(1, {}, {}, extra={"compute": asdict(meters[0])})
    assert compute_meter(older, policy, None, alone).rollouts == 3
    fresh = compute_meter(None, policy, None, alone)
    assert fresh.rollouts == 0 and fresh.actor_params == sum(p.numel() for p in policy.parameters())


RAN: list[str] = []


def _ran_on_load(marker: str) -> str:
    RAN.append(marker)
    return marker


class RunsCodeOnLoad:
    """Unpickling this calls ``_ran_on_load``: what a hostile state.pt would do."""

    def __reduce__(self):
        return (_ran_on_load, ("ran",))


def test_a_state_that_would_run_code_is_refused(tmp_path: Path):
    state = TrainingState(1, {}, capture_rng(), [], {"payload": RunsCodeOnLoad()})
    torch.save(state.__dict__, tmp_path / "state.pt")
    with pytest.raises(UntrustedCheckpointError, match="--trust-checkpoint"):
        load_state(tmp_path)
    assert RAN == []  # nothing ran


def _old_format_checkpoint(tmp_path: Path) -> Path:
    """A checkpoint as cxsim wrote it before plain-data states: raw numpy RNG tuples."""
    tokenizer = default_tokenizer()
    policy = build_policy("tiny", tokenizer, seed=0)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    state = TrainingState(1, {"actor": opt.state_dict()}, capture_rng(), [{"x": 1.0}])
    path = save_checkpoint(tmp_path, state, policy, tokenizer, None, PPOConfig())
    old_rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    raw = {**state.__dict__, "rng": old_rng, "extra": {"rng_per_rank": [old_rng], "elapsed_s": 1.0}}
    torch.save(raw, path / "state.pt")
    return path


def test_an_earlier_checkpoint_resumes_by_the_documented_routes(tmp_path: Path):
    path = _old_format_checkpoint(tmp_path)
    with pytest.raises(UntrustedCheckpointError, match=r"python -m cxsim\.checkpoint"):
        load_state(path)
    trusted = load_state(path, trust=True)  # route 1: --trust-checkpoint
    restore_rng(trusted.rng)
    a = np.random.rand()
    convert_state(path)  # route 2: convert once, then the default loader reads it
    converted = load_state(path)
    restore_rng(converted.rng)
    assert np.random.rand() == a and converted.history == [{"x": 1.0}]
    assert isinstance(converted.rng["numpy"]["keys"], torch.Tensor)


@pytest.mark.slow
def test_train_resumes_an_earlier_checkpoint_with_trust(tmp_path: Path):
    tokenizer = default_tokenizer()
    policy_dir = tmp_path / "base"
    save_policy(build_policy("tiny", tokenizer, seed=0), tokenizer, policy_dir)
    run_dir = tmp_path / "run"
    subprocess.run(_train_cmd(policy_dir, run_dir), check=True, stderr=subprocess.DEVNULL)
    last = latest_checkpoint(run_dir)
    raw = torch.load(last / "state.pt", weights_only=True)
    for rng in [raw["rng"], *raw["extra"]["rng_per_rank"]]:  # back to the earlier format
        restore_rng(rng)
        rng["numpy"] = np.random.get_state()
    torch.save(raw, last / "state.pt")
    more = ["--ppo.iterations", "4", "--resume"]
    refused = subprocess.run(_train_cmd(policy_dir, run_dir, *more), capture_output=True, text=True)
    assert refused.returncode != 0 and "--trust-checkpoint" in refused.stderr
    subprocess.run(_train_cmd(policy_dir, run_dir, *more, "--trust-checkpoint"), check=True,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    assert json.loads((run_dir / "results.json").read_text())["iterations_done"] == 5
    load_state(latest_checkpoint(run_dir))  # written back as plain data

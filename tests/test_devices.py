"""Device names, bf16 autocast with float32 master weights and optimizer state, and the
distributed helpers' device choice on a machine without CUDA."""

from __future__ import annotations

import pytest
import torch

from cxsim import distributed
from cxsim.agents.models import build_policy, sequence_logprobs
from cxsim.agents.tokenizer import build_tokenizer
from cxsim.devices import autocast, check_device_name, master_weights, resolve_device

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


@pytest.fixture
def cuda_untouchable(monkeypatch):
    """On a machine without CUDA: any torch.cuda call but is_available() fails the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("torch.cuda touched beyond is_available() on a CPU-only machine")

    for name in ("device_count", "current_device", "set_device", "get_rng_state_all"):
        monkeypatch.setattr(torch.cuda, name, forbidden)


@NO_CUDA
def test_resolve_device_without_cuda(cuda_untouchable):
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for name in ("cuda", "cuda:1"):
        with pytest.raises(ValueError, match="CUDA is not available: use --device cpu"):
            resolve_device(name)
    with pytest.raises(ValueError, match="auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")
    check_device_name("cpu")
    check_device_name("auto")
    for name in ("cuda", "cuda:3"):  # config time asks whether CUDA is there, and nothing more
        with pytest.raises(ValueError, match="CUDA is not available: use --device cpu"):
            check_device_name(name)
    with pytest.raises(ValueError, match="auto, cpu, cuda or cuda:N"):
        check_device_name("cuda:x")


@NO_CUDA
@pytest.mark.parametrize(
    "command",
    [
        ["run", "--policy", "None"],
        ["sft", "--policy", "None"],
        ["train"],
        ["eval", "--agent", "oracle"],
        ["tables", "--policy", "None"],
    ],
)
def test_a_missing_gpu_stops_each_command_before_any_stage(command, tmp_path, capsys):
    """``--device cuda`` without CUDA: one line saying what to change, before anything is
    printed or written (no settings.json, no stage line)."""
    from cxsim.cli import main as cxsim

    where = str(tmp_path / "out")
    places = {  # every output flag of each command, inside tmp_path
        "run": ["--run-dir", where], "sft": ["--run-dir", where], "train": ["--run-dir", where],
        "eval": ["--out", str(tmp_path / "out" / "eval.json")],
        "tables": ["--out-dir", where, "--runs-dir", str(tmp_path / "runs")],
    }  # fmt: skip
    with pytest.raises(SystemExit) as info:
        cxsim([*command, *places[command[0]], "--device", "cuda"])
    assert str(info.value) == (
        f"cxsim {command[0]}: error: device 'cuda' asked for, but CUDA is not available: use "
        f"--device cpu; see `cxsim {command[0]} --help`"
    )
    assert info.value.code == 2  # a usage error
    said = capsys.readouterr()
    assert said.out == "" and said.err.strip() == str(info.value)  # the one line, nothing else
    assert not any(tmp_path.iterdir())


@NO_CUDA
def test_distributed_helpers_never_raise_without_cuda(cuda_untouchable, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for device in (None, "auto", "cpu"):
        ctx = distributed.init_distributed(device=device)
        assert ctx.device == torch.device("cpu") and ctx.world_size == 1
    for local_rank in (0, 3):  # was local_rank % device_count(): ZeroDivisionError
        assert distributed._device(local_rank, None) == torch.device("cpu")
        assert distributed._device(local_rank, "auto") == torch.device("cpu")
        with pytest.raises(ValueError, match="CUDA is not available"):
            distributed._device(local_rank, "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_names_are_checked_against_the_gpus_present():
    count = torch.cuda.device_count()
    check_device_name("cuda")
    check_device_name(f"cuda:{count - 1}")
    assert resolve_device(f"cuda:{count - 1}") == torch.device("cuda", count - 1)
    with pytest.raises(ValueError, match=f"this machine has {count} GPU"):
        check_device_name(f"cuda:{count}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_each_rank_takes_its_local_rank_gpu():
    count = torch.cuda.device_count()
    assert distributed._device(0, "cuda") == torch.device("cuda", 0)
    assert distributed._device(count - 1, None) == torch.device("cuda", count - 1)
    with pytest.raises(ValueError, match=f"LOCAL_RANK {count} has no GPU"):
        distributed._device(count, "cuda")


def test_bf16_autocast_keeps_float32_weights_and_optimizer_state():
    tokenizer = build_tokenizer([f"w{i}" for i in range(30)])
    policy = build_policy("tiny", tokenizer, seed=0)
    reference = build_policy("tiny", tokenizer, seed=0)
    ids = torch.randint(9, 39, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    cpu = torch.device("cpu")
    with autocast("bf16", cpu):
        logits = policy(input_ids=ids).logits
        logprobs = sequence_logprobs(policy, ids, mask)
    assert logits.dtype == torch.bfloat16  # the matmuls ran in bf16
    exact = sequence_logprobs(reference, ids, mask)
    gap = float((logprobs.detach() - exact.detach()).abs().max())
    assert 0 < gap < 0.1  # bf16 rounding, not a different model
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-6)
    (-logprobs.mean()).backward()
    optimizer.step()
    for p in policy.parameters():
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32
        state = optimizer.state[p]
        assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    # lr 1e-6 moves float32 weights a little but not by bf16 steps (pure bf16 would not move).
    deltas = [
        (p - r).abs().max()
        for p, r in zip(policy.parameters(), reference.parameters(), strict=True)
    ]
    assert max(float(d) for d in deltas) < 1e-5 and any(float(d) > 0 for d in deltas)
    with autocast("fp32", cpu):
        assert policy(input_ids=ids).logits.dtype == torch.float32


def test_master_weights_upcasts_a_bf16_model():
    policy = build_policy("tiny", build_tokenizer(["a", "b"]), seed=0).to(torch.bfloat16)
    master_weights(policy)
    assert all(p.dtype == torch.float32 for p in policy.parameters())

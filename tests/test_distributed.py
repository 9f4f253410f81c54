"""Data parallelism: one update on 2 gloo processes equals one process on the global batch.

The batch is real: scripted-agent rollouts under compaction (KeyRecall), the
tiny Llama policy, the cross-segment GAE with rollout-scoped adaptive lambda,
global whitening, ``policy_loss`` and ``aggregate`` with the global
denominator, micro-batches of one rollout each. The shards are uneven on
purpose (short single-window rollouts on rank 0, long compacted ones on
rank 1): a mean of per-rank means is then visibly wrong, and the test checks
that it is.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from cxsim.advantages import adaptive_lambda, cross_segment_gae
from cxsim.agents.chat import WordChatFormat
from cxsim.agents.models import build_policy, sequence_logprobs
from cxsim.agents.scripted import ScriptedAgent
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.distributed import (
    DistContext,
    allreduce_gradients,
    barrier,
    broadcast_object,
    gather_objects,
    gather_records,
    global_count,
    global_whiten,
    init_distributed,
    mean_metrics,
    rank_seed,
    shard_seeds,
    spawn_local,
)
from cxsim.losses import aggregate, policy_loss
from cxsim.runtime import CompactionConfig, collect_rollouts
from cxsim.segments import SegmentBatch, pack_segments
from cxsim.whitening import whiten

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with gloo is not available",
)

ENV = "cxsim/KeyRecall-v0"
WORLD = 2
SHORT, LONG = 3, 2
"""Rollouts 0-2 are single windows (rank 0's shard), rollouts 3-4 compact twice (rank 1's)."""
CLIP_EPS = 0.2
MODES = ("token-mean", "segment-mean", "rollout-mean")
"""seq-mean-token-sum divides by the segment count, as segment-mean does."""
NAIVE = ("token-mean", "segment-mean")


def single() -> DistContext:
    return DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


@cache
def chat() -> WordChatFormat:
    return WordChatFormat(default_tokenizer())


def global_batch() -> tuple[SegmentBatch, dict[str, torch.Tensor]]:
    """Five rollouts' segments, behaviour log-probs near the policy's, random critic values."""
    agent = ScriptedAgent(ENV, chat(), epsilon=0.3, seed=1)
    runtime = CompactionConfig(max_compactions=8, max_turns=30)
    short = collect_rollouts(ENV, {"memory_length": 4}, agent, runtime, range(SHORT), chat())
    long = collect_rollouts(
        ENV, {"memory_length": 12}, agent, runtime, range(SHORT, SHORT + LONG), chat(),
        rollout_id_start=SHORT,
    )  # fmt: skip
    batch = pack_segments(short.segments + long.segments, chat().pad_id)
    policy = build_policy("tiny", chat().tokenizer, seed=0)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        current = sequence_logprobs(policy, batch.token_ids, batch.attention)
    noise = 0.1 * torch.randn(current.shape, generator=gen)
    batch.logprobs = torch.where(batch.trainable, current + noise, 0.0)
    values = torch.where(batch.attention, torch.randn(current.shape, generator=gen), 0.0)
    return batch.with_extras(values=values), policy.state_dict()


def local_count(mask: torch.Tensor, mode: str, rollout_id: torch.Tensor) -> torch.Tensor:
    """What ``aggregate`` divides by on this batch alone (tokens, segments or rollouts)."""
    rows = mask.any(dim=1)
    if mode == "token-mean":
        return mask.sum().float()
    if mode == "rollout-mean":
        return torch.tensor(float(len(torch.unique(rollout_id[rows]))))
    return rows.sum().float()


def update_gradients(
    policy: torch.nn.Module, batch: SegmentBatch, mode: str, ctx: DistContext, naive: bool = False
) -> dict[str, torch.Tensor]:
    """Gradients of one PPO step on this rank's batch, synchronised across ranks.

    naive=True is the mean of per-rank means (local denominators, gradients
    averaged as DistributedDataParallel does), for contrast.
    """
    mask = batch.trainable  # (S, T)
    lam = adaptive_lambda(mask, batch.rollout_id, "rollout")
    advantages = cross_segment_gae(
        batch.extras["values"], mask, batch.rewards, batch.rollout_id, batch.segment_index, 1.0, lam
    )
    advantages = global_whiten(advantages, mask, ctx)
    count = local_count(mask, mode, batch.rollout_id)
    denominator = count if naive else global_count(count, ctx)
    policy.zero_grad(set_to_none=True)
    for rollout in torch.unique(batch.rollout_id):  # one micro-batch per rollout
        rows = torch.nonzero(batch.rollout_id == rollout).squeeze(1)
        micro = batch.select(rows)
        t = int(micro.lengths.max())  # trimmed: padding beyond the longest row never matters
        logprobs = sequence_logprobs(policy, micro.token_ids[:, :t], micro.attention[:, :t])
        per_token, _ = policy_loss(logprobs, micro.logprobs[:, :t], advantages[rows, :t], CLIP_EPS)
        loss = aggregate(per_token, micro.trainable[:, :t], mode, micro.rollout_id, denominator)
        loss.backward()
    allreduce_gradients(policy, ctx)
    grads = {name: p.grad.clone() for name, p in policy.named_parameters()}
    if naive:
        grads = {name: g / ctx.world_size for name, g in grads.items()}
    return grads


def _grad_worker(data: Path, out: Path) -> None:
    ctx = init_distributed()
    torch.set_num_threads(1)
    batch, weights = torch.load(data, weights_only=False)
    policy = build_policy("tiny", chat().tokenizer, seed=0)
    policy.load_state_dict(weights)
    shard = shard_seeds(list(range(SHORT + LONG)), ctx)
    mine = (batch.rollout_id >= shard.start) & (batch.rollout_id < shard.stop)
    rows = torch.nonzero(mine).squeeze(1)
    local = batch.select(rows)
    result: dict = {
        "tokens": int(local.trainable.sum()),
        "segments": len(local),
        "whitened": whiten_check(batch, rows, ctx),
    }
    for mode in MODES:
        result[mode] = update_gradients(policy, local, mode, ctx)
    for mode in NAIVE:
        result[f"naive/{mode}"] = update_gradients(policy, local, mode, ctx, naive=True)
    # an optimiser step on the summed gradients keeps the replicas equal
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
    torch.optim.Adam(policy.parameters(), lr=1e-2).step()
    result["stepped"] = {k: v.clone() for k, v in policy.state_dict().items()}
    result["objects"] = {
        "broadcast": broadcast_object({"rank": ctx.rank}, ctx),
        "records": gather_records([f"record-{ctx.rank}-{i}" for i in range(ctx.rank + 1)], ctx),
        "metrics": mean_metrics({"losses/x": float(ctx.rank), f"only/{ctx.rank}": 1.0}, ctx),
        "seed": gather_objects(rank_seed(7, ctx), ctx),
    }
    barrier(ctx)
    torch.save(result, out / f"rank{ctx.rank}.pt")


def whiten_check(batch: SegmentBatch, rows: torch.Tensor, ctx: DistContext) -> float:
    """Largest gap between whitening this rank's rows globally and whitening the whole batch."""
    values, mask = batch.extras["values"], batch.trainable
    reference = whiten(values, mask)[rows]
    return float((global_whiten(values[rows], mask[rows], ctx) - reference).abs().max())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The 2-process results and the single-process reference, computed once."""
    tmp = tmp_path_factory.mktemp("dist")
    batch, weights = global_batch()
    torch.save((batch, weights), tmp / "data.pt")
    spawn_local(_grad_worker, WORLD, (tmp / "data.pt", tmp))
    ranks = [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    policy = build_policy("tiny", chat().tokenizer, seed=0)
    policy.load_state_dict(weights)
    reference = {mode: update_gradients(policy, batch, mode, single()) for mode in MODES}
    return {"ranks": ranks, "reference": reference}


def relative_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[float, float]:
    """(max abs difference, that over the largest reference magnitude) across parameters."""
    diff = max(float((a[k] - b[k]).abs().max()) for k in b)
    scale = max(float(b[k].abs().max()) for k in b)
    return diff, diff / scale


def test_shards_are_uneven(runs):
    r0, r1 = runs["ranks"]
    assert r0["segments"] == SHORT and r1["segments"] > 3 * r0["segments"]
    assert r1["tokens"] > 3 * r0["tokens"]


@pytest.mark.parametrize("mode", MODES)
def test_gradients_equal_single_process(runs, mode):
    r0, r1 = runs["ranks"]
    reference = runs["reference"][mode]
    abs_gap, rel_gap = relative_gap(r0[mode], reference)
    print(f"{mode}: max abs diff {abs_gap:.2e}, relative {rel_gap:.2e}")
    assert rel_gap < 1e-5
    for name in reference:  # every rank holds the same summed gradient
        assert torch.equal(r0[mode][name], r1[mode][name]), name
    if mode in NAIVE:
        _, naive_gap = relative_gap(r0[f"naive/{mode}"], reference)
        print(f"{mode}: a mean of per-rank means is off by {naive_gap:.2e} (relative)")
        assert naive_gap > 1e-2, "a mean of per-rank means should differ on uneven shards"


def test_replicas_stay_equal_after_a_step(runs):
    r0, r1 = runs["ranks"]
    for name, value in r0["stepped"].items():
        assert torch.equal(value, r1["stepped"][name]), name


def test_global_whitening_equals_whitening_the_whole_batch(runs):
    for rank in runs["ranks"]:
        assert rank["whitened"] < 1e-5


def test_object_helpers(runs):
    for rank in runs["ranks"]:
        objects = rank["objects"]
        assert objects["broadcast"] == {"rank": 0}
        assert objects["records"] == ["record-0-0", "record-1-0", "record-1-1"]
        assert objects["metrics"] == {"losses/x": 0.5, "only/0": 1.0, "only/1": 1.0}
        assert objects["seed"][0] == 7 and objects["seed"][1] != 7


# -- one process, no torchrun -------------------------------------------------------------


def test_without_torchrun_everything_is_a_no_op(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    ctx = init_distributed(device="cpu")
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.is_distributed) == (0, 1, True, False)
    assert float(global_count(torch.tensor(5.0), ctx)) == 5.0
    assert broadcast_object("x", ctx) == "x"
    assert gather_records([1, 2], ctx) == [1, 2]
    assert mean_metrics({"a": 1.0}, ctx) == {"a": 1.0}
    assert rank_seed(3, ctx) == 3
    shard = shard_seeds([10, 11, 12], ctx, group_ids=[0, 0, 1])
    assert (shard.seeds, shard.group_ids, shard.rollout_id_start) == ([10, 11, 12], [0, 0, 1], 0)
    barrier(ctx)
    model = torch.nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    before = model.weight.grad.clone()
    allreduce_gradients(model, ctx)
    assert torch.equal(model.weight.grad, before)
    mask = torch.tensor([[False, True, True], [False, True, False]])
    x = torch.tensor([[9.0, 1.0, 2.0], [9.0, 4.0, 9.0]])
    torch.testing.assert_close(global_whiten(x, mask, ctx), whiten(x, mask))


def fake(rank: int, world_size: int) -> DistContext:
    return DistContext(
        rank=rank, world_size=world_size, local_rank=rank, device=torch.device("cpu")
    )


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_shards_keep_groups_together_and_cover_the_batch(world_size):
    groups = [g for g in range(7) for _ in range(3)]  # 7 tasks, group size 3
    seeds = [100 + i for i in range(len(groups))]
    shards = [shard_seeds(seeds, fake(r, world_size), groups) for r in range(world_size)]
    assert [s for shard in shards for s in shard.seeds] == seeds  # disjoint, in order
    assert [shard.start for shard in shards] == [0, *[shard.stop for shard in shards[:-1]]]
    for shard in shards:
        assert shard.seeds == seeds[shard.start : shard.stop]
        assert shard.rollout_id_start == shard.start
        assert len(shard.seeds) % 3 == 0  # whole groups only
    sizes = [len(shard.seeds) // 3 for shard in shards]
    assert max(sizes) - min(sizes) <= 1
    assert shards == [shard_seeds(seeds, fake(r, world_size), groups) for r in range(world_size)]


def test_shard_errors():
    with pytest.raises(ValueError, match="consecutive"):
        shard_seeds([1, 2, 3], fake(0, 2), group_ids=[0, 1, 0])
    with pytest.raises(ValueError, match="cannot be shared by 3 ranks"):
        shard_seeds([1, 2, 3, 4], fake(0, 3), group_ids=[0, 0, 1, 1])
    with pytest.raises(ValueError, match="group_ids has 1 entries"):
        shard_seeds([1, 2], fake(0, 1), group_ids=[0])


def test_rank_seeds_differ():
    seeds = [rank_seed(0, fake(r, 8)) for r in range(8)]
    assert seeds[0] == 0 and len(set(seeds)) == 8
    assert seeds == [rank_seed(0, fake(r, 8)) for r in range(8)]


# -- the benchmark ------------------------------------------------------------------------


@pytest.mark.slow
def test_bench_distributed_smoke(capsys):
    import tyro

    from cxsim.experiments import bench_distributed as bench

    argv = ["--rollouts", "2", "--processes", "2", "--compaction.max-turns", "1", "--no-gpu"]
    out = bench.run(tyro.cli(bench.Config, args=argv))
    assert out["cpu/rollouts_per_s/2"] > 0
    assert "cpu x2: 2 rollouts" in capsys.readouterr().out


def torchrun_train(tmp_path: Path, *flags: str) -> tuple[list[str], dict[str, str], Path]:
    """An SFT base made in ``tmp_path`` and the command that trains from it with
    ``torchrun --nproc-per-node 2 cxsim train`` (small settings, then ``flags``); the
    environment to run it in and its run directory."""
    import os
    import sys

    from cxsim.cli import main as cxsim

    env_flags = ["--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std",
                 "1", "--compaction.budget", "160"]  # fmt: skip
    cxsim(["sft", "--run-dir", str(tmp_path / "sft"), *env_flags, "--sft.episodes", "6",
           "--sft.epochs", "1", "--sft.heldout-episodes", "2", "--no-progress-bar"])  # fmt: skip
    run_dir = tmp_path / "train"
    train = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
             "2", "-m", "cxsim.cli", "train", "--policy", str(tmp_path / "sft" / "policy"),
             "--run-dir", str(run_dir), *env_flags, "--ppo.rollouts-per-batch", "4",
             "--ppo.critic-warmup", "1", "--ppo.minibatches", "1", "--ppo.epochs", "1",
             "--no-progress-bar", *flags]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "CXSIM_QUIET"} | {"OMP_NUM_THREADS": "1"}
    return train, env, run_dir


@pytest.mark.slow
def test_torchrun_trains_two_processes_and_resumes(tmp_path):
    """`torchrun --nproc-per-node 2 cxsim train` runs end to end, then resumes from rank 0's
    checkpoint and finishes the remaining iterations."""
    import subprocess

    train, env, run_dir = torchrun_train(tmp_path, "--checkpoint-every", "1")
    first = subprocess.run([*train, "--ppo.iterations", "1"], env=env, capture_output=True,
                           text=True, timeout=240)  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.count("done: 2 iterations") == 1  # rank 0 alone reports
    second = subprocess.run([*train, "--ppo.iterations", "2", "--resume"], env=env,
                            capture_output=True, text=True, timeout=240)  # fmt: skip
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming from" in second.stdout and "(iteration 2)" in second.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["iterations_done"] == 3
    assert [h["iteration"] for h in results["history"]] == [0, 1, 2]
    # compute adds up over the ranks (4 rollouts per global batch), across the resume too
    assert [h["compute/rollouts"] for h in results["history"]] == [4.0, 8.0, 12.0]
    assert (run_dir / "checkpoints" / "iter-000003" / "policy").is_dir()


@pytest.mark.slow
def test_torchrun_refits_the_context_ridge_over_both_ranks(tmp_path):
    """The context-ridge's closed-form fit sums its running statistics over the ranks
    (float64 all-reduce) and is saved with the critic."""
    import subprocess

    from safetensors.torch import load_file

    flags = ("--ppo.iterations", "1", "--ppo.value-head", "context-ridge")
    train, env, run_dir = torchrun_train(tmp_path, *flags)
    done = subprocess.run(train, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    (critic,) = (run_dir / "checkpoints").glob("iter-*/critic")
    saved = load_file(str(critic / "value_head.safetensors"))
    count, _ = saved["pool.totals"].tolist()
    # rows per rank and segment index, averaged over the ranks: x 2 for both ranks' rows;
    # the earlier batch counts half. One rank's sums alone would hold about half of that.
    history = json.loads((run_dir / "results.json").read_text())["history"]
    rows = [2 * sum(v for k, v in h.items() if k.startswith("critic/count_seg")) for h in history]
    both = 0.5 * rows[0] + rows[1]
    assert 0.8 * both < count <= both
    assert int((saved["pool.weight"] != 0).sum()) > 0

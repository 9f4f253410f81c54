"""Benchmark: rollouts per second with 1 and 2 data-parallel processes.

The same global batch of rollouts (``rollouts`` seeds of one environment, the
tiny LM agent) is collected by 1 process, then by 2 processes that each take
their shard (``cxsim.distributed.shard_seeds``), as a torchrun job would. The
processes are started from here (``spawn_local``: torchrun's environment on
127.0.0.1). Timing starts at a barrier after every rank has built its model
and warmed up, and stops when the slowest rank is done, so it is the wall
time of the iteration's rollout phase. Reported: rollouts/s per process count
and the ratio to one process, measured in the same run.

On CPU each process gets ``threads`` intra-op threads: with 2 processes the
job uses twice the cores of the 1-process run, which is the point of scaling
out, and the ratio is bounded by the free cores of the machine. With CUDA, the
same measurement runs on GPUs (NCCL) with up to one process per GPU.

    cxsim bench distributed
    cxsim bench distributed --rollouts 64 --processes 1 2 4
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
import torch.multiprocessing as mp
import tyro

from cxsim.agents.chat import WordChatFormat
from cxsim.agents.lm_agent import LMAgent
from cxsim.agents.models import PresetName, build_policy
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.distributed import (
    barrier,
    gather_objects,
    init_distributed,
    rank_seed,
    shard_seeds,
    spawn_local,
)
from cxsim.generation import SamplingConfig
from cxsim.runtime import CompactionConfig, collect_rollouts


@dataclass(frozen=True)
class Config:
    """Rollouts per second of one global batch with 1 and 2 processes."""

    env_id: str = "cxsim/KeyRecall-v0"
    """Environment (registered id)."""
    rollouts: int = 32
    """Rollouts in the global batch (seeds seed .. seed + rollouts - 1), split across processes."""
    processes: tuple[int, ...] = (1, 2)
    """Process counts to measure; the first is the reference of the ratio."""
    preset: PresetName = "tiny"
    """Size of the randomly initialised policy."""
    compaction: CompactionConfig = field(default_factory=lambda: CompactionConfig(max_turns=12))
    """Runtime settings (a random policy writes long responses: max_turns bounds an episode)."""
    threads: int = 1
    """torch intra-op threads per process (CPU)."""
    seed: int = 0
    """Seeds the policy, the sampling (per rank) and the environments."""
    gpu: bool = True
    """Also measure on CUDA (NCCL, one process per GPU) when a GPU is present."""

    def __post_init__(self) -> None:
        if not self.processes or min(self.processes) < 1:
            raise ValueError(f"--processes {self.processes}: give one or more counts >= 1")
        if self.rollouts < max(self.processes):
            raise ValueError(
                f"--rollouts {self.rollouts} must be >= the largest --processes "
                f"({max(self.processes)}): every process needs a rollout"
            )


Device = Literal["cpu", "cuda"]


def _worker(cfg: Config, device: Device, results: mp.SimpleQueue) -> None:
    """One rank: build the agent, warm up, collect this rank's shard, report to rank 0."""
    ctx = init_distributed(device=device)
    torch.set_num_threads(cfg.threads)
    tokenizer = default_tokenizer()
    chat = WordChatFormat(tokenizer)
    policy = build_policy(cfg.preset, tokenizer, seed=cfg.seed).to(ctx.device)
    agent = LMAgent(policy, chat, SamplingConfig(seed=rank_seed(cfg.seed, ctx)), ctx.device)
    shard = shard_seeds([cfg.seed + i for i in range(cfg.rollouts)], ctx)
    with torch.no_grad():
        warmup = replace(cfg.compaction, max_turns=1)
        collect_rollouts(cfg.env_id, {}, agent, warmup, shard.seeds[:1], chat)
        agent.forget()
        barrier(ctx)
        start = time.perf_counter()
        batch = collect_rollouts(
            cfg.env_id,
            {},
            agent,
            cfg.compaction,
            shard.seeds,
            chat,
            rollout_id_start=shard.rollout_id_start,
        )
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    tokens = sum(r.tokens_generated for r in batch.records)
    per_rank = gather_objects((seconds, len(batch.records), tokens), ctx)
    if ctx.is_main:
        results.put(per_rank)


def measure(cfg: Config, device: Device, processes: int) -> dict[str, float]:
    """Rollouts/s and tokens/s of the global batch with ``processes`` ranks on ``device``."""
    results = mp.get_context("spawn").SimpleQueue()
    spawn_local(_worker, processes, (cfg, device, results))
    per_rank = results.get()
    wall = max(seconds for seconds, _, _ in per_rank)
    rollouts = sum(n for _, n, _ in per_rank)
    tokens = sum(t for _, _, t in per_rank)
    shards = ", ".join(f"{n} in {s:.2f}s" for s, n, _ in per_rank)
    print(
        f"{device:>4} x{processes}: {rollouts} rollouts, {tokens} tokens in {wall:6.2f} s = "
        f"{rollouts / wall:6.2f} rollouts/s, {tokens / wall:7.0f} tokens/s  (per rank: {shards})"
    )
    return {"rollouts_per_s": rollouts / wall, "tokens_per_s": tokens / wall, "seconds": wall}


def run(cfg: Config) -> dict[str, float]:
    """Runs the benchmark; returns ``<device>/rollouts_per_s/<n>`` and ``<device>/ratio/<n>``."""
    print(
        f"bench distributed: {cfg.env_id}, random-init {cfg.preset} policy, "
        f"{cfg.rollouts} rollouts per batch, {cfg.threads} thread(s) per CPU process"
    )
    # the ratio is bounded by the cores other jobs leave free: say how busy the machine was
    load = os.getloadavg()[0]
    print(f"cpu: {os.cpu_count()} cores, load average {load:.1f} before the run")
    devices: list[tuple[Device, list[int]]] = [("cpu", list(cfg.processes))]
    if cfg.gpu and torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        devices.append(("cuda", [n for n in cfg.processes if n <= gpus]))
        if len(devices[-1][1]) < len(cfg.processes):
            print(f"cuda: {gpus} GPU(s), so only process counts up to {gpus} run there")
    elif cfg.gpu:
        print("cuda: not available, GPU measurement skipped")
    out: dict[str, float] = {"cpu/load_average": load}
    for device, counts in devices:
        for n in counts:
            out[f"{device}/rollouts_per_s/{n}"] = measure(cfg, device, n)["rollouts_per_s"]
        reference = out[f"{device}/rollouts_per_s/{counts[0]}"]
        for n in counts[1:]:
            ratio = out[f"{device}/rollouts_per_s/{n}"] / reference
            out[f"{device}/ratio/{n}"] = ratio
            print(f"{device}: {n} processes / {counts[0]}: {ratio:.2f}x rollouts/s")
    return out


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

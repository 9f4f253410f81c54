"""Data-parallel training over ``torch.distributed``, started by ``torchrun``.

Every rank runs the same loop on its own shard of the iteration's rollouts:
collect, score, update. Three things make the update equal to a single-process
update on the whole global batch (docs/method.md section 4, "counted globally"):

1. **Shard by rollout** (:func:`shard_seeds`): a rollout's segments stay on
   one rank, and so do the rollouts of one task group, so every estimator
   (``N_{>s}``, adaptive lambda, group baselines) sees whole rollouts and gives
   the same advantages as on the whole batch. Rollout ids are the
   single-process ones.
2. **Global denominators** (:func:`global_count`): the token-mean divisor
   ``|M|`` (segments with a masked token for segment-mean, rollouts for
   rollout-mean) is all-reduced (SUM) across ranks before the loss is formed,
   so each rank's loss is ``local_sum / global_count``.
3. **Summed gradients** (:func:`allreduce_gradients`): SUM over ranks of the
   gradients of ``local_sum_r / D`` is the gradient of ``(sum_r local_sum_r) / D``,
   the single-process loss, up to float summation order.

Why a SUM all-reduce after the backward passes, not ``DistributedDataParallel``:
DDP averages (divides by the world size, which would have to be undone in the
loss) and all-reduces inside every ``backward``, so with gradient accumulation
each rank must run the same number of backward passes; uneven shards have
different numbers of micro-batches, and a rank may have none in a minibatch.
One flat all-reduce per optimiser step has none of these constraints and
leaves the policy a plain model (the rollout agent keeps calling it directly).
It does not overlap communication with the backward pass, which only matters
for models far beyond cxsim's sizes.

Everything here is a no-op on one process (no torchrun): the same trainer
code runs with or without it. Logging and checkpoints come from the main rank
(``ctx.is_main``); :func:`broadcast_object` and :func:`gather_objects` move
config, resume state, records and RNG states between ranks.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cxsim.devices import resolve_device
from cxsim.whitening import whiten

T = TypeVar("T")

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""Environment variables torchrun sets for each worker (``env://`` rendezvous)."""


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job. One process: rank 0 of 1."""

    rank: int
    """Global rank, 0 .. world_size - 1."""
    world_size: int
    """Number of processes in the job (all nodes)."""
    local_rank: int
    """Rank on this node; picks the GPU."""
    device: torch.device
    """``cuda:<local_rank>`` when CUDA is available, else ``cpu``."""

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs, prints and writes checkpoints."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        """More than one process: collectives do something."""
        return self.world_size > 1


def _device(local_rank: int, kind: str | None) -> torch.device:
    """This rank's device: ``cuda`` is GPU ``LOCAL_RANK``, ``cuda:N`` GPU N, ``auto``/None
    CUDA when present.

    A machine without CUDA is asked ``torch.cuda.is_available()`` only, and gets
    a clear error (not a division by its zero GPUs) when CUDA was asked for.
    """
    if kind in (None, "auto"):
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind != "cuda":
        return resolve_device(kind)  # cpu, or cuda:N checked against the GPUs present
    resolve_device("cuda")  # raises when there is no CUDA
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise ValueError(
            f"LOCAL_RANK {local_rank} has no GPU: this node has {count}; start at most "
            f"{count} processes per node (torchrun --nproc-per-node {count})"
        )
    return torch.device("cuda", local_rank)


def init_distributed(
    backend: str | None = None, device: str | None = None, timeout_s: float = 1800.0
) -> DistContext:
    """Joins the torchrun job described by the environment, or returns a single-process context.

    Under torchrun (``RANK`` and ``WORLD_SIZE`` set) this starts the default
    process group with the ``env://`` rendezvous (``MASTER_ADDR``,
    ``MASTER_PORT``). ``device``: ``cuda`` (GPU ``LOCAL_RANK``), ``cuda:N`` (one
    process), ``cpu``; ``auto`` or None: CUDA when available. ``backend``: None picks ``nccl`` on CUDA and
    ``gloo`` on CPU. ``timeout_s`` bounds how long a collective waits for a
    late rank (a rank with longer rollouts reaches the first all-reduce
    later). Calling it again returns the same context.
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return DistContext(rank=0, world_size=1, local_rank=0, device=_device(0, device))
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    where = _device(local_rank, device)
    if where.type == "cuda":
        torch.cuda.set_device(where)
    if not dist.is_initialized():
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
        if missing:
            raise RuntimeError(
                f"RANK and WORLD_SIZE are set but {', '.join(missing)} is not: start with "
                "torchrun (it sets all of them), or export them by hand"
            )
        dist.init_process_group(
            backend=backend or ("nccl" if where.type == "cuda" else "gloo"),
            init_method="env://",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
            device_id=where if where.type == "cuda" else None,
        )
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, device=where)


def shutdown_distributed() -> None:
    """Leaves the process group (if any); call once at the end of a run."""
    if dist.is_initialized():
        dist.destroy_process_group()


def _comm_device(ctx: DistContext) -> torch.device:
    """Where collective tensors must live: the GPU for NCCL, anywhere for gloo."""
    return ctx.device if dist.get_backend() == "nccl" else torch.device("cpu")


# --------------------------------------------------------------------------- sharding


@dataclass(frozen=True)
class Shard:
    """This rank's rollouts: positions ``start .. stop - 1`` of the iteration's seed list."""

    seeds: list[int]
    """Environment seeds this rank collects."""
    group_ids: list[int] | None
    """Their group ids (None when none were given)."""
    start: int
    """Position of the first one in the global list (= its single-process rollout id)."""
    stop: int
    """One past the last position."""

    @property
    def rollout_id_start(self) -> int:
        """Pass to ``collect_rollouts(..., rollout_id_start=...)``: ids match one process."""
        return self.start


def shard_seeds(
    seeds: Sequence[int], ctx: DistContext, group_ids: Sequence[int] | None = None
) -> Shard:
    """Splits one iteration's rollouts (one per seed) into contiguous per-rank blocks.

    Whole task groups stay together (rollouts sharing a group id must be
    consecutive in ``seeds``): group baselines and, with one rollout per seed,
    all of a rollout's segments are then computed on one rank. Ranks get
    ``len(groups) // world_size`` groups, the first ``len(groups) % world_size``
    ranks one more; the split depends only on the list and the world size, and
    the blocks are disjoint, so every rank runs distinct seeds.
    """
    n = len(seeds)
    if group_ids is not None and len(group_ids) != n:
        raise ValueError(f"group_ids has {len(group_ids)} entries for {n} seeds")
    # group g covers positions bounds[g] .. bounds[g + 1] - 1
    bounds = [0]
    if group_ids is None:
        bounds = list(range(n + 1))
    else:
        for i in range(1, n):
            if group_ids[i] != group_ids[i - 1]:
                bounds.append(i)
        bounds.append(n)
        runs = [group_ids[b] for b in bounds[:-1]]
        if len(set(runs)) != len(runs):
            raise ValueError(
                "rollouts of one group must be consecutive in the seed list to stay on one rank"
            )
    groups = len(bounds) - 1
    if groups < ctx.world_size:
        raise ValueError(
            f"{groups} task groups cannot be shared by {ctx.world_size} ranks: raise "
            "--ppo.rollouts-per-batch (or lower --ppo.group-size or --nproc-per-node)"
        )
    per_rank = np.array_split(np.arange(groups), ctx.world_size)[ctx.rank]
    start, stop = bounds[int(per_rank[0])], bounds[int(per_rank[-1]) + 1]
    return Shard(
        seeds=list(seeds[start:stop]),
        group_ids=None if group_ids is None else list(group_ids[start:stop]),
        start=start,
        stop=stop,
    )


def rank_seed(seed: int, ctx: DistContext) -> int:
    """Seed of this rank's RNGs (sampling, minibatch shuffles): ``seed`` itself on rank 0.

    Distinct per rank and deterministic for a given world size; rank 0 keeps
    the run seed so a one-process run is unchanged.
    """
    if ctx.rank == 0:
        return seed
    return int(np.random.SeedSequence([seed, ctx.rank]).generate_state(1)[0])


# --------------------------------------------------------------------------- reductions


def global_count(x: torch.Tensor | int | float, ctx: DistContext) -> torch.Tensor:
    """SUM of a local count over ranks (a new tensor; identity on one process).

    Used for loss denominators: the trainable-token count for token-mean, the
    number of segments (rollouts) with a masked token for segment-mean
    (rollout-mean). ``cxsim.ppo``'s ``global_sum`` hook takes
    ``lambda c: global_count(c, ctx)``. Every rank must call it the same number
    of times, in the same order.
    """
    t = x.detach().clone() if isinstance(x, torch.Tensor) else torch.tensor(x)
    if not ctx.is_distributed:
        return t
    home = t.device
    t = t.to(_comm_device(ctx))
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.to(home)


def allreduce_gradients(model: torch.nn.Module, ctx: DistContext) -> None:
    """SUMs ``p.grad`` of every trainable parameter across ranks, in place.

    Call after a step's backward passes, before gradient clipping and
    ``optimizer.step()``. With each rank's loss ``local_sum / global_count``
    the sum is the single-process gradient, so the clipped norm and the step
    are the same on every rank and the replicas stay equal. A rank with no
    micro-batch in a step contributes zeros; a parameter no rank touched
    keeps ``grad = None`` (as on one process, where Adam then skips it).
    All gradients travel in one flat buffer per dtype (one collective each).
    """
    if not ctx.is_distributed:
        return
    params = [p for p in model.parameters() if p.requires_grad]
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for p in params:
        by_dtype.setdefault(p.dtype, []).append(p)
    device = _comm_device(ctx)
    for dtype, group in by_dtype.items():
        sizes = [p.numel() for p in group]
        total = sum(sizes)
        # the last len(group) entries count the ranks that hold a gradient of each parameter
        flat = torch.zeros(total + len(group), dtype=dtype, device=device)
        offset = 0
        for i, p in enumerate(group):
            if p.grad is not None:
                flat[offset : offset + sizes[i]] = p.grad.reshape(-1)
                flat[total + i] = 1
            offset += sizes[i]
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        held = flat[total:].tolist()
        offset = 0
        for i, p in enumerate(group):
            if held[i] > 0:
                p.grad = flat[offset : offset + sizes[i]].view_as(p).to(p.device, copy=True)
            offset += sizes[i]


def global_whiten(
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ctx: DistContext,
    eps: float = 1e-8,
    std_floor: float = 0.0,
) -> torch.Tensor:
    """``cxsim.whitening.whiten`` with the mean and variance of the global batch (and its
    ``std_floor``).

    ``(A - mean_M) / sqrt(var_M + eps)`` over the masked entries of all ranks
    (Bessel-corrected), 0 outside the mask: equal to ``whiten`` on the
    concatenated batch. Two scalar all-reduces. Shapes: (S, T) -> (S, T).
    """
    return whiten(advantages, mask, eps, std_floor, lambda t: global_count(t, ctx))


def mean_metrics(metrics: dict[str, float], ctx: DistContext) -> dict[str, float]:
    """Each metric averaged over the ranks that report it (every rank gets the result).

    For per-rank update statistics (losses, KL, clip fraction) logged by rank 0;
    per-rollout metrics are exact from :func:`gather_records` instead.
    """
    if not ctx.is_distributed:
        return dict(metrics)
    every = gather_objects(metrics, ctx)
    keys = list(dict.fromkeys(k for m in every for k in m))
    return {k: float(np.mean([m[k] for m in every if k in m])) for k in keys}


# --------------------------------------------------------------------------- objects


def barrier(ctx: DistContext) -> None:
    """Waits for every rank (e.g. while rank 0 writes a checkpoint)."""
    if ctx.is_distributed:
        dist.barrier()


def broadcast_object(obj: T, ctx: DistContext, src: int = 0) -> T:
    """Rank ``src``'s ``obj`` on every rank (picklable: config, resume path, a stop flag)."""
    if not ctx.is_distributed:
        return obj
    box = [obj if ctx.rank == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_objects(obj: T, ctx: DistContext) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank (``all_gather_object``)."""
    if not ctx.is_distributed:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def gather_records(records: Sequence[T], ctx: DistContext) -> list[T]:
    """All ranks' per-rollout records, concatenated in rank order, on every rank.

    With :func:`shard_seeds` that is rollout-id order, the order one process
    would have produced; rank 0 logs and evaluates them, and every rank can
    take the same decisions from them.
    """
    return [r for part in gather_objects(list(records), ctx) for r in part]


def broadcast_module(model: torch.nn.Module, ctx: DistContext, src: int = 0) -> None:
    """Copies rank ``src``'s parameters and buffers into every rank's model, in place.

    A start-of-run guard: ranks that loaded the same checkpoint already agree,
    this makes it so even when a weight was initialised from a rank's RNG.
    """
    if not ctx.is_distributed:
        return
    device = _comm_device(ctx)
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            moved = t.data.to(device)
            dist.broadcast(moved, src=src)
            t.data.copy_(moved)


# --------------------------------------------------------------------------- local launch


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a one-machine rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local_worker(
    local_rank: int, world_size: int, port: int, fn: Callable[..., None], args: tuple
) -> None:
    os.environ.update(
        RANK=str(local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    try:
        fn(*args)
    finally:
        shutdown_distributed()


def spawn_local(fn: Callable[..., None], world_size: int, args: tuple = ()) -> None:
    """Runs ``fn(*args)`` in ``world_size`` fresh processes on this machine and waits.

    Each process gets the environment ``torchrun --standalone --nproc-per-node
    world_size`` would give it (rendezvous on 127.0.0.1, a free port), so
    ``fn`` calls :func:`init_distributed` exactly as under torchrun. For tests
    and benchmarks; training is started with torchrun. ``fn`` must be a
    module-level function; an exception in any process is raised here.
    """
    mp.spawn(_local_worker, args=(world_size, free_port(), fn, args), nprocs=world_size)

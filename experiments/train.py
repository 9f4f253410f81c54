"""``cxsim train``: PPO with context compaction (CompactionRL and its ablations).

Reads top to bottom: seed; load the policy (an SFT checkpoint) and initialise an
independent critic from it; then per iteration collect rollouts under the
compaction runtime, score them (critic values, advantages), update the critic
(``critic_ratio`` passes per actor pass) and, after the value-only warm-up, the
actor; log; checkpoint. ``--resume`` continues a killed run from its newest
checkpoint (weights, optimisers, RNG states, history), so the same seed gives
the same run whether or not it was interrupted.

    cxsim train --policy runs/sft/policy --run-dir runs/train
    cxsim train --preset no-summary-training --ppo.iterations 20
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel

from cxsim.agents.chat import ChatFormat
from cxsim.agents.critic import Critic
from cxsim.agents.lm_agent import LMAgent
from cxsim.agents.models import load_policy
from cxsim.checkpoint import (
    TrainingState,
    capture_rng,
    checkpoint_dir,
    latest_checkpoint,
    list_checkpoints,
    load_state,
    restore_rng,
    save_checkpoint,
    seed_everything,
)
from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, PPOConfig, check_policy_dir
from cxsim.diagnostics import ComputeMeter, summarize_all
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
    shutdown_distributed,
)
from cxsim.evaluation import EVAL_SEED_OFFSET, rollout_metrics, torch_threads
from cxsim.experiments.presets import DEFAULT_PRESET, PresetName, cli_with_preset, preset_ppo
from cxsim.generation import SamplingConfig
from cxsim.ppo import actor_update, critic_update, score_batch
from cxsim.runtime import RolloutBatch, RolloutRecord, collect_rollouts
from cxsim.segments import SegmentBatch, pack_segments
from cxsim.tracking import (
    log_config,
    log_scalars,
    log_transcripts,
    open_writer,
    progress,
    write_json,
)

TRAIN_SEED_STRIDE = 1_000_000
"""Training task seeds of run seed s are s * stride + k; evaluation seeds sit far above."""


@dataclass(frozen=True)
class Config:
    """PPO training from a policy checkpoint."""

    preset: PresetName = DEFAULT_PRESET
    """Named PPO preset (experiments/presets.py); resolved first, other flags override it."""
    policy: str = "runs/sft/policy"
    """Policy checkpoint to start from (made by ``cxsim sft``); the critic starts from it too."""
    run_dir: str = "runs/train"
    """Output folder: tb/ (TensorBoard), checkpoints/, results.json."""
    seed: int = 0
    """Seed of torch/numpy/python and of the training tasks."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    """Context budget and compaction; training rollouts use ``--ppo.protocol``."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    checkpoint_every: int = 5
    """Save a checkpoint every this many iterations (and at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (newest)."""
    resume: bool = False
    """Continue from the newest checkpoint in run_dir (starts fresh if there is none)."""
    time_limit_s: float | None = None
    """Stop (and checkpoint) after this many seconds of training; None: run all iterations."""
    transcripts_every: int = 10
    """Log two sample transcripts to TensorBoard every this many iterations."""
    threads: int = 1
    """torch intra-op threads for training (0: torch's default). 1 is the safe choice on shared
    cores: a second thread that must wait for a busy core made a tiny-model update 8x slower."""
    rollout_threads: int = 1
    """torch threads while sampling rollouts (1: fastest for tiny models; 0: as --threads)."""
    progress_bar: bool = True
    """Show a tqdm progress bar with an ETA."""

    def __post_init__(self) -> None:
        if self.compaction.protocol != "compacted":
            raise ValueError(
                f"--compaction.protocol {self.compaction.protocol!r}: training sets the protocol "
                "with --ppo.protocol (compacted or single); leave --compaction.protocol at compacted"
            )
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ValueError("checkpoint_every and keep_checkpoints must be >= 1")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s={self.time_limit_s} must be positive (or None)")

    @property
    def total_iterations(self) -> int:
        return self.ppo.critic_warmup + self.ppo.iterations


def task_seeds(cfg: Config, iteration: int) -> tuple[list[int], list[int]]:
    """Env seeds and group ids of one iteration's rollouts (group_size rollouts per task)."""
    tasks = cfg.ppo.rollouts_per_batch // cfg.ppo.group_size
    first = cfg.seed * TRAIN_SEED_STRIDE + iteration * tasks
    if first + tasks >= EVAL_SEED_OFFSET:
        raise ValueError(f"training seeds reach the evaluation range; lower --seed ({cfg.seed})")
    seeds = [first + k for k in range(tasks) for _ in range(cfg.ppo.group_size)]
    groups = [k for k in range(tasks) for _ in range(cfg.ppo.group_size)]
    return seeds, groups


def collect(cfg: Config, agent: LMAgent, iteration: int, ctx: DistContext) -> RolloutBatch:
    """This rank's share of one iteration's rollouts under the training protocol.

    Whole task groups go to one rank, and rollout ids are those of a one-process run.
    """
    seeds, groups = task_seeds(cfg, iteration)
    shard = shard_seeds(seeds, ctx, groups)
    runtime = replace(cfg.compaction, protocol=cfg.ppo.protocol)
    with torch.no_grad(), torch_threads(cfg.rollout_threads):
        batch = collect_rollouts(
            cfg.env.env_id,
            cfg.env.kwargs,
            agent,
            runtime,
            shard.seeds,
            agent.chat,
            rollout_id_start=shard.rollout_id_start,
            group_ids=shard.group_ids,
        )
    agent.forget()
    return batch


def diagnostics(
    batch: SegmentBatch,
    rollouts: RolloutBatch,
    cfg: Config,
    has_critic: bool,
    warmup: bool,
    meter: ComputeMeter,
) -> dict[str, float]:
    """This rank's diagnostics of one iteration (docs/diagnostics.md): omission, credit
    decay, segment weights, critic calibration, estimator gap, and compute so far."""
    tokens = float(batch.attention.sum())
    passes = cfg.ppo.critic_ratio * cfg.ppo.epochs if has_critic else 0
    actor_passes = 0 if warmup else cfg.ppo.epochs
    meter.add_records(rollouts.records)
    meter.add(
        iterations=1,
        actor_forward_tokens=tokens * actor_passes,
        actor_backward_tokens=tokens * actor_passes,
        critic_forward_tokens=tokens * (passes + int(has_critic)),  # + the scoring pass
        critic_backward_tokens=tokens * passes,
    )
    return summarize_all(
        batch,
        rollouts.records,
        advantages=batch.extras["advantages"],
        values=batch.extras["values"] if has_critic else None,
        gamma=cfg.ppo.gamma,
        lam=batch.extras["lam"],
        train_summaries=cfg.ppo.train_summaries,
        meter=meter,
    )


def build_optimizers(
    policy: PreTrainedModel, critic: Critic | None, ppo: PPOConfig
) -> dict[str, torch.optim.Optimizer]:
    optimizers = {"actor": torch.optim.Adam(policy.parameters(), lr=ppo.actor_lr)}
    if critic is not None:
        optimizers["critic"] = torch.optim.Adam(critic.parameters(), lr=ppo.critic_lr)
    return optimizers


def restore(
    checkpoint: Path, optimizers: dict[str, torch.optim.Optimizer], seed: int, ctx: DistContext
) -> TrainingState:
    """Loads a checkpoint's state into the optimisers and this rank's RNGs."""
    state = load_state(checkpoint)
    for name, opt in optimizers.items():
        opt.load_state_dict(state.optimizers[name])
    rngs = state.extra["rng_per_rank"]
    if len(rngs) == ctx.world_size:
        restore_rng(rngs[ctx.rank])
    else:  # another number of processes: same weights, new shards and RNG streams
        seed_everything(rank_seed(seed + state.iteration, ctx))
    if ctx.is_main:
        print(f"resuming from {checkpoint} (iteration {state.iteration})")
    return state


def compute_meter(
    state: TrainingState | None,
    policy: PreTrainedModel,
    critic: Critic | None,
    ctx: DistContext,
) -> ComputeMeter:
    """This rank's compute meter: fresh, or as the checkpoint left it. Resumed on another
    number of processes, rank 0 carries the merged totals and the others start at 0."""
    fresh = ComputeMeter(
        actor_params=sum(p.numel() for p in policy.parameters()),
        critic_params=sum(p.numel() for p in critic.parameters()) if critic else None,
    )
    if state is None:
        return fresh
    # checkpoints written before meters were kept per rank hold one meter, "compute"
    per_rank = state.extra.get("compute_per_rank") or [state.extra["compute"]]
    saved = [ComputeMeter(**m) for m in per_rank]
    if len(saved) == ctx.world_size:
        return saved[ctx.rank]
    return ComputeMeter.merged(saved) if ctx.is_main else fresh


def update(
    batch: SegmentBatch,
    policy: PreTrainedModel,
    critic: Critic | None,
    optimizers: dict[str, torch.optim.Optimizer],
    ppo: PPOConfig,
    warmup: bool,
    ctx: DistContext,
) -> tuple[SegmentBatch, dict[str, float]]:
    """Scores one iteration's batch, then updates the critic and, after the warm-up, the actor.

    Denominators, gradients and whitening statistics are summed over ranks, so on
    several processes the update equals the one-process update on the whole batch.
    """

    def global_sum(count: torch.Tensor) -> torch.Tensor:
        return global_count(count, ctx)

    def sync_grads(model: torch.nn.Module) -> None:
        allreduce_gradients(model, ctx)

    def whiten_all(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return global_whiten(advantages, mask, ctx)

    batch, metrics = score_batch(batch, critic, ppo, whiten_all)
    if critic is not None:
        passes = ppo.critic_ratio * ppo.epochs
        metrics |= critic_update(
            critic, optimizers["critic"], batch, ppo, passes, global_sum, sync_grads
        )
    if not warmup:
        metrics |= actor_update(policy, optimizers["actor"], batch, ppo, global_sum, sync_grads)
    return batch, metrics


def iterate(
    cfg: Config,
    agent: LMAgent,
    policy: PreTrainedModel,
    critic: Critic | None,
    optimizers: dict[str, torch.optim.Optimizer],
    meter: ComputeMeter,
    iteration: int,
    warmup: bool,
    ctx: DistContext,
) -> tuple[dict[str, float], list[RolloutRecord]]:
    """One PPO iteration: collect, pack, score and update, then the iteration's metrics
    (the same on every rank) and the whole batch's rollout records."""
    tick = time.perf_counter()
    with meter.timed("rollout"):  # compute/wall_clock_s: rollout + update time
        rollouts = collect(cfg, agent, iteration, ctx)
    rollout_s = time.perf_counter() - tick
    batch = pack_segments(rollouts.segments, agent.chat.pad_id)
    with meter.timed("update"):
        batch, metrics = update(batch, policy, critic, optimizers, cfg.ppo, warmup, ctx)
    metrics["charts/rollout_seconds"] = rollout_s
    metrics["charts/iteration_seconds"] = time.perf_counter() - tick
    metrics |= diagnostics(batch, rollouts, cfg, critic is not None, warmup, meter)
    metrics = mean_metrics(metrics, ctx)  # update statistics: mean over ranks
    if ctx.is_distributed:  # compute: work adds up over ranks, clocks run side by side
        metrics |= ComputeMeter.merged(gather_objects(meter, ctx)).as_dict()
    records = gather_records(rollouts.records, ctx)  # the whole batch, on every rank
    return metrics | rollout_metrics(records), records


def starting_checkpoint(cfg: Config, ctx: DistContext) -> Path | None:
    """The checkpoint to resume (rank 0's newest, on every rank), or None for a fresh run;
    a fresh run refuses a run directory that already holds checkpoints."""
    run_dir = Path(cfg.run_dir)
    checkpoint = broadcast_object(latest_checkpoint(run_dir) if cfg.resume else None, ctx)
    if not cfg.resume and list_checkpoints(run_dir):
        raise FileExistsError(
            f"{run_dir} already holds checkpoints; pass --resume to continue that run, "
            "or choose another --run-dir"
        )
    return checkpoint


def load_models(
    cfg: Config, checkpoint: Path | None
) -> tuple[PreTrainedModel, Any, ChatFormat, Critic | None]:
    """Policy, tokenizer, chat format and critic (None without one), from the checkpoint
    or, for a fresh run, from ``cfg.policy`` with a new critic; checks the window fits."""
    policy, tokenizer, chat = load_policy(checkpoint / "policy" if checkpoint else Path(cfg.policy))
    cfg.compaction.validate(chat, cfg.env.system_prompt)
    critic = None
    if cfg.ppo.uses_critic:
        critic = (
            Critic.from_pretrained(checkpoint / "critic")
            if checkpoint
            else Critic.from_policy(policy)
        )
    return policy, tokenizer, chat, critic


def train(cfg: Config) -> dict[str, Any]:
    """Runs (or resumes) training; returns what results.json holds.

    Under torchrun each rank collects its shard of the rollouts; loss denominators,
    gradients and whitening statistics are summed over ranks, so an update equals
    the one-process update on the same global batch (docs/distributed.md). Rank 0
    alone logs and writes checkpoints.
    """
    ctx = init_distributed(device="cpu")  # a one-process context without torchrun
    check_policy_dir(cfg.policy)
    run_dir = Path(cfg.run_dir)
    checkpoint = starting_checkpoint(cfg, ctx)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(rank_seed(cfg.seed, ctx))  # rank 0 keeps cfg.seed

    policy, tokenizer, chat, critic = load_models(cfg, checkpoint)
    optimizers = build_optimizers(policy, critic, cfg.ppo)
    state = TrainingState(iteration=0, optimizers={}, rng={}, history=[], extra={"elapsed_s": 0.0})
    if checkpoint:
        state = restore(checkpoint, optimizers, cfg.seed, ctx)

    writer = None
    if ctx.is_main:
        writer = open_writer(run_dir, purge_step=state.iteration if checkpoint else None)
        log_config(writer, cfg)
    agent = LMAgent(policy, chat, SamplingConfig(temperature=cfg.ppo.temperature))
    show_bar = cfg.progress_bar and ctx.is_main
    bar = progress(cfg.total_iterations, state.iteration, "train", disable=not show_bar)

    meter = compute_meter(state if checkpoint else None, policy, critic, ctx)

    began = time.perf_counter() - state.extra["elapsed_s"]

    def save(iteration: int) -> Path:
        state.iteration = iteration
        state.optimizers = {name: opt.state_dict() for name, opt in optimizers.items()}
        rngs = gather_objects(capture_rng(), ctx)  # rank r resumes from rngs[r]
        state.rng = rngs[0]
        state.extra["rng_per_rank"] = rngs
        state.extra["elapsed_s"] = time.perf_counter() - began
        state.extra["compute_per_rank"] = [asdict(m) for m in gather_objects(meter, ctx)]
        path = checkpoint_dir(run_dir, iteration)
        if ctx.is_main:
            path = save_checkpoint(
                run_dir, state, policy, tokenizer, critic, cfg, cfg.keep_checkpoints
            )
        barrier(ctx)  # no rank runs ahead of a checkpoint being written
        return path

    iteration = state.iteration
    last_saved = checkpoint
    while iteration < cfg.total_iterations:
        warmup = iteration < cfg.ppo.critic_warmup
        metrics, records = iterate(
            cfg, agent, policy, critic, optimizers, meter, iteration, warmup, ctx
        )
        if writer is not None:
            log_scalars(writer, metrics, iteration)
            if iteration % cfg.transcripts_every == 0:
                log_transcripts(writer, [r.transcript for r in records[:2]], iteration)
        state.history.append({"iteration": iteration, "warmup": float(warmup), **metrics})
        iteration += 1
        bar.update(1)
        bar.set_postfix(success=f"{metrics['charts/success_rate']:.2f}", warmup=warmup)
        out_of_time = (
            cfg.time_limit_s is not None and time.perf_counter() - began > cfg.time_limit_s
        )
        out_of_time = broadcast_object(out_of_time, ctx)  # rank 0's clock: all stop together
        if (
            iteration % cfg.checkpoint_every == 0
            or iteration == cfg.total_iterations
            or out_of_time
        ):
            last_saved = save(iteration)
        if out_of_time:
            if ctx.is_main:
                print(f"time limit {cfg.time_limit_s}s reached after {iteration} iterations")
            break
    bar.close()
    if last_saved is None or not str(last_saved).endswith(f"{iteration:06d}"):
        last_saved = save(iteration)  # resumed a finished run, or nothing ran
    if writer is not None:
        writer.close()

    results = {
        "preset": cfg.preset,
        "iterations_done": iteration,
        "wall_time_s": time.perf_counter() - began,
        "checkpoint": str(last_saved),
        "policy": str(last_saved / "policy"),
        "final": _final_metrics(state.history),
        "history": state.history,
        "config": cfg,
    }
    if ctx.is_main:
        write_json(run_dir / "results.json", results)
    return results


def _final_metrics(history: list[dict[str, float]], last: int = 5) -> dict[str, float]:
    """Mean of each metric over the last ``last`` non-warm-up iterations."""
    rows = [h for h in history if not h["warmup"]][-last:] or history[-last:]
    if not rows:
        return {}
    keys = [k for k in rows[-1] if k not in ("iteration", "warmup")]
    return {k: float(np.mean([r[k] for r in rows if k in r])) for k in keys}


def main(argv: list[str] | None = None) -> None:
    cfg = cli_with_preset(Config, lambda name: Config(preset=name, ppo=preset_ppo(name)), argv)
    results = train(cfg)
    is_main = init_distributed(device="cpu").is_main  # the context train() joined
    shutdown_distributed()
    if not is_main:
        return
    final = results["final"] or {"charts/success_rate": float("nan")}
    print(
        f"done: {results['iterations_done']} iterations in {results['wall_time_s']:.0f}s; "
        f"last success rate {final['charts/success_rate']:.3f}; "
        f"policy at {results['policy']}"
    )


if __name__ == "__main__":
    main()

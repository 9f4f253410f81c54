"""The plumbing beside ``cxsim train``'s loop: resume, time limit, data parallel, logging.

:class:`TrainingRun` is built once from the config and holds what the loop in
``cxsim/pipeline/train.py`` should not have to think about: the torchrun context
(shards, all-reduced denominators, gradients and whitening statistics), the
checkpoint to resume from and the state it restores (optimisers, RNG streams,
history, compute meter, elapsed time), the TensorBoard writer, the progress bar
and the time limit. The loop calls its methods; nothing here decides what an
iteration does.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from cxsim.agents.chat import ChatOptions
from cxsim.agents.critic import Critic
from cxsim.agents.models import enable_gradient_checkpointing, load_policy
from cxsim.best_policy import BestPolicy
from cxsim.checkpoint import (
    TrainingState,
    best_policy_dir,
    capture_rng,
    checkpoint_dir,
    latest_checkpoint,
    list_checkpoints,
    load_state,
    restore_rng,
    save_best_policy,
    save_checkpoint,
    seed_everything,
)
from cxsim.config import check_policy_dir
from cxsim.critics import build_critic, check_critic, critic_optimizer
from cxsim.diagnostics import ComputeMeter
from cxsim.diagnostics.omission import online_ceiling, online_stated_ceiling
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
)
from cxsim.evaluation import rollout_metrics
from cxsim.preflight import preflight
from cxsim.rollout_records import RolloutRecord
from cxsim.runtime import RolloutBatch, collect_rollouts
from cxsim.segments import SegmentBatch
from cxsim.stabilisers import reference_logprobs
from cxsim.tracking import (
    advance,
    log_config,
    log_scalars,
    log_transcripts,
    open_writer,
    progress,
    say,
    write_json,
)

if TYPE_CHECKING:
    from cxsim.agents.lm_agent import LMAgent
    from cxsim.pipeline.train import Config


class TrainingRun:
    """One (possibly resumed, possibly multi-process) training run's state and side effects."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        # a one-process context without torchrun; under it, this rank's GPU (NCCL) or CPU (gloo)
        self.ctx = init_distributed(device=cfg.compute.device)
        self.device = self.ctx.device
        check_policy_dir(cfg.model.policy)
        self.run_dir = Path(cfg.run_dir)
        checkpoint = starting_checkpoint(cfg, self.ctx)
        if cfg.compute.threads:
            torch.set_num_threads(cfg.compute.threads)
        seed_everything(rank_seed(cfg.seed, self.ctx))  # rank 0 keeps cfg.seed
        self.policy, self.tokenizer, self.chat, self.critic = load_models(
            cfg, checkpoint, self.device
        )
        self.reference = load_reference(cfg, self.device)  # the starting policy, frozen
        if self.ctx.is_main:
            print(f"train: policy on {self.device} ({cfg.compute.precision})")
        # sizes derived for this env and chat format; fails loudly if the oracle cannot solve it
        self.cfg = cfg = replace(cfg, compaction=preflight(cfg.env, cfg.compaction, self.chat))
        # float32 master weights (load_models), hence float32 Adam state, in bf16 too
        self.optimizers = {"actor": torch.optim.Adam(self.policy.parameters(), lr=cfg.ppo.actor_lr)}
        if self.critic is not None:
            self.optimizers["critic"] = critic_optimizer(self.critic, cfg.ppo)
        self.state = TrainingState(0, {}, {}, [], {"elapsed_s": 0.0})
        if checkpoint:
            self.state = restore(checkpoint, self.optimizers, cfg, self.ctx)
        self.start_iteration = self.iteration = self.state.iteration
        self.best = None  # --ppo.keep-best: the versions' scores (cxsim/best_policy.py)
        if cfg.ppo.keep_best:
            self.best = BestPolicy.from_dict(self.state.extra.get("best_policy"))
            if self.ctx.is_main:  # the best weights as of the checkpoint (none: a fresh run)
                restore_best_policy(self.run_dir, checkpoint)
        self.last_saved = checkpoint
        self.writer = None
        if self.ctx.is_main:
            self.writer = open_writer(
                self.run_dir, purge_step=self.iteration if checkpoint else None
            )
            log_config(self.writer, cfg)
        show = cfg.progress_bar and self.ctx.is_main
        self.bar = progress(cfg.total_iterations, self.iteration, "train", disable=not show)
        self.meter = compute_meter(
            self.state if checkpoint else None, self.policy, self.critic, self.ctx
        )
        self.began = time.perf_counter() - self.state.extra["elapsed_s"]

    # -- data parallel: what the update functions take ---------------------
    def global_sum(self, count: torch.Tensor) -> torch.Tensor:
        return global_count(count, self.ctx)

    def sync_grads(self, model: torch.nn.Module) -> None:
        allreduce_gradients(model, self.ctx)

    def whiten(
        self, advantages: torch.Tensor, mask: torch.Tensor, std_floor: float = 0.0
    ) -> torch.Tensor:
        return global_whiten(advantages, mask, self.ctx, std_floor=std_floor)

    def reference_logprobs(self, batch: SegmentBatch) -> torch.Tensor | None:
        """The starting policy's log-probs of the batch's trainable tokens, or None when the
        run keeps no reference (``PPOConfig.uses_reference``)."""
        if self.reference is None:
            return None
        return reference_logprobs(self.reference, batch, self.cfg.ppo, self.cfg.compute.precision)

    def collect(self, agent: LMAgent, seeds: list[int], groups: list[int]) -> RolloutBatch:
        """This rank's share of the rollouts: whole task groups, with the rollout ids of a
        one-process run, under the training protocol."""
        shard = shard_seeds(seeds, self.ctx, groups)
        runtime = self.cfg.compaction.for_protocol(self.cfg.ppo.protocol)
        env = self.cfg.env
        batch = collect_rollouts(
            env.env_id, env.kwargs, agent, runtime, shard.seeds, agent.chat,
            rollout_id_start=shard.rollout_id_start, group_ids=shard.group_ids,
        )  # fmt: skip
        agent.forget()
        return batch

    # -- --ppo.keep-best: each batch scores the policy version it was sampled from --------
    def observe_policy(self, records: list[RolloutRecord]) -> None:
        """Adds this batch's successes (summed over ranks) to the current version's score."""
        if self.best is None:
            return
        local = torch.tensor([sum(r.success for r in records), len(records)], dtype=torch.float64)
        successes, rollouts = self.global_sum(local).tolist()
        self.best.observe(successes, rollouts)

    def close_policy_version(self) -> None:
        """Before the weights change: closes the current version and, if it scored above
        every earlier one, writes its weights to ``best/policy`` (rank 0)."""
        if self.best is None or not self.best.close():
            return
        if self.ctx.is_main:
            save_best_policy(self.run_dir, self.policy, self.tokenizer, self.chat_options)
        barrier(self.ctx)

    # -- value pretraining: before the first iteration -------------------------
    def pretrain_critic(self, agent: LMAgent, seed_stride: int) -> None:
        """``--ppo.value-pretrain-steps N``: N value-only optimiser steps on a fixed set of the
        starting policy's rollouts, collected once (a fresh run only; nothing when N = 0).

        The rollouts (``value_pretrain_rollouts``, task seeds at the top of this run seed's
        training range, ``seed * seed_stride .. (seed + 1) * seed_stride - 1``) are split by rollout id into a fit share and a held-out share
        (``value_pretrain_heldout``, evenly spaced ids; under torchrun each rank measures its
        own and the figures are averaged over ranks). Each step scores the fit share with the current critic
        (targets as in training, ``--ppo.critic-lam`` included) and takes one value-loss step
        on all of it; the held-out explained variance of the values against the Monte Carlo
        return (step rewards included) is logged as ``critic/pretrain_heldout_ev`` at steps
        0 .. N, with ``critic/pretrain_value_loss``, and kept for results.json.
        """
        from cxsim.diagnostics import monte_carlo_returns
        from cxsim.evaluation import torch_threads
        from cxsim.ppo import (
            critic_update,
            critic_values,
            explained_variance,
            score_batch,
            with_critic_inputs,
        )
        from cxsim.segments import pack_segments

        cfg, ppo = self.cfg, self.cfg.ppo
        if not ppo.value_pretrain_steps or self.critic is None or self.start_iteration > 0:
            return
        count = ppo.value_pretrain_rollouts
        first = (cfg.seed + 1) * seed_stride - count  # never reached by training seeds
        seeds = [first + k for k in range(count)]
        with torch.no_grad(), torch_threads(cfg.rollout_threads), self.meter.timed("rollout"):
            rollouts = self.collect(agent, seeds, list(range(count)))
        share = ppo.pretrain_heldout_rollouts  # held out: evenly spaced rollout ids, so that
        held_ids = {int((j + 0.5) * count / share) for j in range(share)}  # every shard has some
        pad, temperature = agent.chat.pad_id, ppo.temperature
        fit = [s for s in rollouts.segments if s.rollout_id not in held_ids]
        held = [s for s in rollouts.segments if s.rollout_id in held_ids]
        fit_batch = pack_segments(fit, pad, temperature, self.device)
        held_batch = pack_segments(held, pad, temperature, self.device)
        held_batch = with_critic_inputs(held_batch, ppo, agent.chat.assistant_prefix())
        mask = held_batch.policy_mask(ppo.train_summaries)
        target = monte_carlo_returns(
            held_batch.rewards, mask, held_batch.rollout_id, held_batch.segment_index,
            ppo.gamma, step_rewards=held_batch.step_rewards,
        )  # fmt: skip
        one_step = replace(ppo, minibatches=1)
        header, fp = agent.chat.assistant_prefix(), cfg.compute.precision
        curve: list[dict[str, float]] = []
        for step in range(ppo.value_pretrain_steps + 1):
            metrics: dict[str, float] = {}
            if step:
                with self.meter.timed("update"):
                    scored, _ = score_batch(fit_batch, self.critic, ppo, self.whiten, header, fp)
                    stats = critic_update(
                        self.critic, self.optimizers["critic"], scored, one_step, 1,
                        self.global_sum, self.sync_grads, fp,
                    )  # fmt: skip
                metrics["critic/pretrain_value_loss"] = stats["losses/value"]
            values = critic_values(
                self.critic, held_batch, ppo.micro_batch_rows, ppo.micro_batch_tokens, fp
            )
            metrics["critic/pretrain_heldout_ev"] = explained_variance(values, target, mask)
            metrics = mean_metrics(metrics, self.ctx)
            if self.writer is not None:
                log_scalars(self.writer, metrics, step)
            curve.append({"step": float(step), **metrics})
        self.state.extra["value_pretrain"] = curve
        if self.ctx.is_main:
            ev = curve[-1]["critic/pretrain_heldout_ev"]
            say(f"value pretraining: {len(curve) - 1} steps, held-out explained variance {ev:.3f}")

    # -- logging -------------------------------------------------------------
    def log(
        self, iteration: int, warmup: bool, metrics: dict[str, float], records: list[RolloutRecord]
    ) -> None:
        """Averages the update statistics over ranks, adds the whole batch's rollout metrics,
        writes TensorBoard (rank 0) and the history."""
        metrics = mean_metrics(metrics, self.ctx)
        if self.ctx.is_distributed:  # compute: work adds up over ranks, clocks run side by side
            metrics |= ComputeMeter.merged(gather_objects(self.meter, self.ctx)).as_dict()
        records = gather_records(records, self.ctx)  # the whole batch, on every rank
        metrics |= rollout_metrics(records)
        metrics |= online_ceiling(records, self.state.history)  # reads the earlier batches
        metrics |= online_stated_ceiling(records, self.state.history)
        if self.writer is not None:
            log_scalars(self.writer, metrics, iteration)
            if iteration % self.cfg.transcripts_every == 0:
                log_transcripts(self.writer, [r.transcript for r in records[:2]], iteration)
        self.state.history.append({"iteration": iteration, "warmup": float(warmup), **metrics})
        self.iteration = iteration + 1
        advance(self.bar, success=f"{metrics['charts/success_rate']:.2f}", warmup=warmup)

    # -- checkpoints and the time limit -----------------------------------------
    def checkpoint(self) -> bool:
        """Saves when due (every ``checkpoint_every``, at the end, at the time limit); True
        when the time limit is reached (every rank stops together, on rank 0's clock)."""
        cfg, done = self.cfg, self.iteration
        out_of_time = cfg.time_limit_s is not None and self.elapsed() > cfg.time_limit_s
        out_of_time = broadcast_object(out_of_time, self.ctx)
        if done % cfg.checkpoint_every == 0 or done == cfg.total_iterations or out_of_time:
            self.save()
        if out_of_time and self.ctx.is_main:
            print(f"time limit {cfg.time_limit_s}s reached after {done} iterations")
        return out_of_time

    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    @property
    def chat_options(self) -> ChatOptions | None:
        """The chat options the policy renders with (saved with each checkpoint's policy)."""
        return getattr(self.chat, "options", None)

    def save(self) -> None:
        state, ctx = self.state, self.ctx
        state.iteration = self.iteration
        state.optimizers = {name: opt.state_dict() for name, opt in self.optimizers.items()}
        rngs = gather_objects(capture_rng(), ctx)  # rank r resumes from rngs[r]
        state.rng = rngs[0]
        state.extra["rng_per_rank"] = rngs
        state.extra["elapsed_s"] = self.elapsed()
        state.extra["compute_per_rank"] = [asdict(m) for m in gather_objects(self.meter, ctx)]
        if self.best is not None:
            state.extra["best_policy"] = self.best.as_dict()
        path = checkpoint_dir(self.run_dir, self.iteration)
        if ctx.is_main:
            path = save_checkpoint(
                self.run_dir, state, self.policy, self.tokenizer, self.critic, self.cfg,
                self.cfg.keep_checkpoints, self.chat_options,
            )  # fmt: skip
            if self.best is not None and best_policy_dir(self.run_dir).is_dir():
                shutil.copytree(best_policy_dir(self.run_dir), path / "best-policy")
        barrier(ctx)  # no rank runs ahead of a checkpoint being written
        self.last_saved = path

    def finish(self) -> dict[str, Any]:
        """Final checkpoint if the last iteration has none (a resumed finished run), closes
        the writer, writes results.json (rank 0); returns what it holds."""
        self.bar.close()
        if self.last_saved is None or not str(self.last_saved).endswith(f"{self.iteration:06d}"):
            self.save()
        if self.writer is not None:
            self.writer.close()
        results = {
            "preset": self.cfg.preset,
            "iterations_done": self.iteration,
            "wall_time_s": self.elapsed(),
            "checkpoint": str(self.last_saved),
            "policy": str(Path(self.last_saved) / "policy"),
            "final": final_metrics(self.state.history),
            "history": self.state.history,
            "config": self.cfg,
        }
        if "value_pretrain" in self.state.extra:  # --ppo.value-pretrain-steps
            results["value_pretrain"] = self.state.extra["value_pretrain"]
        done = self.iteration == self.cfg.total_iterations
        if self.best is not None and done and self.best.best_version is not None:
            rule = self.cfg.ppo.keep_best_rule
            kept = self.best.kept_version(rule)
            if kept == self.best.best_version:  # else the last version: the last checkpoint's
                results["policy"] = str(best_policy_dir(self.run_dir))
            results["best_policy"] = self.best.as_dict() | {"rule": rule, "kept_version": kept}
        if self.ctx.is_main:
            write_json(self.run_dir / "results.json", results)
        return results


def restore_best_policy(run_dir: Path, checkpoint: Path | None) -> None:
    """``best/policy`` as the checkpoint kept it (a copy in ``best-policy``), or none: a
    killed run may have written a later best that its resumed run must not inherit."""
    shutil.rmtree(best_policy_dir(run_dir), ignore_errors=True)
    if checkpoint is not None and (checkpoint / "best-policy").is_dir():
        shutil.copytree(checkpoint / "best-policy", best_policy_dir(run_dir))


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
    cfg: Config, checkpoint: Path | None, device: torch.device
) -> tuple[Any, Any, Any, Critic | None]:
    """Policy, tokenizer, chat format and critic (None when the estimator needs none), from
    the checkpoint or, for a fresh run, from ``cfg.model.policy`` with a new critic; float32 on
    ``device`` (the master weights), with gradient checkpointing when asked for."""
    path = checkpoint / "policy" if checkpoint else Path(cfg.model.policy)
    policy, tokenizer, chat = load_policy(path, device, chat_options(cfg))
    critic = None
    if cfg.ppo.uses_critic:
        if checkpoint:
            critic = Critic.from_pretrained(checkpoint / "critic", device)
            check_critic(critic, cfg.ppo)
        else:  # the configured value head and loss (cxsim/critics.py)
            critic = build_critic(policy, cfg.ppo)
    if cfg.compute.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
        if critic is not None:
            enable_gradient_checkpointing(critic.backbone)
    return policy, tokenizer, chat, critic


def load_reference(cfg: Config, device: torch.device) -> Any:
    """The starting policy (``cfg.model.policy``), frozen in eval mode, when the run keeps a
    reference (``--ppo.kl-coef`` or ``--ppo.track-reference``); else None. On resume it
    is still the policy training started from."""
    if not cfg.ppo.uses_reference:
        return None
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):  # loading draws nothing from the run's streams
        reference, _, _ = load_policy(Path(cfg.model.policy), device, chat_options(cfg))
    reference.eval()
    reference.requires_grad_(False)
    return reference


def chat_options(cfg: Config) -> ChatOptions | None:
    """``--chat.*`` as given, or None (the options saved with the policy) when left at the
    defaults."""
    return None if cfg.model.chat == ChatOptions() else cfg.model.chat


def restore(
    checkpoint: Path, optimizers: dict[str, torch.optim.Optimizer], cfg: Config, ctx: DistContext
) -> TrainingState:
    """Loads a checkpoint's state into the optimisers and this rank's RNGs."""
    state = load_state(checkpoint, trust=cfg.trust_checkpoint)
    for name, opt in optimizers.items():
        opt.load_state_dict(state.optimizers[name])
    rngs = state.extra["rng_per_rank"]
    if len(rngs) == ctx.world_size:
        restore_rng(rngs[ctx.rank])
    else:  # another number of processes: same weights, new shards and RNG streams
        seed_everything(rank_seed(cfg.seed + state.iteration, ctx))
    if ctx.is_main:
        print(f"resuming from {checkpoint} (iteration {state.iteration})")
    return state


def compute_meter(
    state: TrainingState | None, policy: Any, critic: Critic | None, ctx: DistContext
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


def final_metrics(history: list[dict[str, float]], last: int = 5) -> dict[str, float]:
    """Mean of each metric over the last ``last`` non-warm-up iterations."""
    rows = [h for h in history if not h["warmup"]][-last:] or history[-last:]
    if not rows:
        return {}
    keys = [k for k in rows[-1] if k not in ("iteration", "warmup")]
    return {k: float(np.mean([r[k] for r in rows if k in r])) for k in keys}

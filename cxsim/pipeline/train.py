"""``cxsim train``: PPO with context compaction (CompactionRL and its ablations).

The loop in :func:`train` reads top to bottom, one iteration per pass: collect
rollouts under the compaction runtime, score them (critic values, advantages),
update the critic (``critic_ratio`` passes per actor pass) and, after the
value-only warm-up, the actor; log; checkpoint. Resume, the time limit, torchrun
data parallelism and logging live in one object beside it
(``cxsim/pipeline/training_run.py``): ``--resume`` continues a killed run from its
newest checkpoint, so the same seed gives the same run whether or not it was
interrupted. torch is imported inside :func:`train`, so ``--help`` needs only
the configs.

    cxsim train --policy runs/sft/policy --run-dir runs/train
    cxsim train --preset no-summary-training --ppo.iterations 20
    cxsim train --policy runs/sft/policy --device cuda --precision bf16
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from cxsim.compaction import CompactionConfig
from cxsim.compute import FLAT, Compute, ComputeFlags
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, PPOConfig
from cxsim.model_group import SavedModel
from cxsim.pipeline.presets import DEFAULT_PRESET, PresetName, cli_with_preset, preset_ppo

TRAIN_SEED_STRIDE = 1_000_000
"""Training task seeds of run seed s are s * stride + k; evaluation seeds sit far above."""


@dataclass(frozen=True)
class Config:
    """PPO training from a policy checkpoint."""

    preset: PresetName = DEFAULT_PRESET
    """Named PPO preset (cxsim/pipeline/presets.py); resolved first, other flags override it."""
    model: SavedModel = field(default_factory=SavedModel, metadata=FLAT)
    """The policy to start from (``--policy``; the critic starts from it too), and how its chat
    template renders turns."""
    compute: ComputeFlags[Compute] = field(default_factory=Compute, metadata=FLAT)
    run_dir: str = "runs/train"
    """Output folder: tb/ (TensorBoard), checkpoints/, results.json."""
    seed: int = 0
    """Seed of torch/numpy/python and of the training tasks."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    """Context budget and compaction; the window is sized under ``--compaction.protocol``, and
    training rollouts run under it too unless ``--ppo.protocol`` names another (e.g. single)."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    checkpoint_every: int = 5
    """Save a checkpoint every this many iterations (and at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (newest)."""
    resume: bool = False
    """Continue from the newest checkpoint in run_dir (starts fresh if there is none)."""
    trust_checkpoint: bool = False
    """Load the resumed ``state.pt`` with full unpickling: only for a checkpoint written by
    cxsim before checkpoints held plain data, from a source you trust (it can run code).
    The next checkpoint is written in the safe format (see docs/training.md)."""
    time_limit_s: float | None = None
    """Stop (and checkpoint) after this many seconds of training; None: run all iterations."""
    transcripts_every: int = 10
    """Log two sample transcripts to TensorBoard every this many iterations."""
    rollout_threads: int = 1
    """torch threads while sampling rollouts (1: fastest for tiny models; 0: as --threads)."""
    progress_bar: bool = True
    """Show a tqdm progress bar with an ETA."""

    def __post_init__(self) -> None:
        protocol, default = self.compaction.protocol, PPOConfig().protocol
        if protocol != default:  # the run's context strategy: the rollouts run under it
            if self.ppo.protocol not in (default, protocol):
                raise ValueError(
                    f"--compaction.protocol {protocol} and --ppo.protocol {self.ppo.protocol} "
                    "disagree: training rollouts run under one protocol; give only "
                    "--compaction.protocol"
                )
            object.__setattr__(self, "ppo", replace(self.ppo, protocol=protocol))
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ValueError("checkpoint_every and keep_checkpoints must be >= 1")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s={self.time_limit_s} must be positive (or None)")

    @property
    def total_iterations(self) -> int:
        return self.ppo.critic_warmup + self.ppo.iterations


def task_seeds(cfg: Config, iteration: int) -> tuple[list[int], list[int]]:
    """Env seeds and group ids of one iteration's rollouts (group_size rollouts per task)."""
    from cxsim.evaluation import EVAL_SEED_OFFSET

    tasks = cfg.ppo.rollouts_per_batch // cfg.ppo.group_size
    first = cfg.seed * TRAIN_SEED_STRIDE + iteration * tasks
    if first + tasks >= EVAL_SEED_OFFSET:
        raise ValueError(f"training seeds reach the evaluation range; lower --seed ({cfg.seed})")
    seeds = [first + k for k in range(tasks) for _ in range(cfg.ppo.group_size)]
    groups = [k for k in range(tasks) for _ in range(cfg.ppo.group_size)]
    return seeds, groups


def train(cfg: Config) -> dict[str, Any]:
    """Runs (or resumes) training; returns what results.json holds.

    Under torchrun each rank collects its shard; denominators, gradients and whitening
    statistics are summed over ranks (``run.global_sum`` / ``sync_grads`` / ``whiten``),
    so an update equals the one-process update on the global batch (docs/distributed.md).
    """
    import torch

    from cxsim.agents.lm_agent import LMAgent
    from cxsim.critics import set_value_head_lr
    from cxsim.evaluation import torch_threads
    from cxsim.generation import SamplingConfig
    from cxsim.pipeline.training_run import TrainingRun
    from cxsim.ppo import actor_update, critic_update, score_batch
    from cxsim.segments import pack_segments
    from cxsim.stabilisers import linear_lr, set_lr, uniform_outcomes

    run = TrainingRun(cfg)  # seeds, models on run.device, optimisers; the resumed state if any
    cfg = run.cfg  # with the compaction sizes derived for this env and chat format
    ppo, policy, critic, chat, opt = cfg.ppo, run.policy, run.critic, run.chat, run.optimizers
    sampling = SamplingConfig(temperature=ppo.temperature)
    agent = LMAgent(policy, chat, sampling, run.device, cfg.compute.precision)
    fp = cfg.compute.precision
    run.pretrain_critic(agent, TRAIN_SEED_STRIDE)  # --ppo.value-pretrain-steps (0: nothing)
    for iteration in range(run.start_iteration, cfg.total_iterations):
        warmup = iteration < ppo.critic_warmup
        tick = time.perf_counter()
        # 1. collect this rank's rollouts (the behaviour log-probs come with them)
        seeds, groups = task_seeds(cfg, iteration)
        with torch.no_grad(), torch_threads(cfg.rollout_threads), run.meter.timed("rollout"):
            rollouts = run.collect(agent, seeds, groups)
        rollout_s = time.perf_counter() - tick
        run.observe_policy(rollouts.records)  # --ppo.keep-best: scores the version sampled
        batch = pack_segments(rollouts.segments, chat.pad_id, sampling.temperature, run.device)
        with run.meter.timed("update"):  # compute/wall_clock_s: rollout + update time
            # 2. score: critic values, advantages (a KL penalty in the reward), critic targets
            header, ref = chat.assistant_prefix(), run.reference_logprobs(batch)
            scored, metrics = score_batch(batch, critic, ppo, run.whiten, header, fp, ref)
            # 3. critic updates
            if critic is not None:
                set_value_head_lr(opt["critic"], ppo, warmup)
                passes = ppo.critic_ratio * ppo.epochs
                metrics |= critic_update(
                    critic, opt["critic"], scored, ppo, passes, run.global_sum, run.sync_grads, fp
                )
            # 4. actor update, after the value-only warm-up (none from a batch that all
            # ended alike under --ppo.skip-uniform-batches), at the scheduled rate
            skip = ppo.skip_uniform_batches and uniform_outcomes(
                batch.rewards, batch.rollout_id, run.global_sum
            )
            if not warmup and not skip:
                run.close_policy_version()  # --ppo.keep-best: saved if it scored best so far
                lr = linear_lr(ppo.actor_lr, ppo.lr_schedule, iteration - ppo.critic_warmup,
                               ppo.iterations)  # fmt: skip
                set_lr(opt["actor"], lr)
                metrics["charts/actor_lr"] = lr
                metrics |= actor_update(
                    policy, opt["actor"], scored, ppo, run.global_sum, run.sync_grads, fp
                )
            metrics["stability/skipped_update"] = float(skip and not warmup)
        # 5. log
        metrics["charts/rollout_seconds"] = rollout_s
        metrics["charts/iteration_seconds"] = time.perf_counter() - tick
        metrics |= diagnostics(scored, rollouts, cfg, run.meter, warmup)
        run.log(iteration, warmup, metrics, rollouts.records)
        # 6. checkpoint; stop at the time limit
        if run.checkpoint():
            break
    if run.best is not None and run.iteration == cfg.total_iterations:
        # --ppo.keep-best: one more batch, on tasks no iteration drew, scores the last version
        seeds, groups = task_seeds(cfg, cfg.total_iterations)
        with torch.no_grad(), torch_threads(cfg.rollout_threads), run.meter.timed("rollout"):
            run.observe_policy(run.collect(agent, seeds, groups).records)
        run.close_policy_version()
    return run.finish()


def diagnostics(scored: Any, rollouts: Any, cfg: Config, meter: Any, warmup: bool) -> dict:
    """This rank's diagnostics of one iteration (docs/diagnostics.md): omission, credit
    decay, segment weights, critic calibration, estimator gap, and compute so far."""
    from cxsim.diagnostics import summarize_all

    has_critic = cfg.ppo.uses_critic
    batch = scored.batch.to("cpu")  # one copy per iteration: the diagnostics run on the host
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
        advantages=scored.advantages.cpu(),
        values=scored.values.cpu() if has_critic else None,
        gamma=cfg.ppo.gamma,
        lam=scored.lam,
        train_summaries=cfg.ppo.train_summaries,
        meter=meter,
    )


def main(argv: list[str] | None = None) -> None:
    cfg = cli_with_preset(Config, lambda name: Config(preset=name, ppo=preset_ppo(name)), argv)
    from cxsim.distributed import init_distributed, shutdown_distributed

    results = train(cfg)
    is_main = init_distributed(device=cfg.compute.device).is_main  # the context train() joined
    shutdown_distributed()
    if not is_main:
        return
    final = results["final"] or {"charts/success_rate": float("nan")}
    print(
        f"done: {results['iterations_done']} iterations in {results['wall_time_s']:.0f}s; "
        f"last success rate {final['charts/success_rate']:.3f}; "
        f"policy at {results['policy']}; TensorBoard: tensorboard --logdir {cfg.run_dir}/tb"
    )
    for note in training_notes(results):
        print(note)


def training_notes(results: dict[str, Any]) -> list[str]:
    """What a finished run should tell its user beyond its figures: the version
    ``--ppo.keep-best`` kept, and how many actor updates ``--ppo.skip-uniform-batches``
    left out (a smoke run whose batches all ended alike otherwise looks like one that
    trained)."""
    notes = []
    best = results.get("best_policy")
    if best is not None and best.get("kept_version", best["best_version"]) != best["best_version"]:
        notes.append(
            f"keep-best ({best['rule']}): the last policy, after {best['kept_version']} actor "
            f"update(s); the best-scored one (after {best['best_version']}, success "
            f"{best['best_rate']:.3f} on {best['best_rollouts']:.0f} rollouts) did not do "
            f"better beyond chance; at {results['policy']}"
        )
    elif best is not None:
        notes.append(
            f"keep-best: the policy after {best['best_version']} actor update(s) of "
            f"{best['version'] - 1}: success {best['best_rate']:.3f} on "
            f"{best['best_rollouts']:.0f} rollouts of unseen tasks, at {results['policy']}"
        )
    skipped = int(sum(row.get("stability/skipped_update", 0.0) for row in results["history"]))
    if skipped:
        notes.append(
            f"note: {skipped} actor update(s) skipped, each from a batch whose rollouts all "
            "ended alike (--ppo.no-skip-uniform-batches takes a step anyway)"
        )
    return notes


if __name__ == "__main__":
    main()

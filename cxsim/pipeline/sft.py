"""``cxsim sft``: behaviour cloning from scripted rollouts under compaction (the "base" model).

Reads top to bottom: seed; load the starting policy (by default the shipped starting
checkpoint, ``--policy pretrained``: the tiny word-level model that copies,
cxsim/pretrained.py; ``--policy DIR``: any local Hugging Face causal LM with its
tokenizer and chat template; ``--policy None``: a fresh ``--sft.model`` preset over the
word tokenizer); collect
demonstrations with the scripted agent (oracle executor, scripted summarizer
that drops each needed fact with ``--sft.omission-rate``) through the same
compaction runtime the policy will run in; cross-entropy on the trainable
tokens (the oracle's actions and summaries), token-mean per step; held-out
loss by role; save the policy with its tokenizer.

    cxsim sft --run-dir runs/sft --sft.omission-rate 0.5
    cxsim sft --policy None --sft.epochs 12          # from a fresh tiny model
    cxsim sft --policy path/to/hf-model --device cuda --precision bf16
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cxsim.compaction import CompactionConfig
from cxsim.compute import FLAT, Compute, ComputeFlags
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, SFTConfig, check_policy_dir
from cxsim.evaluation import EVAL_SEED_OFFSET
from cxsim.model_group import Model
from cxsim.model_options import ChatOptions
from cxsim.tracking import write_json

if TYPE_CHECKING:  # torch-heavy; imported where used, so that --help is fast
    from cxsim.agents.chat import ChatFormat
    from cxsim.runtime import RolloutBatch
    from cxsim.segments import SegmentBatch

HELDOUT_SEED_OFFSET = EVAL_SEED_OFFSET // 2
"""Held-out demonstration seeds: away from training (0..) and evaluation seeds."""


@dataclass(frozen=True)
class Config:
    """Behaviour cloning of the scripted agent."""

    run_dir: str = "runs/sft"
    """Output folder: policy/ (the checkpoint), tb/, results.json."""
    seed: int = 0
    """Seed of torch/numpy/python, the model init, the demonstrations and the summarizer."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    """Context budget and compaction of the demonstrations (keep it as in training): they are
    the scripted agents of ``--compaction.protocol``'s strategy, under it."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    model: Model = field(default_factory=Model, metadata=FLAT)
    """What SFT starts from (``--policy``), and how its chat template renders turns (saved
    with the policy)."""
    compute: ComputeFlags[Compute] = field(default_factory=Compute, metadata=FLAT)
    micro_batch_rows: int = 32
    """Segments per forward pass (gradient accumulation inside a step)."""
    progress_bar: bool = True
    """Show a tqdm progress bar with an ETA."""

    def __post_init__(self) -> None:
        if self.micro_batch_rows < 1:
            raise ValueError("micro_batch_rows must be >= 1")
        check_starting_policy(self.model.policy, self.sft)


def check_starting_policy(policy: str | None, sft: SFTConfig) -> None:
    """``--policy`` names a saved model (or None), and ``--sft.model`` is used only with
    None: a saved model brings its own size."""
    if policy is None:
        return
    check_policy_dir(policy)
    if sft.model != SFTConfig().model:
        raise ValueError(
            f"--sft.model {sft.model} builds a fresh model, but --policy {policy} starts from a "
            "saved one: add --policy None to start from a fresh model of that size"
        )


def demonstrations(cfg: Config, chat: ChatFormat, seeds: list[int]) -> RolloutBatch:
    """Scripted rollouts (oracle + scripted summarizer) under the compaction runtime: the
    scripted agents of the config's context strategy for its sizes
    (``ContextStrategy.scripted_agents`` with the config)."""
    from cxsim.runtime import collect_rollouts
    from cxsim.strategies import ScriptedOptions

    options = ScriptedOptions(
        omission_rate=cfg.sft.omission_rate, seed=cfg.seed, skip_rate=cfg.sft.skip_rate
    )
    agents = cfg.compaction.strategy.scripted_agents(
        cfg.env.env_id, chat, options, config=cfg.compaction
    )
    return collect_rollouts(
        cfg.env.env_id, cfg.env.kwargs, agents.actor, cfg.compaction, seeds, chat, agents.summarizer
    )


def save_atomically(policy, tokenizer, path: Path, chat_options: ChatOptions | None = None) -> None:
    """``save_policy`` into a temporary sibling, then renamed over ``path``."""
    from cxsim.agents.models import save_policy

    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_policy(policy, tokenizer, tmp, chat_options)
    old = path.with_name(f".{path.name}.old")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def starting_policy(cfg: Config, device: Any) -> tuple[Any, Any, ChatFormat]:
    """The policy SFT starts from, on ``device``: a fresh word-level model of
    ``--sft.model``, or ``--policy DIR`` (any local HF causal LM with its chat template)."""
    from cxsim.agents import build_policy, default_tokenizer
    from cxsim.agents.chat import WordChatFormat
    from cxsim.agents.models import enable_gradient_checkpointing, load_policy

    if cfg.model.policy is None:
        tokenizer = default_tokenizer(env_words(cfg.env))
        chat: ChatFormat = WordChatFormat(tokenizer)
        policy = build_policy(cfg.sft.model, tokenizer, seed=cfg.seed).to(device)
    else:
        policy, tokenizer, chat = load_policy(cfg.model.policy, device, cfg.model.chat)
    if cfg.compute.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    return policy, tokenizer, chat


def env_words(env: EnvConfig) -> list[str]:
    """Every word ``env`` declares (its own ``vocabulary()``, system prompt and family's words:
    ``cxsim.envs.family.declared_words``), for a fresh word-level model: an environment from
    outside cxsim's vocabulary (``cxsim/TextWorld-v0``, a user's) brings words the shipped
    tokenizer lacks. Empty when the env lists none."""
    import gymnasium as gym

    from cxsim.envs.family import declared_words

    made = gym.make(env.env_id, **env.kwargs)
    words = declared_words(made)
    made.close()
    return words


def cosine_schedule(optimizer: Any, total_steps: int) -> Any:
    """Cosine decay to 10% of the peak learning rate: the last epochs polish instead of
    bouncing."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: 0.1 + 0.45 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)),
    )


def demonstration_batches(cfg: Config, chat: ChatFormat) -> tuple[RolloutBatch, Any, Any]:
    """The seed's demonstrations (tasks ``seed * episodes + i``) and the packed training and
    held-out batches (held-out tasks offset by HELDOUT_SEED_OFFSET, never trained on)."""
    from cxsim.segments import pack_segments

    base = cfg.seed * cfg.sft.episodes
    data = demonstrations(cfg, chat, [base + i for i in range(cfg.sft.episodes)])
    heldout_seeds = [HELDOUT_SEED_OFFSET + base + i for i in range(cfg.sft.heldout_episodes)]
    heldout = demonstrations(cfg, chat, heldout_seeds)
    return (
        data,
        pack_segments(data.segments, chat.pad_id),
        pack_segments(heldout.segments, chat.pad_id),
    )


def run_sft(cfg: Config) -> dict[str, Any]:
    """Trains and saves the SFT policy; returns what results.json holds."""
    import torch

    from cxsim.agents import count_parameters
    from cxsim.checkpoint import seed_everything
    from cxsim.devices import resolve_device
    from cxsim.evaluation import rollout_metrics
    from cxsim.preflight import preflight
    from cxsim.tracking import log_config, log_transcripts, open_writer, say

    began = time.perf_counter()
    if cfg.compute.threads:
        torch.set_num_threads(cfg.compute.threads)
    seed_everything(cfg.seed)
    run_dir = Path(cfg.run_dir)
    device = resolve_device(cfg.compute.device)
    policy, tokenizer, chat = starting_policy(cfg, device)
    cfg = replace(cfg, compaction=preflight(cfg.env, cfg.compaction, chat))

    data, batch, heldout_batch = demonstration_batches(cfg, chat)
    demo_stats = rollout_metrics(data.records)

    writer = open_writer(run_dir)
    log_config(writer, cfg)
    log_transcripts(writer, [r.transcript for r in data.records[:2]], 0)
    say(
        f"sft: {len(batch)} segments, {batch.num_trainable} trainable tokens from "
        f"{cfg.sft.episodes} demonstrations (success {demo_stats['charts/success_rate']:.2f}, "
        f"summary recall {demo_stats['compaction/summary_recall']:.2f}); "
        f"policy {count_parameters(policy) / 1e6:.2f}M parameters on {device} "
        f"({cfg.compute.precision})"
    )
    history = fit_policy(cfg, policy, tokenizer, batch, heldout_batch, writer)
    writer.close()
    results = {
        "policy": str(run_dir / "policy"),
        "parameters": count_parameters(policy),
        "segments": len(batch),
        "trainable_tokens": batch.num_trainable,
        "demonstrations": demo_stats,
        "final": history[-1],
        "history": history,
        "wall_time_s": time.perf_counter() - began,
        "config": cfg,
    }
    write_json(run_dir / "results.json", results)
    return results


def fit_policy(
    cfg: Config,
    policy: Any,
    tokenizer: Any,
    batch: SegmentBatch,
    heldout: SegmentBatch,
    writer: Any,
) -> list[dict[str, float]]:
    """The epochs of cross-entropy on ``batch`` (Adam, :func:`cosine_schedule`), each followed
    by the held-out loss by role and the policy saved to ``run_dir/policy`` (usable if the run
    is cut short); every step's and epoch's metrics logged to ``writer``. Returns each epoch's
    last step and held-out metrics."""
    import torch

    from cxsim.sft import epoch_batches, sft_eval, sft_step
    from cxsim.tracking import advance, log_scalars, progress

    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.sft.lr)
    steps_per_epoch = math.ceil(len(batch) / cfg.sft.batch_rows)
    total_steps = cfg.sft.epochs * steps_per_epoch
    schedule = cosine_schedule(optimizer, total_steps)
    bar = progress(total_steps, desc="sft", disable=not cfg.progress_bar)
    history: list[dict[str, float]] = []
    step = 0
    for epoch in range(cfg.sft.epochs):
        lengths = batch.lengths if cfg.sft.bucket_by_length else None
        for rows in epoch_batches(len(batch), cfg.sft.batch_rows, lengths):
            metrics = sft_step(
                policy,
                optimizer,
                batch.select(rows),
                cfg.micro_batch_rows,
                cfg.sft.max_grad_norm,
                cfg.compute.precision,
            )
            schedule.step()
            log_scalars(writer, metrics, step)
            step += 1
            advance(bar, loss=f"{metrics['losses/sft']:.3f}")
        heldout_metrics = sft_eval(policy, heldout, cfg.micro_batch_rows, cfg.compute.precision)
        log_scalars(writer, heldout_metrics, step)
        history.append({"epoch": epoch, **metrics, **heldout_metrics})
        # usable if the run is cut short
        save_atomically(policy, tokenizer, Path(cfg.run_dir) / "policy", cfg.model.chat)
    bar.close()
    return history


def main(argv: list[str] | None = None) -> None:
    import tyro

    results = run_sft(tyro.cli(Config, args=argv))
    final = results["final"]
    print(
        f"sft done in {results['wall_time_s']:.0f}s: loss {final['losses/sft']:.3f}, held-out "
        f"execution {final['losses/heldout_execution']:.3f} / summary "
        f"{final['losses/heldout_summary']:.3f} nats per token; policy at {results['policy']}"
    )


if __name__ == "__main__":
    main()

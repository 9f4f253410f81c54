"""Benchmark: the compaction-PPO pipeline on a GPU, a Qwen2.5-0.5B-sized model and the tiny preset.

Part 1: a Qwen2 model shaped like Qwen2.5-0.5B (hidden 896, 24 layers, 14 heads,
2 KV heads, MLP 4864, tied embeddings; random init, built from a config) with a
byte-level BPE tokenizer trained here on the environments' text (vocabulary size
``--vocab-size``; a ChatML template). The compaction sizes are derived for that
chat format and the oracle pre-flight checks them (``cxsim.preflight``); then a
short SFT on scripted demonstrations and ``--iterations`` PPO iterations of
``--rollouts`` rollouts on KeyRecall under Compacted, each printing rollout
tokens/s (tokens the policy sampled, over the collection's seconds), trained
tokens/s (the batch's real tokens over the update's seconds: one critic scoring
pass, ``critic_ratio`` critic passes and one actor pass), peak GPU memory, and,
for the first iteration, the largest |log ratio| before any actor step (it must
stay within ``--ratio-tolerance`` of 0: the ratio within that of 1).

Part 2: the tiny preset (word-level) on the same device and on the CPU, the same
seeds, printing the ratio of its iteration time on the device to its CPU time.

The library functions are called with explicit devices: the policy and critic
live on ``--device``; rollouts sample there (``LMAgent(device=...)``); the batch
is scored with the critic through :class:`OnDevice` (``score_batch`` builds its
values on the CPU) and moved to the device for the critic and actor updates.

    cxsim bench gpu                       # on a GPU machine (scripts/gpu_check.sh)
    cxsim bench gpu --small --device cpu  # a CPU rehearsal in a minute or two
"""

from __future__ import annotations

import copy
import json
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import tyro

if TYPE_CHECKING:
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig
    from cxsim.config import PPOConfig
    from cxsim.ppo import ScoredBatch

from cxsim.experiments.bench_gpu_models import (
    QWEN05_SHAPE,
    SMALL_SHAPE,
    bpe_tokenizer,
    env_corpus,
    qwen2_policy,
)

ENV_ID = "cxsim/KeyRecall-v0"


@dataclass(frozen=True)
class Config:
    """Rollout and training throughput, peak memory and first-step ratio on a device."""

    device: str = "auto"
    """auto (CUDA when present), cpu, cuda or cuda:N."""
    small: bool = False
    """CPU rehearsal: the small decoder, 8 rollouts, 2 iterations, a short SFT, a small
    vocabulary (the sizes below that are left unset take their small values)."""
    vocab_size: int | None = None
    """Largest BPE vocabulary (None: 1024; 512 with --small). The environments' text holds
    about 1040 tokens' worth of merges; the trainer stops there."""
    rollouts: int | None = None
    """Rollouts per PPO iteration (None: 64; 8 with --small)."""
    iterations: int | None = None
    """PPO iterations of the 0.5B-sized model (None: 3; 2 with --small)."""
    sft_steps: int | None = None
    """SFT optimiser steps before PPO (None: 24; 3 with --small)."""
    sft_rows: int = 16
    """Segments per SFT step."""
    micro_batch_rows: int = 16
    """Segments per forward pass in the updates (24 layers of activations per row)."""
    ratio_tolerance: float = 1e-3
    """Largest |log ratio| allowed before the first actor step (cxsim train's default)."""
    tiny: bool = True
    """Also time the tiny preset's iterations on the device and on the CPU."""
    tiny_iterations: int = 2
    """Tiny-preset iterations per device (the fastest one is compared)."""
    cpu_threads: int = 1
    """torch threads for the CPU side of the comparison (cxsim train's default)."""
    seed: int = 0
    out: str | None = None
    """Also write the figures to this JSON file (None: print only)."""

    def __post_init__(self) -> None:
        from cxsim.devices import check_device_name

        check_device_name(self.device)
        for name in ("vocab_size", "rollouts", "iterations", "sft_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1; got {value}")
        if self.vocab_size is not None and self.vocab_size < 300:
            raise ValueError(
                f"--vocab-size {self.vocab_size}: a byte-level BPE needs at least 300 "
                "(256 bytes, the special tokens and some merges)"
            )
        if min(self.sft_rows, self.micro_batch_rows, self.tiny_iterations, self.cpu_threads) < 1:
            raise ValueError(
                "--sft-rows, --micro-batch-rows, --tiny-iterations and --cpu-threads must be >= 1"
            )
        if self.ratio_tolerance <= 0:
            raise ValueError(f"--ratio-tolerance must be positive; got {self.ratio_tolerance}")

    def size(self, name: str) -> int:
        """A size flag, or its default for this mode."""
        defaults = {"vocab_size": (1024, 512), "rollouts": (64, 8), "iterations": (3, 2),
                    "sft_steps": (24, 3)}  # fmt: skip
        value = getattr(self, name)
        return value if value is not None else defaults[name][int(self.small)]


# --------------------------------------------------------------------------- placement


class OnDevice(torch.nn.Module):
    """Wraps a critic so that it takes CPU inputs and returns CPU values (with their graph),
    for ``score_batch``, which builds its value tensor on the CPU."""

    def __init__(self, module: torch.nn.Module, device: torch.device):
        super().__init__()
        self.module = module
        self.device = device

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor:
        moved = None if context is None else context.to(self.device)
        values = self.module(
            input_ids.to(self.device), attention_mask.to(self.device), context=moved
        )
        return values.to(input_ids.device)


def scored_to(scored: ScoredBatch, device: torch.device) -> ScoredBatch:
    """The scored batch with every tensor on ``device``."""
    from cxsim.ppo import ScoredBatch

    tokens, ref = scored.rollout_tokens, scored.ref_logprobs
    return ScoredBatch(
        scored.batch.to(device), scored.values.to(device), scored.advantages.to(device),
        scored.returns.to(device), scored.policy_mask.to(device), scored.lam.to(device),
        None if tokens is None else tokens.to(device), None if ref is None else ref.to(device),
    )  # fmt: skip


def synchronize(device: torch.device) -> None:
    """Waits for the device's queued work (timings end when the work does)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory(device: torch.device) -> str:
    """Peak allocated GPU memory since the last reset, or ``n/a`` off CUDA."""
    if device.type != "cuda":
        return "n/a"
    return f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"


# --------------------------------------------------------------------------- one iteration


@dataclass
class Learner:
    """A policy and its critic on one device, with their optimisers and a sampling agent."""

    policy: Any
    critic: Any
    reference: Any
    """The starting policy, frozen: the KL penalty's reference (``--ppo.kl-coef``)."""
    actor_opt: Any
    critic_opt: Any
    agent: Any
    device: torch.device

    @classmethod
    def build(
        cls, policy: Any, chat: ChatFormat, ppo: PPOConfig, device: torch.device, seed: int
    ) -> Learner:
        from cxsim.agents.critic import Critic
        from cxsim.agents.lm_agent import LMAgent
        from cxsim.generation import SamplingConfig

        policy = policy.to(device)
        critic = Critic.from_policy(policy).to(device)
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
        sampling = SamplingConfig(temperature=ppo.temperature, seed=seed)
        return cls(
            policy,
            critic,
            reference,
            torch.optim.Adam(policy.parameters(), lr=ppo.actor_lr),
            torch.optim.Adam(critic.parameters(), lr=ppo.critic_lr),
            LMAgent(policy, chat, sampling, device=device),
            device,
        )


def ppo_iteration(
    learner: Learner, ppo: PPOConfig, compaction: CompactionConfig, chat: ChatFormat, first: int
) -> dict[str, float]:
    """One PPO iteration (collect, score, critic and actor updates) on ``learner.device``:
    seconds, tokens and rates of the rollouts and of the update, the first |log ratio|."""
    from cxsim.config import DEFAULT_ENV_KWARGS
    from cxsim.ppo import actor_update, critic_update, score_batch
    from cxsim.runtime import collect_rollouts
    from cxsim.segments import pack_segments
    from cxsim.stabilisers import reference_logprobs

    device = learner.device
    seeds = list(range(first, first + ppo.rollouts_per_batch))
    runtime = replace(compaction, protocol="compacted")
    synchronize(device)
    tick = time.perf_counter()
    with torch.no_grad():
        rollouts = collect_rollouts(ENV_ID, DEFAULT_ENV_KWARGS, learner.agent, runtime, seeds, chat)
    learner.agent.forget()
    synchronize(device)
    rollout_s = time.perf_counter() - tick
    batch = pack_segments(rollouts.segments, chat.pad_id, learner.agent.sampling.temperature)
    tick = time.perf_counter()
    critic = OnDevice(learner.critic, device)
    ref = reference_logprobs(learner.reference, batch.to(device), ppo).cpu()  # the KL penalty's
    scored, _ = score_batch(
        batch, critic, ppo, continuation=chat.assistant_prefix(), ref_logprobs=ref
    )
    scored = scored_to(scored, device)
    passes = ppo.critic_ratio * ppo.epochs
    stats = critic_update(learner.critic, learner.critic_opt, scored, ppo, passes)
    stats |= actor_update(learner.policy, learner.actor_opt, scored, ppo)
    synchronize(device)
    update_s = time.perf_counter() - tick
    sampled = sum(r.tokens_generated for r in rollouts.records)
    tokens = float(batch.attention.sum())
    return {
        "rollout_s": rollout_s,
        "update_s": update_s,
        "iteration_s": rollout_s + update_s,
        "rollout_tokens": float(sampled),
        "rollout_tokens_per_s": sampled / rollout_s,
        "trained_tokens": tokens,
        "trained_tokens_per_s": tokens / update_s,
        "segments": float(len(batch)),
        "success_rate": sum(r.success for r in rollouts.records) / len(rollouts.records),
        "compactions": float(sum(r.compactions for r in rollouts.records)),
        "first_log_ratio_max": stats["losses/first_log_ratio_max"],
    }


def print_iteration(label: str, it: dict[str, float], memory: str) -> None:
    print(
        f"{label}: {it['rollout_tokens']:.0f} tokens sampled in {it['rollout_s']:.2f} s = "
        f"{it['rollout_tokens_per_s']:.0f} rollout tokens/s; {it['segments']:.0f} segments, "
        f"{it['trained_tokens']:.0f} tokens updated in {it['update_s']:.2f} s = "
        f"{it['trained_tokens_per_s']:.0f} trained tokens/s; success {it['success_rate']:.2f}, "
        f"{it['compactions']:.0f} compactions; peak memory {memory}",
        flush=True,
    )


# --------------------------------------------------------------------------- the two parts


def ppo_config(cfg: Config, rollouts: int, lr: float) -> PPOConfig:
    """The PPO settings of both parts: cxsim train's, with no warm-up and the ratio checked
    here (reported, not raised) so that every figure is printed."""
    from cxsim.config import PPOConfig

    return PPOConfig(
        rollouts_per_batch=rollouts,
        iterations=1,
        critic_warmup=0,
        micro_batch_rows=cfg.micro_batch_rows,
        actor_lr=lr,
        critic_lr=lr,
        ratio_check_atol=None,
    )


def sft(policy: Any, chat: ChatFormat, compaction: CompactionConfig, cfg: Config) -> dict:
    """A short SFT on scripted demonstrations (omission rate 0.5, as ``cxsim sft``)."""
    from cxsim.agents.scripted import ScriptedAgent
    from cxsim.config import DEFAULT_ENV_KWARGS
    from cxsim.runtime import collect_rollouts
    from cxsim.segments import pack_segments
    from cxsim.sft import epoch_batches, sft_step

    steps, rows = cfg.size("sft_steps"), cfg.sft_rows
    agent = ScriptedAgent(ENV_ID, chat, omission_rate=0.5, seed=cfg.seed)
    episodes = max(8, steps * rows // 4)  # about 4 segments per episode
    seeds = list(range(10_000, 10_000 + episodes))
    data = collect_rollouts(ENV_ID, DEFAULT_ENV_KWARGS, agent, compaction, seeds, chat)
    batch = pack_segments(data.segments, chat.pad_id)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-4)
    device = policy.device
    synchronize(device)
    tick = time.perf_counter()
    done, trained, stats = 0, 0, {}
    while done < steps:
        for picked in epoch_batches(len(batch), rows):
            if done == steps:
                break
            step = batch.select(picked)
            stats = sft_step(policy, opt, step, cfg.micro_batch_rows, 1.0)
            trained += int(step.attention.sum())
            done += 1
    synchronize(device)
    seconds = time.perf_counter() - tick
    print(
        f"sft: {steps} steps of {rows} segments ({len(batch)} segments from {episodes} scripted "
        f"episodes), {trained} tokens in {seconds:.2f} s = {trained / seconds:.0f} tokens/s; "
        f"last loss {stats['losses/sft']:.3f}",
        flush=True,
    )
    return {
        "sft_s": seconds,
        "sft_tokens_per_s": trained / seconds,
        "sft_loss": stats["losses/sft"],
    }


def qwen_part(cfg: Config, device: torch.device) -> dict[str, Any]:
    """Part 1: the 0.5B-sized Qwen2 with a local BPE tokenizer through SFT and PPO."""
    from cxsim.agents.chat import HFChatFormat
    from cxsim.agents.models import count_parameters
    from cxsim.config import DEFAULT_COMPACTION, EnvConfig
    from cxsim.preflight import preflight

    tick = time.perf_counter()
    tokenizer = bpe_tokenizer(cfg.size("vocab_size"), env_corpus())
    chat = HFChatFormat(tokenizer)
    compaction = preflight(EnvConfig(env_id=ENV_ID), DEFAULT_COMPACTION, chat)
    shape = SMALL_SHAPE if cfg.small else QWEN05_SHAPE
    policy = qwen2_policy(tokenizer, shape, device, cfg.seed)
    synchronize(device)
    print(
        f"qwen2: {shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}, "
        f"{count_parameters(policy) / 1e6:.1f}M parameters, BPE vocabulary {len(tokenizer)}, "
        f"ChatML; sizes for this chat format: budget {compaction.budget}, threshold "
        f"{compaction.threshold}, max response {compaction.max_response_tokens}, max summary "
        f"{compaction.max_summary_tokens} tokens (pre-flight passed); built in "
        f"{time.perf_counter() - tick:.1f} s",
        flush=True,
    )
    results: dict[str, Any] = {"parameters": count_parameters(policy), "vocab": len(tokenizer)}
    results |= sft(policy, chat, compaction, cfg)
    ppo = ppo_config(cfg, cfg.size("rollouts"), lr=1e-6)
    learner = Learner.build(policy, chat, ppo, device, cfg.seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    iterations = []
    for k in range(cfg.size("iterations")):
        it = ppo_iteration(learner, ppo, compaction, chat, first=k * ppo.rollouts_per_batch)
        iterations.append(it)
        print_iteration(f"ppo {k + 1}/{cfg.size('iterations')}", it, peak_memory(device))
    worst = iterations[0]["first_log_ratio_max"]
    within = worst <= cfg.ratio_tolerance
    print(
        f"first-step ratio: max |log ratio| {worst:.2e} before any actor step (ratio within "
        f"exp(+-{worst:.2e})); tolerance {cfg.ratio_tolerance:g}: {'within' if within else 'OUTSIDE'}",
        flush=True,
    )
    n = len(iterations)
    results |= {
        "iterations": iterations,
        "rollout_tokens_per_s": sum(i["rollout_tokens"] for i in iterations)
        / sum(i["rollout_s"] for i in iterations),
        "trained_tokens_per_s": sum(i["trained_tokens"] for i in iterations)
        / sum(i["update_s"] for i in iterations),
        "iteration_s": sum(i["iteration_s"] for i in iterations) / n,
        "peak_memory": peak_memory(device),
        "peak_memory_gib": (
            torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        ),
        "first_log_ratio_max": worst,
        "first_ratio_within_tolerance": within,
    }
    del learner, policy
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return results


def tiny_seconds(cfg: Config, device: torch.device) -> float:
    """The fastest of ``tiny_iterations`` PPO iterations of the tiny preset on ``device``."""
    from cxsim.agents import WordChatFormat, build_policy, default_tokenizer
    from cxsim.config import DEFAULT_COMPACTION, EnvConfig
    from cxsim.evaluation import torch_threads
    from cxsim.preflight import preflight

    tokenizer = default_tokenizer()
    chat = WordChatFormat(tokenizer)
    compaction = preflight(EnvConfig(env_id=ENV_ID), DEFAULT_COMPACTION, chat)
    ppo = ppo_config(cfg, cfg.size("rollouts") // 2 if cfg.small else 32, lr=1e-3)
    threads = cfg.cpu_threads if device.type == "cpu" else 0
    with torch_threads(threads):
        learner = Learner.build(build_policy("tiny", tokenizer, seed=cfg.seed), chat, ppo,
                                device, cfg.seed)  # fmt: skip
        times = []
        for k in range(cfg.tiny_iterations):
            it = ppo_iteration(learner, ppo, compaction, chat, first=k * ppo.rollouts_per_batch)
            times.append(it["iteration_s"])
            print_iteration(f"tiny on {device} {k + 1}/{cfg.tiny_iterations}", it, "-")
    return min(times)


def run(cfg: Config) -> dict[str, Any]:
    """Runs both parts; returns their figures (rates, seconds, peak memory, ratios) and
    writes them to ``cfg.out``. A part that fails is reported with its traceback and the
    other part still runs (one call on a GPU machine gives all it can); then this raises."""
    from cxsim.devices import resolve_device

    device = resolve_device(cfg.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"bench gpu: device {device} ({name}), torch {torch.__version__}, "
        f"{'small rehearsal' if cfg.small else 'Qwen2.5-0.5B-sized'}",
        flush=True,
    )
    tick = time.perf_counter()
    results: dict[str, Any] = {"device": str(device), "device_name": name, "failed": []}
    parts = {"qwen2": lambda: qwen_part(cfg, device)}
    if cfg.tiny:
        parts["tiny"] = lambda: tiny_part(cfg, device)
    for part, measure in parts.items():
        try:
            results[part] = measure()
        except Exception:
            print(f"bench gpu: part {part} FAILED:\n{traceback.format_exc()}", flush=True)
            results["failed"].append(part)
    if "qwen2" in results:
        q = results["qwen2"]
        print(
            f"summary: rollout {q['rollout_tokens_per_s']:.0f} tokens/s, trained "
            f"{q['trained_tokens_per_s']:.0f} tokens/s, peak memory {q['peak_memory']}, "
            f"first-step |log ratio| {q['first_log_ratio_max']:.2e}"
            + (f", tiny {results['tiny']['ratio']:.2f}x CPU" if "tiny" in results else ""),
            flush=True,
        )
    print(f"bench gpu: {time.perf_counter() - tick:.0f} s in all", flush=True)
    if cfg.out is not None:
        path = Path(cfg.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"config": asdict(cfg), **results}, indent=2) + "\n")
        print(f"figures written to {path}")
    if results["failed"]:
        raise RuntimeError(f"bench gpu: these parts failed: {', '.join(results['failed'])}")
    return results


def tiny_part(cfg: Config, device: torch.device) -> dict[str, float]:
    """Part 2: the tiny preset's iteration time on ``device`` over its time on the CPU."""
    on_device = tiny_seconds(cfg, device)
    on_cpu = tiny_seconds(cfg, torch.device("cpu"))
    ratio = on_device / on_cpu
    print(
        f"tiny preset: iteration {on_device:.2f} s on {device}, {on_cpu:.2f} s on the CPU "
        f"({cfg.cpu_threads} thread(s)): {ratio:.2f}x the CPU time",
        flush=True,
    )
    return {"device_s": on_device, "cpu_s": on_cpu, "ratio": ratio}


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

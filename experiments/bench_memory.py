"""Benchmark: memory and time of the actor's loss head, before and after scoring only
the positions the loss needs.

``before``: ``sequence_logprobs(..., return_entropy=True)``, what the PPO update
calls today: logits, log-softmax, its exponential and their product over every
position, each (rows x tokens x vocab) in float32. ``after``:
``token_logprobs_at`` at the trainable positions: the LM head runs on those
states only, in chunks of at most ``HEAD_CHUNK_ELEMENTS`` logits, each
recomputed in the backward pass when there is more than one.

Each case runs one forward and backward pass of the PPO-style loss (log-prob
plus entropy at the trainable positions) over one micro-batch, in its own
process: the peak is the growth of the process's resident memory during the
pass (``VmHWM`` reset through ``/proc/self/clear_refs``, minus ``VmRSS`` before;
it includes the decoder's parameter gradients, the same in both; the tied
embedding's own gradient is left out unless ``--embedding-grad``). The model is shaped
like Qwen2.5-0.5B (hidden 896, 14 heads, 2 KV heads, MLP 4864, vocabulary
151,936, tied embeddings) with ``--layers`` decoder layers (default 2, not 24,
so that it runs in minutes on a CPU; the head, the part that changes, is
full-size). Rows are short windows of ``--window`` tokens whose last
``--trainable-fraction`` are trainable (responses), at two micro-batch token
budgets.

Then the tiny preset on real SFT demonstrations: seconds per optimiser step's
forward and backward passes, before and after, side by side.

    cxsim bench memory
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

METHODS = ("before", "after")


@dataclass(frozen=True)
class Config:
    """Loss-head peak memory and time per token, before/after, at two token budgets."""

    budgets: tuple[int, ...] = (512, 1024)
    """Micro-batch token budgets (rows = budget / window)."""
    window: int = 128
    """Tokens per row (a short context window)."""
    trainable_fraction: float = 0.25
    """Share of each row's tokens that are trainable (its last ones)."""
    layers: int = 2
    """Decoder layers of the Qwen2.5-0.5B-shaped model (the real one has 24)."""
    vocab: int = 151936
    """Vocabulary size (Qwen2.5's)."""
    threads: int = 2
    """torch intra-op threads in each measuring process."""
    embedding_grad: bool = False
    """Also compute the gradient of the (tied) embedding / LM-head matrix. Off by default:
    that dense vocab x hidden gradient (545 MB, three copies at its peak with tied weights)
    is the same before and after and would hide the loss head's own memory."""
    tiny_sft: bool = True
    """Also time SFT passes of the tiny preset on real demonstrations, before/after."""
    seed: int = 0

    def __post_init__(self) -> None:
        if any(b < self.window for b in self.budgets):
            raise ValueError(f"every budget must hold at least one row of {self.window} tokens")
        if not 0.0 < self.trainable_fraction <= 1.0:
            raise ValueError("trainable_fraction must be in (0, 1]")
        if self.layers < 1 or self.window < 2:
            raise ValueError("layers must be >= 1 and window >= 2")


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _qwen_shaped(cfg: Config) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=cfg.vocab,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=cfg.layers,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
    )
    torch.manual_seed(cfg.seed)
    return Qwen2ForCausalLM(config)


def _loss(model, method: str, ids, mask, trainable) -> torch.Tensor:
    from cxsim.agents.models import sequence_logprobs, token_logprobs_at

    if method == "before":
        logprobs, entropy = sequence_logprobs(model, ids, mask, return_entropy=True)
    else:
        logprobs, entropy = token_logprobs_at(model, ids, mask, trainable, return_entropy=True)
    return -((logprobs + 0.01 * entropy) * trainable).sum() / trainable.sum()


def _measure(cfg: Config, method: str, budget: int, out: mp.Queue) -> None:
    """In a fresh process: one forward+backward pass; puts (peak bytes, seconds)."""
    torch.set_num_threads(cfg.threads)
    model = _qwen_shaped(cfg)
    model.get_input_embeddings().weight.requires_grad_(cfg.embedding_grad)
    rows = budget // cfg.window
    g = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(0, cfg.vocab, (rows, cfg.window), generator=g)
    mask = torch.ones_like(ids)
    trainable = torch.zeros_like(ids, dtype=torch.bool)
    trainable[:, cfg.window - max(1, int(cfg.trainable_fraction * cfg.window)) :] = True
    _loss(model, method, ids[:1, -8:], mask[:1, -8:], trainable[:1, -8:]).backward()  # warm-up
    model.zero_grad(set_to_none=True)
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _status_kb("VmRSS")
    start = time.perf_counter()
    _loss(model, method, ids, mask, trainable).backward()
    seconds = time.perf_counter() - start
    out.put(((_status_kb("VmHWM") - before) * 1024.0, seconds))


def measure(cfg: Config, method: str, budget: int) -> tuple[float, float]:
    """(peak bytes, seconds) of one case, in its own process."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_measure, args=(cfg, method, budget, queue))
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(
            f"measuring {method} at {budget} tokens failed (exit {process.exitcode})"
        )
    return queue.get(timeout=10)


def tiny_sft_seconds(cfg: Config) -> dict[str, float]:
    """Seconds of the forward+backward passes of one SFT step (16 rows, micro-batches of 32)
    over tiny-preset demonstrations, with each scoring function; best of three."""
    from cxsim.agents import WordChatFormat, build_policy, default_tokenizer
    from cxsim.agents.models import sequence_logprobs, token_logprobs_at
    from cxsim.agents.scripted import ScriptedAgent
    from cxsim.config import DEFAULT_COMPACTION, EnvConfig
    from cxsim.runtime import collect_rollouts
    from cxsim.segments import pack_segments

    torch.set_num_threads(1)
    tokenizer = default_tokenizer()
    chat = WordChatFormat(tokenizer)
    env = EnvConfig()
    agent = ScriptedAgent(env.env_id, chat, omission_rate=0.5, seed=cfg.seed)
    data = collect_rollouts(
        env.env_id, env.kwargs, agent, DEFAULT_COMPACTION, list(range(64)), chat
    )
    batch = pack_segments(data.segments, chat.pad_id)
    policy = build_policy("tiny", tokenizer, seed=cfg.seed)
    times = {}
    for method in METHODS:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for first in range(0, len(batch), 16):
                rows = batch.select(list(range(first, min(first + 16, len(batch)))))
                ids, mask, trainable = rows.token_ids, rows.attention, rows.trainable
                if method == "before":
                    logprobs = sequence_logprobs(policy, ids, mask)
                else:
                    logprobs = token_logprobs_at(policy, ids, mask, trainable)
                (-(logprobs * trainable).sum()).backward()
            best = min(best, time.perf_counter() - start)
        times[method] = best
    policy.zero_grad(set_to_none=True)
    print(
        f"tiny preset, SFT passes over {len(batch)} segments ({batch.num_trainable} trainable "
        f"of {int(batch.attention.sum())} tokens): before {times['before']:.2f} s, after "
        f"{times['after']:.2f} s = {times['after'] / times['before']:.2f}x"
    )
    return times


def run(cfg: Config) -> dict[str, float]:
    """Runs every case; returns ``<method>/<budget>/peak_mb`` and ``.../us_per_token``."""
    results: dict[str, float] = {}
    print(
        f"bench memory: Qwen2.5-0.5B-shaped, {cfg.layers} layers, vocab {cfg.vocab}, "
        f"windows of {cfg.window} tokens ({cfg.trainable_fraction:.0%} trainable), "
        f"{cfg.threads} threads"
    )
    print(f"{'method':>7} {'tokens':>6} {'rows':>4} {'peak MB':>9} {'MB/token':>9} {'ms/token':>9}")
    for budget in cfg.budgets:
        for method in METHODS:
            peak, seconds = measure(cfg, method, budget)
            tokens = (budget // cfg.window) * cfg.window
            results[f"{method}/{budget}/peak_mb"] = peak / 2**20
            results[f"{method}/{budget}/ms_per_token"] = 1e3 * seconds / tokens
            print(
                f"{method:>7} {tokens:6d} {budget // cfg.window:4d} {peak / 2**20:9.0f} "
                f"{peak / 2**20 / tokens:9.2f} {1e3 * seconds / tokens:9.2f}"
            )
    for budget in cfg.budgets:
        ratio = results[f"after/{budget}/peak_mb"] / results[f"before/{budget}/peak_mb"]
        speed = results[f"after/{budget}/ms_per_token"] / results[f"before/{budget}/ms_per_token"]
        print(f"after / before at {budget} tokens: peak memory {ratio:.2f}x, time {speed:.2f}x")
    if cfg.tiny_sft:
        for method, seconds in tiny_sft_seconds(cfg).items():
            results[f"tiny_sft/{method}/seconds"] = seconds
    return results


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

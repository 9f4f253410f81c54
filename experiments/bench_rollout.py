"""Benchmark: batched compaction rollouts with a reused KV cache against naive loops.

All three agents run the same runtime (``cxsim.runtime.collect_rollouts``) with
the same policy, environment and compaction config; only how responses are
generated differs:

- ``lm-agent``: ``LMAgent``: every row in one forward per decode step, the KV
  cache kept across turns (only new tokens are encoded);
- ``per-env``: for each request, ``model.generate`` on the row's whole context,
  one environment at a time (re-encoding everything every turn);
- ``batched``: one ``model.generate`` per turn over all rows, left-padded,
  re-encoding every context.

Reported: generated tokens per second (responses and summaries), the ratio
of ``lm-agent`` to each baseline, and whether the target (``lm-agent`` faster
than ``per-env``: ``target_ratio``) is met. ``per-env`` is sequential, so its tokens per
second do not depend on how many environments it runs: it runs on the first
``naive_envs`` seeds only, to keep the benchmark short.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import torch
import tyro
from transformers import PreTrainedModel

from cxsim.agent_api import Agent, TurnRequest, TurnResponse
from cxsim.agents.chat import ChatFormat, WordChatFormat
from cxsim.agents.lm_agent import LMAgent
from cxsim.agents.models import PresetName, build_policy, load_policy
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.generation import SamplingConfig
from cxsim.runtime import CompactionConfig, collect_rollouts


@dataclass(frozen=True)
class Config:
    """Generated tokens per second of the batched runtime against naive loops."""

    env_id: str = "cxsim/KeyRecall-v0"
    """Environment (registered id)."""
    num_envs: int = 64
    """Environments run in lockstep by ``lm-agent`` and ``batched``."""
    naive_envs: int = 8
    """Environments run by the sequential ``per-env`` baseline (its tokens/s do not depend on it)."""
    preset: PresetName = "tiny"
    """Size of the randomly initialised policy (it writes long, unterminated responses:
    the regime least favourable to cache reuse)."""
    policy: str | None = None
    """A saved policy directory to use instead (e.g. an SFT checkpoint: short responses)."""
    baselines: tuple[Literal["per-env", "batched"], ...] = ("per-env", "batched")
    """Naive loops to compare against."""
    compaction: CompactionConfig = field(default_factory=lambda: CompactionConfig(max_turns=12))
    """Runtime settings shared by every agent."""
    threads: int | None = 1
    """torch intra-op threads (None: torch's default). One thread is fastest for tiny
    models and robust on a shared machine (two threads were 10x slower under load)."""
    seed: int = 0
    """Seeds the policy and sampling; environment seeds are seed, seed+1, ..."""
    target_ratio: float = 1.0
    """Speed target: lm-agent tokens/s over per-env tokens/s at least this."""


class NaiveAgent:
    """Re-encodes each row's whole context and calls ``model.generate`` every turn."""

    def __init__(self, model: PreTrainedModel, chat: ChatFormat, temperature: float, batched: bool):
        self.model = model
        self.chat = chat
        self.temperature = temperature
        self.batched = batched
        self.context: dict[int, list[int]] = {}

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        prompts = []
        for r in requests:
            previous = [] if r.reset else self.context[r.row]
            prompts.append(previous + list(r.append))
        groups = [requests] if self.batched else [[r] for r in requests]
        new: dict[int, list[int]] = {}
        for group in groups:
            rows = [prompts[requests.index(r)] for r in group]
            outs = self.generate(rows, max(r.max_new_tokens for r in group))
            for r, out in zip(group, outs, strict=True):
                ids = out[: r.max_new_tokens]
                if self.chat.end_id in ids:
                    ids = ids[: ids.index(self.chat.end_id) + 1]
                new[r.row] = ids
        responses = []
        for r, prompt in zip(requests, prompts, strict=True):
            ids = new[r.row]
            self.context[r.row] = prompt + ids
            responses.append(TurnResponse.scripted(ids, self.chat))
        return responses

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        width = max(len(p) for p in prompts)
        pad = self.chat.pad_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=True,
            temperature=self.temperature,
            top_k=0,
            top_p=1.0,
            eos_token_id=self.chat.end_id,
            pad_token_id=pad,
        )
        return [row[width:].tolist() for row in out]


def measure(
    name: str, agent: Agent, cfg: Config, chat: ChatFormat, num_envs: int
) -> tuple[float, int, float]:
    """(seconds, generated tokens, tokens per second) of one batch of rollouts."""
    seeds = [cfg.seed + i for i in range(num_envs)]
    start = time.perf_counter()
    batch = collect_rollouts(cfg.env_id, {}, agent, cfg.compaction, seeds, chat)
    seconds = time.perf_counter() - start
    tokens = sum(r.tokens_generated for r in batch.records)
    turns = sum(r.turns for r in batch.records)
    compactions = sum(r.compactions for r in batch.records)
    print(
        f"{name:>9}: {num_envs:3d} envs, {turns:5d} turns, {compactions:4d} compactions, "
        f"{tokens:6d} tokens in {seconds:6.2f} s = {tokens / seconds:7.0f} tokens/s"
    )
    return seconds, tokens, tokens / seconds


def run(cfg: Config) -> dict[str, float]:
    """Runs the benchmark; returns tokens/s per agent and ``ratio/<baseline>``."""
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    if cfg.policy is None:
        tokenizer = default_tokenizer()
        chat: ChatFormat = WordChatFormat(tokenizer)
        model = build_policy(cfg.preset, tokenizer, seed=cfg.seed)
    else:
        model, _, chat = load_policy(cfg.policy)
    torch.manual_seed(cfg.seed)
    sampling = SamplingConfig(seed=cfg.seed)
    policy = cfg.policy or f"random-init {cfg.preset}"
    print(f"bench rollout: {cfg.env_id}, {policy} policy, torch threads {torch.get_num_threads()}")
    results = {
        "lm-agent": measure("lm-agent", LMAgent(model, chat, sampling), cfg, chat, cfg.num_envs)[2]
    }
    for baseline in cfg.baselines:
        agent = NaiveAgent(model, chat, sampling.temperature, batched=baseline == "batched")
        envs = cfg.naive_envs if baseline == "per-env" else cfg.num_envs
        results[baseline] = measure(baseline, agent, cfg, chat, envs)[2]
    for baseline in cfg.baselines:
        ratio = results["lm-agent"] / results[baseline]
        results[f"ratio/{baseline}"] = ratio
        print(f"lm-agent / {baseline}: {ratio:.1f}x")
    if "per-env" in cfg.baselines:
        met = results["ratio/per-env"] >= cfg.target_ratio
        print(f"target lm-agent / per-env >= {cfg.target_ratio:.1f}x: {'met' if met else 'MISSED'}")
    return results


def main(argv: list[str] | None = None) -> None:
    run(tyro.cli(Config, args=argv))


if __name__ == "__main__":
    main()

"""LMAgent: recorded log-probs equal a one-pass re-score; cache reuse across turns and rows."""

from __future__ import annotations

from functools import cache

import pytest
import torch

from cxsim.agent_api import TurnRequest
from cxsim.agents.chat import WordChatFormat
from cxsim.agents.lm_agent import LMAgent
from cxsim.agents.models import build_policy, sequence_logprobs
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.generation import SamplingConfig
from cxsim.runtime import CompactionConfig, collect_rollouts


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@cache
def setup():
    tokenizer = default_tokenizer()
    return build_policy("tiny", tokenizer, seed=0), WordChatFormat(tokenizer)


def rescore(model, segment, temperature: float) -> torch.Tensor:
    ids = torch.tensor([segment.token_ids])
    with torch.no_grad():
        return sequence_logprobs(model, ids, torch.ones_like(ids), temperature=temperature)[0]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recorded_logprobs_equal_a_one_pass_rescore(temperature):
    model, chat = setup()
    agent = LMAgent(model, chat, SamplingConfig(temperature=temperature, seed=0))
    cfg = CompactionConfig(max_turns=14, max_compactions=2)
    batch = collect_rollouts("cxsim/KeyRecall-v0", {}, agent, cfg, list(range(6)), chat)
    assert all(r.compactions >= 1 and r.turns > 4 for r in batch.records)
    roles = {s.role for s in batch.segments}
    assert roles == {"execution", "summary"}
    worst = 0.0
    for seg in batch.segments:
        mask = torch.tensor(seg.trainable)
        recorded = torch.tensor(seg.logprobs)
        assert torch.all(recorded[~mask] == 0.0)
        worst = max(worst, float((rescore(model, seg, temperature) - recorded)[mask].abs().max()))
        assert len(seg.token_ids) <= cfg.budget
    assert worst <= 1e-4


def test_agent_matches_greedy_generate_and_respects_caps():
    model, chat = setup()
    agent = LMAgent(model, chat, SamplingConfig(greedy=True))
    prompts = [
        chat.system("you walk a corridor .") + chat.task(t) for t in ("the key is k3 .", "say next")
    ]
    caps = [5, 9]
    requests = [
        TurnRequest(
            row=r, kind="act", append=p, reset=True, max_new_tokens=c, context_text="", info={}
        )
        for r, (p, c) in enumerate(zip(prompts, caps, strict=True))
    ]
    responses = agent.respond(requests)
    for prompt, cap, resp in zip(prompts, caps, responses, strict=True):
        with torch.no_grad():
            out = model.generate(
                input_ids=torch.tensor([prompt]), max_new_tokens=cap, do_sample=False,
                eos_token_id=chat.end_id, pad_token_id=chat.pad_id,
            )[0, len(prompt) :].tolist()  # fmt: skip
        assert resp.token_ids == out[: len(resp.token_ids)]
        assert len(resp.token_ids) <= cap and len(resp.logprobs) == len(resp.token_ids)
        assert resp.finished == (resp.token_ids[-1] == chat.end_id)
        assert resp.text == chat.decode(resp.token_ids)


def test_cache_is_reused_across_turns_and_stays_bounded():
    model, chat = setup()
    agent = LMAgent(model, chat, SamplingConfig(seed=3))
    contexts: dict[int, list[int]] = {0: [], 1: []}
    obs = chat.observation("you pass a row of old doors .") + chat.assistant_prefix()
    for turn in range(12):
        reset = turn % 5 == 0
        requests = []
        for row in (0, 1):
            append = chat.system("the key is k3 .") + chat.assistant_prefix() if reset else obs
            contexts[row] = append if reset else contexts[row] + append
            requests.append(
                TurnRequest(row, "act", append, reset, max_new_tokens=6, context_text="", info={})
            )
        for row, resp in zip((0, 1), agent.respond(requests), strict=True):
            start = len(contexts[row])
            contexts[row] += resp.token_ids
            seg = type("S", (), {"token_ids": contexts[row]})
            torch.testing.assert_close(
                rescore(model, seg, 1.0)[start:], torch.tensor(resp.logprobs), atol=1e-4, rtol=0
            )
        # Only the new chunk (plus the last sampled token) was encoded: the cache holds the window.
        assert agent.cache.length.tolist() == [len(contexts[r]) - 1 for r in (0, 1)]
        assert agent.cache.columns <= max(len(c) for c in contexts.values()) + 32 + len(obs) + 6
    with pytest.raises(ValueError, match="send reset=True"):
        agent.respond([TurnRequest(5, "act", obs, False, 3, "", {})])
    agent.forget()
    assert agent.cache.columns == 0


def test_bf16_agent_on_cpu_samples_close_to_fp32():
    """bf16 autocast sampling: the same greedy actions on a tiny policy, log-probs near fp32's."""
    model, chat = setup()
    cfg = CompactionConfig(max_turns=6, max_compactions=1)
    runs = []
    for precision in ("fp32", "bf16"):
        agent = LMAgent(model, chat, SamplingConfig(greedy=True), precision=precision)
        runs.append(collect_rollouts("cxsim/KeyRecall-v0", {}, agent, cfg, [0, 1], chat))
    assert [r.turns for r in runs[0].records] == [r.turns for r in runs[1].records]
    first = runs[0].segments[0]
    same = runs[1].segments[0]
    agree = sum(a == b for a, b in zip(first.token_ids, same.token_ids, strict=False))
    assert agree >= 0.9 * len(first.token_ids)
    gap = max(abs(a - b) for a, b in zip(first.logprobs, same.logprobs, strict=False))
    assert 0 < gap < 0.2  # bf16 rounding: not exactly fp32, not another model


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_agent_on_cuda_matches_cpu_greedy():
    model, chat = setup()
    gpu_model = build_policy("tiny", default_tokenizer(), seed=0)
    cfg = CompactionConfig(max_turns=8, max_compactions=2)
    runs = []
    for policy, device in ((model, "cpu"), (gpu_model, "cuda")):
        agent = LMAgent(policy, chat, SamplingConfig(greedy=True), device=device)
        assert agent.cache.device.type == device
        runs.append(collect_rollouts("cxsim/KeyRecall-v0", {}, agent, cfg, list(range(4)), chat))
    assert next(gpu_model.parameters()).device.type == "cuda"
    for a, b in zip(runs[0].segments, runs[1].segments, strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3

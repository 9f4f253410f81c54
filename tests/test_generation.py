"""Sampling and the shared row cache: masked holes, resets, re-packing, sliding-window layers,
refused architectures, the cache argument's name; the rollout benchmark's output. Every
architecture transformers builds: tests/test_architecture_sweep.py."""

from __future__ import annotations

from functools import cache

import pytest
import torch
import torch.nn.functional as F

from cxsim.agents.models import build_policy
from cxsim.agents.tokenizer import build_tokenizer
from cxsim.cli import main as cli_main
from cxsim.generation import RowCache, SamplingConfig, sample_next
from cxsim.servable import FULL, AttentionLayout, attention_layout, cache_argument


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread (and far faster on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@cache
def model():
    return build_policy("tiny", build_tokenizer([f"w{i}" for i in range(40)]), seed=0)


def clean_logits(tokens: list[int]) -> torch.Tensor:
    """Logits after the last token, from one forward over the row alone."""
    with torch.inference_mode():
        return model()(input_ids=torch.tensor([tokens])).logits[0, -1]


def test_sampling_config_validation():
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)


def test_sample_next_logprobs_greedy_and_top_p():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 30, generator=g)
    tok, logp = sample_next(logits, SamplingConfig(greedy=True, temperature=2.0), None)
    assert torch.equal(tok, logits.argmax(-1))
    expected = F.log_softmax(logits / 2.0, -1).gather(-1, tok[:, None]).squeeze(-1)
    torch.testing.assert_close(logp, expected)

    # top-p: samples stay in the nucleus; log-probs still come from the full softmax.
    logits = torch.tensor([[5.0, 4.0, 0.0, 0.0, 0.0]]).repeat(2000, 1)
    tok, logp = sample_next(logits, SamplingConfig(top_p=0.5), torch.Generator().manual_seed(1))
    assert set(tok.tolist()) == {0}
    tok, logp = sample_next(logits, SamplingConfig(top_p=0.9), torch.Generator().manual_seed(1))
    assert set(tok.tolist()) == {0, 1}
    full = F.log_softmax(logits[0], -1)
    torch.testing.assert_close(logp, full[tok])

    # Frequencies follow the tempered softmax.
    logits = torch.tensor([[1.0, 0.0, -1.0]]).repeat(20000, 1)
    tok, _ = sample_next(logits, SamplingConfig(temperature=0.5), torch.Generator().manual_seed(2))
    freq = torch.bincount(tok, minlength=3).float() / len(tok)
    torch.testing.assert_close(freq, F.softmax(logits[0] / 0.5, -1), atol=0.015, rtol=0)


def test_row_cache_with_holes_matches_a_clean_forward():
    g = torch.Generator().manual_seed(0)
    rc = RowCache(model(), pad_id=0, device=torch.device("cpu"))
    contexts: dict[int, list[int]] = {}
    with torch.inference_mode():
        for turn in range(8):
            keys = [0, 1, 2] if turn < 4 else [0, 2, 5]  # row 1 leaves, row 5 joins
            reset = [turn == 0 or k not in contexts or (turn == 5 and k == 0) for k in keys]
            rc.arrange(keys, reset)
            chunks = []
            for k, r in zip(keys, reset, strict=True):
                n = int(torch.randint(0, 7, (1,), generator=g)) if not r else 5
                chunk = torch.randint(9, 49, (n,), generator=g).tolist()
                contexts[k] = chunk if r else contexts[k] + chunk
                chunks.append(chunk)
            logits = rc.append(chunks)
            for b, k in enumerate(keys):
                if chunks[b]:
                    torch.testing.assert_close(
                        logits[b], clean_logits(contexts[k]), atol=1e-5, rtol=0
                    )
            assert rc.length.tolist() == [len(contexts[k]) for k in keys]
    with pytest.raises(ValueError, match="send reset=True"):
        rc.arrange([0, 7], [False, False])


def test_row_cache_runs_rows_in_groups_by_chunk_length():
    rc = RowCache(model(), pad_id=0, device=torch.device("cpu"))
    contexts = {k: list(range(10 + k, 16 + k)) for k in range(6)}
    with torch.inference_mode():
        rc.arrange(list(range(6)), [True] * 6)
        rc.append([contexts[k] for k in range(6)])
        # One long reset-like chunk, short ones, and rows with nothing to add.
        chunks = [list(range(9, 49)), [11, 12], [13], [], [], []]
        before = rc.columns
        rc.arrange(list(range(6)), [True] + [False] * 5)
        contexts[0] = []
        for k, chunk in enumerate(chunks):
            contexts[k] = contexts[k] + chunk
        logits = rc.append(chunks)
        assert rc.columns - before == 40 + 2 + 1  # one forward per length group: 40, 2, 1
        for k in range(3):
            torch.testing.assert_close(logits[k], clean_logits(contexts[k]), atol=1e-5, rtol=0)
        logits = rc.append([[], [], [], [], [7 + 9], []])  # decoding with one row left
        contexts[4].append(16)
        torch.testing.assert_close(logits[4], clean_logits(contexts[4]), atol=1e-5, rtol=0)
        assert rc.length.tolist() == [len(contexts[k]) for k in range(6)]


def test_row_cache_repacks_masked_columns():
    rc = RowCache(model(), pad_id=0, device=torch.device("cpu"))
    long_row = [9, 10]
    with torch.inference_mode():
        rc.arrange([0, 1], [True, True])
        rc.append([list(range(9, 29)), long_row])
        for i in range(6):  # row 0 restarts each turn: its old columns become holes
            rc.arrange([0, 1], [True, False])
            chunk = list(range(10 + i, 30 + i))
            long_row = [*long_row, 14]
            logits = rc.append([chunk, [14]])
            torch.testing.assert_close(logits[0], clean_logits(chunk), atol=1e-5, rtol=0)
            torch.testing.assert_close(logits[1], clean_logits(long_row), atol=1e-5, rtol=0)
            assert rc.columns <= len(chunk) + 32 + len(chunk)
        assert rc.columns < 7 * 20


def test_bench_rollout_reports_every_agent(capsys):
    """Behaviour only: the speed ratio itself is the benchmark's to report (a target line)."""
    cli_main(
        ["bench", "rollout", "--num-envs", "8", "--naive-envs", "2",
         "--compaction.max-turns", "4", "--baselines", "per-env", "batched"]
    )  # fmt: skip
    out = capsys.readouterr().out
    rates = {line.split(":")[0].strip(): line for line in out.splitlines() if "tokens/s" in line}
    assert set(rates) == {"lm-agent", "per-env", "batched"}
    for name, line in rates.items():
        envs = 2 if name == "per-env" else 8
        assert line.split(":")[1].split()[0] == str(envs)
        assert float(line.split("=")[1].split()[0]) > 0  # tokens/s of real generated tokens
    ratios = [line for line in out.splitlines() if line.startswith("lm-agent /")]
    assert [r.split(":")[0] for r in ratios] == ["lm-agent / per-env", "lm-agent / batched"]
    assert all(float(r.split(":")[1].strip().rstrip("x")) > 0 for r in ratios)
    assert "target lm-agent / per-env >= 1.0x:" in out


TINY = dict(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
)  # fmt: skip


def sliding_models() -> dict[str, torch.nn.Module]:
    """Window-5 Mistral (every layer sliding), Qwen2 with sliding upper layers, Gemma-2/3."""
    from transformers import (
        Gemma2Config,
        Gemma2ForCausalLM,
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    configs = {
        "mistral": (MistralForCausalLM, MistralConfig(sliding_window=5, **TINY)),
        "qwen2-sliding": (
            Qwen2ForCausalLM,
            Qwen2Config(use_sliding_window=True, sliding_window=5, max_window_layers=2, **TINY),
        ),
        "gemma2": (Gemma2ForCausalLM, Gemma2Config(sliding_window=5, head_dim=8, **TINY)),
        "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(sliding_window=5, head_dim=8, **TINY)),
    }
    models = {}
    for name, (cls, config) in configs.items():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            models[name] = cls(config).eval()
    return models


def cached_vs_clean(model, layout: AttentionLayout | None = None) -> float:
    """Largest |cached - clean| logit over 6 turns of two rows (one restarts), contexts
    growing past the window, chunks of 1-5 tokens."""
    rc = RowCache(model, pad_id=0, device=torch.device("cpu"))
    if layout is not None:
        rc.layout = layout
    g = torch.Generator().manual_seed(0)
    contexts: dict[int, list[int]] = {0: [], 1: []}
    worst = 0.0
    with torch.inference_mode():
        for turn in range(6):
            reset = [turn == 0, turn in (0, 3)]
            rc.arrange([0, 1], reset)
            chunks = []
            for k, r in zip([0, 1], reset, strict=True):
                chunk = torch.randint(
                    1, 64, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g
                )
                contexts[k] = chunk.tolist() if r else contexts[k] + chunk.tolist()
                chunks.append(chunk.tolist())
            logits = rc.append(chunks)
            for k in (0, 1):
                clean = model(input_ids=torch.tensor([contexts[k]])).logits[0, -1]
                worst = max(worst, float((logits[k] - clean).abs().max()))
    assert len(contexts[0]) > 10  # longer than the window of 5
    return worst


@pytest.mark.parametrize("name", ["mistral", "qwen2-sliding", "gemma2", "gemma3"])
def test_sliding_window_cache_matches_a_clean_forward(name):
    model = sliding_models()[name]
    kinds = attention_layout(model.config).kinds
    assert "sliding_attention" in kinds
    assert cached_vs_clean(model) < 1e-5
    # The sliding mask is what makes it right: full attention everywhere is far off.
    assert cached_vs_clean(model, AttentionLayout(kinds=(FULL,) * len(kinds), window=None)) > 1e-2


def test_attention_layouts_and_refusals():
    from transformers import LlamaConfig, PretrainedConfig

    assert attention_layout(LlamaConfig(**TINY)) == AttentionLayout((FULL,) * 4, None)
    mixed = PretrainedConfig(num_hidden_layers=2, sliding_window=4)
    mixed.layer_types = ["full_attention", "sliding_attention"]
    assert attention_layout(mixed).mixed and attention_layout(mixed).window == 4
    linear = PretrainedConfig(num_hidden_layers=2)
    linear.layer_types = ["linear_attention", "full_attention"]
    with pytest.raises(ValueError, match=r"layer types \['linear_attention'\] are not served"):
        attention_layout(linear)
    with pytest.raises(ValueError, match="chunked attention"):
        attention_layout(PretrainedConfig(num_hidden_layers=2, attention_chunk_size=8))
    with pytest.raises(ValueError, match="encoder-decoder"):
        attention_layout(PretrainedConfig(num_hidden_layers=2, is_encoder_decoder=True))
    no_window = PretrainedConfig(num_hidden_layers=1)
    no_window.layer_types = ["sliding_attention"]
    with pytest.raises(ValueError, match="sliding_window >= 1"):
        attention_layout(no_window)


def test_alibi_and_local_window_layouts():
    """ALiBi from a 2D mask is served through the key mask; ALiBi or a local window counted
    in cache columns is refused (the architecture sweep checks both against a clean forward)."""
    from transformers import BloomConfig, FalconConfig, GPTNeoConfig, MptConfig

    assert attention_layout(BloomConfig(n_layer=2)).key_mask
    assert attention_layout(FalconConfig(num_hidden_layers=2, alibi=True)).key_mask
    assert not attention_layout(FalconConfig(num_hidden_layers=2)).key_mask
    with pytest.raises(ValueError, match="ALiBi biases count the cache's columns"):
        attention_layout(MptConfig(n_layers=2))
    local = GPTNeoConfig(num_layers=2, attention_types=[[["global", "local"], 1]])
    with pytest.raises(ValueError, match="local-attention layers"):
        attention_layout(local)
    with pytest.raises(ValueError, match="a multimodal model"):
        from transformers import Gemma3Config

        attention_layout(Gemma3Config())


class StateCache:
    """A recurrent state of a model's own, in place of a KV cache."""


def test_cache_argument_follows_the_forward_signature():
    class OldStyle(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None): ...

    class NoCache(torch.nn.Module):
        def forward(self, input_ids): ...

    class OwnState(torch.nn.Module):
        def forward(self, input_ids, cache: StateCache | None = None): ...

    assert cache_argument(model()) in ("cache", "past_key_values")
    assert cache_argument(OldStyle()) == "past_key_values"
    with pytest.raises(ValueError, match="neither `cache` nor `past_key_values`"):
        cache_argument(NoCache())
    with pytest.raises(ValueError, match=r"its own state \(StateCache\)"):
        cache_argument(OwnState())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_row_cache_on_cuda_matches_cpu():
    cuda = torch.device("cuda")
    gpu_model = build_policy("tiny", build_tokenizer([f"w{i}" for i in range(40)]), seed=0).to(cuda)
    rows = {0: list(range(9, 30)), 1: [11, 12, 13]}
    cpu_rc, gpu_rc = RowCache(model(), 0, torch.device("cpu")), RowCache(gpu_model, 0, cuda)
    with torch.inference_mode():
        for rc in (cpu_rc, gpu_rc):
            rc.arrange([0, 1], [True, True])
        a = cpu_rc.append([rows[0], rows[1]])
        b = gpu_rc.append([rows[0], rows[1]])
        assert b.device.type == "cuda" and gpu_rc.valid.device.type == "cuda"
        torch.testing.assert_close(b.cpu(), a, atol=1e-4, rtol=0)
        a = cpu_rc.append([[], [14]])
        b = gpu_rc.append([[], [14]])
        torch.testing.assert_close(b[1].cpu(), a[1], atol=1e-4, rtol=0)

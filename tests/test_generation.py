"""Sampling and the shared row cache: masked holes, resets, re-packing; the rollout benchmark."""

from __future__ import annotations

from functools import cache

import pytest
import torch
import torch.nn.functional as F

from cxsim.agents.models import build_policy
from cxsim.agents.tokenizer import build_tokenizer
from cxsim.cli import main as cli_main
from cxsim.generation import RowCache, SamplingConfig, sample_next


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


def test_bench_rollout_smoke(capsys):
    cli_main(
        ["bench", "rollout", "--num-envs", "8", "--naive-envs", "2",
         "--compaction.max-turns", "4", "--baselines", "per-env", "batched"]
    )  # fmt: skip
    out = capsys.readouterr().out
    ratios = {
        line.split(":")[0]: float(line.split(":")[1].strip().rstrip("x"))
        for line in out.splitlines()
        if line.startswith("lm-agent /")
    }
    assert set(ratios) == {"lm-agent / per-env", "lm-agent / batched"}
    assert ratios["lm-agent / per-env"] > 1.0

"""Behaviour cloning: token-mean over the whole step, on scripted demonstrations."""

from __future__ import annotations

import json
import math

import pytest
import torch
from local_hf_models import save_hf_policy

from cxsim.agents import WordChatFormat, build_policy, default_tokenizer
from cxsim.agents.scripted import ScriptedAgent
from cxsim.compaction import CompactionConfig
from cxsim.runtime import collect_rollouts
from cxsim.segments import pack_segments
from cxsim.sft import epoch_batches, sft_eval, sft_step

ENV = "cxsim/KeyRecall-v0"
KWARGS = {"memory_length": 5, "obs_words_mean": 6.0, "obs_words_std": 1.0, "num_values": 4}
COMPACTION = CompactionConfig(
    budget=160, threshold=72, max_summary_tokens=32, max_response_tokens=8
)


def demos(chat, episodes=4):
    agent = ScriptedAgent(ENV, chat, omission_rate=0.5, seed=0)
    return collect_rollouts(ENV, KWARGS, agent, COMPACTION, list(range(episodes)), chat)


def test_demonstration_tokens_are_the_scripted_text():
    chat = WordChatFormat(default_tokenizer())
    rollouts = demos(chat)
    summaries = [s for s in rollouts.segments if s.role == "summary"]
    assert summaries, "the tiny task must compact"
    for seg in summaries:
        trained = [t for t, m in zip(seg.token_ids, seg.trainable, strict=True) if m]
        assert chat.decode(trained).startswith("summary :") and trained[-1] == chat.end_id
    for seg in rollouts.segments:
        if seg.role == "execution":
            words = chat.decode(
                [t for t, m in zip(seg.token_ids, seg.trainable, strict=True) if m]
            ).split()
            assert set(words) <= {"next", "answer", "k1", "k2", "k3", "k4"}


def test_sft_step_is_one_token_mean_over_micro_batches():
    tokenizer = default_tokenizer()
    batch = pack_segments(demos(WordChatFormat(tokenizer)).segments, tokenizer.pad_token_id)
    params = []
    for rows in (3, 1000):
        policy = build_policy("tiny", tokenizer, seed=0)
        opt = torch.optim.SGD(policy.parameters(), lr=0.5)
        stats = sft_step(policy, opt, batch, micro_batch_rows=rows, max_grad_norm=1e9)
        params.append(torch.cat([p.detach().flatten() for p in policy.parameters()]))
        assert torch.isfinite(torch.tensor(stats["losses/sft"]))
    assert torch.allclose(params[0], params[1], atol=1e-6)


def test_sft_learns_the_demonstrations():
    torch.manual_seed(0)
    tokenizer = default_tokenizer()
    batch = pack_segments(demos(WordChatFormat(tokenizer)).segments, tokenizer.pad_token_id)
    policy = build_policy("tiny", tokenizer, seed=0)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    before = sft_eval(policy, batch, 64)
    for _ in range(3):
        for rows in epoch_batches(len(batch), 8):
            sft_step(policy, opt, batch.select(rows), 64, 1.0)
    after = sft_eval(policy, batch, 64)
    assert after["losses/heldout_execution"] < 0.5 * before["losses/heldout_execution"]
    assert after["losses/heldout_summary"] < 0.5 * before["losses/heldout_summary"]


def test_epoch_batches_partition_rows():
    torch.manual_seed(0)
    parts = epoch_batches(10, 4)
    assert [len(p) for p in parts] == [4, 4, 2]
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(10))


def test_bucketed_epoch_batches_partition_rows_and_pad_less():
    torch.manual_seed(0)
    lengths = torch.randint(10, 200, (256,))

    def padded(parts: list[torch.Tensor]) -> int:  # what a step pads its rows to
        return sum(len(p) * int(lengths[p].max()) for p in parts)

    bucketed = epoch_batches(256, 16, lengths)
    assert torch.equal(torch.cat(bucketed).sort().values, torch.arange(256))
    spans = [int(lengths[p].max() - lengths[p].min()) for p in bucketed]
    assert max(spans) < 40  # each step holds neighbours in length (range 190)
    uniform = epoch_batches(256, 16)
    assert padded(bucketed) < 0.8 * padded(uniform)
    # the order of the steps is shuffled, not sorted by length
    firsts = [int(lengths[p].min()) for p in bucketed]
    assert firsts != sorted(firsts)


@pytest.mark.parametrize(
    ("kind", "flags"),
    [
        ("qwen2", ["--precision", "bf16"]),
        ("gpt2", ["--precision", "fp32", "--gradient-checkpointing"]),
    ],
)
def test_cxsim_sft_from_a_local_hf_policy(kind, flags, tmp_path, capsys):
    from cxsim.agents.chat import HFChatFormat
    from cxsim.agents.models import load_policy
    from cxsim.cli import main as cli_main

    save_hf_policy(kind, tmp_path / "base")
    before, _, _ = load_policy(tmp_path / "base")
    run = tmp_path / "sft"
    cli_main(
        ["sft", "--policy", str(tmp_path / "base"), "--run-dir", str(run), "--device", "cpu",
         *flags, "--sft.episodes", "4", "--sft.heldout-episodes", "2",
         "--sft.epochs", "2", "--sft.batch-rows", "8", "--no-progress-bar"]
    )  # fmt: skip
    assert f"on cpu ({flags[1]})" in capsys.readouterr().out
    results = json.loads((run / "results.json").read_text())
    assert results["demonstrations"]["charts/success_rate"] > 0  # the oracle solves tasks
    final = results["final"]
    assert math.isfinite(final["losses/sft"]) and math.isfinite(final["losses/heldout_summary"])
    first = results["history"][0]["losses/heldout_execution"]
    assert final["losses/heldout_execution"] < first  # it learns the oracle's actions
    after, _, chat = load_policy(run / "policy")
    assert isinstance(chat, HFChatFormat) and type(after) is type(before)
    assert all(p.dtype == torch.float32 for p in after.parameters())  # fp32 master weights
    changed = [
        not torch.equal(a, b) for a, b in zip(after.parameters(), before.parameters(), strict=True)
    ]
    assert all(changed)

"""Oracle pre-flight and derived budgets: every registered id runs with its defaults alone.

Two chat formats: the word-level one of the built-in models, and a byte-level BPE
with a ChatML template trained here on the environments' vocabulary (whose assistant
header and summary request are several times longer in tokens).
"""

from __future__ import annotations

import random
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import cxsim.envs
from cxsim.agents import WordChatFormat, default_tokenizer
from cxsim.agents.chat import HFChatFormat
from cxsim.agents.scripted import ScriptedAgent
from cxsim.config import DEFAULT_COMPACTION, EnvConfig
from cxsim.envs.defaults import PUBLISHED_SIZES
from cxsim.evaluation import evaluate_protocol
from cxsim.pipeline import evaluate
from cxsim.preflight import preflight

ENV_IDS = sorted(
    k for k in gym.registry if k.startswith("cxsim/") and k not in cxsim.envs.OUTSIDE_IDS
)
"""cxsim's own ids; a family from outside (its optional extra) has its own tests."""
TASKS = 6
"""Evaluation tasks per id (the pre-flight plays 16 more)."""

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def word_chat() -> WordChatFormat:
    return WordChatFormat(default_tokenizer())


@pytest.fixture(scope="module")
def bpe_chat() -> HFChatFormat:
    """Byte-level BPE (600 tokens, trained on the env vocabulary) with a ChatML template."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([" ".join(cxsim.envs.vocabulary()), "system user assistant"], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    return HFChatFormat(tokenizer)


def test_bpe_fixed_parts_are_longer(word_chat: WordChatFormat, bpe_chat: HFChatFormat) -> None:
    """The fixed parts the sizes are built from differ by format: measured, not assumed."""
    q = DEFAULT_COMPACTION.summary_instruction
    assert len(word_chat.assistant_prefix()) == 1 and len(bpe_chat.assistant_prefix()) == 7
    assert len(word_chat.summary_request(q)) == 15 < len(bpe_chat.summary_request(q))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_oracle_eval_with_the_id_alone(env_id: str) -> None:
    """``cxsim eval --agent oracle --env.env-id ID`` (no kwargs or budget flags) solves >= 90%."""
    argv = ["--agent", "oracle", "--env.env-id", env_id]
    cfg = evaluate.tyro.cli(evaluate.Config, args=argv)
    cfg = replace(cfg, eval=replace(cfg.eval, episodes=TASKS, protocols=("compacted",)))
    payload = evaluate.evaluate(cfg)
    (result,) = payload["results"]
    assert result["protocol"] == "compacted" and result["runs"] == TASKS
    assert result["pass_at_1"] >= 0.9, result
    assert payload["config"].compaction.sized


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_oracle_solves_every_id_in_a_bpe_chat_format(
    env_id: str, word_chat: WordChatFormat, bpe_chat: HFChatFormat
) -> None:
    env = EnvConfig(env_id=env_id)
    sized = preflight(env, DEFAULT_COMPACTION, bpe_chat)
    agent = ScriptedAgent(env_id, bpe_chat, omission_rate=0.0, seed=0)
    result, records = evaluate_protocol(
        env_id, env.kwargs, agent, bpe_chat, sized, "compacted", TASKS
    )
    assert result["pass_at_1"] >= 0.9, [r.end_reason for r in records]
    assert max(r.peak_context for r in records) <= sized.budget
    word = preflight(env, DEFAULT_COMPACTION, word_chat)
    assert sized.threshold > word.threshold and sized.budget > word.budget


def test_the_published_default_sizes_are_kept(word_chat: WordChatFormat) -> None:
    """The main job (KeyRecall-v0, word format) keeps 200 / 72 / 32 / 8 (docs/results.md)."""
    sized = preflight(EnvConfig(), DEFAULT_COMPACTION, word_chat)
    published = PUBLISHED_SIZES["cxsim/KeyRecall-v0"]
    assert {name: getattr(sized, name) for name in published} == published


def test_given_sizes_are_kept(word_chat: WordChatFormat) -> None:
    given = replace(DEFAULT_COMPACTION, budget=260)
    sized = preflight(EnvConfig(), given, word_chat)
    assert sized.budget == 260 and sized.threshold == 72
    assert preflight(EnvConfig(), sized, word_chat) == sized


def test_preflight_fails_loudly_with_the_numbers(word_chat: WordChatFormat) -> None:
    """SimRepo at KeyRecall's budget: observations overflow the window."""
    env = EnvConfig(env_id="cxsim/SimRepo-v0")
    small = replace(DEFAULT_COMPACTION, **PUBLISHED_SIZES["cxsim/KeyRecall-v0"])
    with pytest.raises(ValueError, match=r"solved \d+/16 cxsim/SimRepo-v0 tasks.*budget 200") as e:
        preflight(env, small, word_chat)
    assert "observation_overflow" in str(e.value) or "window_full" in str(e.value)
    solved = int(str(e.value).split("solved ")[1].split("/")[0])
    assert solved < 13


def test_preflight_leaves_the_global_rngs_alone(word_chat: WordChatFormat) -> None:
    """Training seeds its RNGs before the pre-flight: the run must not depend on it."""
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    before = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    preflight(EnvConfig(env_id="cxsim/FactUpdate-v0"), DEFAULT_COMPACTION, word_chat)
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    assert np.array_equal(np.random.get_state()[1], before[2])

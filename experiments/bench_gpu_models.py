"""What ``cxsim bench gpu`` builds its model from (experiments/bench_gpu.py): a byte-level
BPE tokenizer trained on the environments' text, with ChatML, and a randomly initialised
Qwen2 causal LM of a given shape (Qwen2.5-0.5B's, or a small one for a CPU rehearsal)."""

from __future__ import annotations

from typing import Any

import torch

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The ChatML template of Qwen2.5's instruct models, without its default system text."""

QWEN05_SHAPE = {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
                "num_key_value_heads": 2, "intermediate_size": 4864}  # fmt: skip
"""Qwen2.5-0.5B's decoder shape."""

SMALL_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "intermediate_size": 128}  # fmt: skip
"""The ``--small`` decoder: the same architecture, small enough for a CPU rehearsal."""


def env_corpus(episodes: int = 16) -> list[str]:
    """Text to train the tokenizer on: the vocabulary, the envs' system prompts, and the
    oracle's episodes of every registered env (tasks, actions, observations, summaries)."""
    from cxsim.compaction import CompactionConfig
    from cxsim.config import EnvConfig
    from cxsim.envs import vocabulary
    from cxsim.envs.defaults import DEFAULT_KWARGS, sample_episodes

    words = sorted(vocabulary())
    corpus = [" ".join(words[i : i + 8]) for i in range(0, len(words), 8)]
    defaults = CompactionConfig()
    corpus += [defaults.summary_instruction, defaults.resume_instruction]
    for env_id, kwargs in DEFAULT_KWARGS.items():
        corpus.append(EnvConfig(env_id=env_id).system_prompt)
        for ep in sample_episodes(env_id, dict(kwargs), episodes):
            corpus += [ep.task, *ep.actions, *ep.observations, *ep.summaries]
    return corpus


def bpe_tokenizer(vocab_size: int, corpus: list[str]) -> Any:
    """A byte-level BPE trained on ``corpus``, with ChatML's special tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    tok.chat_template = CHATML
    return tok


def qwen2_policy(tokenizer: Any, shape: dict[str, int], device: torch.device, seed: int) -> Any:
    """A randomly initialised Qwen2 causal LM of ``shape``, built on ``device``, float32."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **shape,
    )
    torch.manual_seed(seed)
    with device:  # initialise on the device: 494M parameters are slow to initialise on a CPU
        model = Qwen2ForCausalLM(config)
    return model.float().eval()

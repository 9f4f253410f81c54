"""Hugging Face policies built here, nothing downloaded: a byte-level BPE tokenizer trained
on the environments' words, ChatML and Gemma-style templates, tiny Qwen2 and GPT-2 models."""

from __future__ import annotations

import torch

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
"""Gemma's rules: no system message, user and assistant strictly alternating."""


def bpe_chatml_tokenizer():
    """A byte-level BPE trained here on the environments' words, with a ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from cxsim.envs import vocabulary

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    words = sorted(vocabulary())
    core.train_from_iterator([" ".join(words[i : i + 8]) for i in range(0, len(words), 8)], trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    tok.chat_template = CHATML
    return tok


def gemma_style_tokenizer():
    """The BPE tokenizer with a Gemma-style template: no system role, strict alternation."""
    tok = bpe_chatml_tokenizer()
    tok.add_special_tokens(
        {"bos_token": "<bos>", "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]}
    )
    tok.chat_template = GEMMA
    return tok


TOKENIZERS = {"chatml": bpe_chatml_tokenizer, "gemma": gemma_style_tokenizer}


def save_hf_policy(kind: str, path, template: str = "chatml") -> None:
    """A locally built Qwen2 or GPT-2 (random init, tiny) with a locally trained BPE
    tokenizer and a ChatML (or Gemma-style) template."""
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    tok = TOKENIZERS[template]()
    ids = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if kind == "qwen2":
            config = Qwen2Config(
                vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                tie_word_embeddings=True, **ids,
            )  # fmt: skip
            model = Qwen2ForCausalLM(config)
        else:
            config = GPT2Config(
                vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=1024, **ids
            )
            model = GPT2LMHeadModel(config)
    model.save_pretrained(path)
    tok.save_pretrained(path)

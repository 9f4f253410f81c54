"""The small chat-templated starting model: a Qwen2 or Llama built from a config, over a
byte-level BPE tokenizer trained here on the environments' text, with a ChatML template.

Nothing is downloaded. `fresh_chat_model` writes one as a ``save_pretrained`` folder
(model, tokenizer, chat template), randomly initialised or started from the word-level
model's weights (`transplant`); ``cxsim pretrain --arch llama --init-from pretrained``
(cxsim/pipeline/pretrain.py) then teaches it to copy what it saw in its own tokens, by the
stages that taught the tiny word-level model, and the result ships as ``--policy
pretrained-chat`` (cxsim/pretrained.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

Architecture = Literal["qwen2", "llama"]
ARCHITECTURES: tuple[Architecture, ...] = ("qwen2", "llama")

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, as Qwen's instruct models write it (system, user, assistant and tool roles)."""

ROLES = ("system", "user", "assistant", "tool")
"""The roles ChatML writes after ``<|im_start|>``."""

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>")
"""End of text, turn start and end, padding: ids 0..3."""

BPE_VOCAB = 2048
"""A cap above what the environments' text yields (about 1400 tokens): every merge it has."""


@dataclass(frozen=True)
class ChatModelSize:
    """The model's shape (the tiny word-level preset's, with grouped-query attention)."""

    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 256
    tie_embeddings: bool = True
    max_positions: int = 1024


def environment_text() -> list[str]:
    """The text the tokenizer learns from: every word any cxsim environment can emit or
    accept (its vocabulary: tasks, observations, actions and the compaction prompts), in
    lines of eight, each line twice, a space before every word as in running text; and
    each word alone, as a message's first word is written; the chat template's role names
    among them (each turn's header is then its role in one token)."""
    from cxsim.envs import vocabulary

    words = sorted({*vocabulary(), *ROLES})
    lines = [" " + " ".join(words[i : i + 8]) for i in range(0, len(words), 8)]
    return lines + lines + words


WORD_PIECES = r" ?[A-Za-z0-9_]+| ?[^\sA-Za-z0-9_]+|\s+"
"""Pre-tokenization with ``split_digits=False``: runs of letters, digits and underscores stay
one piece (``k12``), with the space before them; punctuation runs apart."""


def train_tokenizer(
    vocab_size: int = BPE_VOCAB, split_digits: bool = False, pre_tokenizer: Any = None
) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on `environment_text`, with ChatML and its specials.

    ``split_digits``: GPT-2's pre-tokenization, which cuts letters from digits (the key
    ``k12`` becomes `` k`` and ``12``, as in most real models' tokenizers); else
    `WORD_PIECES`, so that every environment word the merges reach is one token.
    ``pre_tokenizer``: a ``tokenizers`` pre-tokenizer to use instead of either."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    if pre_tokenizer is not None:
        core.pre_tokenizer = pre_tokenizer
    elif split_digits:
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        core.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(WORD_PIECES), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(environment_text(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=SPECIALS[0], pad_token=SPECIALS[3]
    )
    tokenizer.chat_template = CHATML
    return tokenizer


def build_chat_model(
    arch: Architecture,
    tokenizer: PreTrainedTokenizerFast,
    size: ChatModelSize | None = None,
    seed: int = 0,
) -> PreTrainedModel:
    """A freshly initialised ``arch`` model over ``tokenizer``, seeded without touching the
    global torch generator."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if arch not in ARCHITECTURES:
        raise ValueError(f"--arch must be one of {ARCHITECTURES}; got {arch!r}")
    s = size or ChatModelSize()
    shape: dict[str, Any] = dict(
        vocab_size=len(tokenizer), hidden_size=s.hidden, intermediate_size=s.intermediate,
        num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
        max_position_embeddings=s.max_positions, tie_word_embeddings=s.tie_embeddings,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )  # fmt: skip
    config, model_class = (
        (Qwen2Config(**shape), Qwen2ForCausalLM)
        if arch == "qwen2"
        else (LlamaConfig(**shape), LlamaForCausalLM)
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def fresh_chat_model(
    path: str | Path,
    arch: Architecture,
    size: ChatModelSize | None = None,
    seed: int = 0,
    split_digits: bool = False,
    init_from: str | None = None,
) -> dict[str, Any]:
    """Write a fresh ``arch`` model with its trained tokenizer and template to ``path``;
    returns how it was made (architecture, shape, vocabulary, parameters). ``init_from``:
    a word-level policy folder (``pretrained``) whose weights it starts from (`transplant`;
    its shape replaces ``size``).

    A folder of some model types loads its tokenizer with that type's own pre-tokenization
    whatever tokenizer.json holds (transformers maps ``qwen2`` to ``Qwen2Tokenizer``, which
    cuts every digit apart); the BPE is then trained again under the pre-tokenization it
    loads with, so that its merges are those of the text it will see."""
    from transformers import AutoTokenizer

    size = word_model_size(init_from) if init_from is not None else size
    tokenizer = train_tokenizer(split_digits=split_digits)
    model = build_chat_model(arch, tokenizer, size, seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    loads_as = AutoTokenizer.from_pretrained(path, local_files_only=True)
    pre_tokenization = "own"
    probe = " ".join(environment_text()[:64])
    if loads_as.tokenize(probe) != tokenizer.tokenize(probe):
        pre_tokenization = f"as {type(loads_as).__name__} loads it"
        tokenizer = train_tokenizer(pre_tokenizer=loads_as.backend_tokenizer.pre_tokenizer)
        if len(tokenizer) != model.config.vocab_size:
            model = build_chat_model(arch, tokenizer, size, seed)
    transplanted = transplant(model, tokenizer, init_from) if init_from is not None else None
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return {
        "arch": arch,
        "size": asdict(size or ChatModelSize()),
        "tokenizer": {"kind": "byte-level BPE", "trained_on": "environment vocabulary",
                      "vocab_size": len(tokenizer), "split_digits": split_digits,
                      "pre_tokenization": pre_tokenization, "chat_template": "ChatML"},
        "parameters": sum(p.numel() for p in model.parameters()),
        "init_seed": seed,
        "init_from": None if init_from is None else {"policy": str(init_from), **transplanted},
    }  # fmt: skip


WORD_MARKERS = {
    "<|im_end|>": "<|end|>",
    "<|endoftext|>": "<|end|>",
    "<|pad|>": "<pad>",
    "system": "<|system|>",
    "user": "<|observation|>",
    "assistant": "<|assistant|>",
}
"""ChatML's tokens and the word format's markers that play their part (`transplant`)."""


def word_model_size(word_dir: str | Path) -> ChatModelSize:
    """The shape of a word-level Llama policy folder (``pretrained``: the shipped one)."""
    import json

    from cxsim.pretrained import policy_path

    c = json.loads((policy_path(word_dir) / "config.json").read_text())
    return ChatModelSize(
        layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=c["num_attention_heads"],
        kv_heads=c["num_key_value_heads"], intermediate=c["intermediate_size"],
        tie_embeddings=c["tie_word_embeddings"], max_positions=c["max_position_embeddings"],
    )  # fmt: skip


def transplant(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, word_dir: str | Path
) -> dict[str, int]:
    """Start ``model`` (a Llama of the word model's shape) from a word-level policy's
    weights: every layer as it is, and each BPE token's embedding and output rows from the
    word it spells (a leading space dropped) or the marker of `WORD_MARKERS`; the other
    rows keep their fresh values. Returns how many rows were carried and left."""
    import torch

    from cxsim.agents.models import load_policy

    word, word_tokenizer, _ = load_policy(word_dir)
    if word.config.model_type != model.config.model_type:
        raise ValueError(
            f"--init-from {word_dir}: a {word.config.model_type} model cannot start a "
            f"{model.config.model_type}; use --arch {word.config.model_type}"
        )
    word_vocab = word_tokenizer.get_vocab()
    own, theirs = model.state_dict(), word.state_dict()
    carried = 0
    with torch.no_grad():
        for name, tensor in theirs.items():
            if "embed_tokens" not in name and "lm_head" not in name:
                own[name].copy_(tensor)
        for token, index in tokenizer.get_vocab().items():
            text = tokenizer.convert_tokens_to_string([token]).strip()
            source = word_vocab.get(WORD_MARKERS.get(token, text))
            if source is None:
                continue
            own["model.embed_tokens.weight"][index] = theirs["model.embed_tokens.weight"][source]
            if "lm_head.weight" in own and "lm_head.weight" in theirs:
                own["lm_head.weight"][index] = theirs["lm_head.weight"][source]
            carried += 1
    return {"rows_carried": carried, "rows_fresh": len(tokenizer) - carried}

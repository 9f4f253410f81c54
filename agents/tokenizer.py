"""Word-level tokenizer for the built-in environments.

Environment text is lowercase words and symbols separated by single spaces
(CONTRACTS.md, Environments), so one word is one token: whitespace splitting
tokenizes it and a single-space decoder restores it exactly. The vocabulary is
the special tokens of the chat format, at fixed ids, followed by the sorted
words.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD = "<pad>"
UNK = "<unk>"
SYSTEM = "<|system|>"
TASK = "<|task|>"
ASSISTANT = "<|assistant|>"
OBSERVATION = "<|observation|>"
SUMMARIZE = "<|summarize|>"
RESUME = "<|resume|>"
END = "<|end|>"

SPECIAL_TOKENS: tuple[str, ...] = (
    PAD,
    UNK,
    SYSTEM,
    TASK,
    ASSISTANT,
    OBSERVATION,
    SUMMARIZE,
    RESUME,
    END,
)
"""Special tokens; token i of this tuple has id i in every built-in tokenizer."""


def build_tokenizer(words: Sequence[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer: ids 0..8 are `SPECIAL_TOKENS`, then the sorted unique words.

    Words must be non-empty and contain no whitespace; unknown words encode to `<unk>`.
    `<pad>` is the padding token, `<|end|>` the end of a response (eos and bos).
    """
    bad = [w for w in words if not w or w != w.strip() or len(w.split()) != 1]
    if bad:
        raise ValueError(f"words must be single whitespace-free tokens; got {bad[:5]!r}")
    clashes = sorted(set(words) & set(SPECIAL_TOKENS))
    if clashes:
        raise ValueError(f"words must not include special tokens; got {clashes!r}")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for word in sorted(set(words)):
        vocab[word] = len(vocab)

    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordLevel has no decoder of its own; without one decode() glues words together.
    core.decoder = decoders.WordPiece(prefix=" ", cleanup=False)  # no word starts with " "
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=END,
        bos_token=END,
        additional_special_tokens=list(SPECIAL_TOKENS[2:-1]),
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved with `save_pretrained` from a local directory."""
    return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)


def default_tokenizer() -> PreTrainedTokenizerFast:
    """The tokenizer over the union vocabulary of all registered environments."""
    from cxsim.envs import vocabulary  # lazy: agents import without building envs

    return build_tokenizer(vocabulary())

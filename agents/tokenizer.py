"""Word-level tokenizer for the built-in environments.

Environment text is lowercase words and symbols separated by single spaces
(CONTRACTS.md, Environments), so one word is one token: whitespace splitting
tokenizes it and a single-space decoder restores it exactly. The vocabulary is
the special tokens of the chat format, at fixed ids, followed by the sorted
words.

The tokenizer itself maps a word it lacks to ``<unk>``; where a policy meets an
environment (``WordChatFormat``, ``cxsim.runtime``) such a word is an error made by
`unknown_words_error`, which names the words and how to build a tokenizer that has them:
the env's words plus `compaction_words` (the words the runtime itself writes).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
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


def compaction_words(
    summary_instruction: str | None = None, resume_instruction: str | None = None
) -> list[str]:
    """The words the runtime itself writes into a window: those of the summary request and
    of the resume turn (``cxsim.compaction.CompactionConfig``'s defaults unless given).

    A word-level policy for your own environment needs them besides the env's words:
    ``build_tokenizer([*env_words, *compaction_words()])``.
    """
    from cxsim.compaction import CompactionConfig  # torch-free

    default = CompactionConfig()
    texts = (
        summary_instruction or default.summary_instruction,
        resume_instruction or default.resume_instruction,
    )
    return sorted({word for text in texts for word in text.split()})


def unknown_words_error(missing: Iterable[str], where: str) -> ValueError:
    """The error for words a word-level policy's tokenizer lacks, found in ``where``."""
    words = sorted(set(missing))
    shown = ", ".join(repr(w) for w in words[:20]) + (", ..." if len(words) > 20 else "")
    return ValueError(
        f"the policy's word-level tokenizer lacks {len(words)} word(s) of {where}: {shown}; "
        "they would all read as <unk>. Give the policy a tokenizer with every word the "
        "environment writes or accepts: cxsim.agents.build_tokenizer([*env_words, "
        "*cxsim.agents.compaction_words()]), then build_policy and save_policy "
        '(docs/environments.md, "Your own environment")'
    )


def missing_words(vocab: Collection[str], words: Iterable[str]) -> list[str]:
    """The distinct ``words`` that are not in ``vocab`` (a tokenizer's ``get_vocab()``), sorted."""
    return sorted({w for w in words if w not in vocab})


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved with `save_pretrained` from a local directory."""
    return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)


def default_tokenizer(extra_words: Iterable[str] = ()) -> PreTrainedTokenizerFast:
    """The tokenizer over the union vocabulary of cxsim's environments, and ``extra_words``
    (an environment from outside the project brings its own: ``cxsim sft --policy None``)."""
    from cxsim.envs import vocabulary  # lazy: agents import without building envs

    return build_tokenizer(sorted({*vocabulary(), *extra_words}))

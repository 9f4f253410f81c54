"""Word tokenizer: exact roundtrip, unknown words (an error where a policy reads text), fixed
special ids, save/load, the compaction instructions' words."""

import pytest

from cxsim.agents.tokenizer import (
    SPECIAL_TOKENS,
    build_tokenizer,
    compaction_words,
    default_tokenizer,
    load_tokenizer,
    unknown_words_error,
)

WORDS = ["set", "key", "=", "alpha", "beta", "7", "done", "don't", "x.y", "##z"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(WORDS)


def test_special_tokens_have_fixed_ids_then_sorted_words(tokenizer):
    assert tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == list(range(9))
    ids = tokenizer.convert_tokens_to_ids(sorted(WORDS))
    assert ids == list(range(9, 9 + len(WORDS)))
    assert len(tokenizer) == 9 + len(WORDS)
    assert tokenizer.pad_token == "<pad>" and tokenizer.pad_token_id == 0
    assert tokenizer.unk_token_id == 1
    assert tokenizer.eos_token == "<|end|>" and tokenizer.eos_token_id == 8


def test_roundtrip_is_exact_one_token_per_word(tokenizer):
    text = "set key = alpha ##z don't x.y 7 done beta"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.split())
    assert tokenizer.decode(ids) == text


def test_unknown_word_maps_to_unk(tokenizer):
    ids = tokenizer.encode("set gamma key", add_special_tokens=False)
    assert ids[1] == tokenizer.unk_token_id
    assert tokenizer.decode(ids) == "set <unk> key"


def test_specials_in_text_and_skipped_on_decode(tokenizer):
    ids = tokenizer.encode("<|task|> set key <|end|>", add_special_tokens=False)
    assert ids[0] == 3 and ids[-1] == 8
    assert tokenizer.decode(ids, skip_special_tokens=True) == "set key"


def test_duplicate_words_are_merged():
    assert len(build_tokenizer(["b", "a", "b"])) == 11


@pytest.mark.parametrize("bad", [["two words"], [""], ["<pad>"]])
def test_rejects_bad_words(bad):
    with pytest.raises(ValueError, match="words must"):
        build_tokenizer(bad)


def test_save_load_keeps_ids_and_specials(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    text = "<|system|> alpha beta unseen = 7 <|end|>"
    assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(
        text, add_special_tokens=False
    )
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.unk_token_id) == (0, 8, 1)
    assert loaded.decode(tokenizer.encode("key = beta", add_special_tokens=False)) == "key = beta"


def test_default_tokenizer_covers_env_vocabulary():
    from cxsim.envs import vocabulary

    words = vocabulary()
    tokenizer = default_tokenizer()
    assert len(tokenizer) == len(SPECIAL_TOKENS) + len(set(words))
    ids = tokenizer.encode(" ".join(words), add_special_tokens=False)
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == " ".join(words)


def test_compaction_words_are_the_words_of_both_instructions():
    from cxsim.compaction import CompactionConfig

    config = CompactionConfig()
    text = f"{config.summary_instruction} {config.resume_instruction}"
    assert compaction_words() == sorted(set(text.split()))
    assert compaction_words("keep the key", "go on") == ["go", "keep", "key", "on", "the"]
    assert not set(compaction_words()) - set(default_tokenizer().get_vocab())


def test_a_word_the_tokenizer_lacks_is_an_error_naming_it_in_the_chat_format(tokenizer):
    from cxsim.agents.chat import WordChatFormat

    chat = WordChatFormat(tokenizer)
    assert chat.encode("set key = beta") == tokenizer.encode(
        "set key = beta", add_special_tokens=False
    )
    with pytest.raises(
        ValueError,
        match=r"lacks 2 word\(s\) of the text 'set gamma key delta': 'delta', 'gamma'; .*build_tokenizer",
    ):
        chat.encode("set gamma key delta")
    with pytest.raises(ValueError, match=r"lacks 1 word\(s\) of the env: 'omega';"):
        chat.check_words(["set", "omega", "key"], "the env")
    # a sampled <unk> never comes back: decoding drops it, so the text re-encodes cleanly
    assert chat.encode(chat.decode([tokenizer.unk_token_id, *chat.encode("key")])) == chat.encode(
        "key"
    )


def test_the_error_lists_twenty_words_at_most():
    error = unknown_words_error([f"w{i:02d}" for i in range(25)] + ["w00"], "the env")
    assert "lacks 25 word(s) of the env: 'w00', 'w01'," in str(error)
    assert "'w19', ...;" in str(error) and "'w20'" not in str(error)

"""Chat formats: the word format's pieces, and HF chat-template deltas on a local tokenizer."""

import pytest
from local_hf_models import CHATML, GEMMA  # the templates the HF tests share
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from cxsim.agents.chat import ChatOptions, HFChatFormat, WordChatFormat
from cxsim.agents.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def word_chat():
    return WordChatFormat(build_tokenizer(["find", "the", "key", "value", "is", "7", "summarize"]))


def test_word_format_pieces(word_chat):
    tok = word_chat.tokenizer
    ids = tok.convert_tokens_to_ids
    assert word_chat.system("find the key") == [ids("<|system|>"), *ids(["find", "the", "key"])]
    assert word_chat.task("find key") == [ids("<|task|>"), *ids(["find", "key"])]
    assert word_chat.assistant_prefix() == [ids("<|assistant|>")]
    assert word_chat.observation("value is 7") == [
        ids("<|observation|>"),
        *ids(["value", "is", "7"]),
    ]
    assert word_chat.summary_request("summarize") == [
        ids("<|summarize|>"),
        ids("summarize"),
        ids("<|assistant|>"),
    ]
    assert word_chat.resume("summarize", "key is 7") == [
        ids("<|resume|>"),
        *ids(["summarize", "key", "is", "7"]),
    ]
    assert word_chat.end_id == ids("<|end|>") == tok.eos_token_id
    assert word_chat.pad_id == 0


def test_word_format_decode_skips_specials(word_chat):
    context = [*word_chat.task("find the key"), *word_chat.assistant_prefix()]
    context += [*word_chat.encode("value is 7"), word_chat.end_id]
    assert word_chat.decode(context) == "find the key value is 7"
    assert word_chat.decode(word_chat.encode("the key is 7")) == "the key is 7"


def test_word_format_rejects_other_tokenizers():
    with pytest.raises(ValueError, match="HFChatFormat"):
        WordChatFormat(_chatml_tokenizer())


def _chatml_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE with a ChatML template, trained here on a few lines."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = ["system user assistant tool", "find the key. the value is 7", "summarize so far"]
    core.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")
    tok.chat_template = CHATML
    return tok


@pytest.fixture(scope="module")
def hf_chat():
    return HFChatFormat(_chatml_tokenizer())


def test_hf_format_end_and_pad(hf_chat):
    tok = hf_chat.tokenizer
    assert hf_chat.end_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert hf_chat.pad_id == hf_chat.end_id  # no pad token: falls back to end_id


def test_hf_format_pieces_render_chatml(hf_chat):
    text = hf_chat.tokenizer.decode
    assert text(hf_chat.system("be brief")) == "<|im_start|>system\nbe brief<|im_end|>\n"
    assert text(hf_chat.task("find the key")) == "<|im_start|>user\nfind the key<|im_end|>\n"
    assert text(hf_chat.assistant_prefix()) == "<|im_start|>assistant\n"
    # After a response (which ends at end_id) the template's newline opens the next turn.
    assert text(hf_chat.observation("value is 7")) == "\n<|im_start|>user\nvalue is 7<|im_end|>\n"
    assert (
        text(hf_chat.summary_request("summarize"))
        == "\n<|im_start|>user\nsummarize<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (
        text(hf_chat.resume("so far", "key is 7"))
        == "<|im_start|>user\nso far\n\nkey is 7<|im_end|>\n"
    )
    assert hf_chat.decode(hf_chat.task("find the key")) == "user\nfind the key\n"


def test_hf_format_concatenation_equals_full_template(hf_chat):
    """Deltas plus response tokens rebuild exactly what the template renders."""
    tok = hf_chat.tokenizer
    response = "the value is 7"
    ids = [*hf_chat.system("s"), *hf_chat.task("find the key"), *hf_chat.assistant_prefix()]
    ids += [*hf_chat.encode(response), hf_chat.end_id, *hf_chat.observation("ok")]
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "find the key"},
        {"role": "assistant", "content": response},
        {"role": "user", "content": "ok"},
    ]
    assert tok.decode(ids) == tok.apply_chat_template(messages, tokenize=False)


def test_hf_format_tool_role():
    chat = HFChatFormat(_chatml_tokenizer(), observation_role="tool")
    assert chat.tokenizer.decode(chat.observation("ok")) == "\n<|im_start|>tool\nok<|im_end|>\n"


def test_hf_format_needs_a_template():
    tok = _chatml_tokenizer()
    tok.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        HFChatFormat(tok)


def _gemma_tokenizer() -> PreTrainedTokenizerFast:
    tok = _chatml_tokenizer()
    tok.add_special_tokens(
        {"bos_token": "<bos>", "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]}
    )
    tok.chat_template = GEMMA
    return tok


def test_template_without_system_role_merges_it_into_the_first_user_turn():
    chat = HFChatFormat(_gemma_tokenizer())
    tok = chat.tokenizer
    assert chat.merge_system and chat.end_id == tok.convert_tokens_to_ids("<end_of_turn>")
    response = "the value is 7"
    ids = [*chat.system("be brief"), *chat.task("find the key"), *chat.assistant_prefix()]
    ids += [*chat.encode(response), chat.end_id, *chat.observation("ok")]
    messages = [
        {"role": "user", "content": "be brief\n\nfind the key"},
        {"role": "assistant", "content": response},
        {"role": "user", "content": "ok"},
    ]
    assert tok.decode(ids) == tok.apply_chat_template(messages, tokenize=False)
    resumed = tok.decode([*chat.system("be brief"), *chat.resume("so far", "key is 7")])
    assert resumed == "<bos><start_of_turn>user\nbe brief\n\nso far\n\nkey is 7<end_of_turn>\n"
    assert tok.decode(chat.summary_request("sum up")) == (
        "\n<start_of_turn>user\nsum up<end_of_turn>\n<start_of_turn>model\n"
    )


def test_template_rules_are_named_when_a_turn_is_refused():
    with pytest.raises(ValueError, match="System role not supported"):
        HFChatFormat(_gemma_tokenizer(), ChatOptions(system_role="native"))
    with pytest.raises(ValueError, match="roles must alternate user/assistant"):
        HFChatFormat(_gemma_tokenizer(), ChatOptions(observation_role="tool"))


def test_template_arguments_reach_the_template():
    tok = _chatml_tokenizer()
    tok.chat_template = CHATML.replace(
        "assistant\n{% endif %}",
        "assistant\n{% if enable_thinking is defined and not enable_thinking %}"
        "<think></think>{% endif %}{{ tag | default('') }}{% endif %}",
    )
    assert tok.decode(HFChatFormat(tok).assistant_prefix()) == "<|im_start|>assistant\n"
    quiet = HFChatFormat(tok, ChatOptions(enable_thinking=False, template_args=('tag="x"',)))
    assert tok.decode(quiet.assistant_prefix()) == "<|im_start|>assistant\n<think></think>x"
    assert ChatOptions(template_args=("n=3", "s=abc")).template_kwargs() == {"n": 3, "s": "abc"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        ChatOptions(template_args=("novalue",))

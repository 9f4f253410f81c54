"""Policies: preset sizes, save/load, loading errors, and sequence_logprobs alignment."""

import json

import pytest
import torch

from cxsim.agents.chat import HFChatFormat, WordChatFormat
from cxsim.agents.models import (
    build_policy,
    count_parameters,
    load_policy,
    save_policy,
    sequence_logprobs,
)
from cxsim.agents.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer([f"w{i}" for i in range(500)])  # 509 ids, like the env vocabulary


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return build_policy("tiny", tokenizer, max_positions=64).eval()


@pytest.mark.parametrize(
    ("preset", "low", "high"),
    [("tiny", 0.1e6, 0.3e6), ("small", 0.5e6, 2e6), ("base", 5e6, 10e6)],
)
def test_preset_parameter_counts(tokenizer, preset, low, high):
    model = build_policy(preset, tokenizer)
    assert low <= count_parameters(model) <= high
    assert model.config.vocab_size == len(tokenizer)


def test_special_ids_and_seeded_init(tokenizer, tiny):
    assert (tiny.config.pad_token_id, tiny.config.bos_token_id, tiny.config.eos_token_id) == (
        0,
        8,
        8,
    )
    state = torch.random.get_rng_state()
    again = build_policy("tiny", tokenizer, max_positions=64)
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    assert torch.equal(again.lm_head.weight, tiny.lm_head.weight)
    other = build_policy("tiny", tokenizer, max_positions=64, seed=1)
    assert not torch.equal(other.lm_head.weight, tiny.lm_head.weight)


def test_unknown_preset(tokenizer):
    with pytest.raises(ValueError, match="preset must be one of"):
        build_policy("huge", tokenizer)


def test_save_load_reproduces_logits(tokenizer, tiny, tmp_path):
    save_policy(tiny, tokenizer, tmp_path)
    assert json.loads((tmp_path / "cxsim.json").read_text()) == {"chat_format": "word"}
    model, loaded_tok, chat = load_policy(tmp_path)
    assert isinstance(chat, WordChatFormat)
    ids = torch.tensor([chat.task("w1 w2 w3") + chat.assistant_prefix()])
    assert ids.tolist() == [[3, *loaded_tok.convert_tokens_to_ids(["w1", "w2", "w3"]), 4]]
    with torch.no_grad():
        assert torch.equal(model.eval()(ids).logits, tiny(ids).logits)


def test_load_without_marker_uses_hf_chat_format(tokenizer, tiny, tmp_path):
    tok = build_tokenizer(["a", "b"])
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} <|end|> {% endfor %}"
    tiny.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    _, _, chat = load_policy(tmp_path)
    assert isinstance(chat, HFChatFormat)
    assert chat.end_id == 8


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_load_bad_path_says_what_to_pass(tmp_path, make):
    path = tmp_path / "nothing" if make == "missing" else tmp_path
    with pytest.raises(FileNotFoundError, match="pass --policy PATH"):
        load_policy(path)


def _hand_logprobs(model, row: list[int], temperature: float) -> list[float]:
    """One forward pass per prefix: log p(tok_t | tok_<t) from the last position."""
    out = [0.0]
    for t in range(1, len(row)):
        logits = model(torch.tensor([row[:t]])).logits[0, -1] / temperature
        out.append(torch.log_softmax(logits, -1)[row[t]].item())
    return out


@pytest.mark.parametrize("side", ["right", "left"])
def test_sequence_logprobs_equals_per_prefix_loop(tiny, side):
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(9, 509, (n,), generator=gen).tolist() for n in (7, 4, 1)]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for s, row in enumerate(rows):
        span = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
        ids[s, span] = torch.tensor(row)
        mask[s, span] = 1
    with torch.no_grad():
        logprobs, entropy = sequence_logprobs(tiny, ids, mask, temperature=0.7, return_entropy=True)
        for s, row in enumerate(rows):
            span = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
            expected = torch.tensor(_hand_logprobs(tiny, row, 0.7))
            torch.testing.assert_close(logprobs[s, span], expected, atol=1e-5, rtol=0)
            assert logprobs[s][mask[s] == 0].abs().sum() == 0
            assert entropy[s, span][0] == 0 and (entropy[s, span][1:] > 0).all()
            assert entropy[s][mask[s] == 0].abs().sum() == 0


def test_sequence_logprobs_has_gradients(tiny):
    ids = torch.tensor([[3, 10, 11, 4, 12, 8]])
    logprobs = sequence_logprobs(tiny, ids, torch.ones_like(ids))
    logprobs.sum().backward()
    assert tiny.lm_head.weight.grad is not None and tiny.lm_head.weight.grad.abs().sum() > 0
    tiny.zero_grad(set_to_none=True)


def _hf_models() -> dict[str, torch.nn.Module]:
    """Tiny Llama, GPT-2, Gemma-2 (logit soft-capping) and tied-embedding Qwen2, built here."""
    from transformers import (
        Gemma2Config,
        Gemma2ForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    shape = dict(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return {
            "llama": build_policy("tiny", build_tokenizer([f"w{i}" for i in range(291)])),
            "gpt2": GPT2LMHeadModel(
                GPT2Config(
                    n_layer=2,
                    n_embd=32,
                    n_head=2,
                    vocab_size=300,
                    eos_token_id=0,
                    bos_token_id=0,
                    resid_pdrop=0,
                    embd_pdrop=0,
                    attn_pdrop=0,
                )
            ),
            "gemma2": Gemma2ForCausalLM(Gemma2Config(head_dim=8, sliding_window=4, **shape)),
            "qwen2": Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **shape)),
        }


@pytest.mark.parametrize("name", ["llama", "gpt2", "gemma2", "qwen2"])
@pytest.mark.parametrize("chunk_elements", [10**9, 900])  # one head chunk; 3-token chunks
def test_token_logprobs_at_is_sequence_logprobs_at_the_marked_positions(name, chunk_elements):
    from cxsim.agents.models import token_logprobs_at

    model = _hf_models()[name]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 300, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    mask[2, 9:] = 0  # right padding
    marked = torch.rand(3, 12, generator=g) > 0.4
    params = [p for p in model.parameters() if p.requires_grad]
    logprobs, entropy = sequence_logprobs(model, ids, mask, 0.7, return_entropy=True)
    grads = torch.autograd.grad((logprobs * marked).sum() + (entropy * marked).sum(), params)
    at, at_entropy = token_logprobs_at(
        model, ids, mask, marked, 0.7, return_entropy=True, chunk_elements=chunk_elements
    )
    at_grads = torch.autograd.grad((at * marked).sum() + (at_entropy * marked).sum(), params)
    torch.testing.assert_close(at[marked], logprobs[marked].detach(), atol=2e-6, rtol=0)
    torch.testing.assert_close(at_entropy[marked], entropy[marked].detach(), atol=5e-6, rtol=0)
    assert at[~marked].abs().sum() == 0 and at_entropy[~marked].abs().sum() == 0
    assert int((at != 0).sum()) == int((marked & (logprobs != 0)).sum()) > 10
    for a, b in zip(at_grads, grads, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


def test_gradient_checkpointing_keeps_gradients_and_dropout_mode():
    from cxsim.agents.models import enable_gradient_checkpointing

    models = _hf_models()
    plain, checkpointed = models["gpt2"].eval(), _hf_models()["gpt2"].eval()
    enable_gradient_checkpointing(checkpointed)
    assert not checkpointed.transformer.drop.training  # dropout stays off
    ids = torch.randint(1, 300, (2, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    grads, calls = [], []
    for model in (plain, checkpointed):
        mlp, count = model.transformer.h[0].mlp, [0]
        forward = mlp.forward

        def counted(*args, forward=forward, count=count, **kwargs):
            count[0] += 1
            return forward(*args, **kwargs)

        mlp.forward = counted  # (forward hooks do not fire in the recompute)
        loss = sequence_logprobs(model, ids, mask).sum()
        grads.append(torch.autograd.grad(loss, list(model.parameters())))
        calls.append(count[0])
    assert calls == [1, 2]  # the checkpointed layer ran again in the backward pass
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_load_policy_refuses_an_architecture_the_cache_cannot_serve(tmp_path):
    policy = build_policy("tiny", build_tokenizer(["a", "b"]))
    policy.config.attention_chunk_size = 4
    save_policy(policy, build_tokenizer(["a", "b"]), tmp_path / "p")
    with pytest.raises(ValueError, match="chunked attention"):
        load_policy(tmp_path / "p")


def test_load_policy_loads_bf16_weights_as_float32(tmp_path):
    tokenizer = build_tokenizer(["a", "b"])
    save_policy(build_policy("tiny", tokenizer).to(torch.bfloat16), tokenizer, tmp_path / "p")
    model, _, _ = load_policy(tmp_path / "p", device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_token_logprobs_at_with_nothing_marked_stays_in_the_graph(tiny):
    from cxsim.agents.models import token_logprobs_at

    ids = torch.tensor([[3, 10, 11, 4]])
    out = token_logprobs_at(
        tiny, ids, torch.ones_like(ids), torch.zeros_like(ids, dtype=torch.bool)
    )
    assert out.shape == (1, 4) and out.abs().sum() == 0
    out.sum().backward()  # a micro-batch without trainable tokens must not break the update
    tiny.zero_grad(set_to_none=True)

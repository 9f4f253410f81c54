"""The shipped starting checkpoints (the word-level tiny model and its chat-templated Qwen2
sibling) and ``cxsim pretrain``, which regenerates them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cxsim.agents.models import load_policy
from cxsim.chat_model import (
    CHATML,
    build_chat_model,
    fresh_chat_model,
    train_tokenizer,
    word_model_size,
)
from cxsim.cli import main as cxsim
from cxsim.compute import Compute
from cxsim.config import EnvConfig, SFTConfig
from cxsim.model_group import Model
from cxsim.pipeline import sft as sft_entry
from cxsim.pipeline.pretrain import COPY_SFT, POLISH_SFT
from cxsim.preflight import preflight
from cxsim.pretrained import (
    PRETRAINED,
    PRETRAINED_CHAT,
    PRETRAINED_CHAT_DIR,
    PRETRAINED_DIR,
    manifest,
    policy_path,
)
from cxsim.sft import sft_eval

TINY = [
    *("--copy-sft.episodes", "4", "--copy-sft.heldout-episodes", "2", "--copy-sft.epochs", "1"),
    *("--sft.episodes", "4", "--sft.heldout-episodes", "2", "--sft.epochs", "1"),
]


def test_the_shipped_checkpoint_loads_by_name_and_says_how_it_was_made():
    assert policy_path(PRETRAINED) == PRETRAINED_DIR
    assert policy_path("some/dir") == Path("some/dir")
    model, tokenizer, _ = load_policy(PRETRAINED)
    assert sum(p.numel() for p in model.parameters()) < 400_000  # the tiny preset
    made = manifest()
    assert made["command"] == "cxsim pretrain"
    copy, polish = made["stages"]
    assert copy["sft"]["epochs"] == COPY_SFT.epochs and copy["env"]["kwargs"]["num_values"] == 32
    assert polish["sft"]["epochs"] == POLISH_SFT.epochs
    assert copy["sft"]["omission_rate"] == polish["sft"]["omission_rate"] == 0.0
    chosen = [t for t in made["tried"] if t["seed"] == made["seed"]]
    assert chosen and chosen[0]["heldout_execution"] <= made["copy_loss"]
    # the tokenizer covers every cxsim environment's words (no <unk> for any of them)
    from cxsim.envs import vocabulary

    ids = tokenizer.convert_tokens_to_ids(vocabulary())
    assert tokenizer.unk_token_id not in ids


def test_the_shipped_checkpoint_copies_the_key_on_unseen_tasks():
    """Its held-out execution loss on new omission-0 demonstrations is what the manifest
    promised (it copies), and that of a fresh model is far above it."""
    cfg = sft_entry.Config(
        env=EnvConfig(), sft=SFTConfig(episodes=1, heldout_episodes=8, omission_rate=0.0),
        seed=424242, model=Model(PRETRAINED), compute=Compute(device="cpu"),
    )  # fmt: skip
    policy, _, chat = sft_entry.starting_policy(cfg, torch.device("cpu"))
    cfg = replace(cfg, compaction=preflight(cfg.env, cfg.compaction, chat))
    _, _, heldout = sft_entry.demonstration_batches(cfg, chat)
    shipped = sft_eval(policy, heldout, 32, "fp32")["losses/heldout_execution"]
    fresh_cfg = replace(cfg, model=Model(policy=None))
    fresh_policy, _, _ = sft_entry.starting_policy(fresh_cfg, torch.device("cpu"))
    fresh = sft_eval(fresh_policy, heldout, 32, "fp32")["losses/heldout_execution"]
    assert shipped <= 0.02
    assert fresh > 10 * shipped


def test_pretrain_writes_the_first_candidate_that_copies_with_its_manifest(tmp_path):
    out = tmp_path / "policy"
    cxsim(["pretrain", "--out", str(out), "--runs-dir", str(tmp_path / "runs"), "--seeds", "7",
           "8", "--copy-loss", "1000", "--no-progress-bar", *TINY])  # fmt: skip
    made = json.loads((out / "manifest.json").read_text())
    assert made["seed"] == 7 and [t["seed"] for t in made["tried"]] == [7]
    load_policy(out)  # a policy folder as cxsim sft saves one


def test_pretrain_fails_with_every_candidate_listed_when_none_copies(tmp_path):
    with pytest.raises(SystemExit, match=r"no candidate of \(7,\) learned to copy.*\(7, "):
        cxsim(["pretrain", "--out", str(tmp_path / "p"), "--runs-dir", str(tmp_path / "r"),
               "--seeds", "7", "--copy-loss", "1e-9", "--no-progress-bar", *TINY])  # fmt: skip
    assert not (tmp_path / "p").exists()


def test_a_fresh_model_size_with_the_shipped_checkpoint_is_refused_before_any_work(tmp_path):
    with pytest.raises(SystemExit, match=r"--sft.model small builds a fresh model.*--policy None"):
        cxsim(["sft", "--sft.model", "small", "--run-dir", str(tmp_path / "s")])
    assert not (tmp_path / "s").exists()


def test_the_shipped_chat_model_loads_by_name_with_its_template_and_manifest():
    """``pretrained-chat``: a Llama of about 0.3M parameters over a BPE tokenizer that
    makes every KeyRecall word one token, with ChatML; made by ``cxsim pretrain --arch
    llama --init-from pretrained`` (its manifest), and a copier like the word model."""
    from cxsim.agents.chat import HFChatFormat
    from cxsim.envs import KeyRecall

    assert policy_path(PRETRAINED_CHAT) == PRETRAINED_CHAT_DIR
    model, tokenizer, chat = load_policy(PRETRAINED_CHAT)
    assert type(model).__name__ == "LlamaForCausalLM" and isinstance(chat, HFChatFormat)
    assert sum(p.numel() for p in model.parameters()) < 3_000_000
    assert sum(f.stat().st_size for f in PRETRAINED_CHAT_DIR.iterdir()) < 20 * 2**20
    assert tokenizer.chat_template == CHATML
    assert all(len(tokenizer.encode(" " + w)) == 1 for w in KeyRecall.vocabulary())
    made = manifest(PRETRAINED_CHAT)
    assert made["command"] == "cxsim pretrain --arch llama --init-from pretrained"
    assert made["model"]["arch"] == "llama" and made["model"]["tokenizer"]["chat_template"]
    assert made["model"]["init_from"]["policy"] == PRETRAINED
    chosen = [t for t in made["tried"] if t["seed"] == made["seed"]]
    assert chosen and chosen[0]["heldout_execution"] <= made["copy_loss"]


def test_the_shipped_chat_model_copies_the_key_on_unseen_tasks():
    cfg = sft_entry.Config(
        env=EnvConfig(), sft=SFTConfig(episodes=1, heldout_episodes=8, omission_rate=0.0),
        seed=424242, model=Model(PRETRAINED_CHAT), compute=Compute(device="cpu"),
    )  # fmt: skip
    policy, _, chat = sft_entry.starting_policy(cfg, torch.device("cpu"))
    cfg = replace(cfg, compaction=preflight(cfg.env, cfg.compaction, chat))
    _, _, heldout = sft_entry.demonstration_batches(cfg, chat)
    shipped = sft_eval(policy, heldout, 32, "fp32")["losses/heldout_execution"]
    fresh = build_chat_model("llama", train_tokenizer(), word_model_size(PRETRAINED))
    assert shipped <= 0.02
    assert sft_eval(fresh, heldout, 32, "fp32")["losses/heldout_execution"] > 10 * shipped


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_pretrain_arch_makes_a_chat_templated_model_with_its_manifest(tmp_path, arch):
    out = tmp_path / "policy"
    cxsim(["pretrain", "--arch", arch, "--out", str(out), "--runs-dir", str(tmp_path / "runs"),
           "--seeds", "7", "--copy-loss", "1000", "--no-progress-bar", *TINY])  # fmt: skip
    made = json.loads((out / "manifest.json").read_text())
    assert made["command"] == f"cxsim pretrain --arch {arch}"
    assert made["model"]["arch"] == arch and made["model"]["init_seed"] == 7
    assert made["model"]["parameters"] < 3_000_000
    model, tokenizer, _ = load_policy(out)
    expected = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[arch]
    assert type(model).__name__ == expected and tokenizer.chat_template == CHATML
    assert (tmp_path / "runs" / "c7" / "fresh" / "config.json").is_file()


def test_init_from_carries_the_word_models_layers_and_each_words_rows(tmp_path):
    """``--init-from pretrained``: the fresh chat model holds the word model's layers as
    they are, and the BPE token `` key`` the word model's row for ``key``."""
    made = fresh_chat_model(tmp_path / "m", "llama", init_from=PRETRAINED)
    assert made["init_from"]["rows_carried"] > 800 and made["size"]["kv_heads"] == 4
    chat_model, chat_tokenizer, _ = load_policy(tmp_path / "m")
    word, word_tokenizer, _ = load_policy(PRETRAINED)
    layer = "model.layers.1.mlp.down_proj.weight"
    assert torch.equal(chat_model.state_dict()[layer], word.state_dict()[layer])
    (ours,) = chat_tokenizer.encode(" key")
    theirs = word_tokenizer.convert_tokens_to_ids("key")
    for rows in ("model.embed_tokens.weight", "lm_head.weight"):
        assert torch.equal(chat_model.state_dict()[rows][ours], word.state_dict()[rows][theirs])
    with pytest.raises(ValueError, match="cannot start a qwen2"):
        fresh_chat_model(tmp_path / "q", "qwen2", init_from=PRETRAINED)


def test_a_shipped_name_resolves_for_the_oracle_tokenizer_and_in_a_study(tmp_path):
    from cxsim.pipeline.evaluate import check_tokenizer_dir
    from cxsim.studies.settings import starting_policy

    check_tokenizer_dir(PRETRAINED_CHAT)
    assert starting_policy(PRETRAINED_CHAT, tmp_path, "here") == PRETRAINED_CHAT
    assert starting_policy("models/q", tmp_path, "here") == str(tmp_path / "models/q")

"""The shipped starting checkpoint: the tiny word-level model's "pretrained weights".

A fresh tiny model learns to copy the key into its summaries and answers only on some
seeds (docs/results.md, "Independent seeds"), so a base cloned from a fresh model is a
coin toss. Every user of the paper's recipe starts from one pretrained LLM; cxsim's
analog is this checkpoint, shipped in the package (about 1 MB): the tiny preset over the
word tokenizer of every cxsim environment, cloned from omission-0 demonstrations of
KeyRecall on tasks no run uses, so that it copies what it saw. ``cxsim pretrain``
regenerates it (cxsim/pipeline/pretrain.py, the settings in its ``manifest.json``).

``--policy pretrained`` (the default of ``cxsim run`` and ``cxsim sft``) names it;
``--policy None`` starts from a fresh ``--sft.model`` preset instead.

``--policy pretrained-chat`` names its chat-templated sibling, also shipped (about 1.3 MB):
a Llama of the same shape over a byte-level BPE tokenizer trained on the environments'
text, with a ChatML template (cxsim/chat_model.py), started from this model's weights word
by word and taught to copy in its new tokens by the same stages (``cxsim pretrain --arch
llama --init-from pretrained``): the practitioner's path to a Hugging Face model, offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PRETRAINED = "pretrained"
"""The ``--policy`` value that names the shipped starting checkpoint."""

PRETRAINED_DIR = Path(__file__).resolve().parent / "weights" / "tiny-pretrained"
"""Where the package keeps it: a policy folder as ``cxsim sft`` saves one."""

PRETRAINED_CHAT = "pretrained-chat"
"""The ``--policy`` value that names the shipped chat-templated starting checkpoint."""

PRETRAINED_CHAT_DIR = PRETRAINED_DIR.parent / "chat-pretrained"
"""Where the package keeps it: a Hugging Face folder (model, BPE tokenizer, ChatML)."""

SHIPPED = {PRETRAINED: PRETRAINED_DIR, PRETRAINED_CHAT: PRETRAINED_CHAT_DIR}
"""Every name ``--policy`` takes for a shipped checkpoint, and its folder."""

MANIFEST = "manifest.json"
"""Beside the weights: how they were made (``cxsim pretrain`` writes it)."""


def policy_path(policy: str | Path) -> Path:
    """The folder a ``--policy`` value names: a shipped checkpoint for ``pretrained`` or
    ``pretrained-chat``, else the path itself."""
    return SHIPPED.get(str(policy), Path(policy))


def manifest(path: str | Path = PRETRAINED_DIR) -> dict[str, Any]:
    """The settings and held-out losses a starting checkpoint (a folder or a shipped name)
    was made with ({} if none)."""
    file = policy_path(path) / MANIFEST
    return json.loads(file.read_text()) if file.is_file() else {}

"""``cxsim pretrain``: regenerate the shipped starting checkpoint (cxsim/pretrained.py).

Reads top to bottom. For each candidate seed in turn, two SFT stages of a fresh tiny
model over the word tokenizer, both on omission-0 demonstrations (``cxsim sft``; tasks
``seed * 512 + i`` for seeds from 1000 on, which no run uses):

1. **copy**: KeyRecall with 32 key values (``--copy-env``), 8 epochs. With 4 values a
   model that guesses the key loses little, and whether it ever learns to copy is a coin
   toss; with 32 the copy is worth 8 times more and is learned mid-stage;
2. **polish**: the main job's KeyRecall (``--env``), 4 epochs from stage 1.

The first candidate whose held-out execution loss after stage 2 is at most
``--copy-loss`` (it copies the key it saw) is written to ``--out`` with a
``manifest.json`` of the settings, the losses of every candidate tried, and the command.

    cxsim pretrain                                      # into runs/pretrain/policy
    cxsim pretrain --out cxsim/weights/tiny-pretrained  # replace the shipped checkpoint

``--arch llama`` (or ``qwen2``) makes a chat-templated starting model instead: each
candidate starts from a model of that architecture over a byte-level BPE tokenizer trained
on the environments' text, with a ChatML template (cxsim/chat_model.py, written to
``c<seed>/fresh``), and goes through the same two stages in that template's tokens. From a
random init it did not learn to copy in the time tried (the key's held-out loss stayed at
chance, log 32, for 6 to 11 epochs of stage 1 in four runs, where the word model starts
copying after 6); ``--init-from pretrained`` starts it from the
shipped word-level model instead (its layers, and each word's rows carried to the BPE
token that spells it), and it copies after one epoch of stage 1:

    cxsim pretrain --arch llama --init-from pretrained --out cxsim/weights/chat-pretrained

Candidates differ only in their seed; which of them learns to copy depends on the
floating-point results of the machine, so another machine may take another candidate.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cxsim.chat_model import ARCHITECTURES, ChatModelSize
from cxsim.compute import FLAT, Compute, ComputeFlags, DeviceCompute
from cxsim.config import EnvConfig, SFTConfig
from cxsim.model_group import Model
from cxsim.pretrained import MANIFEST
from cxsim.tracking import say, to_jsonable

COPY_ENV = EnvConfig(kwargs={"obs_words_mean": 8.0, "obs_words_std": 2.0, "num_values": 32})
"""Stage 1's task: the main job's KeyRecall with 32 key values instead of 4."""
COPY_SFT = SFTConfig(episodes=512, omission_rate=0.0, epochs=8)
"""Stage 1: 512 demonstrations that keep every fact, 8 epochs, length-bucketed."""
POLISH_SFT = SFTConfig(episodes=512, omission_rate=0.0, epochs=4)
"""Stage 2: the same on the main job's task, 4 epochs."""


@dataclass(frozen=True)
class Config:
    """Regenerate the starting checkpoint: the first candidate seed whose model copies."""

    out: str = "runs/pretrain/policy"
    """Where the checkpoint goes (``cxsim/weights/tiny-pretrained`` replaces the shipped one)."""
    runs_dir: str = "runs/pretrain"
    """Where each candidate's SFT runs go (``c<seed>/copy``, ``c<seed>/polish``)."""
    seeds: tuple[int, ...] = (1001, 1002, 1003, 1004, 1005)
    """Candidate seeds, tried in turn."""
    copy_loss: float = 0.01
    """Held-out execution loss (nats per token) at or below which a candidate copies."""
    copy_env: EnvConfig = field(default_factory=lambda: COPY_ENV)
    """Stage 1's task."""
    copy_sft: SFTConfig = field(default_factory=lambda: COPY_SFT)
    """Stage 1's SFT settings."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Stage 2's task (the main job's)."""
    sft: SFTConfig = field(default_factory=lambda: POLISH_SFT)
    """Stage 2's SFT settings."""
    arch: Literal["word", "qwen2", "llama"] = "word"
    """``word``: the tiny Llama preset over the word tokenizer (``--policy pretrained``);
    ``qwen2`` or ``llama``: that architecture over a BPE tokenizer trained on the
    environments' text, with a ChatML template (``--policy pretrained-chat``)."""
    size: ChatModelSize = field(default_factory=ChatModelSize)
    """``--arch qwen2`` / ``llama``: the model's shape."""
    init_from: str | None = None
    """``--arch llama``: a word-level policy (``pretrained``: the shipped tiny model) whose
    layers, and each word's embedding and output rows, the fresh model starts from; None: a
    random init."""
    split_digits: bool = False
    """``--arch qwen2`` / ``llama``: the BPE's pre-tokenization cuts digits from letters (the
    key ``k12``: `` k`` and ``12``); off: every environment word is one token."""
    compute: ComputeFlags[DeviceCompute] = field(default_factory=DeviceCompute, metadata=FLAT)
    """Where the SFT runs compute (``--device``; the shipped checkpoint was made on the CPU)."""
    progress_bar: bool = True
    """Show each stage's progress."""

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("--seeds is empty: pass at least one candidate seed")
        if self.arch != "word" and self.arch not in ARCHITECTURES:
            raise ValueError(f"--arch must be word or one of {ARCHITECTURES}; got {self.arch!r}")
        if self.init_from is not None and self.arch == "word":
            raise ValueError("--init-from starts a chat model: add --arch llama")
        if self.copy_loss <= 0:
            raise ValueError(f"--copy-loss {self.copy_loss} must be positive")


def pretrain(cfg: Config) -> dict[str, Any]:
    """Candidates in turn until one copies; that one is saved to ``cfg.out``."""
    began = time.perf_counter()
    tried: list[dict[str, Any]] = []
    made: dict[str, Any] = {}
    for seed in cfg.seeds:
        start, made = fresh_start(cfg, seed)
        copy = sft_stage(cfg, seed, "copy", cfg.copy_env, cfg.copy_sft, start)
        polish = sft_stage(cfg, seed, "polish", cfg.env, cfg.sft, copy["policy"])
        losses = [float(r["final"]["losses/heldout_execution"]) for r in (copy, polish)]
        copies = losses[1] <= cfg.copy_loss
        tried.append({"seed": seed, "heldout_execution": losses[1], "after_copy_stage": losses[0]})
        say(f"[pretrain] seed {seed}: held-out execution loss {losses[0]:.4f} after stage 1, "
            f"{losses[1]:.4f} after stage 2 ({'copies' if copies else 'does not copy'}; "
            f"{time.perf_counter() - began:.0f}s)")  # fmt: skip
        if copies:
            wall = time.perf_counter() - began
            return install(cfg, Path(polish["policy"]), seed, tried, wall, made)
    raise NoCandidateCopies(
        f"no candidate of {cfg.seeds} learned to copy (held-out execution loss <= "
        f"{cfg.copy_loss}): {[(t['seed'], round(t['heldout_execution'], 4)) for t in tried]}; "
        "pass more --seeds or more --copy-sft.epochs"
    )


def fresh_start(cfg: Config, seed: int) -> tuple[str | None, dict[str, Any]]:
    """What candidate ``seed`` starts from: None (a fresh word-level preset, built by SFT)
    or, for ``--arch qwen2`` / ``llama``, a fresh chat-templated model written to
    ``c<seed>/fresh``; and how that model was made (empty for the word model)."""
    if cfg.arch == "word":
        return None, {}
    from cxsim.chat_model import fresh_chat_model

    path = Path(cfg.runs_dir) / f"c{seed}" / "fresh"
    shutil.rmtree(path, ignore_errors=True)
    return str(path), fresh_chat_model(
        path, cfg.arch, cfg.size, seed, cfg.split_digits, cfg.init_from
    )


def sft_stage(
    cfg: Config, seed: int, name: str, env: EnvConfig, sft: SFTConfig, start: str | None
) -> dict[str, Any]:
    """One SFT stage of candidate ``seed`` (``start``: the policy it starts from, None: fresh)."""
    from cxsim.pipeline import sft as sft_entry

    stage = sft_entry.Config(
        run_dir=str(Path(cfg.runs_dir) / f"c{seed}" / name), seed=seed, env=env, sft=sft,
        model=Model(policy=start), compute=Compute(device=cfg.compute.device),
        progress_bar=cfg.progress_bar,
    )  # fmt: skip
    return sft_entry.run_sft(stage)


def install(
    cfg: Config,
    policy: Path,
    seed: int,
    tried: list[dict[str, Any]],
    wall: float,
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Copy the chosen candidate's policy to ``cfg.out`` with its manifest."""
    out = Path(cfg.out)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(policy, out)
    command = "cxsim pretrain" + ("" if cfg.arch == "word" else f" --arch {cfg.arch}")
    command += "" if cfg.init_from is None else f" --init-from {cfg.init_from}"
    made = {
        "command": command,
        "seed": seed,
        "tried": tried,
        "copy_loss": cfg.copy_loss,
        "stages": [
            {"name": "copy", "env": to_jsonable(cfg.copy_env), "sft": to_jsonable(cfg.copy_sft)},
            {"name": "polish", "env": to_jsonable(cfg.env), "sft": to_jsonable(cfg.sft)},
        ],
        "model": model or cfg.copy_sft.model,
        "device": cfg.compute.device,
        "wall_time_s": round(wall, 1),
    }
    (out / MANIFEST).write_text(json.dumps(made, indent=2) + "\n")
    say(f"[pretrain] seed {seed} copies: checkpoint written to {out} in {wall:.0f}s")
    return made


def main(argv: list[str] | None = None) -> None:
    import sys

    import tyro

    try:
        pretrain(tyro.cli(Config, args=argv))
    except NoCandidateCopies as error:
        sys.exit(f"cxsim pretrain: error: {error}")


class NoCandidateCopies(RuntimeError):
    """No candidate seed learned to copy at the settings given."""


if __name__ == "__main__":
    main()

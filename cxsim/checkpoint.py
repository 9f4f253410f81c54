"""Atomic training checkpoints and resume.

A checkpoint is a directory ``run_dir/checkpoints/iter-NNNNNN`` holding

    policy/     the policy and its tokenizer (``save_policy``; loads with ``load_policy``)
    critic/     the critic (``Critic.save_pretrained``), absent when the run has none
    state.pt    iteration, optimiser states, RNG states (python, numpy, torch), history
    config.json the run's config, for reading; resume uses the config given on the command line

It is written under a temporary name in the same folder and renamed into place
(``os.replace``), so a run killed at any moment leaves either the previous
checkpoint or the new one, never a half-written directory. The newest complete
checkpoint is the one with the highest iteration.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cxsim.agents.models import save_policy
from cxsim.tracking import write_json

CHECKPOINT_DIR = "checkpoints"
PREFIX = "iter-"


def capture_rng() -> dict[str, Any]:
    """The python, numpy and torch (CPU, and CUDA when present) RNG states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Puts back the RNG states of :func:`capture_rng`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int, deterministic: bool = True) -> None:
    """Seeds python, numpy and torch; deterministic kernels where that is cheap (CPU)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


@dataclass
class TrainingState:
    """What ``state.pt`` holds besides the model weights."""

    iteration: int
    """Iterations completed (the next one to run has this index)."""
    optimizers: dict[str, dict[str, Any]]
    """``optimizer.state_dict()`` by name (``actor``, ``critic``)."""
    rng: dict[str, Any]
    """:func:`capture_rng` at the moment of saving."""
    history: list[dict[str, float]] = field(default_factory=list)
    """Per-iteration metrics so far (for results.json and the learning curves)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else the entry point wants back (e.g. elapsed seconds)."""


def checkpoint_dir(run_dir: str | Path, iteration: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"{PREFIX}{iteration:06d}"


def save_checkpoint(
    run_dir: str | Path,
    state: TrainingState,
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    critic: torch.nn.Module | None,
    config: Any,
    keep: int = 2,
) -> Path:
    """Writes a checkpoint atomically; keeps the newest ``keep`` (>= 1). Returns its path."""
    final = checkpoint_dir(run_dir, state.iteration)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
    try:
        save_policy(policy, tokenizer, tmp / "policy")
        if critic is not None:
            critic.save_pretrained(tmp / "critic")
        torch.save(state.__dict__, tmp / "state.pt")
        write_json(tmp / "config.json", config)
        if final.exists():  # re-saving the same iteration (a resumed run's final save)
            shutil.rmtree(final)
        tmp.replace(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary directories are skipped)."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX)]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_state(path: str | Path) -> TrainingState:
    """The ``state.pt`` of a checkpoint directory (our own file: full unpickling)."""
    raw = torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)
    return TrainingState(**raw)

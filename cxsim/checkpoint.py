"""Atomic training checkpoints and resume.

A checkpoint is a directory ``run_dir/checkpoints/iter-NNNNNN`` holding

    policy/     the policy and its tokenizer (``save_policy``; loads with ``load_policy``)
    critic/     the critic (``Critic.save_pretrained``), absent when the run has none
    state.pt    iteration, optimiser states, RNG states (python, numpy, torch), history
    config.json the run's config, for reading; resume uses the config given on the command line

``state.pt`` holds plain data only (tensors, numbers, strings, lists, tuples,
dicts: the numpy RNG state is stored as a tensor), and :func:`load_state` reads
it with ``torch.load(..., weights_only=True)``, so a shared run directory cannot
run code when it is resumed or inspected. A ``state.pt`` written by earlier
cxsim versions (full pickles) is refused with a message naming the two routes:
convert it once (``python -m cxsim.checkpoint CHECKPOINT_DIR``) or resume with
``cxsim train --resume --trust-checkpoint``; both unpickle it, so only for a
checkpoint you trust.

It is written under a temporary name in the same folder and renamed into place
(``os.replace``), so a run killed at any moment leaves either the previous
checkpoint or the new one, never a half-written directory. The newest complete
checkpoint is the one with the highest iteration.
"""

from __future__ import annotations

import pickle
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cxsim.agents.chat import ChatOptions
from cxsim.agents.models import save_policy
from cxsim.tracking import write_json

CHECKPOINT_DIR = "checkpoints"
PREFIX = "iter-"


def capture_rng() -> dict[str, Any]:
    """The python, numpy and torch (CPU, and CUDA when present) RNG states, as plain data
    that ``torch.load(weights_only=True)`` accepts."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }  # fmt: skip
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Puts back the RNG states of :func:`capture_rng` (or of earlier versions' raw tuples)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = state["numpy"]
    if isinstance(numpy_state, dict):
        keys = numpy_state["keys"].numpy().astype(np.uint32)
        numpy_state = (
            numpy_state["kind"], keys, numpy_state["pos"], numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )  # fmt: skip
    np.random.set_state(numpy_state)
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
    chat_options: ChatOptions | None = None,
) -> Path:
    """Writes a checkpoint atomically; keeps the newest ``keep`` (>= 1). Returns its path.
    ``chat_options``: saved with the policy (a chat-template policy resumes with them)."""
    final = checkpoint_dir(run_dir, state.iteration)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
    try:
        save_policy(policy, tokenizer, tmp / "policy", chat_options)
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


def best_policy_dir(run_dir: str | Path) -> Path:
    """Where ``--ppo.keep-best`` keeps the best policy version's weights."""
    return Path(run_dir) / "best" / "policy"


def save_best_policy(
    run_dir: str | Path,
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    chat_options: ChatOptions | None = None,
) -> Path:
    """Writes the policy to :func:`best_policy_dir` atomically (replacing the one before);
    returns its path."""
    final = best_policy_dir(run_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-policy-"))
    try:
        save_policy(policy, tokenizer, tmp / "policy", chat_options)
        if final.exists():
            shutil.rmtree(final)
        (tmp / "policy").replace(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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


class UntrustedCheckpointError(RuntimeError):
    """A ``state.pt`` that plain-data loading refuses (an earlier format, or a tampered file)."""


def load_state(path: str | Path, trust: bool = False) -> TrainingState:
    """The ``state.pt`` of a checkpoint directory, loaded as plain data (``weights_only``).

    ``trust=True`` unpickles it fully instead: for a checkpoint written by earlier cxsim
    versions, from a source you trust; anything in the file can run on load.
    """
    file = Path(path) / "state.pt"
    try:
        raw = torch.load(file, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as error:
        raise UntrustedCheckpointError(
            f"{file} holds more than plain data, so it was not loaded: it was written by an "
            "earlier cxsim (or altered). If you trust it, convert it once with `python -m "
            f"cxsim.checkpoint {Path(path)}` or resume with --trust-checkpoint. ({error})"
        ) from None
    return TrainingState(**raw)


def _plain(x: Any) -> Any:
    """``x`` with numpy values (and the numpy RNG tuple) turned into weights-only types."""
    if isinstance(x, dict):
        if set(x) >= {"python", "numpy", "torch"} and isinstance(x["numpy"], tuple):
            np.random.set_state(x["numpy"])  # re-express the old tuple through capture_rng
            return {**{k: _plain(v) for k, v in x.items()}, "numpy": capture_rng()["numpy"]}
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x)(_plain(v) for v in x)
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x.copy())
    if isinstance(x, np.generic):
        return x.item()
    return x


def convert_state(path: str | Path) -> Path:
    """Rewrites a checkpoint's ``state.pt`` written by earlier cxsim versions as plain data
    (it is unpickled once, so only for a checkpoint you trust). Returns the file."""
    file = Path(path) / "state.pt"
    saved_numpy = np.random.get_state()
    try:
        state = _plain(torch.load(file, map_location="cpu", weights_only=False))
    finally:
        np.random.set_state(saved_numpy)
    tmp = file.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    tmp.replace(file)
    torch.load(file, map_location="cpu", weights_only=True)  # loads as plain data now
    return file


def main(argv: list[str] | None = None) -> None:
    """``python -m cxsim.checkpoint CHECKPOINT_DIR ...``: convert earlier checkpoints in place."""
    for path in sys.argv[1:] if argv is None else argv:
        print(f"converted {convert_state(path)}")


if __name__ == "__main__":
    main()

"""Run tracking: TensorBoard writer, the hyperparameter record, results JSON, progress bars.

Scalars go straight to ``writer.add_scalar`` under a few prefixes (STYLE.md 10):
``charts/`` (reward, success, throughput), ``losses/`` (policy, value, entropy,
KL, clip fraction), ``compaction/`` (compactions, summary recall, segment
counts) and ``critic/`` (value statistics, explained variance). Update and
rollout functions return ``dict[str, float]`` with those prefixes already in
the keys, so logging one of them is a loop over ``add_scalar``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter
from tqdm.auto import tqdm


def open_writer(run_dir: str | Path, purge_step: int | None = None) -> SummaryWriter:
    """A TensorBoard writer under ``run_dir/tb``.

    ``purge_step``: on resume, drop events at or after this step that a killed
    run wrote after its last checkpoint, so curves have no duplicates.
    """
    return SummaryWriter(log_dir=str(Path(run_dir) / "tb"), purge_step=purge_step)


def log_scalars(writer: SummaryWriter, metrics: Mapping[str, float], step: int) -> None:
    """``writer.add_scalar`` for each ``prefix/name -> value`` of an update's metrics."""
    for name, value in metrics.items():
        writer.add_scalar(name, value, step)


def flatten_config(config: Any, prefix: str = "") -> dict[str, Any]:
    """A dataclass config as ``{"ppo.actor_lr": 1e-3, ...}`` (nested dataclasses dotted)."""
    flat: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            flat.update(flatten_config(value, prefix=f"{key}."))
        else:
            flat[key] = value
    return flat


def log_config(writer: SummaryWriter, config: Any) -> None:
    """The run's hyperparameters as a Markdown table in TensorBoard's Text tab."""
    rows = [f"| `{k}` | `{v!r}` |" for k, v in flatten_config(config).items()]
    writer.add_text("config", "\n".join(["| field | value |", "|---|---|", *rows]), 0)


def log_transcripts(writer: SummaryWriter, transcripts: Iterable[str], step: int) -> None:
    """Sample transcripts in TensorBoard's Text tab (indented: Markdown code blocks)."""
    for i, text in enumerate(transcripts):
        block = "\n".join("    " + line for line in text.splitlines())
        writer.add_text(f"transcripts/{i}", block, step)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, tuples, paths and non-finite floats made JSON-friendly."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | Path, payload: Any) -> None:
    """Writes ``payload`` as indented JSON atomically (temp file, then ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(to_jsonable(payload), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def progress(total: int, initial: int = 0, desc: str = "", disable: bool = False) -> tqdm:
    """A tqdm bar with rate and ETA; ``initial`` > 0 when a run resumes."""
    return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True, disable=disable)

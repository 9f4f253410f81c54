"""Run tracking: TensorBoard writer, the hyperparameter record, results JSON, progress,
and the settings record that keeps one run folder to one set of settings.

Scalars go straight to ``writer.add_scalar`` under a few prefixes (docs/tensorboard.md
lists every tag with its meaning and unit):
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
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: torch's import costs seconds on every --help
    from torch.utils.tensorboard import SummaryWriter

QUIET_ENV = "CXSIM_QUIET"
"""Set to 1 by ``cxsim --quiet`` (or ``cxsim CMD --quiet``): no progress output at all."""
SETTINGS_FILE = "settings.json"


def open_writer(run_dir: str | Path, purge_step: int | None = None) -> SummaryWriter:
    """A TensorBoard writer under ``run_dir/tb``.

    ``purge_step``: on resume, drop events at or after this step that a killed
    run wrote after its last checkpoint, so curves have no duplicates.
    """
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(Path(run_dir) / "tb"), purge_step=purge_step)


def log_scalars(writer: SummaryWriter, metrics: Mapping[str, float], step: int) -> None:
    """``writer.add_scalar`` for each ``prefix/name -> value`` of an update's metrics."""
    for name, value in metrics.items():
        writer.add_scalar(name, value, step)


def log_evaluation(run_dir: str | Path, payload: Mapping[str, Any], step: int) -> None:
    """An evaluation (``cxsim eval``'s payload) into ``run_dir/tb`` at ``step``:
    ``eval/{protocol}/pass_at_1``, ``.../ci95_low``, ``.../ci95_high`` and, where
    summaries were written, ``.../summary_recall`` and the fact survival by compaction round
    (``.../survival/round{k}``, ``.../survival/cliff_round``, the same per fact type)."""
    from cxsim.diagnostics.survival import summary_tags

    writer = open_writer(run_dir)
    for result in payload["results"]:
        prefix = f"eval/{result['protocol']}/"
        for key in ("pass_at_1", "ci95_low", "ci95_high", "summary_recall"):
            value = result.get(key)
            if value is not None and math.isfinite(value):
                writer.add_scalar(prefix + key, value, step)
        if result.get("survival"):
            for tag, value in summary_tags(result["survival"], prefix + "survival/").items():
                writer.add_scalar(tag, value, step)
    writer.close()


def flatten_config(config: Any, prefix: str = "") -> dict[str, Any]:
    """A dataclass config as ``{"ppo.actor_lr": 1e-3, ...}`` (nested dataclasses dotted, a
    :data:`RECORDED_FLAT` group's fields undotted)."""
    flat: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        key = f"{prefix}{f.name}"
        if f.metadata.get(RECORDED_FLAT):
            flat.update(flatten_config(value, prefix=prefix))
        elif dataclasses.is_dataclass(value):
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


RECORDED_WHEN_SET = "cxsim.recorded_when_set"
"""Field metadata key: the field is left out of records (settings, cache tags) while it
holds the value a record without it stands for. Settings added after runs were recorded use
it, so those runs' records and cache folders stay valid: ``field(default=..., metadata=
{RECORDED_WHEN_SET: True})``, or, for a field whose default changed since, the old default
in place of True (``{RECORDED_WHEN_SET: ("last",)}``, the value in a 1-tuple), so a run made
at the old default keeps its record and one made at the new default is told apart."""


RECORDED_FLAT = "cxsim.recorded_flat"
"""Field metadata key: the field is a settings group (a dataclass) whose fields are recorded
as its parent's own, in its place (``{"device": ..., "precision": ...}``, not ``{"compute":
{...}}``), as the command line spells them (:data:`cxsim.compute.FLAT`)."""


def unrecorded_value(f: dataclasses.Field) -> Any:
    """The value a record without the field ``f`` stands for (:data:`RECORDED_WHEN_SET`):
    its old default where it names one, else its default; ``dataclasses.MISSING`` when the
    field is always recorded."""
    marked = f.metadata.get(RECORDED_WHEN_SET)
    if not marked:
        return dataclasses.MISSING
    if isinstance(marked, tuple):
        return marked[0]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def with_unrecorded(record: Mapping[str, Any], config_type: type) -> dict[str, Any]:
    """``record`` (a dataclass's :func:`to_jsonable` form) with every field it leaves out
    while at its :func:`unrecorded_value` put back at that value, so two records compare
    field by field whatever each left out."""
    full = dict(record)
    for f in dataclasses.fields(config_type):
        unrecorded = unrecorded_value(f)
        if f.name not in full and unrecorded is not dataclasses.MISSING:
            full[f.name] = to_jsonable(unrecorded)
    return full


def _recorded(value: Any, f: dataclasses.Field) -> bool:
    unrecorded = unrecorded_value(f)
    return unrecorded is dataclasses.MISSING or getattr(value, f.name) != unrecorded


def to_jsonable(value: Any) -> Any:
    """Dataclasses, tuples, paths and non-finite floats made JSON-friendly (a dataclass
    field marked :data:`RECORDED_WHEN_SET` only when it differs from its default, one marked
    :data:`RECORDED_FLAT` as its fields)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        record: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            if f.metadata.get(RECORDED_FLAT):
                record.update(to_jsonable(getattr(value, f.name)))
            elif _recorded(value, f):
                record[f.name] = to_jsonable(getattr(value, f.name))
        return record
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


def quiet() -> bool:
    """True under ``--quiet``: commands print nothing but errors."""
    return os.environ.get(QUIET_ENV, "") not in ("", "0")


class LineProgress:
    """Progress for logs (stderr not a terminal): one summary line every ``every_s``
    seconds and one at the end, instead of a carriage-return bar rewritten many times
    a second. Same calls as the tqdm bar it replaces: ``update``, ``set_postfix``, ``close``."""

    def __init__(self, total: int, initial: int = 0, desc: str = "", every_s: float = 30.0):
        self.total, self.n, self.start_n, self.desc = total, initial, initial, desc
        self.every_s = every_s
        self.began = self.last = time.perf_counter()
        self.postfix = ""
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if now - self.last >= self.every_s or self.n >= self.total:
            self.last = now
            self.write()

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        """The values the next line shows (``refresh`` is tqdm's; lines are written by
        ``update`` and ``close``)."""
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def line(self) -> str:
        elapsed = time.perf_counter() - self.began
        done = self.n - self.start_n
        eta = elapsed / done * (self.total - self.n) if done else math.nan
        eta_text = f", ETA {eta:.0f}s" if math.isfinite(eta) and self.n < self.total else ""
        tail = f"; {self.postfix}" if self.postfix else ""
        return f"[{self.desc}] {self.n}/{self.total} in {elapsed:.0f}s{eta_text}{tail}"

    def write(self) -> None:
        print(self.line(), file=sys.stderr, flush=True)

    def close(self) -> None:
        if not self.closed and self.n < self.total:
            self.write()  # stopped early (time limit): say where
        self.closed = True


def progress(total: int, initial: int = 0, desc: str = "", disable: bool = False) -> Any:
    """A tqdm bar with rate and ETA on a terminal; in a log (stderr redirected), a
    :class:`LineProgress` summary line every 30 s; nothing under ``--quiet``.
    ``initial`` > 0 when a run resumes."""
    from tqdm.auto import tqdm

    disable = disable or quiet()
    if not disable and not sys.stderr.isatty():
        return LineProgress(total, initial, desc)
    return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True, disable=disable)


def advance(bar: Any, **values: Any) -> None:
    """One step of ``bar`` done, showing ``values``: the step's values are set first, then
    the count, so that the line the count writes (a log's summary line, the bar's refresh)
    carries the step just finished, not the one before it."""
    bar.set_postfix(refresh=False, **values)
    bar.update(1)


def say(message: str) -> None:
    """One line of progress on stdout (flushed, so logs keep the order); silent under --quiet."""
    if not quiet():
        print(message, flush=True)


class SettingsMismatch(ValueError):
    """A run folder holds results made with other settings."""


def flat_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"sft.omission_rate": 0.5, ...}``: settings (dataclasses, dicts) as JSON values
    under dotted names, so two records compare field by field."""
    flat: dict[str, Any] = {}

    def walk(value: Any, key: str) -> None:
        value = to_jsonable(value)
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        else:
            flat[key] = value

    walk(dict(settings), "")
    return flat


def claim_run_dir(
    run_dir: str | Path,
    settings: Mapping[str, Any],
    overwrite: bool = False,
    flag: str = "--run-dir",
) -> None:
    """Records ``settings`` in ``run_dir/settings.json``, or refuses a folder made with others.

    Equal settings: the folder is resumed (nothing changes). Different settings:
    :class:`SettingsMismatch` naming each differing setting, before any work, unless
    ``overwrite``, which deletes the folder and starts it anew. A folder with results
    but no record (made before records were kept) is taken as it is.
    """
    run_dir = Path(run_dir)
    path = run_dir / SETTINGS_FILE
    wanted = flat_settings(settings)
    if path.is_file() and not overwrite:
        recorded = json.loads(path.read_text())
        differ = sorted(k for k in set(recorded) | set(wanted) if recorded.get(k) != wanted.get(k))
        if differ:
            shown = "; ".join(
                f"{k}: {json.dumps(recorded.get(k))} there, {json.dumps(wanted.get(k))} now"
                for k in differ[:6]
            )
            more = f" (and {len(differ) - 6} more)" if len(differ) > 6 else ""
            raise SettingsMismatch(
                f"{run_dir} holds a run made with other settings ({shown}{more}); pass another "
                f"{flag} to start a new run, or --overwrite to delete {run_dir} and start over"
            )
        return
    if overwrite and run_dir.exists():
        shutil.rmtree(run_dir)
    write_json(path, wanted)

"""Where a study's cache and page go: keyed by the study file, so that two files never share
them, and a narrowed run's page named apart from the full one.

The folder of a study file is ``runs/studies/<stem>/``, unless that folder belongs to another
file of the same name: then ``runs/studies/<stem>-<8 hex digits of the file's path>/``. A
folder's ``study-file`` names the file it belongs to (:func:`file_identity`: its path relative
to the current folder, or its absolute path when it lies outside); a folder made before these
markers belongs to the first file that uses it.

A run of the file as written (its seeds, every setting and claim, no budget) writes
``<stem>.md``; one narrowed by ``--seeds``, ``--only`` or ``--budget`` writes
``<stem>.<what narrowed it>.md`` beside it (:func:`page_name`), never over the full page.

A runs folder can be shared (``--runs-dir``): its runs are keyed by what they depend on, so
two files share a run only when it is the same run. What belongs to the file rather than
to a run, its ``predictions.json`` and the ``--print-commands`` folders, goes under
``<runs-dir>/studies/<stem>-<8 hex digits of the file's path>/`` (:func:`own_files`), so
two files' predictions never mix.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

STUDIES_ROOT = Path("runs") / "studies"
OWNER_FILE = "study-file"
"""The file, in a study's folder, that names the study file the folder belongs to."""


def shown_path(path: str | Path) -> str:
    """``path`` relative to the current folder when it lies inside it, else its name: no
    machine's absolute path in a page, its data or a folder's marker."""
    full = Path(path).resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return full.name


def file_identity(path: str | Path) -> str:
    """What tells study files apart: the path relative to the current folder when the file
    lies inside it (the same after a checkout moves), else the resolved absolute path (two
    files elsewhere with one name differ). Kept only in a runs folder's marker, never on a
    page."""
    full = Path(path).resolve()
    try:
        return str(full.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(full)


def path_digest(path: str | Path) -> str:
    """8 hex digits of the file's :func:`file_identity`."""
    return hashlib.sha256(file_identity(path).encode()).hexdigest()[:8]


def study_key(path: str | Path) -> str:
    """``<stem>-<8 hex digits of the file's path>``: the file's name in a runs folder."""
    return f"{Path(path).stem}-{path_digest(path)}"


def own_files(runs_dir: str | Path, path: str | Path) -> Path:
    """Where, in a runs folder, the study file ``path`` keeps what is its own and no run's
    (its ``predictions.json``, its ``--print-commands`` folders): never another file's,
    whichever files share the runs folder."""
    return Path(runs_dir) / "studies" / study_key(path)


def is_own_cache(runs_dir: str | Path, path: str | Path) -> bool:
    """Whether ``runs_dir`` is the study file's own folder's cache (``--runs-dir`` left out),
    which no other file writes to."""
    return Path(runs_dir).resolve() == (study_folder(path) / "runs").resolve()


def owner_of(folder: Path) -> str | None:
    """The study file a folder belongs to; None when it names none."""
    marker = folder / OWNER_FILE
    return marker.read_text().strip() if marker.is_file() else None


def study_folder(file: str | Path, root: str | Path = STUDIES_ROOT) -> Path:
    """The folder of the study file ``file`` under ``root``: ``<stem>`` when it is free, the
    file's own or unmarked, else ``<stem>-<digest>``."""
    stem, identity = Path(file).stem, file_identity(file)
    plain = Path(root) / stem
    owner = owner_of(plain)
    if not plain.exists() or owner in (None, identity):
        return plain
    return Path(root) / f"{stem}-{path_digest(file)}"


def claim_folder(folder: Path, file: str | Path) -> None:
    """Mark ``folder`` as the study file's (made if missing); a folder marked for another
    file is an error, never shared."""
    identity = file_identity(file)
    owner = owner_of(folder)
    if owner not in (None, identity):
        raise ValueError(f"{folder} belongs to the study file {owner}, not {identity}")
    folder.mkdir(parents=True, exist_ok=True)
    if owner is None:
        (folder / OWNER_FILE).write_text(identity + "\n")


def seed_words(seeds: Sequence[int]) -> str:
    """Seeds as runs of consecutive ones: ``0-3+40-45``, ``7``."""
    runs: list[list[int]] = []
    for seed in seeds:
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return "+".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def page_name(
    stem: str,
    seeds: Sequence[int],
    file_seeds: Sequence[int],
    only: Sequence[str] = (),
    budget: str | None = None,
) -> str:
    """The page's file stem: ``stem`` for the file as written, else ``stem`` with what
    narrowed the run (``.budget-smoke``, ``.seeds-0-1``, ``.only-small_floor-helps``)."""
    parts = []
    if budget:
        parts.append(f"budget-{budget}")
    if tuple(seeds) != tuple(file_seeds):
        parts.append(f"seeds-{seed_words(seeds)}")
    if only:
        parts.append("only-" + "+".join(only))
    name = ".".join([stem, *parts])
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)

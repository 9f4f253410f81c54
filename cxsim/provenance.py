"""Where a result came from: the commit of the checkout cxsim runs from, and how a page says
it. Every page, study artefact and calibration record reads its commit here.

git runs in the package's own folder, so the commit is cxsim's whatever the working folder;
outside a git checkout (an installed package) the commit is ``"unknown"`` and a page names
the package's version instead.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent


def _git(*words: str) -> str:
    """git's output in the package's folder; empty when git is missing or fails."""
    try:
        done = subprocess.run(["git", *words], capture_output=True, text=True, cwd=_HERE,
                              timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def commit() -> str:
    """The checkout's short commit id, or ``"unknown"`` outside a git checkout."""
    return _git("rev-parse", "--short", "HEAD") or "unknown"


def commit_state() -> dict[str, Any]:
    """The checkout's full commit id (``"unknown"`` outside one) and whether tracked files
    differ from it."""
    sha = _git("rev-parse", "HEAD")
    return {"commit": sha or "unknown", "dirty": bool(_git("status", "--porcelain", "-uno"))}


def made_at(commit_id: str | None, version: str | None = None) -> str:
    """``at commit abc1234``; outside a git checkout, ``outside a git checkout (cxsim
    VERSION)`` (the version left out when not known)."""
    if commit_id and commit_id != "unknown":
        return f"at commit {commit_id}"
    return "outside a git checkout" + (f" (cxsim {version})" if version else "")


def cxsim_version() -> str | None:
    """The installed package's version (None when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cxsim")
    except PackageNotFoundError:
        return None

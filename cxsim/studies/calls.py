"""A study's calls: each stage read from the cache or made, and calls mapped through an
executor in order, one log line per finished call.

Every call of a study (a stage-0 candidate, an SFT base, a unit, a swap) is a function of
plain arguments that returns a small dict: its setting and seed, the stages it made now
(``made``: :func:`cached_stage` notes each stage it had to compute rather than read) and its
wall time. :func:`mapped` calls one such function on a list of argument tuples through an
executor of :mod:`cxsim.studies.executors` and puts the results back in order, logging each
call as it finishes (:func:`log`: one timestamped line).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cxsim.studies.executors import Executor
from cxsim.tables import cached_json
from cxsim.tracking import say


def cached_stage(
    path: Path, compute: Callable[[], dict[str, Any]], made: list[str], stage: str
) -> dict[str, Any]:
    """``cached_json``, noting in ``made`` the stages this call had to compute."""
    if not path.is_file():
        made.append(stage)
    return cached_json(path, compute)


def mapped(
    executor: Executor, fn: Callable[..., dict[str, Any]], calls: list[tuple[Any, ...]], what: str
) -> list[dict[str, Any]]:
    """``[fn(*c) for c in calls]`` through ``executor``, in order; one log line per call as
    it finishes (``what`` names a call; empty: its arm)."""
    results: list[dict[str, Any]] = [{} for _ in calls]
    for done, (index, result) in enumerate(executor.map(fn, calls), start=1):
        results[index] = result
        stages = ", ".join(result["made"]) or "read from the cache"
        log(
            f"[{done}/{len(calls)}] {result['setting']}, seed {result['seed']}, "
            f"{what or result.get('label') or result['arm']}: {stages} "
            f"({result['wall_time_s']:.0f}s)"
        )
    return results


def log(message: str) -> None:
    say(f"[study {time.strftime('%H:%M:%S')}] {message}")

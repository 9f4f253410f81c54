"""Seeds side by side: each job in its own spawned process with one torch thread.

``cxsim tables`` runs its seeds through :func:`map_in_processes` (``cxsim verdicts`` and
``cxsim study`` run theirs on cxsim/studies/executors.py). Tiny models run 10-100x faster
on one thread each than on a shared pool, and ``spawn`` (not ``fork``) keeps a child from
inheriting torch's thread pools.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def map_in_processes(fn: Callable[..., Any], jobs: int, *args: Sequence[Any]) -> list[Any]:
    """``[fn(*a) for a in zip(*args)]``, ``jobs`` at a time, in order.

    With ``jobs == 1`` or a single item it runs in this process. Otherwise each call runs
    in a spawned single-threaded worker; an exception in one call is raised here.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import torch

    calls = list(zip(*args, strict=True))
    if jobs == 1 or len(calls) <= 1:
        return [fn(*a) for a in calls]
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(jobs, len(calls)), mp_context=spawn,
                             initializer=torch.set_num_threads, initargs=(1,)) as pool:  # fmt: skip
        return list(pool.map(fn, *args))

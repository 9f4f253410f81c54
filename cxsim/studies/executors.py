"""Where a study's runs execute: this machine's process pool, or a Ray cluster.

A study is a list of calls with plain arguments (:func:`cxsim.studies.runner.make_base`,
then :func:`cxsim.studies.runner.run_unit`, then :func:`cxsim.studies.runner.run_swap`),
so an executor needs one operation: :meth:`Executor.map` calls a function on each
argument tuple and yields ``(index, result)`` as each call finishes, so that the study
logs one line per finished run and puts the results back in order. Every call writes its
files (checkpoints, results) into the study's runs folder itself and returns a small dict;
nothing large comes back.

- :class:`LocalExecutor` (``--executor local``, the default): ``--jobs`` spawned processes
  with one torch thread each (tiny models run 10-100x faster on one thread each than on a
  shared pool); one job runs in this process. On Linux a worker ends with the process that
  started it, so a study or calibration killed by a signal leaves no worker computing.
- :class:`RayExecutor` (``--executor ray``): one Ray task per call, asking for one CPU and,
  when the study's device is ``cuda``, one GPU. ``--ray-address HOST:PORT`` joins a running
  cluster; without it a local Ray instance starts with ``--jobs`` CPUs. Ray is imported only
  here, when asked for (``pip install 'cxsim[ray]'``).

Either way a unit is read from the cache when its files are there, so a study killed on
one executor resumes on either.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

EXECUTORS = ("local", "ray")
RAY_MISSING = "--executor ray needs Ray: pip install 'cxsim[ray]'"


class Executor(Protocol):
    """Maps a function over argument tuples; see the module's docstring."""

    name: str
    workers: int
    """Calls that can run at once (a Ray cluster's CPUs, when it is known)."""

    def map(
        self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]
    ) -> Iterator[tuple[int, Any]]:
        """``fn(*calls[i])`` for every i, yielding ``(i, result)`` as each call finishes.
        An exception in a call is raised here, after the calls not yet started are dropped
        (those that finished have written their files)."""
        ...

    def close(self) -> None:
        """Free what the executor started (its processes, a Ray instance it began)."""
        ...


class LocalExecutor:
    """``jobs`` spawned single-threaded processes on this machine (one job: this process).

    The processes start with the first map of more than one call and serve every later map
    (the bases, then the units) until :meth:`close`, so each imports torch once."""

    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise ValueError(f"--jobs {jobs}: pass at least one process")
        self.workers = jobs
        self.pool: ProcessPoolExecutor | None = None

    def map(
        self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]
    ) -> Iterator[tuple[int, Any]]:
        from concurrent.futures import FIRST_COMPLETED, wait

        if self.workers == 1 or len(calls) <= 1:
            for index, args in enumerate(calls):
                yield index, fn(*args)
            return
        pool = self.started_pool()
        pending = {pool.submit(fn, *args): index for index, args in enumerate(calls)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()
        finally:
            for future in pending:  # an error or an interrupted study: drop what has not run
                future.cancel()

    def started_pool(self) -> ProcessPoolExecutor:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if self.pool is None:
            # spawn, not fork: a child must not inherit torch's thread pools
            self.pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=start_worker,
                initargs=(os.getpid(),),
            )
        return self.pool

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


PR_SET_PDEATHSIG = 1
"""Linux's prctl option: the signal a process gets when the thread that made it ends."""


def start_worker(parent: int) -> None:
    """A local worker's start: one torch thread and, on Linux, a SIGTERM when ``parent`` (the
    study's process) ends, so that killing a study ends its workers too instead of leaving
    them to finish their runs unwatched. A parent already gone ends the worker at once."""
    import torch

    torch.set_num_threads(1)
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it ended before the request took hold
        os._exit(1)


def import_ray() -> ModuleType:
    """``import ray``, or a one-line error that says how to install it."""
    try:
        import ray
    except ImportError as error:
        raise ValueError(RAY_MISSING) from error
    return ray


def gpus_per_run(device: str) -> int:
    """The GPUs one Ray task asks for: 1 on ``cuda``, 0 on ``cpu``. Ray gives each task its
    own GPU as ``cuda`` (it sets ``CUDA_VISIBLE_DEVICES``), so ``cuda:N`` and ``auto``, which
    would pick a GPU on their own, are refused."""
    if device in ("cpu", "cuda"):
        return int(device == "cuda")
    raise ValueError(
        f"--device {device} with --executor ray: pass --device cuda (Ray gives each run its "
        "own GPU) or --device cpu"
    )


def check_answers(address: str) -> None:
    """A ``HOST:PORT`` address takes a connection within 5 s (Ray itself would retry for
    minutes); ``auto`` and ``ray://`` addresses are left to Ray."""
    import socket

    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise ValueError(
            f"--ray-address {address}: nothing answers there ({error.strerror or error}); "
            "start a cluster with `ray start --head` and pass the HOST:PORT it prints"
        ) from error


def run_in_worker(fn: Callable[..., Any], where: dict[str, Any], args: tuple[Any, ...]) -> Any:
    """A Ray task's body: the driver's folder, import path and ``--quiet``, one torch
    thread, then ``fn(*args)``.

    ``where["cwd"]``: the driver's working folder, entered when this node has it, so that a
    relative runs folder and a ``module:name`` plug-in in the current folder mean what they
    mean on the driver; ``where["sys_path"]``: the driver's import path, whose folders this
    node has are appended (the study file's folder, for its plug-ins)."""
    import torch

    from cxsim.tracking import QUIET_ENV

    torch.set_num_threads(1)  # tiny models: one thread per run
    if os.path.isdir(where["cwd"]):
        os.chdir(where["cwd"])
    for folder in where["sys_path"]:
        if folder and folder not in sys.path and os.path.isdir(folder):
            sys.path.append(folder)
    os.environ[QUIET_ENV] = where["quiet"]
    return fn(*args)


class RayExecutor:
    """One Ray task per call (``num_cpus=1``, ``num_gpus`` from the device).

    ``address``: a running cluster to join (``HOST:PORT``); None starts a local instance
    with ``num_cpus`` CPUs, unless this process is connected to Ray already (then that
    session is used as it is, and left running). The runs folder must be one the workers
    share: on a local instance any folder is; on a cluster, a shared file system mounted at
    the same path on every node (give ``--runs-dir`` as an absolute path)."""

    name = "ray"

    def __init__(self, device: str, num_cpus: int = 1, address: str | None = None) -> None:
        if num_cpus < 1:
            raise ValueError(f"--jobs {num_cpus}: pass at least one CPU for the Ray workers")
        self.gpus = gpus_per_run(device)
        ray = import_ray()
        self.ray, self.started = ray, False
        if not ray.is_initialized():
            if address is None:
                ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level="warning")
            else:
                check_answers(address)
                try:
                    ray.init(address=address, logging_level="warning")
                except ConnectionError as error:
                    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                    raise ValueError(
                        f"--ray-address {address}: no Ray cluster answered ({first}); start "
                        "one with `ray start --head` or pass its HOST:PORT"
                    ) from error
            self.started = True
        resources = ray.cluster_resources()
        self.workers = max(1, int(resources.get("CPU", 1)))
        if self.gpus and resources.get("GPU", 0) < 1:
            self.close()
            raise ValueError(
                "--device cuda with --executor ray: the Ray cluster has no GPU; pass "
                "--device cpu or join a cluster with GPUs (--ray-address)"
            )

    def map(
        self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]
    ) -> Iterator[tuple[int, Any]]:
        from cxsim.tracking import QUIET_ENV

        ray = self.ray
        task = ray.remote(num_cpus=1, num_gpus=self.gpus, max_retries=0)(run_in_worker)
        where = {
            "cwd": os.getcwd(),
            "sys_path": list(sys.path),
            "quiet": os.environ.get(QUIET_ENV, ""),
        }
        pending = {task.remote(fn, where, args): index for index, args in enumerate(calls)}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    index = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayTaskError as error:  # the call's own exception
                        cause = getattr(error, "cause", None)
                        if isinstance(cause, Exception):
                            raise cause from None
                        raise
                    yield index, result
        finally:
            for ref in pending:  # an error or an interrupted study: drop what has not run
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            self.started = False


def make_executor(
    name: str, jobs: int = 1, device: str = "cpu", ray_address: str | None = None
) -> Executor:
    """The executor ``cxsim study --executor NAME`` asks for."""
    if name == "local":
        if ray_address is not None:
            raise ValueError("--ray-address joins a Ray cluster: pass it with --executor ray")
        return LocalExecutor(jobs)
    if name == "ray":
        return RayExecutor(device, num_cpus=jobs, address=ray_address)
    raise ValueError(f"--executor {name}: choose one of: {', '.join(EXECUTORS)}")

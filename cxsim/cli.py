"""The ``cxsim`` console command: dispatches to tyro entry points in ``cxsim.experiments``.

Each entry point is a module with ``main(argv: list[str] | None) -> None`` that
parses its own frozen-dataclass config with ``tyro.cli``. Modules are imported
lazily so that ``cxsim --help`` stays fast, and the entry points import torch only
when they run, so that ``cxsim CMD --help`` does too.

Errors a user can cause (a bad flag or value, a missing file, a run folder made
with other settings) end the command with one line on stderr that says what to
change, and exit status 1; ``CXSIM_TRACEBACK=1`` shows the traceback instead.
``--quiet`` (anywhere on the line) silences progress and stage lines.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

USER_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)
"""Exceptions that mean "change the command": shown as one line, no traceback."""

# command -> (module, one-line description); "bench" and others nest one level.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("cxsim.experiments.run", "the main job: SFT, CompactionRL, eval, report"),
    "sft": ("cxsim.experiments.sft", "behaviour cloning from oracle rollouts under compaction"),
    "train": (
        "cxsim.experiments.train",
        "PPO with context compaction (CompactionRL and ablations)",
    ),
    "eval": ("cxsim.experiments.evaluate", "Single and Compacted protocols, Pass@1 with 95% CI"),
    "tables": ("cxsim.experiments.tables", "the paper's tables in miniature, with seeds and CIs"),
    "verdicts": (
        "cxsim.experiments.verdicts",
        "a verdict on each of the paper's claims, from independent seeds",
    ),
    "critic-probe": (
        "cxsim.experiments.critic_probe",
        "is the outcome in the context, and do the critic's features carry it",
    ),
    "report": ("cxsim.experiments.report", "plots and tables from a finished run directory"),
    "lab": ("cxsim.experiments.lab", "estimator lab: estimators against ground truth"),
    "conform": (
        "cxsim.experiments.conform",
        "check another framework's advantages or loss reduction against cxsim",
    ),
}
BENCHMARKS: dict[str, tuple[str, str]] = {
    "advantages": ("cxsim.experiments.bench_advantages", "estimators against a time loop"),
    "envs": ("cxsim.experiments.bench_envs", "environment steps per second"),
    "rollout": ("cxsim.experiments.bench_rollout", "batched compaction rollouts vs a naive loop"),
    "distributed": ("cxsim.experiments.bench_distributed", "rollouts/s with 1 and 2 processes"),
    "help": ("cxsim.experiments.bench_help", "seconds each command's --help takes"),
    "memory": ("cxsim.experiments.bench_memory", "loss-head peak memory and time per token"),
    "gpu": ("cxsim.experiments.bench_gpu", "0.5B-sized Qwen2 SFT + PPO on a GPU; tiny vs CPU"),
    "learning": ("cxsim.experiments.bench_learning", "regression check: CompactionRL still learns"),
}


def _usage(table: dict[str, tuple[str, str]], prefix: str) -> str:
    width = max(len(name) for name in table)
    lines = [f"usage: {prefix} COMMAND [--help]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {desc}" for name, (_, desc) in table.items()]
    return "\n".join(lines)


def _dispatch(
    table: dict[str, tuple[str, str]], argv: list[str], prefix: str, listed: list[str]
) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(table, prefix))
        return
    name, rest = argv[0], argv[1:]
    if name not in table:
        sys.exit(f"{prefix}: unknown command {name!r}; choose one of: {', '.join(listed)}")
    module = importlib.import_module(table[name][0])
    if not {"-h", "--help"} & set(rest):
        _set_threads()
    prog = f"{prefix} {name}"
    sys.argv[0] = prog
    _rewrap_help()
    quiet = os.environ.get("CXSIM_QUIET", "") not in ("", "0")
    with (
        _one_line_parse_errors(prog),
        contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext(),
    ):
        try:
            module.main(rest)
        except USER_ERRORS as err:
            if os.environ.get("CXSIM_TRACEBACK"):
                raise
            message = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
            sys.exit(f"{prog}: error: {message}")


def _unwrap(text: str) -> str:
    """A docstring's hard-wrapped lines joined into paragraphs (blank lines and list items
    ``- ...`` / ``1. ...`` keep their breaks), so that ``--help`` rewraps whole sentences."""
    out: list[str] = []
    for raw in text.split("\n"):
        line = raw.strip()
        starts_item = bool(re.match(r"([-*]|\d+\.) ", line))
        if not line:
            out.append("")
        elif out and out[-1] and not starts_item:
            out[-1] += " " + line
        else:
            out.append(line)
    return "\n".join(out).strip()


def _rewrap_help() -> None:
    """tyro keeps a docstring's line break wherever the next line is indented, which breaks
    field help mid-sentence; its joiner is replaced by :func:`_unwrap` (left alone if a
    tyro version has no such function)."""
    strings = getattr(importlib.import_module("tyro._docstrings"), "_strings", None)
    if strings is not None and hasattr(strings, "remove_single_line_breaks"):
        strings.remove_single_line_breaks = _unwrap


def _condense(text: str) -> str:
    """tyro's boxed error as one line: box borders and rules dropped, repeats merged."""
    parts: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"[╭╮╰╯│─━┃┏┓┗┛]+", " ", line).strip()
        if not line or line.startswith("For full helptext"):
            continue
        if parts and (line == parts[-1] or parts[-1].startswith(line)):
            continue
        if parts and line.startswith(parts[-1]):
            parts[-1] = line
            continue
        parts.append(line)
    return " ".join(parts)


@contextlib.contextmanager
def _one_line_parse_errors(prog: str) -> Iterator[None]:
    """While the block runs, ``tyro.cli`` reports a parse error in one line.

    tyro draws its errors as a multi-line box on stderr; every entry point calls
    ``tyro.cli``, so it is wrapped here once: its stderr is captured, replayed
    unchanged on success or ``--help``, and condensed to one line on an error.
    """
    import tyro

    original: Callable[..., Any] = tyro.cli

    @functools.wraps(original)
    def compact(*args: Any, **kwargs: Any) -> Any:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured):
                parsed = original(*args, **kwargs)
        except SystemExit as stop:
            if stop.code not in (0, None):  # a parse error: one line instead of the box
                raise SystemExit(
                    f"{prog}: error: {_condense(captured.getvalue())}; see `{prog} --help`"
                ) from None
            sys.stderr.write(captured.getvalue())  # --help
            raise
        except BaseException:
            sys.stderr.write(captured.getvalue())
            raise
        sys.stderr.write(captured.getvalue())  # warnings tyro printed on success
        return parsed

    tyro.cli = compact
    try:
        yield
    finally:
        tyro.cli = original


def _set_threads() -> None:
    """torch intra-op threads: ``CXSIM_THREADS`` (default 1).

    The models cxsim trains on a CPU are tiny; measured here, their ops ran
    10-100x slower with torch's default of one thread per core whenever another
    process shared the cores. Entry points
    with a ``--threads`` flag override this.
    """
    import torch

    torch.set_num_threads(int(os.environ.get("CXSIM_THREADS", "1")))


def main(argv: list[str] | None = None) -> None:
    try:
        _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def _main(argv: list[str]) -> None:
    if "--quiet" in argv:  # every command takes it; entry points read CXSIM_QUIET
        argv.remove("--quiet")
        os.environ["CXSIM_QUIET"] = "1"
    # transformers' and huggingface_hub's own bars ("Loading weights", "Writing model
    # shards") are noise in a log; cxsim reports its own progress
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if argv and argv[0] == "bench":
        _dispatch(BENCHMARKS, argv[1:], "cxsim bench", list(BENCHMARKS))
        return
    table = {**COMMANDS, "bench": ("", "benchmarks: " + ", ".join(BENCHMARKS))}
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(table, "cxsim") + "\n\noptions (every command):\n  --quiet  print errors only")
        return
    _dispatch(COMMANDS, argv, "cxsim", list(table))


if __name__ == "__main__":
    main()

"""The ``cxsim`` console command: dispatches to tyro entry points, each named by its module.

The commands' modules are library code (``cxsim.pipeline.run``, ``cxsim.studies.study``,
...); the benchmarks' are ``cxsim.experiments.bench_*``. Each entry point is a module with
``main(argv: list[str] | None) -> None`` that parses its own frozen-dataclass config with
``tyro.cli``. Modules are imported lazily so that ``cxsim --help`` stays fast, and the entry
points import torch only when they run, so that ``cxsim CMD --help`` does too.

Exit status, the same for every command: 0 when it did what it was asked, 2 for a usage or
configuration error (a bad flag or value, an unknown command, a missing file, a run folder
made with other settings: ``ValueError`` and the other :data:`USER_ERRORS`, and tyro's parse
errors), as argparse has it, and 1 when a run or check failed (a study's checks, a function
``cxsim conform`` finds differing, a plug-in's unusable output, a regression bench below its
floor). Either ends with one line on stderr that says what happened;
``CXSIM_TRACEBACK=1`` shows the traceback instead. ``--quiet`` (anywhere on the line)
silences progress and stage lines.
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
from typing import Any, NoReturn

from cxsim.plugin_checks import PluginOutputError

USER_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)
"""Exceptions that mean "change the command": shown as one line, no traceback, exit status 2."""
USAGE_ERROR = 2
"""Exit status of a usage or configuration error (argparse's)."""
FAILED = 1
"""Exit status of a run or check that failed (a ``SystemExit`` with a message)."""


class UsageError(SystemExit):
    """A usage or configuration error: exit status :data:`USAGE_ERROR` (``code``); ``str()``
    is its one line, which :func:`usage_error` has printed on stderr."""

    def __init__(self, message: str) -> None:
        super().__init__(USAGE_ERROR)
        self.message = message

    def __str__(self) -> str:
        return self.message


def usage_error(message: str) -> NoReturn:
    """Print ``message`` on stderr and end the command with exit status 2."""
    print(message, file=sys.stderr)
    raise UsageError(message)


# command -> (module, one-line description); "bench" and others nest one level.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("cxsim.pipeline.run", "the main job: SFT, CompactionRL, eval, report"),
    "sft": ("cxsim.pipeline.sft", "behaviour cloning from oracle rollouts under compaction"),
    "pretrain": (
        "cxsim.pipeline.pretrain",
        "regenerate the shipped starting checkpoint (the tiny model that copies)",
    ),
    "train": (
        "cxsim.pipeline.train",
        "PPO with context compaction (CompactionRL and ablations)",
    ),
    "eval": ("cxsim.pipeline.evaluate", "Single and Compacted protocols, Pass@1 with 95% CI"),
    "tables": ("cxsim.paper_tables.tables", "the paper's tables in miniature, with seeds and CIs"),
    "verdicts": (
        "cxsim.paper_tables.verdicts",
        "a verdict on each of the paper's claims, from independent seeds",
    ),
    "study": ("cxsim.studies.study", "your own claims from a study file, on paired seeds"),
    "calibrate": (
        "cxsim.studies.calibrate",
        "search an env's dials for a setting whose SFT base lands in a band of Pass@1",
    ),
    "critic-probe": (
        "cxsim.pipeline.critic_probe",
        "is the outcome in the context, and do the critic's features carry it",
    ),
    "report": ("cxsim.report.report", "plots and tables from a finished run directory"),
    "stability": (
        "cxsim.studies.stability_page",
        "which runs of a study kept what they learned (collapse figures from its cache)",
    ),
    "lab": ("cxsim.lab.lab", "estimator lab: estimators against ground truth"),
    "conform": (
        "cxsim.conformance.conform_command",
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
    "executors": ("cxsim.experiments.bench_executors", "a study on local processes vs Ray"),
    "horizons": (
        "cxsim.experiments.bench_horizons",
        "each horizon's share of the rollouts vs of the policy gradient, per loss mode",
    ),
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
        usage_error(
            f"{prefix}: error: unknown command {name!r}; choose one of: {', '.join(listed)}"
        )
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
            usage_error(f"{prog}: error: {message}")
        except PluginOutputError as err:  # a failed run: one line naming the plug-in, status 1
            if os.environ.get("CXSIM_TRACEBACK"):
                raise
            raise SystemExit(f"{prog}: error: {err}") from None
        except SystemExit as stop:  # a failed run's message gets the command's prefix, once
            if isinstance(stop.code, str) and not PREFIXED.match(stop.code):
                raise SystemExit(f"{prog}: error: {stop.code}") from None
            raise


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


PREFIXED = re.compile(r"cxsim[\w -]*: ")
"""A message that already names its command (``cxsim run: error: ...``)."""


ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")
"""Colour codes tyro adds on a terminal."""


def _box(text: str) -> tuple[str, list[list[str]]]:
    """tyro's error box as its title and its sections (split at the box's rules), each a
    list of lines with their indentation inside the box. tyro draws it with UTF-8 borders
    (``╭─ title ─╮``, ``│ ... │``) or, where the output is not UTF-8, as a title line over a
    rule of dashes and indented text; anything else: no title, one section."""
    lines = [ANSI_CODE.sub("", raw).rstrip() for raw in text.splitlines()]
    lines = [line for line in lines if line.strip()]
    title = ""
    if lines and lines[0].lstrip().startswith(("╭", "┏")):
        title = lines.pop(0).strip().strip("╭╮┏┓─━ ")
    elif len(lines) > 1 and _is_rule(lines[1]):  # the plain drawing
        title, lines = lines[0].strip(), lines[2:]
    sections: list[list[str]] = [[]]
    for line in lines:
        if line.lstrip().startswith(("╰", "┗")):
            continue
        inner = line.strip()
        if inner[:1] in ("│", "┃"):  # the UTF-8 borders; what is inside keeps its indent
            inner = line.lstrip()[1:].rstrip().removesuffix("│").removesuffix("┃").rstrip()
        else:
            inner = line
        if _is_rule(inner):
            sections.append([])
        elif inner.strip():
            sections[-1].append(inner)
    return title, [section for section in sections if section]


def _is_rule(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 3 and not stripped.strip("─━-")


def _flags(section: list[str]) -> list[str]:
    """The outermost lines of a listing (``--sft.epochs INT``), not their help text."""
    if not section:
        return []
    indent = min(len(line) - len(line.lstrip()) for line in section)
    return [line.strip() for line in section if len(line) - len(line.lstrip()) == indent]


def _plain_conversion_error(why: str) -> str:
    """Python's words for a value that is not a number, in the user's words."""
    found = re.fullmatch(r"invalid literal for int\(\) with base 10: (.*)", why)
    if found:
        return f"{found.group(1)} is not an integer"
    found = re.fullmatch(r"could not convert string to float: (.*)", why)
    return f"{found.group(1)} is not a number" if found else why


def _condense(text: str) -> str:
    """tyro's boxed parse error as one phrase with no prefix of its own: the kind of
    error is said once (``invalid choice 'x' for --presets; choose from a, b``), the help
    text it quotes and its "For full helptext" footer are dropped."""
    title, sections = _box(text)
    sections = [s for s in sections if not s[0].strip().startswith("For full helptext")]
    if not sections:
        return title or " ".join(text.split())
    body, rest = " ".join(" ".join(sections[0]).split()), sections[1:]
    kind = title.lower()
    if kind == "invalid choice":
        found = re.match(
            r"invalid choice (.+?) for argument '(.+?)'\. Expected one of (.*?)\.?$", body
        )
        if found:
            value, flag, listed = found.groups()
            choices = re.findall(r"'([^']*)'", listed) or [listed]
            return f"invalid choice {value} for {flag}; choose from {', '.join(choices)}"
    if kind == "value error":
        found = re.match(r"Error parsing (\S+?): (.*)$", body)
        if found:
            what, why = found.groups()
            if not what.startswith("-"):  # the config's own check: its message says it all
                return why
            why = _plain_conversion_error(why)
            usage = [f for s in rest if s[0].strip() == "Argument helptext:" for f in _flags(s[1:])]
            said = why if what in why else f"{what}: {why}"
            return said + (f" (usage: {usage[0]})" if usage else "")
    if kind == "unrecognized options":
        names = body.removeprefix("Unrecognized options:").strip()
        said = f"unrecognized option{'s' if ',' in names else ''} {names}"
        guesses = [f for s in rest if s[0].strip().startswith("Perhaps") for f in _flags(s[1:])]
        return said + (f" (did you mean {' or '.join(guesses)}?)" if guesses else "")
    if kind == "required options":
        missing = _flags(sections[0][1:]) if len(sections[0]) > 1 else []
        if missing:
            return f"missing {', '.join(missing)}"
    if body.lower().startswith(kind):  # the title said again in the text: keep the text
        return body
    return f"{title.lower()}: {body}" if title else body


@contextlib.contextmanager
def _one_line_parse_errors(prog: str) -> Iterator[None]:
    """While the block runs, ``tyro.cli`` reports a parse error in one line.

    tyro draws its errors as a multi-line box on stderr; every entry point calls
    ``tyro.cli``, so it is wrapped here once: its stderr is captured, replayed
    unchanged on success or ``--help``, and condensed to one line on an error. What it
    parsed has its env keyword arguments checked (:func:`cxsim.env_kwargs.check_env_configs`)
    before the command runs.
    """
    import tyro

    from cxsim.env_kwargs import check_env_configs

    original: Callable[..., Any] = tyro.cli

    @functools.wraps(original)
    def compact(*args: Any, **kwargs: Any) -> Any:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured):
                parsed = original(*args, **kwargs)
        except SystemExit as stop:
            if stop.code not in (0, None):  # a parse error: one line instead of the box
                usage_error(f"{prog}: error: {_condense(captured.getvalue())}; see `{prog} --help`")
            sys.stderr.write(captured.getvalue())  # --help
            raise
        except BaseException:
            sys.stderr.write(captured.getvalue())
            raise
        sys.stderr.write(captured.getvalue())  # warnings tyro printed on success
        check_env_configs(parsed)  # before the command writes anything
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
    quiet_before = os.environ.get("CXSIM_QUIET")
    try:
        _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    finally:  # a command called in-process (a test, a notebook) leaves --quiet behind it
        if quiet_before is None:
            os.environ.pop("CXSIM_QUIET", None)
        else:
            os.environ["CXSIM_QUIET"] = quiet_before


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

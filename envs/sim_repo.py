"""SimRepo: a synthetic coding task with an in-memory repository and one injected bug."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from cxsim.envs.base import ERROR_WORDS, NOISE_WORD, TextEnv, corrupt, words_of
from cxsim.envs.family import EnvFamily
from cxsim.envs.scripted import (
    REPO_SUMMARY_WORDS,
    SimRepoOracle,
    fact_types,
    shown_facts,
    sim_repo_summary,
)

FILES = (
    "calc.py",
    "text.py",
    "stats.py",
    "dates.py",
    "money.py",
    "grid.py",
    "cache.py",
    "paths.py",
)
TEST_FILE = "test_all.py"
MAX_LINES = 64  # per module; bounds the file:line words of the vocabulary
MAX_PATCHES = 8
CONSTANTS = tuple(range(2, 10))


@dataclass(frozen=True)
class Template:
    """A function body (``{name}``, ``{c}``, ``{c1}`` filled in) with one bug site."""

    kind: str  # off-by-one | flipped comparison | wrong constant | swapped arguments
    names: tuple[str, ...]
    lines: tuple[str, ...]
    bug_line: int  # index into lines
    bug: str  # the buggy version of that line


TEMPLATES = (
    Template(
        "off-by-one",
        ("sum_all", "total_of", "add_up"),
        (
            "def {name} ( xs ) :",
            "total = 0",
            "for i in range ( len ( xs ) ) :",
            "total = total + xs [ i ]",
            "return total",
        ),
        2,
        "for i in range ( len ( xs ) - 1 ) :",
    ),
    Template(
        "flipped comparison",
        ("pick_max", "larger", "top_of"),
        ("def {name} ( a , b ) :", "if a > b :", "return a", "return b"),
        1,
        "if a < b :",
    ),
    Template(
        "wrong constant",
        ("scale", "stretch", "grow"),
        ("def {name} ( x ) :", "y = x * {c}", "return y"),
        1,
        "y = x * {c1}",
    ),
    Template(
        "swapped arguments",
        ("gap", "spread", "diff_of"),
        ("def {name} ( a , b ) :", "d = a - b", "return d * {c}"),
        1,
        "d = b - a",
    ),
    Template(
        "flipped comparison",
        ("count_big", "num_above", "tally"),
        (
            "def {name} ( xs ) :",
            "n = 0",
            "for x in xs :",
            "if x >= {c} :",
            "n = n + 1",
            "return n",
        ),
        3,
        "if x < {c} :",
    ),
    Template(
        "swapped arguments",
        ("clamp", "bound", "limit"),
        ("def {name} ( x , lo , hi ) :", "return min ( max ( x , lo ) , hi )"),
        1,
        "return min ( max ( x , hi ) , lo )",
    ),
)
ISSUES = (
    "issue : {name} returns wrong values .",
    "issue : users report a bug in {name} .",
    "issue : the result of {name} is wrong for some inputs .",
)
TASK_TAIL = (
    "find the bug , apply the right patch with edit and submit . "
    "tools : ls , view file , view file start end , grep word , run_tests , patches , "
    "edit patch , submit ."
)
MESSAGES = (
    "files : ( truncated ) no match for lines to ran tests failed fail pass in -> "
    "assertion error timeout applied reverted submitted resolved not the bug is still there "
    "patches : no such file bad line range unknown patch"
)


@dataclass
class Function:
    name: str
    template: Template
    file: str
    start: int  # line number (1-based) of the def line
    lines: list[str]
    bug: str  # the line that breaks this function (applied to the buggy one)

    @property
    def site(self) -> int:
        return self.start + self.template.bug_line

    @property
    def test(self) -> str:
        return f"test_{self.name}"


@dataclass
class Patch:
    pid: str
    file: str
    line: int
    text: str

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


_CALIBRATED: dict[str, Any] = {"num_flaky": 0, "flaky_rate": 0.3, "output_words": 120}
"""What SimRepo's calibrated easy and default presets share (no flaky test, long outputs)."""


class SimRepo(TextEnv):
    """Find and fix one injected bug in a small in-memory repository, then submit.

    ## Description
    A repository of ``num_files`` modules with ``funcs_per_file`` functions
    each, generated from templates; one function carries an injected bug
    (off-by-one, flipped comparison, wrong constant or swapped arguments). The
    issue names the broken function. ``run_tests`` prints a traceback whose
    last frame is the bug's location (``calc.py:12``, the key fact; an extra
    frame in the test file adds noise); ``num_flaky`` tests fail now and then
    regardless (probability ``flaky_rate``, drawn from the env's RNG).
    ``patches`` lists ``num_patches`` candidate one-line patches, each at a
    location; exactly one fixes the bug, the others break a working function.

    ## Observation
    Text: the issue and the tool list at reset; then tool output. Outputs
    longer than ``output_words`` words are cut and end with ``( truncated )``.
    Code is one line per ``<n> |`` marker, tokens separated by spaces. With
    ``noise`` > 0, words of ``view`` / ``grep`` output become ``#``.

    ## Actions
    Text: ``ls``, ``view <file>``, ``view <file> <start> <end>``,
    ``grep <word>``, ``run_tests``, ``patches``, ``edit <patch id>`` (replaces
    any earlier edit), ``submit``. Anything else is an error observation; it
    never raises.

    ## Rewards
    On ``submit``: 1.0 if resolved (the failing test passes and every other
    test still passes, flakiness aside), else 0.0; ``-error_penalty`` per
    malformed action (default 0).

    ## Episode end
    Terminated on ``submit``; truncated at ``horizon`` steps.

    ## Arguments
    ``num_files`` (1-8), ``funcs_per_file``, ``num_patches`` (2-8), ``num_flaky``, ``flaky_rate``,
    ``output_words``, ``noise``, ``error_penalty``, ``horizon``. Presets in ``PRESETS``; the
    defaults are the calibrated ``default`` preset (before calibration: ``num_files=3,
    funcs_per_file=3, num_patches=4, num_flaky=1, flaky_rate=0.3, output_words=60``).
    Key facts: ``location`` (``<file>:<line>`` of the bug, shown by ``run_tests``) and ``patch``
    (the fixing patch id, shown by ``patches``); ``fact_needed_step``: the first ``edit``'s
    step (-1 before it).

    ## Version history
    * v0: initial version.
    """

    env_name: ClassVar[str] = "sim_repo"
    family: ClassVar[EnvFamily] = EnvFamily(
        oracle=SimRepoOracle,
        summary=sim_repo_summary,
        goal="the bug",
        notes={"location": "the bug is at {value}", "patch": "the fix is {value}"},
        words=REPO_SUMMARY_WORDS,
        commits=("edit", "submit"),
    )
    system_prompt: ClassVar[str] = (
        "you fix a bug in a small repository . run_tests shows where the bug is . "
        "patches lists fixes ; edit the one at the bug and submit ."
    )
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        # calibrated: docs/results/calibration/SimRepo-easy.toml (0.32 on 8 seeds) and
        # SimRepo-default.toml (0.29); the two differ in num_files only
        "easy": {"num_files": 2, "funcs_per_file": 2, "num_patches": 2, **_CALIBRATED},
        "default": {"num_files": 3, "funcs_per_file": 2, "num_patches": 2, **_CALIBRATED},
        "hard": {
            "num_files": 5,
            "funcs_per_file": 3,
            "num_patches": 6,
            "num_flaky": 2,
            "flaky_rate": 0.4,
            "output_words": 40,
            "noise": 0.05,
        },
    }

    def __init__(
        self,
        num_files: int = 3,
        funcs_per_file: int = 2,
        num_patches: int = 2,
        num_flaky: int = 0,
        flaky_rate: float = 0.3,
        output_words: int = 120,
        noise: float = 0.0,
        error_penalty: float = 0.0,
        horizon: int = 30,
        render_mode: str | None = None,
    ) -> None:
        n_funcs = num_files * funcs_per_file
        if not 1 <= num_files <= len(FILES):
            raise ValueError(f"num_files={num_files} must be in [1, {len(FILES)}]")
        if not 2 <= n_funcs <= sum(len(t.names) for t in TEMPLATES):
            raise ValueError(f"num_files * funcs_per_file = {n_funcs} must be in [2, 18]")
        if funcs_per_file * max(len(t.lines) for t in TEMPLATES) > MAX_LINES:
            raise ValueError(f"funcs_per_file={funcs_per_file} is too many for {MAX_LINES} lines")
        if not 2 <= num_patches <= min(MAX_PATCHES, n_funcs):
            raise ValueError(f"num_patches={num_patches} must be in [2, min(8, {n_funcs})]")
        if not 0 <= num_flaky < n_funcs or not 0.0 <= flaky_rate <= 1.0:
            raise ValueError("need 0 <= num_flaky < number of functions and flaky_rate in [0, 1]")
        if output_words < 10:
            raise ValueError(f"output_words={output_words} must be at least 10")
        super().__init__(
            horizon=horizon, noise=noise, error_penalty=error_penalty, render_mode=render_mode
        )
        self.num_files = num_files
        self.funcs_per_file = funcs_per_file
        self.num_patches = num_patches
        self.num_flaky = num_flaky
        self.flaky_rate = flaky_rate
        self.output_words = output_words

    # -- episode generation ------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        rng = self.np_random
        pairs = [(t, n) for t in TEMPLATES for n in t.names]
        order = rng.permutation(len(pairs))[: self.num_files * self.funcs_per_file]
        files = [FILES[i] for i in rng.permutation(len(FILES))[: self.num_files]]
        self._funcs: list[Function] = []
        self._files: dict[str, list[str]] = {f: [] for f in files}
        for k, i in enumerate(order.tolist()):
            template, name = pairs[i]
            c = int(rng.choice(CONSTANTS))
            fill = {"name": name, "c": c, "c1": c + 1}
            file = files[k // self.funcs_per_file]
            lines = [line.format(**fill) for line in template.lines]
            func = Function(
                name, template, file, len(self._files[file]) + 1, lines, template.bug.format(**fill)
            )
            self._files[file].extend(lines)
            self._funcs.append(func)
        buggy = self._funcs[int(rng.integers(len(self._funcs)))]
        self._buggy = buggy
        # The repository as shipped: the buggy line replaces the correct one.
        self._correct_line = buggy.lines[buggy.template.bug_line]
        self._files[buggy.file][buggy.site - 1] = buggy.bug
        others = [f for f in self._funcs if f is not buggy]
        flaky_idx = rng.permutation(len(others))[: self.num_flaky].tolist()
        self._flaky = {others[i].test for i in flaky_idx}
        decoys = [others[i] for i in rng.permutation(len(others))[: self.num_patches - 1]]
        patches = [Patch("", buggy.file, buggy.site, self._correct_line)]
        patches += [Patch("", f.file, f.site, f.bug) for f in decoys]
        ids = rng.permutation(self.num_patches).tolist()
        self._patches = {}
        for patch, i in zip(patches, ids, strict=True):
            patch.pid = f"p{i + 1}"
            self._patches[patch.pid] = patch
        self._fix = patches[0].pid
        issue = ISSUES[int(rng.integers(len(ISSUES)))].format(name=buggy.name)
        task = f"{issue} {TASK_TAIL}"
        location = f"{buggy.file}:{buggy.site}"
        self._facts = {"location": location, "patch": self._fix}
        self._needed = ["location", "patch"]
        self._shown = {"location": -1, "patch": -1}
        self._revised = {"location": [], "patch": []}
        self._needed_step = {"location": -1, "patch": -1}
        self._t = 0
        self._success = False
        self._applied: str | None = None
        self._done = False
        self._seen = {"listed": False, "viewed": False, "patches": False, "tested_edit": False}
        self._last_obs = task
        return task, self._info()

    # -- repository ----------------------------------------------------------------------
    def _line(self, file: str, number: int) -> str:
        patch = self._patches.get(self._applied) if self._applied else None
        if patch is not None and patch.file == file and patch.line == number:
            return patch.text
        return self._files[file][number - 1]

    def _failing(self) -> list[Function]:
        """Functions whose test fails deterministically in the current code."""
        return [
            f for f in self._funcs if self._line(f.file, f.site) != f.lines[f.template.bug_line]
        ]

    def _cut(self, words: list[str], noisy: bool) -> str:
        if noisy:
            words = corrupt(words, self.noise, self.np_random)
        if len(words) > self.output_words:
            words = [*words[: self.output_words], "(", "truncated", ")"]
        return " ".join(words)

    # -- tools ---------------------------------------------------------------------------
    def _view(self, args: list[str]) -> tuple[str, str | None]:
        file = args[0]
        if file not in self._files:
            return "", "no such file"
        n = len(self._files[file])
        if len(args) == 1:
            start, end = 1, n
        elif len(args) == 3 and args[1].isdigit() and args[2].isdigit():
            start, end = int(args[1]), min(int(args[2]), n)
            if not 1 <= start <= end:
                return "", "bad line range"
        else:
            return "", "not allowed now"
        head = f"{file} lines {start} to {end} :".split()
        body: list[str] = []
        for i in range(start, end + 1):
            body += [str(i), "|", *self._line(file, i).split()]
        b = self._buggy
        if file == b.file and start <= b.site <= end:
            self._seen["viewed"] = True
        return " ".join(head) + " " + self._cut(body, noisy=True), None

    def _grep(self, word: str) -> str:
        body: list[str] = []
        for file in self._files:
            for i in range(1, len(self._files[file]) + 1):
                line = self._line(file, i)
                if word in line.split():
                    body += [f"{file}:{i}", "|", *line.split()]
        if not body:
            return f"no match for {word} ."
        return self._cut(body, noisy=True)

    def _run_tests(self) -> str:
        failing = self._failing()
        fail_names = {f.test for f in failing}
        flaky = [  # sorted first: one draw per test in a fixed order, whatever the hash seed
            t
            for t in sorted(self._flaky)
            if t not in fail_names and self.np_random.random() < self.flaky_rate
        ]
        words = f"ran {len(self._funcs)} tests : {len(failing) + len(flaky)} failed .".split()
        for f in failing:
            test_line = 3 * self._funcs.index(f) + 2
            words += (
                f"fail {f.test} : {TEST_FILE}:{test_line} in {f.test} -> "
                f"{f.file}:{f.site} in {f.name} : assertion error ."
            ).split()
            if f is self._buggy and self._shown["location"] < 0:
                self._shown["location"] = self._t
        for test in flaky:
            words += f"fail {test} : timeout .".split()
        if self._applied is not None:
            self._seen["tested_edit"] = True
        return self._cut(words, noisy=False)

    def _list_patches(self) -> str:
        words = ["patches", ":"]
        for pid in sorted(self._patches, key=lambda p: int(p[1:])):
            patch = self._patches[pid]
            words += [pid, patch.location, ":", *patch.text.split(), ";"]
        if self._shown["patch"] < 0:
            self._shown["patch"] = self._t
        self._seen["patches"] = True
        return " ".join(words)  # never cut: every candidate must stay visible

    def _act(self, words: list[str]) -> tuple[str, float, bool, str | None]:
        if self._done:
            return self._error("not allowed now")
        cmd, args = words[0], words[1:]
        if cmd == "ls" and not args:
            self._seen["listed"] = True
            return "files : " + " ".join(self._files) + " .", 0.0, False, None
        if cmd == "view" and args:
            obs, error = self._view(args)
            return self._error(error) if error else (obs, 0.0, False, None)
        if cmd == "grep" and len(args) == 1:
            return self._grep(args[0]), 0.0, False, None
        if cmd == "run_tests" and not args:
            return self._run_tests(), 0.0, False, None
        if cmd == "patches" and not args:
            return self._list_patches(), 0.0, False, None
        if cmd == "edit" and len(args) == 1:
            if args[0] not in self._patches:
                return self._error("unknown patch")
            for name in self._needed:
                if self._needed_step[name] < 0:
                    self._needed_step[name] = self._t
            self._applied = args[0]
            self._seen["tested_edit"] = False
            return f"applied {args[0]} to {self._patches[args[0]].location} .", 0.0, False, None
        if cmd == "submit" and not args:
            self._done = True
            self._success = not self._failing()
            verdict = "resolved" if self._success else "not resolved"
            return f"submitted : {verdict} .", float(self._success), True, None
        return self._error("not allowed now")

    # -- info --------------------------------------------------------------------------------
    def summary_stated(self, summary: str, info: dict[str, Any]) -> dict[str, bool]:
        """Needed fact -> whether ``summary`` states a value for it, right or wrong: a
        ``file:line`` of one of the repository's files for ``location``, a patch id for
        ``patch``; over the facts shown before it was written (as ``summary_recall``)."""
        words = summary.split()
        location = any(
            w.partition(":")[0] in self._files and w.partition(":")[2].isdigit() for w in words
        )
        stated = {"location": location, "patch": any(w in self._patches for w in words)}
        return {name: stated[name] for name in shown_facts(info)}

    def fact_types(self, info: dict[str, Any]) -> dict[str, str]:
        """Needed fact shown so far -> its type (``scripted.fact_types``): ``key`` for the bug's
        location and the right patch, which no step revises."""
        return fact_types(info)

    def _admissible(self) -> list[str]:
        if self._done:
            return []
        actions = ["ls", "run_tests", "patches", "submit"]
        actions += [f"view {f}" for f in self._files]
        actions += [f"edit {pid}" for pid in sorted(self._patches, key=lambda p: int(p[1:]))]
        return actions

    def _state(self) -> dict[str, Any]:
        b = self._buggy
        return {
            "env": self.env_name,
            "bug_kind": b.template.kind,
            "bug_function": b.name,
            "bug_file": b.file,
            "bug_line": b.site,
            "fix": self._fix,
            "applied": self._applied,
            "failing_tests": [f.test for f in self._failing()],
            "flaky_tests": sorted(self._flaky),
            **self._seen,
            "done": self._done,
        }

    @classmethod
    def vocabulary(cls) -> list[str]:
        words = words_of(cls.system_prompt, TASK_TAIL, MESSAGES, *ISSUES, *ERROR_WORDS)
        for t in TEMPLATES:
            fills = [{"name": n, "c": c, "c1": c + 1} for n in t.names for c in CONSTANTS]
            for fill in fills:
                words |= words_of(*(line.format(**fill) for line in t.lines), t.bug.format(**fill))
                words.add(f"test_{fill['name']}")
        words.update(FILES)
        words.add(TEST_FILE)
        words.update(f"{f}:{i}" for f in (*FILES, TEST_FILE) for i in range(1, MAX_LINES + 1))
        words.update(str(i) for i in range(100))  # counts, line numbers and view ranges
        words.update(f"p{i}" for i in range(1, MAX_PATCHES + 1))
        words.update(("|", NOISE_WORD))
        return sorted(w for w in words if "{" not in w)

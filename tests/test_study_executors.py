"""cxsim study's executors: local processes and Ray make the same numbers, a study resumes
across them, and the Ray path fails in one line where it cannot run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from test_studies import EXAMPLES, TEST_BUDGET

from cxsim.cli import main as cxsim
from cxsim.experiments.bench_executors import parse_setup, report
from cxsim.studies.executors import LocalExecutor, RayExecutor, check_answers, make_executor

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (pip install 'cxsim[ray]')",
)


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray instance with 2 CPUs for the module's tests (starting one takes seconds);
    an executor made while it runs uses it and leaves it running."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("study")
    shutil.copy(EXAMPLES / "my_estimator.py", folder)
    study = folder / "my_study.toml"
    study.write_text((EXAMPLES / "my_study.toml").read_text() + TEST_BUDGET)
    return study


def run_study(example: Path, name: str, *flags: str) -> dict:
    """Seeds 0 and 1 of the base and compactionrl at the test budget, in runs folder ``name``."""
    runs, out = example.parent / name, example.parent / f"{name}-page"
    cxsim(["study", str(example), "--budget", "test", "--seeds", "0:2", "--only",
           "small:beats-base", "--runs-dir", str(runs), "--out", str(out), "--quiet",
           *flags])  # fmt: skip
    page = out / "my_study.budget-test.seeds-0-1.only-small_beats-base.json"  # a narrowed run's
    return {"runs": runs, **json.loads(page.read_text())}


def timing(key: str) -> bool:
    """A figure that measures the machine, not the run (``compute/wall_clock_s``, ...)."""
    return "wall" in key or "seconds" in key


def per_seed_numbers(runs: Path) -> dict[str, dict]:
    """Each seed's evaluations (every figure of every protocol), the trained arm's final
    diagnostics and the SFT base's losses, keyed by what they are, not where they are;
    timings left out."""
    found: dict[str, dict] = {}
    for path in runs.glob("small-*/s*/eval/*.json"):
        seed, arm = path.parent.parent.name, path.stem.split("-")[0]
        found[f"{seed}/eval/{arm}"] = json.loads(path.read_text())["results"]
    for path in runs.glob("small-*/s*/train/*/results.json"):
        seed = path.parent.parent.parent.name
        final = json.loads(path.read_text())["final"]
        found[f"{seed}/train/{path.parent.name}"] = {
            k: v for k, v in final.items() if not timing(k)
        }
    for path in runs.glob("small-*/s*/sft/results.json"):
        result = json.loads(path.read_text())
        found[f"{path.parent.parent.name}/sft"] = {
            k: v for k, v in result.items() if not timing(k) and k not in ("policy", "config")
        }
    return found


@pytest.fixture(scope="module")
def local_run(example: Path) -> dict:
    return run_study(example, "local")


# -- the executor interface -------------------------------------------------------------------


def test_local_executor_yields_every_call_once_with_its_index():
    for jobs in (1, 2):
        executor = LocalExecutor(jobs)
        done = dict(executor.map(divmod, [(7, 2), (9, 4), (10, 5)]))
        assert done == {0: (3, 1), 1: (2, 1), 2: (2, 0)}
        with pytest.raises(ValueError, match="invalid literal for int"):
            dict(executor.map(int, [("12",), ("x",)]))
        executor.close()


KILLED_STUDY = """
import os, sys, time
from pathlib import Path
from cxsim.studies.executors import LocalExecutor

def hold(folder):
    Path(folder, str(os.getpid())).write_text("")  # a worker says it has started a run
    time.sleep(120)

if __name__ == "__main__":
    dict(LocalExecutor(2).map(hold, [(sys.argv[1],), (sys.argv[1],)]))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)
def test_a_killed_study_leaves_no_worker_computing(tmp_path: Path):
    """SIGTERM to a study's process (``kill``, a scheduler's stop) ends its local workers too,
    instead of leaving each to finish the run it holds."""
    import os
    import signal
    import subprocess
    import time

    script, started = tmp_path / "killed_study.py", tmp_path / "started"
    script.write_text(KILLED_STUDY)
    started.mkdir()
    study = subprocess.Popen([sys.executable, str(script), str(started)], cwd=tmp_path)
    deadline = time.monotonic() + 120
    while len(list(started.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = [int(p.name) for p in started.iterdir()]
    assert len(workers) == 2, "the workers did not start"
    study.send_signal(signal.SIGTERM)
    assert study.wait(timeout=30) == -signal.SIGTERM

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie has ended

    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers), "a worker outlived the killed study"


@pytest.mark.slow  # Ray's start alone takes about 10 s
@needs_ray
def test_ray_executor_maps_and_raises_the_calls_own_error(ray_session):
    executor = RayExecutor("cpu", num_cpus=2)
    assert executor.workers == 2 and not executor.started  # the module's session, reused
    done = dict(executor.map(divmod, [(7, 2), (9, 4), (10, 5), (1, 1)]))
    assert done == {0: (3, 1), 1: (2, 1), 2: (2, 0), 3: (1, 0)}
    with pytest.raises(ValueError, match="invalid literal for int"):
        dict(executor.map(int, [("12",), ("x",)]))
    executor.close()
    assert ray_session.is_initialized()  # not the executor's to shut down


# -- a study on either executor ---------------------------------------------------------------


@pytest.mark.slow  # about 40 s: Ray's start, its workers' imports, the study twice
@needs_ray
def test_ray_and_local_make_the_same_per_seed_numbers(example: Path, local_run: dict, ray_session):
    on_ray = run_study(example, "ray", "--executor", "ray", "--jobs", "2")
    assert on_ray["made_now"] == local_run["made_now"] == {"sft": 2, "train": 2, "eval": 4}
    assert on_ray["arms"]["small"]["compactionrl"]["seeds"] == [0, 1]  # back in seed order
    assert on_ray["arms"] == local_run["arms"]  # per-seed Pass@1 of each arm
    assert (
        on_ray["claims"][0]["per_seed_difference"]
        == (local_run["claims"][0]["per_seed_difference"])
    )
    ours, theirs = per_seed_numbers(on_ray["runs"]), per_seed_numbers(local_run["runs"])
    assert len(ours) == 2 + 2 + 4 and ours == theirs  # evaluations, diagnostics, SFT losses
    trained = [final for name, final in ours.items() if "/train/" in name]
    assert len(trained) == 2 and all("credit/abs_adv_seg0" in final for final in trained)


@pytest.mark.slow
@needs_ray
def test_a_study_resumes_on_the_other_executor(example: Path, local_run: dict, ray_session):
    runs = local_run["runs"]
    (evaluated,) = runs.glob("small-*/s1/eval/compactionrl-*.json")
    before = json.loads(evaluated.read_text())["results"]
    evaluated.unlink()  # a study killed before its last evaluation
    resumed = run_study(example, "local", "--executor", "ray", "--jobs", "2")
    assert resumed["made_now"] == {"sft": 0, "train": 0, "eval": 1}
    assert json.loads(evaluated.read_text())["results"] == before
    assert resumed["arms"]["small"]["compactionrl"]["made_now"] == [[], ["eval"]]
    for arm in ("base", "compactionrl"):
        assert (
            resumed["arms"]["small"][arm]["pass_at_1"]
            == (local_run["arms"]["small"][arm]["pass_at_1"])
        )


# -- where Ray cannot run ---------------------------------------------------------------------


def test_without_ray_the_error_says_how_to_install_it(
    example: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    runs = example.parent / "no-ray"
    with pytest.raises(SystemExit) as stop:
        cxsim(["study", str(example), "--budget", "test", "--executor", "ray",
               "--runs-dir", str(runs)])  # fmt: skip
    assert str(stop.value) == (
        "cxsim study: error: --executor ray needs Ray: pip install 'cxsim[ray]'"
    )
    assert not runs.exists()  # refused before any run


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--ray-address", "head:6379"], "--ray-address joins a Ray cluster: pass --executor ray"),
        (["--executor", "ray", "--device", "auto"], "--device auto with --executor ray: pass"),
        (["--executor", "ray", "--device", "cuda:1"], "--device cuda:1 with --executor ray"),
        (["--executor", "dask"], "invalid choice 'dask' for --executor; choose from local, ray"),
    ],
)
def test_flags_ray_cannot_use_fail_in_one_line(example: Path, flags: list[str], said: str):
    with pytest.raises(SystemExit) as stop:
        cxsim(["study", str(example), *flags])
    message = str(stop.value)
    assert said in message and "\n" not in message


def test_a_ray_address_nothing_answers_at_fails_at_once():
    import socket

    with socket.socket() as listener:  # a port that was free a moment ago: nothing listens
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
    with pytest.raises(ValueError, match=rf"--ray-address 127.0.0.1:{port}: nothing answers"):
        check_answers(f"127.0.0.1:{port}")
    check_answers("auto")  # Ray's own forms are left to Ray
    check_answers("ray://head:10001")


def test_make_executor_names_the_choices():
    assert isinstance(make_executor("local", jobs=2), LocalExecutor)
    with pytest.raises(ValueError, match="choose one of: local, ray"):
        make_executor("threads")


def test_bench_report_ratios_and_ray_overhead():
    walls = {"local:1": 40.0, "local:2": 25.0, "ray:1": 44.0, "ray:2": 30.0}
    lines = report(walls, {1: 4.0, 2: 5.0})
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in lines[2:6]}
    assert rows["local:2"][:2] == ["25.0", "1.60x"]  # 40 / 25
    assert rows["ray:1"][2:] == ["4.0", "+10.0%", "+0.0% |"]  # 44 / 40 - 1; (44 - 4) / 40 - 1
    assert rows["ray:2"][3] == "+20.0%"  # 30 / 25 - 1
    assert lines[-1].endswith("+20.0% (goal: under 10%: not met)")
    assert parse_setup("ray:2") == ("ray", 2)
    with pytest.raises(ValueError, match="write EXECUTOR:CPUS"):
        parse_setup("ray")

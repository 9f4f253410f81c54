"""SimRepo: the bug, the traceback, patches, flaky tests and truncation behave as documented."""

from __future__ import annotations

from cxsim.envs import SimRepo
from cxsim.envs.scripted import SimRepoOracle, play


def _after(env: SimRepo, seed: int, *actions: str) -> tuple:
    env.reset(seed=seed)
    out = None
    for action in actions:
        out = env.step(action)
    return out


def test_traceback_points_at_the_key_fact() -> None:
    env = SimRepo(num_flaky=0)
    kinds = set()
    for seed in range(40):
        obs, _, _, _, info = _after(env, seed, "run_tests")
        location = info["key_facts"]["location"]
        assert obs.split().count(location) == 1 and "1 failed" in obs
        assert info["fact_shown_step"]["location"] == 1
        state = info["state"]
        assert location == f"{state['bug_file']}:{state['bug_line']}"
        kinds.add(state["bug_kind"])
    assert kinds == {"off-by-one", "flipped comparison", "wrong constant", "swapped arguments"}


def test_only_the_right_patch_resolves() -> None:
    env = SimRepo(num_patches=5)
    for seed in range(20):
        _, info = env.reset(seed=seed)
        fix = info["key_facts"]["patch"]
        listing = env.step("patches")[0]
        assert listing.count(";") == 5 and f"{fix} {info['key_facts']['location']} :" in listing
        for pid in ("p1", "p2", "p3", "p4", "p5"):
            _, reward, terminated, _, info = _after(env, seed, f"edit {pid}", "submit")
            assert terminated and reward == float(pid == fix) and info["success"] == (pid == fix)
        assert _after(env, seed, "submit")[1] == 0.0  # submitting the bug as is fails


def test_a_wrong_patch_breaks_another_test_and_edit_replaces_it() -> None:
    env = SimRepo(num_flaky=0)
    _, info = env.reset(seed=3)
    fix = info["key_facts"]["patch"]
    wrong = next(p for p in ("p1", "p2", "p3", "p4") if p != fix)
    env.step(f"edit {wrong}")
    assert "2 failed" in env.step("run_tests")[0]
    env.step(f"edit {fix}")
    obs, _, _, _, info = env.step("run_tests")
    assert "0 failed" in obs and info["state"]["failing_tests"] == []
    assert info["fact_needed_step"] == {"location": 1, "patch": 1}  # first edit


def test_flaky_tests_fail_at_the_requested_rate_but_do_not_decide_reward() -> None:
    env = SimRepo(num_flaky=2, flaky_rate=0.5)
    timeouts = runs = 0
    for seed in range(30):
        env.reset(seed=seed)
        for _ in range(10):
            timeouts += env.step("run_tests")[0].split().count("timeout")
            runs += 2
    assert 0.4 < timeouts / runs < 0.6
    always = SimRepo(num_flaky=1, flaky_rate=1.0)
    episode = play(always, SimRepoOracle(), seed=0)
    assert "timeout" in episode.observations[-2] and episode.success


def test_long_outputs_are_truncated_to_the_word_budget() -> None:
    env = SimRepo(num_files=1, funcs_per_file=6, num_patches=4, output_words=20)
    obs = _after(env, 0, "ls")[0]
    file = obs.split()[2]
    obs = _after(env, 0, f"view {file}")[0]
    assert obs.endswith("( truncated )") and len(obs.split()) <= 20 + 3 + 7
    obs = _after(env, 0, f"view {file} 2 3")[0]
    assert obs.split()[:6] == [file, "lines", "2", "to", "3", ":"] and "truncated" not in obs
    assert _after(env, 0, "patches")[0].count(";") == 4  # the patch list is never cut


def test_noise_hits_code_views_not_tracebacks() -> None:
    env = SimRepo(noise=0.3, num_flaky=0)
    for seed in range(10):
        file = _after(env, seed, "ls")[0].split()[2]
        assert "#" in env.step(f"view {file}")[0]
        obs, *_, info = env.step("run_tests")
        assert "#" not in obs and info["key_facts"]["location"] in obs.split()


def test_errors_and_horizon() -> None:
    env = SimRepo(horizon=5)
    env.reset(seed=0)
    for action, error in [
        ("view nope.py", "unknown word"),
        ("view calc.py 9 2", None),
        ("edit", "not allowed now"),
        ("grep", "not allowed now"),
    ]:
        info = env.step(action)[4]
        assert error is None or info["error"] == error
    *_, terminated, truncated, info = env.step("ls")
    assert truncated and not terminated and not info["success"]


def test_flaky_test_outputs_do_not_depend_on_the_hash_seed() -> None:
    import os
    import subprocess
    import sys

    script = (
        "from cxsim.envs import SimRepo\n"
        "env = SimRepo(num_flaky=3, flaky_rate=0.5)\n"
        "for seed in range(4):\n"
        "    env.reset(seed=seed)\n"
        "    print([env.step('run_tests')[0] for _ in range(4)])\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
        ).stdout
        for hash_seed in (0, 1, 2)
    }  # fmt: skip
    assert len(outputs) == 1

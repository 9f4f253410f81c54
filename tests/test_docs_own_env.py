"""The own-environment example of docs/environments.md ("Your own environment") runs as
written: its python blocks become the files they name in an empty folder, and its bash
blocks run there, in order, in one bash session with this venv's ``cxsim`` and ``python``
first on the PATH and no PYTHONPATH (``my_module`` is found in the current folder). The
wiring check (the first bash block) runs in the default suite; the learning run (every
block) is ``slow``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "environments.md"
SECTION = "## Your own environment"
VENV_BIN = Path(sys.executable).parent


def doc_blocks() -> tuple[dict[str, str], list[str]]:
    """The section's python blocks by the file each names in its first line, and its bash
    blocks in order."""
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end >= 0 else len(text)]
    files: dict[str, str] = {}
    bash: list[str] = []
    for language, body in re.findall(r"^```(\w*)\n(.*?)^```", section, flags=re.S | re.M):
        if language == "python":
            name = re.match(r"# (\w+\.py)\n", body)
            assert name, f"a python block of {SECTION!r} must start with '# FILE.py'"
            files[name.group(1)] = body
        elif language == "bash":
            bash.append(body)
    return files, bash


def run_doc(folder: Path, bash_blocks: list[str], timeout_s: float) -> str:
    files, _ = doc_blocks()
    for name, body in files.items():
        (folder / name).write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", "OMP_NUM_THREADS": "1"}
    script = "set -euo pipefail\n" + "\n".join(bash_blocks)
    done = subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=timeout_s)  # fmt: skip
    assert done.returncode == 0, f"the doc's commands failed:\n{done.stderr[-4000:]}"
    return done.stdout + done.stderr


def test_the_section_has_the_files_and_commands_it_describes():
    files, bash = doc_blocks()
    assert set(files) == {"my_module.py", "make_policy.py", "my_family.py"}
    assert "def vocabulary()" in files["my_module.py"]
    assert len(bash) == 2 and "python make_policy.py" in bash[0]
    assert (VENV_BIN / "cxsim").is_file()


def test_the_doc_wiring_check_runs_as_written(tmp_path: Path):
    _, bash = doc_blocks()
    run_doc(tmp_path, bash[:1], timeout_s=300)
    results = json.loads((tmp_path / "runs/recall-check/results.json").read_text())
    assert results["iterations_done"] == 2  # 1 value-only warm-up + 1 PPO iteration
    for row in results["history"]:
        assert row["compaction/compactions_mean"] == 1.0  # every episode compacts once
        assert 0.0 <= row["compaction/summary_recall"] <= 1.0  # measured from key_facts


FAMILY_SFT = (
    "cxsim sft --policy None --env.env-id my_family:mine/RecallFamily-v0 --env.kwargs "
    "--sft.episodes 16 --sft.epochs 1 --sft.heldout-episodes 4 --run-dir runs/sft"
)
"""Step 5's command (its inline text) at the budget it quotes."""


def test_the_doc_family_gives_derived_sizes_and_sft_data(tmp_path: Path):
    """Step 5: the env with its family declared (my_family.py) gets its sizes derived and SFT
    demonstrations from its oracle, with no size flag."""
    text = DOC.read_text()
    assert FAMILY_SFT.split(" --sft.")[0] in " ".join(text.split())
    run_doc(tmp_path, [FAMILY_SFT], timeout_s=300)
    results = json.loads((tmp_path / "runs/sft/results.json").read_text())
    assert results["demonstrations"]["charts/success_rate"] == 1.0
    assert results["segments"] == 48  # as the doc says: the derived window compacts
    assert results["config"]["compaction"]["budget"] is not None


def _compacted(path: Path) -> dict:
    rows = {r["protocol"]: r for r in json.loads(path.read_text())["results"]}
    assert rows["single"]["pass_at_1"] == 0.0  # the window is full before the second answer
    return rows["compacted"]


@pytest.mark.slow
def test_the_doc_example_learns_as_stated(tmp_path: Path):
    _, bash = doc_blocks()
    run_doc(tmp_path, bash, timeout_s=1800)
    before = _compacted(tmp_path / "before.json")
    after = _compacted(tmp_path / "after.json")
    assert before["episodes"] == after["episodes"] == 128
    assert before["pass_at_1"] <= 0.1  # a fresh model: the color by chance of its ~30 ids
    assert after["pass_at_1"] >= 0.5 and after["ci95_low"] > 0.25  # above chance (4 colors)
    assert after["summary_recall"] > before["summary_recall"] + 0.3  # the summary keeps it

"""docs/tutorials/hugging-face-model.md runs as written, offline: its bash blocks run in an
empty folder, in order, in one bash session with this venv's ``cxsim`` first on the PATH and
no network use (no hub is reached: step 1 makes the model with ``cxsim pretrain`` from the shipped
word-level model); each
``cxsim`` command gets the smoke budget below appended, so the whole page runs in seconds.
The hub route (the python block) is shown as the alternative and not run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "hugging-face-model.md"
VENV_BIN = Path(sys.executable).parent

SMOKE = {
    "pretrain": [
        *("--copy-sft.episodes", "4", "--copy-sft.heldout-episodes", "2", "--copy-sft.epochs", "1"),
        *("--sft.episodes", "4", "--sft.heldout-episodes", "2", "--sft.epochs", "1"),
        *("--copy-loss", "1000", "--no-progress-bar"),
    ],
    "eval": ["--eval.episodes", "4"],
    "run": [
        *("--sft.episodes", "4", "--sft.heldout-episodes", "2", "--sft.epochs", "1"),
        *("--ppo.iterations", "1", "--ppo.critic-warmup", "0", "--ppo.rollouts-per-batch", "4"),
        *("--eval.episodes", "4", "--no-progress-bar"),
    ],
}
"""Flags appended to each ``cxsim <command>`` line of the page: a smoke budget."""


def doc_blocks(language: str) -> list[str]:
    """The page's code blocks in ``language``, in order."""
    text = DOC.read_text()
    return [
        b for lang, b in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M) if lang == language
    ]


def at_smoke_budget(block: str) -> str:
    """Each ``cxsim COMMAND ...`` line with that command's `SMOKE` flags appended."""
    lines = []
    for line in block.splitlines():
        words = line.split("#", 1)[0].split()
        if words[:1] == ["cxsim"]:
            line = " ".join([*words, *SMOKE[words[1]]])
        lines.append(line)
    return "\n".join(lines)


def test_the_page_makes_its_model_offline_and_keeps_the_hub_route():
    bash = doc_blocks("bash")
    assert bash[0].split() == [
        *("cxsim", "pretrain", "--arch", "llama", "--init-from", "pretrained"),
        *("--out", "models/chat"),
    ]
    commands = [
        line.split()[1] for b in bash for line in b.splitlines() if line.startswith("cxsim")
    ]
    assert commands == ["pretrain", "eval", "run"]
    assert "pretrained-chat" in DOC.read_text()  # the shipped checkpoint, named
    (hub,) = doc_blocks("python")
    assert "from_pretrained" in hub and 'save_pretrained("models/chat")' in hub


def test_the_tutorial_runs_as_written_at_a_smoke_budget(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    script = "set -euo pipefail\n" + "\n".join(at_smoke_budget(b) for b in doc_blocks("bash"))
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, f"the page's commands failed:\n{done.stderr[-4000:]}"
    made = json.loads((tmp_path / "models/chat/manifest.json").read_text())
    assert made["command"] == "cxsim pretrain --arch llama --init-from pretrained"
    assert made["model"]["arch"] == "llama" and made["model"]["init_from"]["rows_carried"] > 800
    said = done.stdout + done.stderr
    oracle = dict(re.findall(r"^\| oracle \(omission 0\.0\) \| (\w+) \| ([0-9.]+) \|", said, re.M))
    assert oracle == {"single": "0.000", "compacted": "1.000"}, said[-2000:]
    results = json.loads((tmp_path / "runs/chat/results.json").read_text())
    assert {(r["label"], r["protocol"]) for r in results["table"]} == {
        (label, protocol)
        for label in ("base (SFT)", "compactionrl")
        for protocol in ("single", "compacted")
    }
    assert (tmp_path / "runs/chat/final/policy/config.json").is_file()

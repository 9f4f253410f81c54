"""TensorBoard: the tags a short `cxsim run` writes are exactly those docs/tensorboard.md lists,
wall-clock is measured, and the evaluation is logged."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cxsim.cli import main as cxsim
from cxsim.diagnostics import COUNTERS
from cxsim.losses import LOSS_MODES

DOC = Path(__file__).resolve().parents[1] / "docs" / "tensorboard.md"
PLACEHOLDERS = {
    "{k}": r"\d+",
    "{d}": r"\d+",
    "{r}": r"[0-9.]+x",
    "{mode}": "(" + "|".join(re.escape(m) for m in LOSS_MODES) + ")",
    "{protocol}": "(single|compacted)",
    "{counter}": "(" + "|".join(c for c in COUNTERS if c != "wall_clock_s") + ")",
    "{total}": ".+",
    "{type}": "[a-z_]+",
}
REQUIRED = ("always", "with a critic", "after warm-up", "after evaluation")
"""Conditions a short run with a critic and an evaluation meets (the others may not hold)."""

TINY = [
    "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
    "num_values", "4", "--compaction.budget", "160",
    "--sft.episodes", "6", "--sft.epochs", "1", "--sft.heldout-episodes", "2",
    "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "2", "--ppo.critic-warmup", "1",
    "--ppo.minibatches", "1", "--ppo.epochs", "1", "--eval.episodes", "3", "--no-progress-bar",
]  # fmt: skip


def documented() -> list[tuple[re.Pattern[str], str, str]]:
    """(tag pattern, name as written, when it is written) for every tag row of the doc."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            pattern = re.escape(name)
            for key, regex in PLACEHOLDERS.items():
                pattern = pattern.replace(re.escape(key), regex)
            rows.append((re.compile(pattern + "$"), name, cells[3]))
    return rows


@pytest.fixture(scope="module")
def scalars(tmp_path_factory) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path_factory.mktemp("tb") / "main"
    cxsim(["run", "--run-dir", str(run_dir), *TINY])
    acc = EventAccumulator(str(run_dir / "train" / "compactionrl-s0" / "tb"), {"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_documented_tags_equal_the_tags_a_run_writes(scalars: dict[str, list[float]]):
    rows = documented()
    assert len(rows) > 50
    undocumented = sorted(t for t in scalars if not any(p.match(t) for p, _, _ in rows))
    assert not undocumented, f"add these to docs/tensorboard.md: {undocumented}"
    missing = [n for p, n, when in rows if when in REQUIRED and not any(map(p.match, scalars))]
    assert not missing, f"documented as written but absent: {missing}"


def test_wall_clock_is_measured(scalars: dict[str, list[float]]):
    wall = scalars["compute/wall_clock_s"]
    assert len(wall) == 3 and all(w > 0 for w in wall) and wall == sorted(wall)
    assert scalars["compute/wall_rollout_s"][-1] > 0 and scalars["compute/wall_update_s"][-1] > 0


def test_evaluation_is_logged(scalars: dict[str, list[float]]):
    for protocol in ("single", "compacted"):
        (pass_at_1,) = scalars[f"eval/{protocol}/pass_at_1"]
        (low,), (high,) = (
            scalars[f"eval/{protocol}/ci95_low"],
            scalars[f"eval/{protocol}/ci95_high"],
        )
        assert 0.0 <= low <= pass_at_1 <= high <= 1.0

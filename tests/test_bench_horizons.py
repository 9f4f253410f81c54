"""cxsim bench horizons: oracle rollouts with the horizon dial, grouped by window count, the
share of rollouts against each loss mode's share of the gradient; figure, table, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cxsim.cli import main as cxsim
from cxsim.experiments.bench_horizons import Config
from cxsim.loss_modes import LOSS_MODES

TINY = [
    "--episodes", "12",
    "--env.kwargs", "obs_words_mean", "6", "obs_words_std", "1", "num_values", "4",
    "memory_length_min", "1", "memory_length_max", "10",
]  # fmt: skip


def test_bench_writes_the_figure_and_a_table_whose_shares_add_up(tmp_path: Path):
    cxsim(["bench", "horizons", *TINY, "--out", str(tmp_path)])
    result = json.loads((tmp_path / "horizons.json").read_text())
    assert sum(result["rollouts"]) == 12 and len(result["windows"]) >= 2  # short and long
    assert result["windows"] == sorted(result["windows"]) and result["windows"][0] >= 1
    assert result["success"] == 1.0  # the oracle with perfect summaries
    assert sum(result["rollout_share"]) == pytest.approx(1.0)
    shares = result["grad_share"]
    assert set(shares) == set(LOSS_MODES)  # every registered mode
    # the summary tokens' share of the gradient: their token share under token-mean, exactly
    # c / (1 + c) = 1/2 under summary-loss (weight 1), below token-mean under session-equal
    summary = result["summary_share"]
    assert summary["token-mean"] == pytest.approx(result["summary_token_share"])
    assert summary["summary-loss"] == pytest.approx(0.5)
    assert 0 < summary["session-equal"] < summary["token-mean"]
    assert "summary tokens' share of the gradient" in (tmp_path / "horizons.md").read_text()
    for mode, by_k in shares.items():
        assert sum(by_k) == pytest.approx(1.0), mode
    # one vote per rollout: the gradient share is the rollout share
    assert shares["rollout-mean"] == pytest.approx(result["rollout_share"])
    # every policy token weighs 1/S' under seq-mean-token-sum, 1/|M| under token-mean
    assert shares["seq-mean-token-sum"] == pytest.approx(shares["token-mean"])
    # longer rollouts hold more tokens, so token-mean gives the longest more than its count
    assert shares["token-mean"][-1] > result["rollout_share"][-1]
    assert result["policy_tokens_per_rollout"] == sorted(result["policy_tokens_per_rollout"])
    page = (tmp_path / "horizons.md").read_text()
    assert "cxsim bench horizons --episodes 12" in page and "wall time" in page
    # the horizon table (header + one row per K), then the summary table (header + a row a mode)
    assert page.count("\n| ") == 1 + len(result["windows"]) + 1 + len(LOSS_MODES)
    assert (tmp_path / "horizons.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_flags_fail_before_any_work():
    with pytest.raises(ValueError, match="--modes='token-sum' is unknown"):
        Config(modes=("token-sum",))
    with pytest.raises(ValueError, match="at least 2"):
        Config(episodes=1)


def write_run(folder: Path, history: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"history": history}))


def test_runs_give_the_shares_training_logged_averaged(tmp_path: Path):
    warmup = {
        "warmup": True,
        "horizon/rollout_share_k1": 1.0,
        "horizon/token-mean/grad_share_k1": 1.0,
    }
    one = {
        "warmup": False,
        "horizon/rollout_share_k1": 0.5,
        "horizon/rollout_share_k2": 0.5,
        "horizon/token-mean/grad_share_k1": 0.2,
        "horizon/token-mean/grad_share_k2": 0.8,
    }
    two = {
        "warmup": False,
        "horizon/rollout_share_k1": 1.0,
        "horizon/token-mean/grad_share_k1": 1.0,
    }
    write_run(tmp_path / "runs" / "s0" / "train" / "a", [warmup, one])
    write_run(tmp_path / "runs" / "s1" / "train" / "a", [two])
    out = tmp_path / "page"
    cxsim(["bench", "horizons", "--runs", str(tmp_path / "runs"), "--modes", "token-mean",
           "--out", str(out)])  # fmt: skip
    result = json.loads((out / "horizons.json").read_text())
    assert result["iterations"] == 2 and result["windows"] == [1, 2]  # the warm-up left out
    assert result["rollout_share"] == pytest.approx([0.75, 0.25])  # K=2 absent: 0 in `two`
    assert result["grad_share"]["token-mean"] == pytest.approx([0.6, 0.4])
    page = (out / "horizons.md").read_text()
    assert "under training" in page and "| 2 | - | - | 0.250 | 0.400 (1.60x) |" in page
    with pytest.raises(SystemExit, match="no training run"):  # one line, no traceback
        cxsim(["bench", "horizons", "--runs", str(tmp_path / "nothing"), "--out", str(out)])

"""cxsim bench horizons: oracle rollouts with the horizon dial, grouped by window count, the
share of rollouts against each loss mode's share of the gradient; figure, table, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cxsim.cli import main as cxsim
from cxsim.experiments.bench_horizons import Config

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
    assert set(shares) == {"token-mean", "segment-mean", "rollout-mean", "seq-mean-token-sum"}
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
    assert page.count("\n| ") == 1 + len(result["windows"])  # header + one row per K
    assert (tmp_path / "horizons.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_flags_fail_before_any_work():
    with pytest.raises(ValueError, match="--modes='token-sum' is unknown"):
        Config(modes=("token-sum",))
    with pytest.raises(ValueError, match="at least 2"):
        Config(episodes=1)

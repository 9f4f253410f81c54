"""cxsim critic-probe: the ridge probe, the outcome ceiling, and the command end to end."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cxsim.agents import build_policy
from cxsim.agents.models import save_policy
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.cli import main as cxsim
from cxsim.config import PPOConfig
from cxsim.experiments.critic_probe import Config, outcome_ceiling, ridge_heldout_ev


def test_ridge_probe_finds_a_linear_signal_and_not_noise():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, 8, generator=gen, dtype=torch.float64)
    fit = torch.arange(400) < 300
    signal = x @ torch.linspace(-1, 1, 8, dtype=torch.float64)
    assert ridge_heldout_ev(x, signal + 0.1 * torch.randn(400, generator=gen), fit, 1.0) > 0.95
    noise = torch.randn(400, generator=gen, dtype=torch.float64)
    assert abs(ridge_heldout_ev(x, noise, fit, 1.0)) < 0.1


def test_ceiling_splits_success_by_what_the_last_summary_kept():
    def record(success: bool, kept: bool) -> SimpleNamespace:
        return SimpleNamespace(success=success, summary_recall=[{"key": True}, {"key": kept}])

    records = [record(True, True)] * 3 + [record(False, True)] + [record(False, False)] * 4
    out = outcome_ceiling(records)
    assert out["kept_share"] == 0.5 and out["success_if_kept"] == 0.75
    assert out["success_if_lost"] == 0.0 and out["success"] == 0.375
    # Var(R) = 0.234375; the split leaves 0.5 * 0.1875 -> 1 - 0.09375 / 0.234375
    assert out["ev_ceiling"] == pytest.approx(0.6)


def test_bad_flags_fail_before_any_work():
    with pytest.raises(ValueError, match="fit-share"):
        Config(fit_share=1.0)
    with pytest.raises(ValueError, match="at least 8"):
        Config(episodes=2)
    with pytest.raises(ValueError, match="no critic"):
        Config(critic_iterations=3, ppo=PPOConfig(estimator="group-broadcast", group_size=2))


def test_probe_runs_on_a_policy_and_writes_every_segment(tmp_path: Path, capsys):
    tokenizer = default_tokenizer()
    save_policy(build_policy("tiny", tokenizer, seed=0), tokenizer, tmp_path / "policy")
    out = tmp_path / "probe.json"
    cxsim(["critic-probe", "--policy", str(tmp_path / "policy"), "--episodes", "16",
           "--env.kwargs", "memory_length", "5", "obs_words_mean", "6.0", "obs_words_std", "1.0",
           "num_values", "4", "--compaction.budget", "160", "--out", str(out),
           "--critic-iterations", "2", "--ppo.rollouts-per-batch", "4"])  # fmt: skip
    result = json.loads(out.read_text())
    assert result["episodes"] == 16 and 0.0 <= result["success"] <= 1.0
    probes = result["probe_heldout_ev"]
    assert "seg0" in probes and probes["seg0"]["rollouts"] == 16
    assert set(probes["seg0"]) == {"last", "prefix-mean", "rollouts"}
    # the trainer's critic step, twice on the 12 fit rollouts, figures on the 4 held out
    assert len(result["critic_training"]) == 2
    assert all(-10 < ev <= 1 for cells in result["critic_training"] for ev in cells.values())
    printed = capsys.readouterr().out
    assert "held-out EV by ridge" in printed and "critic iteration 2:" in printed

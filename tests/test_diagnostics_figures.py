"""The paper's figures' raw numbers: compactions, tool calls, summary length, entropy."""

import pytest
import torch

from cxsim.diagnostics import entropy_stats, rollout_figures


def test_rollout_figures_on_hand_built_records():
    records = [
        {
            "success": True,
            "turns": 10,
            "compactions": 2,
            "summaries": ["key a is 3", "key a is 3 key b is 4"],
            "tokens_generated": 60,
            "tokens_summarised": 15,
        },
        {
            "success": False,
            "turns": 5,
            "compactions": 0,
            "summaries": [],
            "tokens_generated": 15,
            "tokens_summarised": 0,
        },
    ]
    stats = rollout_figures(records)
    assert "figures/success_rate" not in stats  # charts/success_rate is the one tag
    assert stats["figures/compactions_max"] == 2
    assert stats["figures/compactions_eq0"] == 0.5
    assert stats["figures/compactions_eq1"] == 0.0
    assert stats["figures/compactions_eq2"] == 0.5
    assert stats["figures/summary_tokens"] == 7.5
    assert stats["figures/summary_words"] == 6.0
    assert stats["figures/tokens_per_turn"] == pytest.approx((45 + 15) / 15)


def test_entropy_by_role():
    entropy = torch.tensor([[9.0, 1.0, 3.0], [9.0, 2.0, 9.0]])
    mask = torch.tensor([[False, True, True], [False, True, False]])
    stats = entropy_stats(entropy, mask, torch.tensor([False, True]))
    assert stats["figures/entropy"] == pytest.approx(2.0)
    assert stats["figures/entropy_execution"] == pytest.approx(2.0)
    assert stats["figures/entropy_summary"] == pytest.approx(2.0)
    stats = entropy_stats(entropy, mask, torch.tensor([False, False]))
    assert "figures/entropy_summary" not in stats

"""cxsim critic-probe: the ridge probe, the outcome ceiling, and the command end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from cxsim.agents import build_policy
from cxsim.agents.models import save_policy
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.cli import main as cxsim
from cxsim.config import PPOConfig
from cxsim.pipeline.critic_probe import (
    Config,
    head_features,
    ridge_heldout_ev,
    steps_to_reach,
    value_features,
    variant_ppo,
)


def test_ridge_probe_finds_a_linear_signal_and_not_noise():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, 8, generator=gen, dtype=torch.float64)
    fit = torch.arange(400) < 300
    signal = x @ torch.linspace(-1, 1, 8, dtype=torch.float64)
    assert ridge_heldout_ev(x, signal + 0.1 * torch.randn(400, generator=gen), fit, 1.0) > 0.95
    noise = torch.randn(400, generator=gen, dtype=torch.float64)
    assert abs(ridge_heldout_ev(x, noise, fit, 1.0)) < 0.1


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
    assert set(probes["seg0"]) == {"last", "prefix-mean", "embedding-mean", "rollouts"}
    # the trainer's critic step, twice on the 12 fit rollouts, figures on the 4 held out
    assert len(result["critic_training"]) == 2
    assert all(-10 < ev <= 1 for cells in result["critic_training"] for ev in cells.values())
    printed = capsys.readouterr().out
    assert "held-out EV by ridge" in printed and "critic iteration 2:" in printed


@pytest.mark.parametrize(
    "variants, message",
    [
        (("lats",), r"--variants head='lats' is unknown; choose one of: context-ridge, last"),
        (("last+l2",), r"--variants loss='l2' is unknown; choose one of: mse, hl-gauss"),
        (("last+",), r"--variants 'last\+': write a value head, optionally \+loss"),
        (("last", "last"), r"--variants names last twice"),
        ((), r"--variants: name at least one"),
    ],
)
def test_bad_variants_fail_in_one_line(variants, message):
    with pytest.raises(ValueError, match=message) as error:
        Config(variants=variants, critic_iterations=2)
    assert "\n" not in str(error.value)


def test_variants_need_critic_iterations_and_a_valid_critic_config():
    with pytest.raises(ValueError, match="set --critic-iterations N"):
        Config(variants=("last",))
    with pytest.raises(ValueError, match=r"--variants last\+hl-gauss: --ppo\.value-clip-eps"):
        Config(variants=("last+hl-gauss",), critic_iterations=1, ppo=PPOConfig(value_clip_eps=0.2))


def test_a_bad_variant_stops_the_command_before_the_policy_is_read(tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as info:
        cxsim(["critic-probe", "--policy", str(tmp_path / "absent"), "--critic-iterations", "1",
               "--variants", "last", "attention-pol"])  # fmt: skip
    said = str(info.value)
    assert said.startswith("cxsim critic-probe: error: --variants head='attention-pol'")
    assert "\n" not in said and "absent" not in said


def test_variant_config_swaps_only_the_head_and_the_loss():
    base = PPOConfig(critic_lr=1e-3, value_head="last", value_loss="hl-gauss", value_bins=16)
    ppo = variant_ppo(base, "prefix-mean")
    assert (ppo.value_head, ppo.value_loss, ppo.value_bins) == ("prefix-mean", "hl-gauss", 16)
    ppo = variant_ppo(base, "attention-pool+mse")
    assert (ppo.value_head, ppo.value_loss, ppo.critic_lr) == ("attention-pool", "mse", 1e-3)


def test_steps_to_reach_half_the_ceiling():
    curve = [{"step": 8, "last": -0.1}, {"step": 16, "last": 0.2}, {"step": 24, "last": 0.35}]
    assert steps_to_reach(curve, 0.2) == 16
    assert steps_to_reach(curve, 0.3) == 24
    assert steps_to_reach(curve, 0.5) is None
    assert steps_to_reach(curve, float("nan")) is None


def test_head_features_are_what_each_fresh_head_reads():
    from cxsim.agents.critic import Critic
    from cxsim.critics import VALUE_HEADS
    from cxsim.segments import Segment, pack_segments

    critic = Critic.from_policy(build_policy("tiny", default_tokenizer(), seed=0))
    gen = torch.Generator().manual_seed(0)
    segments = []
    for rid, n in enumerate((5, 9, 7)):
        ids = torch.randint(5, 40, (n,), generator=gen).tolist()
        trainable = [False] * (n - 3) + [True] * 3
        segments.append(Segment("execution", ids, trainable, [0.0] * n, rid, 0, float(rid)))
    batch = pack_segments(segments, pad_id=0)
    frozen = value_features(critic, batch)
    last = head_features(critic, VALUE_HEADS["last"], batch)
    mean = head_features(critic, VALUE_HEADS["prefix-mean"], batch)
    pooled = head_features(critic, VALUE_HEADS["attention-pool"], batch)
    torch.testing.assert_close(last, frozen["last"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean, frozen["prefix-mean"], rtol=1e-5, atol=1e-5)
    # the bag of words: the prefix's input embeddings averaged, before any layer
    table = critic.backbone.get_input_embeddings().weight.double()
    for row, at in enumerate((batch.trainable.long().argmax(dim=1) - 1).tolist()):
        words = batch.token_ids[row, : at + 1][batch.attention[row, : at + 1]]
        torch.testing.assert_close(frozen["embedding-mean"][row], table[words].mean(0))
    torch.testing.assert_close(pooled, mean, rtol=1e-5, atol=1e-6)  # query 0: the prefix mean
    assert not torch.allclose(last, mean)
    # the value the head would give is read from exactly these features
    critic.head.weight.data.normal_(generator=gen)
    values = critic(batch.token_ids, batch.attention)
    first = batch.trainable.long().argmax(dim=1)
    expected = last.float() @ critic.head.weight[0] + critic.head.bias
    torch.testing.assert_close(values[torch.arange(3), first], expected, rtol=1e-4, atol=1e-4)


RIDGES = {"ridge1", "ridge10", "ridge100"}


def test_variants_get_one_row_each(tmp_path: Path, capsys):
    out = tmp_path / "probe.json"
    cxsim(["critic-probe", "--policy", "pretrained", "--episodes", "16",
           "--env.kwargs", "memory_length", "5", "obs_words_mean", "6.0", "obs_words_std", "1.0",
           "num_values", "8", "--compaction.budget", "160", "--out", str(out),
           "--critic-iterations", "2", "--ppo.rollouts-per-batch", "4", "--ppo.minibatches", "1",
           "--variants", "last", "attention-pool+hl-gauss"])  # fmt: skip
    result = json.loads(out.read_text())
    rows = result["variants"]
    assert [r["variant"] for r in rows] == ["last", "attention-pool+hl-gauss"]
    assert [(r["value_head"], r["value_loss"]) for r in rows] == [
        ("last", "mse"), ("attention-pool", "hl-gauss")
    ]  # fmt: skip
    assert 0 < result["ev_ceiling"] <= 1  # 8 values: the outcome varies with the summary
    assert result["ev_ceiling_loo"] <= result["ev_ceiling"]  # a group no longer explains itself
    for row in rows:
        # each iteration: critic ratio 2 x epochs 1 x 1 minibatch
        assert [p["step"] for p in row["curve"]] == [2, 4] and row["steps"] == 4
        assert row["ev_after"] == row["curve"][-1]["last"] and -10 < row["ev_after"] <= 1
        assert math.isfinite(row["probe_ev"]) and row["probe_ridge"] in (1.0, 10.0, 100.0)
        assert row["half_ceiling"] == pytest.approx(0.5 * result["ev_ceiling"])
        reached = [p["step"] for p in row["curve"] if p["last"] >= row["half_ceiling"]]
        assert row["steps_to_half_ceiling"] == (reached[0] if reached else None)
        assert "seg0" in row["curve"][0]
        probes = row["probe_by_segment"]["seg0"]
        assert probes["rollouts"] == 16 and set(probes[row["value_head"]]) == RIDGES
    # each variant's own critic: another head and loss, another curve
    assert rows[0]["ev_after"] != rows[1]["ev_after"]
    assert len(result["critic_training"]) == 2  # the configured critic, as before
    page = out.with_suffix(".md").read_text()
    assert (
        "| last | last | mse |" in page and "| attention-pool+hl-gauss | attention-pool |" in page
    )
    printed = capsys.readouterr().out
    assert "EV after 4 steps" in printed
    assert f"({result['ev_ceiling_loo']:+.3f} with each group's rate from the other" in printed

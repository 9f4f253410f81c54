"""``--ppo.keep-best``: the scores of policy versions, and a run that ends with its best one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_settings import TINY_ENV

from cxsim.agents import load_policy
from cxsim.best_policy import BestPolicy
from cxsim.evaluation import wilson_interval


def test_a_version_scored_on_many_rollouts_is_not_replaced_by_a_lucky_batch():
    best = BestPolicy()
    best.observe(95, 96)  # the base: three batches of 32 before its first actor step
    assert best.close()
    best.observe(32, 32)  # a later version: one perfect batch
    assert not best.close()
    assert (best.best_version, best.best_rollouts) == (0, 96)
    assert best.best_score == pytest.approx(wilson_interval(95, 96)[0])
    assert best.best_score > wilson_interval(32, 32)[0]


def test_a_better_version_replaces_the_best_and_ties_keep_the_earlier():
    best = BestPolicy()
    for successes in (13, 29, 29, 20):  # of 32 each
        best.observe(successes, 32)
        best.close()
    assert (best.best_version, best.best_rate) == (1, 29 / 32)
    assert best.version == 4 and best.rollouts == 0


def test_batches_of_one_version_pool_and_an_unscored_version_is_passed_over():
    best = BestPolicy()
    assert not best.close()  # nothing observed: no score, no best
    best.observe(10, 32)
    best.observe(22, 32)
    assert best.close()
    assert (best.best_version, best.best_rate, best.best_rollouts) == (1, 0.5, 64)
    restored = BestPolicy.from_dict(json.loads(json.dumps(best.as_dict())))
    assert restored == best
    assert BestPolicy.from_dict(None) == BestPolicy()


def _scored(*batches: tuple[int, int]) -> BestPolicy:
    """A tracker whose versions each scored one batch (successes, rollouts), in order."""
    best = BestPolicy()
    for successes, rollouts in batches:
        best.observe(successes, rollouts)
        best.close()
    return best


def test_unless_worse_keeps_the_last_version_when_the_best_is_ahead_by_chance():
    best = _scored((13, 32), (29, 32), (27, 32))  # the best, 29 of 32, then 27 of 32
    assert best.best_version == 1
    assert best.kept_version("highest-bound") == 1
    assert best.kept_version("unless-worse") == 2
    assert best.versions == [[0, 13, 32], [1, 29, 32], [2, 27, 32]]


def test_unless_worse_falls_back_when_the_last_version_is_worse_beyond_chance():
    # a base that solved 191 of 192 (Newcombe's interval of the difference against 28 of
    # 32 is about [+0.04, +0.27]); against 31 of 32 it is not resolved and the last is kept
    assert _scored((191, 192), (28, 32)).kept_version("unless-worse") == 0
    assert _scored((191, 192), (31, 32)).kept_version("unless-worse") == 1
    assert _scored((20, 32), (30, 32)).kept_version("unless-worse") == 1  # the last is best
    assert BestPolicy().kept_version("unless-worse") is None
    with pytest.raises(ValueError, match="unknown; choose one of"):
        BestPolicy().kept_version("latest")  # type: ignore[arg-type]


def test_a_batch_with_more_successes_than_rollouts_is_refused():
    with pytest.raises(ValueError, match="is not a batch"):
        BestPolicy().observe(5, 4)


def _train(policy: str, run_dir: Path, *extra: str) -> dict:
    cmd = [
        sys.executable, "-m", "cxsim.cli", "train", "--policy", policy,
        "--run-dir", str(run_dir), *TINY_ENV,
        "--ppo.rollouts-per-batch", "8", "--ppo.iterations", "3", "--ppo.critic-warmup", "1",
        "--ppo.minibatches", "1", "--ppo.no-skip-uniform-batches", "--checkpoint-every", "1",
        "--keep-checkpoints", "10", "--threads", "1", "--no-progress-bar", *extra,
    ]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    results = json.loads((run_dir / "results.json").read_text())
    results["stdout"] = out
    return results


def _history(results: dict) -> list[dict]:
    return [
        {k: v for k, v in h.items() if "seconds" not in k and "/wall_" not in k}
        for h in results["history"]
    ]


def _same_weights(a: str | Path, b: str | Path) -> bool:
    x, _, _ = load_policy(a)
    y, _, _ = load_policy(b)
    return all(torch.equal(p, q) for p, q in zip(x.parameters(), y.parameters(), strict=True))


def test_keep_best_trains_alike_and_ends_with_the_version_it_names(tmp_path: Path):
    plain = _train("pretrained", tmp_path / "plain", "--ppo.no-keep-best")
    kept = _train("pretrained", tmp_path / "kept", "--ppo.keep-best-rule", "highest-bound")
    assert _history(kept) == _history(plain)  # the flag only reads the batches
    best = kept["best_policy"]
    assert kept["policy"] == str(tmp_path / "kept" / "best" / "policy")
    assert best["version"] == 4  # 3 actor steps: versions 0-3 closed, then the final batch
    # version v is the policy after v actor steps: checkpoint iter-(1 + v) (1 warm-up)
    chosen = tmp_path / "kept" / "checkpoints" / f"iter-{1 + best['best_version']:06d}"
    assert _same_weights(kept["policy"], chosen / "policy")
    scored = [h["charts/success_rate"] * 8 for h in kept["history"]]
    version_batches = {0: scored[0] + scored[1], 1: scored[2], 2: scored[3]}
    if best["best_version"] in version_batches:
        rollouts = 16 if best["best_version"] == 0 else 8
        assert best["best_rate"] == pytest.approx(version_batches[best["best_version"]] / rollouts)
    assert "keep-best: the policy after" in kept["stdout"]
    assert "best_policy" not in plain and plain["policy"].endswith("iter-000004/policy")


def test_unless_worse_ends_with_the_version_its_recorded_counts_choose(tmp_path: Path):
    kept = _train("pretrained", tmp_path / "kept")  # the default: keep-best, unless-worse
    best = kept["best_policy"]
    tracker = BestPolicy.from_dict({k: v for k, v in best.items() if k in BestPolicy().as_dict()})
    assert best["rule"] == "unless-worse"
    assert best["kept_version"] == tracker.kept_version("unless-worse")
    scored = [h["charts/success_rate"] * 8 for h in kept["history"]]
    assert [v[:2] for v in best["versions"][:3]] == [
        [0, scored[0] + scored[1]], [1, scored[2]], [2, scored[3]]
    ]  # fmt: skip
    chosen = tmp_path / "kept" / "checkpoints" / f"iter-{1 + best['kept_version']:06d}"
    assert _same_weights(kept["policy"], chosen / "policy")


def test_the_default_keeps_best_unless_worse_and_runs_without_it_keep_their_records():
    from cxsim.config import PPOConfig
    from cxsim.tracking import to_jsonable

    default = to_jsonable(PPOConfig())
    assert (default["keep_best"], default["keep_best_rule"]) == (True, "unless-worse")
    before = to_jsonable(PPOConfig(keep_best=False, keep_best_rule="unless-worse"))
    assert "keep_best" not in before and "keep_best_rule" not in before  # cache keys as before
    highest = to_jsonable(PPOConfig(keep_best_rule="highest-bound"))
    assert highest["keep_best"] is True and "keep_best_rule" not in highest
    with pytest.raises(ValueError, match="keep_best_rule='latest' is unknown"):
        PPOConfig(keep_best_rule="latest")  # type: ignore[arg-type]

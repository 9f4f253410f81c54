"""Credit rules as references, declared claims, mixed errors, exit codes and the shrinking budget
of ``cxsim conform`` (docs/conformance.md)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cxsim import cli
from cxsim.advantages import cross_segment_gae, group_broadcast
from cxsim.conformance import Checker, Claims, load_function
from cxsim.conformance.batches import Segment, build_batch
from cxsim.conformance.check import cases_for, format_report
from cxsim.conformance.pinned_batches import pinned_cases
from cxsim.conformance.quantities import reference_of as reference
from cxsim.conformance.random_batches import random_cases
from cxsim.conformance.rules import (
    RULES,
    chain_split,
    outcome_broadcast,
    per_rollout_loss,
    trained_without_rejected,
)
from cxsim.conformance.term_models import CROSS_SEGMENT, gae_model, including_rejected
from cxsim.estimators import split_over_chains
from cxsim.losses import aggregate

VARIANTS = "cxsim.conformance.variants:"
PINNED = {c.name: c.example for c in pinned_cases()}
_some_case = st.one_of([c.strategy for c in random_cases(("fixed",)) if "long" not in c.name])


# --------------------------------------------------------------------------- references


def test_outcome_broadcast_by_hand():
    """Rollout 0 (3 traces, R = 1) and rollout 1 (1 trace, R = 0) in one group: mean 0.5,
    std sqrt(0.5), so +-0.5 / 0.7071 on every trainable token of every trace."""
    b = PINNED["pinned/traces"]
    out = outcome_broadcast(b.rewards, b.trainable, b.rollout_id, b.group_id)
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert out.dtype == torch.float64
    first = b.rollout_id == 0
    assert torch.allclose(out[first][b.trainable[first]], torch.tensor(expected).double())
    assert torch.allclose(out[3, :2], torch.tensor([-expected, -expected], dtype=torch.float64))
    assert float(out[~b.trainable].abs().sum()) == 0.0


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(_some_case)
def test_outcome_broadcast_is_cxsims_group_broadcast(batch):
    """The rule and the estimator cxsim trains it with (group-broadcast) agree."""
    ours = outcome_broadcast(batch.rewards, batch.trainable, batch.rollout_id, batch.group_id)
    theirs = group_broadcast(batch.rewards, batch.trainable, batch.rollout_id, batch.group_id)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_chain_split_by_hand():
    """R / K: a rollout of 3 chains with R = 1 gives 1/3 per chain, one of 1 chain with R = 0.5
    gives 0.5; a rejected summary attempt (mask 0) is no chain."""
    b = PINNED["pinned/three-chains"]
    out = chain_split(b.rewards, b.trainable, b.rollout_id)
    third = torch.tensor(1 / 3, dtype=torch.float64)
    assert torch.equal(out[0, :2], third.repeat(2)) and out[1, 0] == third and out[2, 0] == third
    assert out[3, 0] == 0.5 and float(out[~b.trainable].abs().sum()) == 0.0
    rejected = PINNED["pinned/rejected-summary"]  # 3 chains and a rejected attempt, R = 1
    split = chain_split(rejected.rewards, rejected.trainable, rejected.rollout_id)
    assert torch.equal(split[rejected.trainable], third.repeat(4))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(_some_case)
def test_chain_split_estimator_is_the_rule(batch):
    ours = chain_split(batch.rewards, batch.trainable, batch.rollout_id)
    estimator = split_over_chains(batch.rewards, batch.trainable, batch.rollout_id)
    torch.testing.assert_close(ours, estimator, rtol=1e-12, atol=1e-12)


def test_chain_split_estimator_trains_one_iteration():
    """``--ppo.estimator chain-split``: scored advantages are the rule on the policy mask of a
    sampled compacted batch, and one PPO iteration runs on them."""
    from test_registries import one_iteration, sampled_batch

    from cxsim.agents.models import build_policy
    from cxsim.agents.tokenizer import default_tokenizer
    from cxsim.config import PPOConfig
    from cxsim.ppo import score_batch
    from cxsim.scans import per_group_sum

    policy = build_policy("tiny", default_tokenizer(), seed=0)
    batch = sampled_batch(policy, 1.0)
    cfg = PPOConfig(
        estimator="chain-split", rollouts_per_batch=4, minibatches=1, whiten=False, kl_coef=0.0
    )
    assert not cfg.uses_critic
    scored, _ = score_batch(batch, None, cfg)
    chains = per_group_sum(scored.policy_mask.any(dim=1).double(), batch.rollout_id)
    assert float(chains.max()) > 1  # some rollout has several chains
    returns = batch.rewards + per_group_sum(batch.step_rewards.sum(dim=1), batch.rollout_id)
    expected = chain_split(returns.double(), scored.policy_mask, batch.rollout_id)
    torch.testing.assert_close(scored.advantages.double(), expected, rtol=1e-6, atol=1e-7)
    stats = one_iteration(policy, batch, cfg)
    assert stats["losses/first_log_ratio_max"] < 1e-3
    assert math.isfinite(stats["losses/policy"])


def test_per_rollout_loss_by_hand():
    """Rollout 0: losses (1) and (0, 0, 0) -> mean 1/4; rollout 1: (2, 4) -> 3; mean of the two
    rollouts 1.625 (counting 3 segments instead would give 1.0833)."""
    b = PINNED["pinned/rollout-denominators"]
    assert float(per_rollout_loss(b.loss, b.trainable, b.rollout_id)) == 1.625
    reduced = load_function("cxsim.conformance.adapters:reduce_micro_batches")(
        losses=[b.loss[:1], b.loss[1:]],
        masks=[b.trainable[:1], b.trainable[1:]],
        rollout_ids=[b.rollout_id[:1], b.rollout_id[1:]],
        mode="rollout-mean",
    )  # cxsim's rollout-mean, rollout 0 split over the two micro-batches
    assert math.isclose(float(reduced), 1.625, rel_tol=1e-12)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(_some_case)
def test_per_rollout_loss_is_cxsims_rollout_mean(batch):
    ours = per_rollout_loss(batch.loss, batch.trainable, batch.rollout_id)
    theirs = aggregate(batch.loss, batch.trainable, "rollout-mean", batch.rollout_id)
    assert math.isclose(float(ours), float(theirs), rel_tol=1e-12, abs_tol=1e-12)


def _cross_segment(b):
    return cross_segment_gae(
        b.values, b.trainable, b.rewards, b.rollout_id, b.segment_index, b.gamma, b.lam
    )


def test_rejected_attempt_dropped_by_hand():
    """Segments of 2, 1, 1 trainable tokens with a rejected 3-token attempt after the first,
    gamma 1, lambda 0.5, zero values, R = 1: N_after of the first segment is 2, so it gets
    (0.5, 1) * 0.5^2 = (0.125, 0.25); including the attempt makes N_after 5: (1/64, 1/32)."""
    b = PINNED["pinned/rejected-summary"]
    out = trained_without_rejected(b, _cross_segment)
    assert out[0, :2].tolist() == [0.125, 0.25]
    assert out[1].abs().sum() == 0 and out[2, 0] == 0.5 and out[3, 0] == 1.0
    included = gae_model(b, CROSS_SEGMENT, include_rejected=True)
    assert included[0, :2].tolist() == [1 / 64, 1 / 32]
    assert bool(including_rejected(b).trainable[1, :3].all())


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(next(c.strategy for c in random_cases(("fixed",)) if c.rejected))
def test_cxsim_estimators_drop_rejected_attempts_on_their_own(batch):
    """A rejected attempt has mask 0, and cxsim's estimators read only the mask: the reference on
    the whole batch is the rule (the rollout trained without the attempt)."""
    assert bool(batch.rejected.any())
    for quantity in ("local-gae", "cross-segment-gae", "stitched-gae", "group-broadcast"):
        expected = trained_without_rejected(batch, lambda b, q=quantity: reference(b, q))
        torch.testing.assert_close(reference(batch, quantity), expected, rtol=1e-12, atol=1e-12)


def test_every_rule_is_named_in_the_docs():
    text = Path(__file__).parents[1].joinpath("docs", "conformance.md").read_text()
    for name, rule in RULES.items():
        assert f"`{name}`" in text, name
        assert rule.check.split()[-1] in text, rule.check


# --------------------------------------------------------------------------- wrong forms

# (variant, quantity, layout, mode, pinned case, random case, term, form words, at, expected, got)
WRONG_RULES = [
    ("group_broadcast_per_segment", "group-broadcast", "segment-rows", None, "pinned/traces",
     "segments", "the group statistics", "applied per segment", (0, 0), 0.70710607, 0.5),
    ("chain_split_not_split", "chain-split", "segment-rows", None, "pinned/three-chains",
     "segments", "the split", "not split", (0, 0), 1 / 3, 1.0),
    ("rollout_mean_segments_counted", "loss-reduction", "loss-matrix", "rollout-mean",
     "pinned/rollout-denominators", "segments", "the denominator",
     "rollouts counted as segments", (0,), 1.625, 3.25 / 3),
    ("cross_segment_gae_rejected_included", "cross-segment-gae", "segment-rows", None,
     "pinned/rejected-summary", "rejected-summaries/fixed", "the rejected summary attempts",
     "included in the advantage computation", (0, 0), 0.125, 1 / 64),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "quantity", "layout", "mode", "pinned", "family", "term", "words", "at", "expected",
     "got"),
    WRONG_RULES,
)  # fmt: skip
def test_each_wrong_form_of_a_rule_is_named(
    name, quantity, layout, mode, pinned, family, term, words, at, expected, got
):
    checker = Checker(load_function(VARIANTS + name), quantity, layout, mode, shrink_seconds=5)
    results = {r.case.name: r for r in checker.run(examples=25, seed=0, only=(pinned, family))}
    assert set(results) == {pinned, family}
    for r in results.values():
        assert not r.passed, r.case.name
        assert r.failure.term == term, (r.case.name, r.failure.form)
        assert words in r.failure.form
    failure = results[pinned].failure
    assert math.isclose(float(failure.expected[at]), expected, rel_tol=1e-5)  # eps 1e-6
    assert math.isclose(float(failure.got[at]), got, rel_tol=1e-5)


# --------------------------------------------------------------------------- claims

SEGMENT_SCOPE_MODULE = textwrap.dedent(
    '''
    """A framework's cross-segment GAE (samples layout) that implements segment-scope lambda only."""
    import torch


    def _gae(values, loss_masks, rewards, response_lengths, trainable_counts, tokens_after,
             gamma, lam, alpha, reward_on_last_response_token):
        out = []
        for v, m, reward, n, count, after in zip(values, loss_masks, rewards, response_lengths,
                                                  trainable_counts, tokens_after):
            trained = [t for t in range(n) if m[t]]
            if not trained:  # a rejected summary attempt: nothing to train
                out.append(torch.zeros(n, dtype=torch.float64))
                continue
            lam_s = lam if lam is not None else max(0.0, 1.0 - 1.0 / (alpha * count))
            reward_at = n - 1 if reward_on_last_response_token else trained[-1]
            adv = torch.zeros(n, dtype=torch.float64)
            running, next_value = 0.0, 0.0
            for t in reversed(trained):
                r = reward if t == reward_at else 0.0
                running = r + gamma * next_value - float(v[t]) + gamma * lam_s * running
                adv[t] = running
                next_value = float(v[t])
            out.append(adv * (gamma * lam_s) ** after)
        return out


    def segment_scope_gae_buggy(values, loss_masks, rewards, response_lengths, rollout_ids,
                                segment_indices, trainable_counts, tokens_after, gamma, lam,
                                alpha, lambda_scope):
        return _gae(values, loss_masks, rewards, response_lengths, trainable_counts,
                    tokens_after, gamma, lam, alpha, True)


    def segment_scope_gae(values, loss_masks, rewards, response_lengths, rollout_ids,
                          segment_indices, trainable_counts, tokens_after, gamma, lam, alpha,
                          lambda_scope):
        return _gae(values, loss_masks, rewards, response_lengths, trainable_counts,
                    tokens_after, gamma, lam, alpha, False)
    '''
)


@pytest.fixture
def adapter_folder(tmp_path, monkeypatch):
    """A folder holding my_adapters.py, as the current folder (restored afterwards)."""
    (tmp_path / "my_adapters.py").write_text(SEGMENT_SCOPE_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_adapters", raising=False)
    yield tmp_path
    sys.modules.pop("my_adapters", None)


def test_segment_scope_implementation_fails_only_on_its_bug(adapter_folder):
    """Declared segment-scope, its one real bug (the reward on the last response token, dropped
    when a segment ends on observations) is the only term named; no case speaks of the scope."""
    function = load_function("my_adapters:segment_scope_gae_buggy")  # found from the folder
    checker = Checker(
        function, "cross-segment-gae", "samples", claims=Claims("segment-scope"), shrink_seconds=1
    )
    results, skipped = checker.run_all(examples=5, seed=0)
    assert {s.case.name for s in skipped} == {
        c.name for c in cases_for("cross-segment-gae") if c.scope == "rollout"
    }
    assert all(s.reason == "adaptive lambda over the rollout (--claims segment-scope)"
               for s in skipped)  # fmt: skip
    failing = [r for r in results if not r.passed]
    assert "pinned/ends-on-observation" in {r.case.name for r in failing}
    assert "ends-on-observation/adaptive-segment" in {r.case.name for r in failing}
    for r in failing:
        assert r.failure.term == "where the reward sits", (r.case.name, r.failure.form)
    passing = {r.case.name for r in results if r.passed}
    assert {"segments/fixed", "segments/adaptive-segment", "pinned/1000+2000"} <= passing
    report = format_report(results, "f", "cross-segment-gae", "samples", None, skipped,
                           checker.claims)  # fmt: skip
    assert "claims: adaptive lambda over the segment only" in report
    assert "not checked (outside the claims):" in report
    assert f"{len(skipped)} cases skipped: segments/adaptive-rollout" in report

    # without the claim, the convention fails too, named as the scope
    unclaimed = Checker(function, "cross-segment-gae", "samples", shrink_seconds=2)
    result = unclaimed.run(examples=10, seed=0, only=("segments/adaptive-rollout",))[0]
    assert result.failure.term == "the lambda used"
    assert result.failure.form.startswith("lambda over the segment instead of the rollout")


def test_segment_scope_implementation_passes_once_fixed(adapter_folder):
    """The real command, run from the folder that holds the adapter module: exit 0, and the
    report lists the rollout-scope cases it did not check."""
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("cxsim")), "conform", "my_adapters:segment_scope_gae",
         "--quantity", "cross-segment-gae", "--layout", "samples", "--claims", "segment-scope",
         "--examples", "3"],
        capture_output=True, text=True, timeout=120, cwd=adapter_folder,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = len([c for c in cases_for("cross-segment-gae") if c.scope != "rollout"])
    assert f"all {checked} cases run agree with the reference" in proc.stdout
    assert (
        "adaptive lambda over the rollout (--claims segment-scope): 7 cases skipped" in proc.stdout
    )


def _group_of_one_gets_its_reward(rewards, response_mask, attention_mask, rollout_id, group_id,
                                  eps):  # fmt: skip
    """Right for groups of two or more rollouts; a group of one keeps its raw reward."""
    out = torch.zeros(response_mask.shape, dtype=torch.float64)
    for g in group_id.unique():
        rows = group_id == g
        first = {}
        for r in rows.nonzero().flatten().tolist():
            first.setdefault(int(rollout_id[r]), r)
        voters = rewards[list(first.values())]
        if len(voters) == 1:
            out[rows] = rewards[rows][:, None]
        else:
            out[rows] = ((rewards[rows] - voters.mean()) / (voters.std() + eps))[:, None]
    return out * response_mask


def test_min_group_removes_smaller_groups_and_counts_them():
    unclaimed = Checker(_group_of_one_gets_its_reward, "group-broadcast", "segment-rows")
    result = unclaimed.run(examples=25, seed=0, only=("segments",))[0]
    assert not result.passed
    shrunk = result.failure.batch
    assert len(shrunk.rollout_id.unique()) == 1  # shrunk to a group of one
    claims = Claims(min_group=2)
    checker = Checker(_group_of_one_gets_its_reward, "group-broadcast", "segment-rows",
                      claims=claims)  # fmt: skip
    results, skipped = checker.run_all(examples=25, seed=0, only=("segments", "observations"))
    assert all(r.passed for r in results) and not skipped
    removed = sum(r.groups_removed for r in results)
    assert removed > 0
    report = format_report(results, "f", "group-broadcast", "segment-rows", None, skipped, claims)
    assert f"groups of fewer than 2 rollouts (--min-group 2): {removed} groups removed" in report
    assert "claims: groups of at least 2 rollouts" in report


def test_no_rejected_attempts_skips_their_cases():
    checker = Checker(
        load_function(VARIANTS + "cross_segment_gae_rejected_included"),
        "cross-segment-gae",
        "segment-rows",
        claims=Claims(rejected_attempts=False),
    )
    only = ("rejected", "pinned/rej", "segments/fixed")
    results, skipped = checker.run_all(examples=5, seed=0, only=only)
    assert [r.case.name for r in results] == ["segments/fixed"] and results[0].passed
    assert {s.case.name for s in skipped} == {
        "rejected-summaries/fixed",
        "rejected-summaries/adaptive-segment",
        "rejected-summaries/adaptive-rollout",
        "pinned/rejected-summary",
    }
    assert {s.reason for s in skipped} == {"rejected summary attempts (--no-rejected-attempts)"}


# --------------------------------------------------------------------------- mixed errors


def test_observations_stepped_locally_with_n_after_right_is_named():
    """Observation tokens as steps inside each segment while N_after counts trainable tokens:
    no single textbook pitfall, and still named, not unidentified."""
    batch = build_batch([[Segment((2, 1, 1)), Segment((1, 2, 1))]], gamma=1.0, lam=0.9)
    checker = Checker(
        load_function(VARIANTS + "cross_segment_gae_observations_as_steps_locally"),
        "cross-segment-gae",
        "samples",
    )
    _, failure = checker.compare(batch)
    failure = checker.explain(failure)
    assert failure.term == "the exponent"
    assert "inside each segment are stepped over as GAE steps" in failure.form


def test_two_errors_together_are_each_named():
    """Segment-scope lambda on a rollout-scope batch and the reward on the last response token:
    neither form alone reproduces the output; the pair does, and both terms are reported."""
    batch = build_batch(
        [[Segment((2, 1)), Segment((3,))]], gamma=1.0, lam=None, alpha=1.5, scope="rollout"
    )
    checker = Checker(
        load_function(VARIANTS + "cross_segment_gae_segment_scope_only_reward_dropped"),
        "cross-segment-gae",
        "samples",
    )
    _, failure = checker.compare(batch)
    failure = checker.explain(failure)
    assert [term for term, _ in failure.parts] == ["where the reward sits", "the lambda used"]
    assert failure.form.startswith("2 errors together, each explaining its part")
    assert "lambda over the segment instead of the rollout" in failure.form


# --------------------------------------------------------------------------- exit codes


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no_such_adapter_module:f", "--quantity", "local-gae", "--layout", "segment-rows"],
         "no_such_adapter_module:f: not found: no module 'no_such_adapter_module'"),
        (["m:f", "--quantity", "local-gae", "--layout", "segment-rows", "--claims", "sideways"],
         "sideways"),
        (["m:f", "--quantity", "local-gae", "--layout", "segment-rows", "--min-group", "0"],
         "--min-group must be >= 1"),
        ([VARIANTS + "local_gae_observations_as_steps", "--quantity", "local-gae", "--layout",
          "segment-rows", "--only", "nothing/"], "--only nothing/ matches no case of local-gae"),
        ([VARIANTS + "local_gae_observations_as_steps", "--quantity", "local-gae", "--layout",
          "segment-rows", "--only", "long/adaptive", "--lambda-kind", "fixed"],
         "outside the claims"),
        (["cxsim.conformance.adapters:group_broadcast_rows", "--quantity", "group-broadcast",
          "--layout", "segment-rows", "--claims", "segment-scope"], "group-broadcast has no lambda"),
    ],
)  # fmt: skip
def test_usage_and_configuration_errors_exit_2_in_one_line(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the check puts the current folder on it
    with pytest.raises(SystemExit) as stop:
        cli.main(["conform", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("cxsim conform: error:") and message in err, err


def test_a_module_that_fails_on_import_exits_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_adapters.py").write_text("import not_a_real_dependency_here\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit) as stop:
        cli.main(["conform", "broken_adapters:f", "--quantity", "local-gae", "--layout",
                  "segment-rows"])  # fmt: skip
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "ModuleNotFoundError: No module named 'not_a_real_dependency_here'" in err
    sys.modules.pop("broken_adapters", None)


# --------------------------------------------------------------------------- shrinking budget


def test_shrinking_stops_at_its_budget_and_says_so():
    checker = Checker(
        load_function(VARIANTS + "cross_segment_gae_lambda_capped"),
        "cross-segment-gae",
        "samples",
        shrink_seconds=0.05,
    )
    case = next(c for c in cases_for("cross-segment-gae") if c.name == "long/adaptive-segment")
    result = checker.run_case(case, examples=25, seed=0)
    assert not result.passed and result.shrink_stopped
    assert result.failure.term == "the lambda used"
    assert result.shrink_seconds < 3.0  # the budget, plus at most the step under way
    report = format_report([result], "f", "cross-segment-gae", "samples", None, shrink_seconds=0.05)
    assert "smallest example found before the shrinking budget ran out" in report
    assert (
        "shrinking: at most 0.05 s per failing case (--shrink-seconds); stopped at the budget"
        in (report)
    )


@pytest.mark.parametrize(
    ("function", "said"),
    [
        ("cxsim.conformance.adaptrs:local_gae_rows", "not found: no module "
         "'cxsim.conformance.adaptrs' (did you mean 'cxsim.conformance.adapters'?)"),
        ("cxsim.conformance.adapters:cross_segment_gae_rowz", "not found: module "
         "'cxsim.conformance.adapters' has no 'cross_segment_gae_rowz' (did you mean "
         "'cross_segment_gae_rows'?)"),
    ],
)  # fmt: skip
def test_a_typo_in_module_or_name_says_not_found_not_which_layout(function, said, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["conform", function])  # no --layout: the name is found first
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"cxsim conform: error: {function}: {said}" or (
        err.startswith(f"cxsim conform: error: {function}: {said}, searched from ")
    ), err
    assert "--layout" not in err

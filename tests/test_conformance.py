"""The conformance check: cxsim passes in every layout, each wrong variant is caught with its numbers."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import get_args

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cxsim.advantages import adaptive_lambda
from cxsim.conformance import LAYOUTS, Checker, conform, load_function
from cxsim.conformance import conform_command as conform_cli
from cxsim.conformance.check import format_report
from cxsim.conformance.pinned_batches import pinned_cases
from cxsim.conformance.quantities import (
    ESTIMATOR_QUANTITIES,
    GAE_QUANTITIES,
    QUANTITIES,
    reference_of,
)
from cxsim.conformance.quantity_names import check_records, serving
from cxsim.conformance.random_batches import random_cases
from cxsim.conformance.reference import lambda_rows

ADAPTERS = "cxsim.conformance.adapters:"
VARIANTS = "cxsim.conformance.variants:"
_SUFFIX = {"segment-rows": "rows", "rollout-rows": "rollout_rows", "samples": "samples"}

OWN = [
    (f"{ADAPTERS}{q.replace('-', '_')}_{_SUFFIX[layout]}", q, layout, None)
    for layout in _SUFFIX
    for q in serving(layout)
] + [
    (f"{ADAPTERS}reduce_micro_batches", "loss-reduction", "loss-matrix", mode)
    for mode in ("token-mean", "segment-mean", "rollout-mean", "seq-mean-token-sum")
]

_any_case = st.one_of([c.strategy for c in random_cases() if not c.name.startswith("long")])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(_any_case, st.sampled_from(GAE_QUANTITIES))
def test_gae_model_with_right_terms_equals_cxsim(batch, quantity):
    """The diagnosis model, with every term right, is the reference (so its wrong forms mean something)."""
    torch.testing.assert_close(
        QUANTITIES[quantity].model(batch, None, {}),
        reference_of(batch, quantity),
        rtol=1e-12,
        atol=1e-12,
    )


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of([c.strategy for c in random_cases(("adaptive",))]))
def test_float64_lambda_is_cxsims_adaptive_lambda(batch):
    ours = lambda_rows(batch)
    cxsim = adaptive_lambda(batch.trainable, batch.rollout_id, batch.scope, batch.alpha)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours.float(), cxsim, rtol=0, atol=1.2e-7)


@pytest.mark.parametrize(("function", "quantity", "layout", "mode"), OWN)
def test_cxsim_passes_through_every_layout(function, quantity, layout, mode):
    checker = Checker(load_function(function), quantity, layout, mode)
    results = checker.run(examples=4, seed=1)
    failed = [(r.case.name, r.max_diff, r.failure and r.failure.form) for r in results]
    assert all(r.passed for r in results), failed
    assert len(results) >= 6
    fixed = [
        r
        for r in results
        if r.case.lam_kind != "adaptive"
        and r.case.name != "pinned/1000+2000"
        and not r.case.name.startswith("pinned/4")
    ]
    for r in fixed:  # no float32 lambda involved: float64 throughout, exact up to rounding
        assert r.max_diff < 1e-9, (r.case.name, r.max_diff)


# (function, quantity, layout, mode, pinned case, term, (row, col) or None, expected, got,
#  the random case families where the pitfall shows)
WRONG = [
    (
        "local_gae_observations_as_steps",
        "local-gae",
        "segment-rows",
        None,
        "pinned/observations-5",
        "the exponent",
        (0, 1),
        0.44,
        0.2544,
        ("observations/", "ends-on-observation/fixed"),
    ),
    (
        "adaptive_lambda_with_observations",
        "adaptive-lambda",
        "samples",
        None,
        "pinned/4+4",
        "the lambda used",
        (0,),
        1 - 1 / 6,
        1 - 1 / 12,
        ("observations/", "one-token/"),
    ),
    (
        "cross_segment_gae_lambda_capped",
        "cross-segment-gae",
        "samples",
        None,
        "pinned/1000+2000",
        "the lambda used",
        (0, 0),
        (1 - 1 / 1500) ** 2999,
        0.999**2999,
        ("long/adaptive",),
    ),
    (
        "local_gae_reward_on_last_response_token",
        "local-gae",
        "segment-rows",
        None,
        "pinned/ends-on-observation",
        "where the reward sits",
        (0, 1),
        1.0,
        0.0,
        ("ends-on-observation/",),
    ),
    (
        "cross_segment_gae_negative_lambda",
        "cross-segment-gae",
        "samples",
        None,
        "pinned/one-token-alpha-0.5",
        "the lambda used",
        (1, 0),
        0.0,
        -1.0,
        ("one-token/adaptive-segment",),
    ),
    (
        "token_mean_of_micro_batch_means",
        "loss-reduction",
        "loss-matrix",
        "token-mean",
        "pinned/two-micro-batches",
        "the denominator",
        (0,),
        0.25,
        0.50,
        ("segments",),
    ),
]


@pytest.mark.parametrize(
    ("name", "quantity", "layout", "mode", "pinned", "term", "at", "expected", "got", "where"),
    WRONG,
)
def test_each_wrong_variant_is_caught_with_the_quoted_numbers(
    name, quantity, layout, mode, pinned, term, at, expected, got, where
):
    checker = Checker(load_function(VARIANTS + name), quantity, layout, mode)
    results = {r.case.name: r for r in checker.run(examples=25, seed=0, only=(pinned, *where))}
    failing = [r for r in results.values() if not r.passed]
    assert len(failing) == len(results), [r.case.name for r in results.values() if r.passed]
    case = results[pinned]
    assert not case.passed
    failure = case.failure
    assert failure.term == term, failure.form
    assert math.isclose(float(failure.expected[at]), expected, abs_tol=1e-9)
    assert math.isclose(float(failure.got[at]), got, abs_tol=1e-9)
    for r in failing:  # every failure names a term; random ones are shrunk to a few short rows
        assert r.failure.term == term, (r.case.name, r.failure.term, r.failure.form)
        if not r.case.pinned and not r.case.name.startswith(("long", "mixed")):
            assert r.failure.batch.num_rows <= 3
            assert r.failure.batch.response.sum(dim=1).max() <= 3


def test_quoted_numbers_are_the_rounded_figures():
    """0.050 vs 0.135 (capped lambda) and 0.2544 vs 0.44 are what the pinned cases give."""
    assert round((1 - 1 / 1500) ** 2999, 3) == 0.135
    assert round(0.999**2999, 3) == 0.050


def test_command_exits_non_zero_and_names_the_term():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cxsim.cli",
            "conform",
            VARIANTS + "local_gae_observations_as_steps",
            "--quantity",
            "local-gae",
            "--layout",
            "segment-rows",
            "--examples",
            "10",
            "--only",
            "pinned/observations-5",
            "observations/fixed",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert "differing term: the exponent: observation tokens" in proc.stdout
    assert "FAIL pinned/observations-5" in proc.stdout
    assert "0.2544" in proc.stdout and "0.44" in proc.stdout


def test_command_passes_cxsim(capsys):
    conform_cli.main(
        [
            ADAPTERS + "reduce_micro_batches",
            "--quantity",
            "loss-reduction",
            "--layout",
            "loss-matrix",
            "--mode",
            "rollout-mean",
            "--examples",
            "5",
        ]
    )
    out = capsys.readouterr().out
    assert "all 8 cases run agree with the reference" in out  # pinned/sessions among them


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["m:f", "--quantity", "adaptive-lambda", "--layout", "rollout-rows"], "does not serve"),
        (["m:f", "--quantity", "loss-reduction", "--layout", "loss-matrix"], "--mode is required"),
        (["m.f", "--quantity", "local-gae", "--layout", "samples"], "package.module:function"),
    ],
)
def test_bad_config_fails_before_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        conform_cli.main(argv)
    assert exit_info.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_unknown_function_is_a_one_line_error():
    with pytest.raises(ValueError, match=r"not found: module '.*variants' has no 'nope'"):
        conform("cxsim.conformance.variants:nope", "local-gae", "segment-rows", examples=1)


def test_a_function_that_raises_is_reported():
    checker = Checker(lambda **kw: 1 / 0, "local-gae", "segment-rows")
    result = checker.run_case(pinned_cases()[0], examples=1, seed=0)
    assert not result.passed and "ZeroDivisionError" in result.failure.error


def test_cli_layout_table_matches_the_layouts():
    assert {layout: serving(layout) for layout in LAYOUTS} == conform_cli.LAYOUT_QUANTITIES


# --------------------------------------------------------------------------- the records


def test_the_registry_holds_every_quantity_the_command_accepts():
    """One record per ``--quantity`` choice, in the command's order; the command's torch-free
    copies (names, ``--mode`` kinds, the tolerances --rtol's help quotes) say what the records
    say."""
    assert tuple(QUANTITIES) == get_args(conform_cli.QuantityName)
    assert all(name == q.name for name, q in QUANTITIES.items())
    modes = {name: q.mode for name, q in QUANTITIES.items() if q.mode is not None}
    assert modes == conform_cli.MODE_KINDS
    rtols = {name: q.rtol for name, q in QUANTITIES.items()}  # as --rtol's help says
    assert rtols == {
        **dict.fromkeys(GAE_QUANTITIES, 1e-3),
        **{n: 1e-5 if n == "group-broadcast" else 1e-6 for n in rtols if n not in GAE_QUANTITIES},
    }
    help_text = Path(conform_cli.__file__).read_text()
    assert "1e-3 for GAE, 1e-5 group broadcast, 1e-6 otherwise" in help_text
    for name, q in QUANTITIES.items():
        assert set(q.layouts) <= set(LAYOUTS), name
        assert q.cases(), name
    for estimator, name in ESTIMATOR_QUANTITIES.items():  # as each estimator declares it
        # ``cxsim conform NAME`` hands it over as the trainer does
        assert "estimator" in QUANTITIES[name].layouts, estimator


def test_a_registry_that_drifts_from_the_torch_free_names_fails_when_built():
    """The names ``--help`` lists are the records': a record serving a layout its line in
    quantity_names.py does not list, another mode kind, or a record with no line fails
    when the registry is built, naming both sides."""
    records = {name: (q, tuple(q.layouts), q.mode) for name, q in QUANTITIES.items()}
    assert check_records(records) == QUANTITIES
    chain = QUANTITIES["chain-split"]
    drifted = {**records, "chain-split": (chain, (*chain.layouts, "rollout-rows"), None)}
    with pytest.raises(ValueError, match=r"'chain-split': its record serves .*'rollout-rows'"):
        check_records(drifted)
    with pytest.raises(ValueError, match=r"'chain-split': its record's mode is 'loss mode'"):
        check_records({**records, "chain-split": (chain, tuple(chain.layouts), "loss mode")})
    with pytest.raises(ValueError, match=r"differ from QUANTITY_LAYOUTS"):
        check_records({**records, "chain-splat": (chain, tuple(chain.layouts), None)})


def test_the_record_drives_the_check():
    """A copy of chain-split's record with a deliberately wrong reference (the whole reward R
    on every chain, not R/K) fails cxsim's own function through the same Checker and report,
    on the record's own pinned case; the right record passes it."""
    right = QUANTITIES["chain-split"]

    def whole_reward(batch, mode):
        return torch.where(batch.trainable, batch.rewards[:, None], 0.0)

    wrong = replace(right, name="chain-split-unsplit", reference=whole_reward)
    own = load_function(ADAPTERS + "chain_split_rows")
    results, skipped = Checker(own, wrong, "segment-rows").run_all(2, 0, ("pinned/",))
    assert [r.case.name for r in results] == ["pinned/three-chains"] and not skipped
    assert not results[0].passed and results[0].max_diff == pytest.approx(2 / 3)
    report = format_report(results, "own", wrong, "segment-rows", None)
    assert report.startswith("conformance of own: chain-split-unsplit, layout segment-rows")
    assert "FAIL pinned/three-chains" in report
    assert "1 of 1 cases run differ from the reference" in report
    assert all(r.passed for r in Checker(own, right, "segment-rows").run(2, 0, ("pinned/",)))


def test_the_record_names_the_wrong_forms():
    """The diagnosis reads the record's wrong forms: without them the unsplit variant's
    failure is unidentified; with them it is "the split"."""
    unsplit = load_function(VARIANTS + "chain_split_not_split")
    right = QUANTITIES["chain-split"]
    for record, term in ((right, "the split"), (replace(right, wrong_forms=lambda b, m: []), "")):
        result = Checker(unsplit, record, "segment-rows").run(1, 0, ("pinned/three-chains",))[0]
        assert not result.passed
        assert result.failure.term == (term or "unidentified")


def test_a_layout_outside_the_record_is_refused():
    with pytest.raises(ValueError, match="layout loss-matrix does not serve chain-split"):
        Checker(lambda **kw: None, "chain-split", "loss-matrix")


def test_the_docs_list_each_records_variants():
    """docs/conformance.md's list of the deliberately wrong functions is the records'
    variants, and each is a function of a layout its record is served in."""
    text = Path(__file__).parents[1].joinpath("docs", "conformance.md").read_text()
    listed = set(
        re.findall(
            r"^cxsim conform (\S+) --quantity (\S+) --layout (\S+)(?: --mode (\S+))?$", text, re.M
        )
    )
    records = {
        (v.function, name, v.layout, v.mode or "")
        for name, q in QUANTITIES.items()
        for v in q.variants
    }
    assert {entry for entry in listed if ".conformance." in entry[0]} >= records
    assert {e for e in listed if "variants:" in e[0]} == records
    for name, q in QUANTITIES.items():
        for v in q.variants:
            assert v.layout in q.layouts, (name, v)
            load_function(v.function)


def test_cli_reference_lists_the_registry():
    """docs/reference/cli.md's ``--quantity`` and ``--layout`` rows name what the registry holds."""
    text = Path(__file__).parents[1].joinpath("docs", "reference", "cli.md").read_text()
    rows = {
        m[0]: m[1]
        for m in re.findall(r"^\| `(--quantity|--layout)` \| `None` \| (.*)$", text, re.M)
    }
    assert re.findall(r"`([a-z-]+)`", rows["--quantity"].split(";")[0]) == list(QUANTITIES)
    assert re.findall(r"`([a-z-]+)`", rows["--layout"].split(";")[0]) == list(LAYOUTS)


def test_help_does_not_import_torch():
    code = (
        "import sys; import cxsim.conformance.conform_command as c; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _population_std_broadcast(rewards, response_mask, attention_mask, rollout_id, group_id, eps):
    out = torch.zeros(response_mask.shape, dtype=torch.float64)
    for g in group_id.unique():
        first = {}
        for r in (group_id == g).nonzero().flatten().tolist():
            first.setdefault(int(rollout_id[r]), r)
        voters = rewards[list(first.values())]
        std = voters.std(unbiased=False) if len(voters) > 1 else 0.0
        rows = group_id == g
        out[rows] = ((rewards[rows] - voters.mean()) / (std + eps))[:, None]
    return out * response_mask


def test_group_statistics_term_is_named():
    checker = Checker(_population_std_broadcast, "group-broadcast", "segment-rows")
    result = checker.run(examples=25, seed=0, only=("segments",))[0]
    assert not result.passed
    assert result.failure.term == "the group statistics"
    assert "population std" in result.failure.form


def _segment_mean_everywhere(losses, masks, rollout_ids, mode):
    from cxsim.losses import aggregate

    return aggregate(torch.cat(losses), torch.cat(masks), "segment-mean")


def test_wrong_mode_is_named_as_the_denominator():
    checker = Checker(_segment_mean_everywhere, "loss-reduction", "loss-matrix", "token-mean")
    result = checker.run(examples=25, seed=0, only=("segments",))[0]
    assert not result.passed
    assert result.failure.term == "the denominator"
    assert "computes segment-mean instead of token-mean" in result.failure.form


def test_an_unknown_error_is_located_not_named():
    def doubled(**kwargs):
        return 2 * load_function(ADAPTERS + "local_gae_rows")(**kwargs)

    result = Checker(doubled, "local-gae", "segment-rows").run(only=("pinned/4+4",))[0]
    assert result.failure.term == "unidentified"
    assert "largest difference is at" in result.failure.form

"""What an estimator returns, checked in one place (cxsim/plugin_checks.py): a list, the wrong
shape, a NaN and a nonzero advantage off the mask each end the trainer's scoring, the lab and
``cxsim conform`` in one line that names the estimator (and, in a study, where it ran)."""

from __future__ import annotations

import pytest
import torch

from cxsim.config import PPOConfig
from cxsim.estimators import ESTIMATORS, Estimator, EstimatorInputs
from cxsim.plugin_checks import PluginOutputError, check_advantages, within

MASK = torch.tensor([[False, True, True], [True, True, False]])


def _good(x: EstimatorInputs) -> torch.Tensor:
    return ESTIMATORS["chain-split"].advantages(x)


def _as_list(x: EstimatorInputs) -> list:
    return _good(x).tolist()


def _short(x: EstimatorInputs) -> torch.Tensor:
    return _good(x)[:, :-1]


def _nan(x: EstimatorInputs) -> torch.Tensor:
    out = _good(x).clone()
    out[tuple(x.mask.nonzero()[0].tolist())] = float("nan")
    return out


def _off_mask(x: EstimatorInputs) -> torch.Tensor:
    return _good(x) + (~x.mask).float() * 0.5


as_list = Estimator(_as_list, False, "returns a Python list")
short = Estimator(_short, False, "one token short")
nan = Estimator(_nan, False, "a NaN on the mask")
off_mask = Estimator(_off_mask, False, "0.5 off the mask")

FAULTS = {
    "as_list": r"returned a list, not a torch\.Tensor of shape \(S, T\) = \(",
    "short": r"returned advantages of shape \(\d+, \d+\); it must return one per token",
    "nan": r"returned 1 advantages that are nan or inf, the first at row \d+, token \d+: nan",
    "off_mask": r"returned \d+ nonzero advantages off the mask, the first at row \d+, token \d+: 0\.5; they",
}
"""Each faulty estimator of this module, and what the one line says after its name."""


def said(name: str) -> str:
    return rf"^estimator '{__name__}:{name}' {FAULTS[name]}"


# ------------------------------------------------------------------------------- the check


def test_each_fault_is_one_line_naming_the_estimator():
    good = torch.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]])
    assert check_advantages("mine", good, MASK) is good
    cases = {
        "a list": ([[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]], "returned a list, not a torch.Tensor"),
        "wrong shape": (good[:, :2], "returned advantages of shape (2, 2); it must return"),
        "integers": (good.long(), "returned a torch.int64 tensor; advantages are floats"),
        "inf": (good.masked_fill(MASK, float("inf")), "returned 4 advantages that are nan or"),
        "off the mask": (good + 1, "returned 2 nonzero advantages off the mask, the first at "
                         "row 0, token 0: 1; they must be 0 where inputs.mask is False"),
    }  # fmt: skip
    for what, (output, message) in cases.items():
        with pytest.raises(PluginOutputError) as info:
            check_advantages("mine", output, MASK)
        assert str(info.value).startswith(f"estimator 'mine' {message}"), what
        assert "\n" not in str(info.value)


def test_within_says_where_the_plugin_ran_and_lets_other_errors_through():
    def fails() -> None:
        check_advantages("mine", [], MASK)

    with pytest.raises(PluginOutputError, match=r"\(study setting 's', arm 'a', seed 3\)$"):
        within("study setting 's', arm 'a', seed 3", fails)
    assert within("anywhere", lambda: 7) == 7
    with pytest.raises(ZeroDivisionError):
        within("anywhere", lambda: 1 / 0)


# ------------------------------------------------------------------------------- the trainer


@pytest.mark.parametrize("name", list(FAULTS))
def test_the_trainers_scoring_names_the_estimator(name: str):
    from test_stabilisers import batch_of

    from cxsim.ppo import score_batch

    cfg = PPOConfig(estimator=f"{__name__}:{name}", whiten=False)
    with pytest.raises(PluginOutputError, match=said(name)):
        score_batch(batch_of([1.0, 0.0]), None, cfg)
    score_batch(batch_of([1.0, 0.0]), None, PPOConfig(estimator="chain-split"))  # cxsim's own


# ------------------------------------------------------------------------------- the lab


@pytest.mark.parametrize("name", list(FAULTS))
def test_the_lab_names_the_estimator(name: str):
    from cxsim.lab import measure
    from cxsim.lab.process import Critic, ProcessSpec, simulate

    spec = ProcessSpec(
        compactions=1, exec_tokens=(6,), summary_tokens=2, turn_tokens=3, obs_tokens=1
    )
    sample = simulate(spec, 8, Critic(bias=0.0, noise=0.1), seed=0)
    with pytest.raises(PluginOutputError, match=said(name)):
        measure.run(sample, f"{__name__}:{name}", 0.9)


# ------------------------------------------------------------------------------- conform


@pytest.mark.parametrize("name", list(FAULTS))
def test_conform_fails_in_one_line_naming_the_estimator_and_the_case(name: str, capsys):
    from cxsim.conformance import conform_command as conform

    with pytest.raises(SystemExit) as stop:
        conform.main([f"{__name__}:{name}", "--quantity", "chain-split", "--only", "pinned/",
                      "--examples", "1"])  # fmt: skip
    assert stop.value.code == 1  # a failed check, not a usage error
    said_out = capsys.readouterr()
    err = said_out.err.strip()
    assert len(err.splitlines()) == 1 and said_out.out == "", err
    assert err.startswith(f"cxsim conform: error: estimator '{__name__}:{name}' "), err
    assert err.endswith(")") and "(case pinned/" in err, err


def test_the_command_line_ends_with_one_line_and_status_1(capsys, tmp_path):
    from cxsim.cli import main as cxsim

    with pytest.raises(SystemExit) as stop:
        cxsim(["lab", "--preset", "smoke", "--estimators", f"{__name__}:short",
               "--output-dir", str(tmp_path)])  # fmt: skip
    assert isinstance(stop.value.code, str)  # Python exits 1 with it
    assert stop.value.code.startswith(f"cxsim lab: error: estimator '{__name__}:short' returned")

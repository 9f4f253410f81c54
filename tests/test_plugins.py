"""Estimators and loss modes from outside cxsim: ``module:name``, installed entry points, the
declaration a plug-in makes, and every command that reads the registries (train, lab, conform,
spawned workers)."""

from __future__ import annotations

import json
import operator
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch

from cxsim import plugins
from cxsim.cli import main as cxsim
from cxsim.config import PPOConfig
from cxsim.estimators import ESTIMATORS, Estimator, EstimatorInputs
from cxsim.loss_modes import LOSS_MODES, LossModeSpec

CALLS: list[tuple[int, int]] = []
"""The (S, T) of every batch the plug-in estimator below was given."""


def _stitched_gae_loop(x: EstimatorInputs) -> torch.Tensor:
    """Stitched GAE as one plain loop per rollout over its trainable tokens in segment order:
    ``A_k = delta_k + gamma lam A_{k+1}``, the reward ``R`` after the last token."""
    CALLS.append(tuple(x.mask.shape))
    lam = torch.as_tensor(x.lam, dtype=torch.float64).expand(len(x.values)).tolist()
    values, mask, steps = x.values.tolist(), x.mask.tolist(), x.step_rewards.tolist()
    rewards, segment = x.rewards.tolist(), x.segment_index.tolist()
    rows_of: dict[int, list[int]] = {}
    for row, rollout in enumerate(x.rollout_id.tolist()):
        rows_of.setdefault(rollout, []).append(row)
    out = [[0.0] * len(row) for row in values]
    for rows in rows_of.values():
        rows.sort(key=segment.__getitem__)
        tokens = [(r, t) for r in rows for t, on in enumerate(mask[r]) if on]
        advantage, following = 0.0, rewards[rows[-1]]  # after the last token: R
        for k, (r, t) in enumerate(reversed(tokens)):
            delta = following + steps[r][t] - values[r][t]
            advantage = delta + (x.gamma * lam[r] * advantage if k else 0.0)
            out[r][t] = advantage
            following = x.gamma * values[r][t]
    return torch.tensor(out, dtype=x.values.dtype, device=x.values.device)


stitched_loop = Estimator(_stitched_gae_loop, True, "stitched GAE, one loop per rollout")
"""The plug-in: an ``Estimator`` declared outside cxsim (needs a critic)."""
PLUGIN = f"{__name__}:stitched_loop"


def _token_sum(loss, mask, rollout_id=None, denominator=None, rollout_tokens=None):
    return torch.where(mask, loss, 0.0).sum() / (1.0 if denominator is None else denominator)


token_sum = LossModeSpec(
    _token_sum, lambda mask, rollout_id: torch.tensor(1.0), lambda m, r: m.double(), "sum"
)
"""A loss-mode plug-in: every token's loss summed, no denominator."""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> Path:
    """A working folder of the user's own modules; the import path is restored afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_module(folder: Path, name: str, body: str, monkeypatch) -> str:
    (folder / f"{name}.py").write_text("from cxsim.estimators import Estimator\n" + body)
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


# ---------------------------------------------------------------- the estimator, everywhere


def test_a_plugin_estimator_trains_one_ppo_iteration_from_the_flag(tmp_path: Path):
    run_dir = tmp_path / "train"
    CALLS.clear()
    # 4 rollouts can all end alike: --ppo.no-skip-uniform-batches, so the actor steps
    cxsim(["train", "--policy", "pretrained", "--device", "cpu", "--run-dir", str(run_dir),
           "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
           "num_values", "4", "--compaction.budget", "160", "--ppo.estimator", PLUGIN,
           "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "1", "--ppo.critic-warmup", "0",
           "--ppo.minibatches", "1", "--ppo.no-skip-uniform-batches",
           "--no-progress-bar"])  # fmt: skip
    results = json.loads((run_dir / "results.json").read_text())
    assert results["config"]["ppo"]["estimator"] == PLUGIN
    assert results["iterations_done"] == 1 and len(results["history"]) == 1
    assert torch.isfinite(torch.tensor(results["history"][-1]["losses/policy"]))
    # the iteration's batch was scored by the plug-in: the actor's advantages, then the
    # critic's targets at its own lambda (--ppo.critic-lam, 1.0 by default), from the same batch
    assert len(CALLS) == 2 and CALLS[0] == CALLS[1]
    assert (Path(results["checkpoint"]) / "critic").is_dir()  # its needs_critic=True was read


def test_a_plugin_estimator_appears_in_the_lab_tables():
    import tyro

    from cxsim.lab.lab import Config
    from cxsim.lab.lab_page import segment_section
    from cxsim.lab.lab_studies import Lab, by_segment
    from cxsim.lab.process import Critic

    cfg = tyro.cli(Config, args=["--preset", "smoke", "--estimators", PLUGIN])
    lab = Lab(cfg)
    assert lab.estimators == (
        "local", "cross-segment", "stitched", "group-broadcast", "chain-split", PLUGIN
    )  # fmt: skip
    labels, slope_rows, corr_rows, _ = by_segment(lab, Critic())
    measured = (labels, slope_rows, corr_rows, {})
    section = "\n".join(segment_section(labels, measured, measured))
    for setting in ("1", "0.99", "adaptive (rollout)", "adaptive (segment)"):
        ours = next(r for r in slope_rows if r[:2] == [setting, PLUGIN])
        cxsims = next(r for r in slope_rows if r[:2] == [setting, "stitched"])
        assert ours[2:] == cxsims[2:], setting  # the same estimate on the same samples
        assert f"| {setting} | {PLUGIN} | {' | '.join(ours[2:])} |" in section
    with pytest.raises(ValueError, match="--estimators='nope' is unknown; choose one of: "):
        Config(estimators=("nope",))


def test_a_plugin_estimator_is_checked_by_cxsim_conform(capsys):
    from cxsim.conformance import conform_command as conform

    conform.main([PLUGIN, "--quantity", "stitched-gae", "--examples", "3", "--no-trees",
                  "--only", "segments/", "observations/", "pinned/"])  # fmt: skip
    report = capsys.readouterr().out
    assert report.startswith(f"conformance of {PLUGIN}: stitched-gae, layout estimator")
    assert "all 12 cases run agree with the reference" in report
    assert "chains only, never segment trees" in report  # pinned/tree: outside its claims
    # the plug-in reads a rollout as a chain, so a segment tree is where it differs
    with pytest.raises(SystemExit) as info:
        conform.main([PLUGIN, "--quantity", "stitched-gae", "--only", "pinned/tree"])
    assert info.value.code == 1
    assert "1 of 1 cases run differ from the reference" in capsys.readouterr().out
    # the check is real: the plug-in is not the cross-segment estimator
    with pytest.raises(SystemExit) as info:
        conform.main([PLUGIN, "--quantity", "cross-segment-gae", "--examples", "5",
                      "--only", "segments/fixed", "--shrink-seconds", "1"])  # fmt: skip
    assert info.value.code == 1
    assert "1 of 1 cases run differ from the reference" in capsys.readouterr().out


def test_every_registered_estimator_passes_its_reference_in_the_estimator_layout():
    from cxsim.conformance import Checker
    from cxsim.conformance.quantities import ESTIMATOR_QUANTITIES

    assert set(ESTIMATOR_QUANTITIES) == set(ESTIMATORS)  # each answers to one reference
    for name, quantity in ESTIMATOR_QUANTITIES.items():
        checker = Checker(lambda inputs, n=name: ESTIMATORS[n].advantages(inputs), quantity,
                          "estimator")  # fmt: skip
        results = checker.run(examples=2, seed=3, only=("segments", "rejected-summaries"))
        assert all(r.passed for r in results), (name, [r.case.name for r in results])


def test_spawned_workers_resolve_the_same_names(folder: Path, monkeypatch):
    from cxsim.studies.executors import LocalExecutor

    body = (
        "def _zeros(x):\n    return x.values * 0\n\n"
        "with_critic = Estimator(_zeros, True, 'zeros')\n"
        "without_critic = Estimator(_zeros, False, 'zeros')\n"
    )
    module = write_module(folder, "spawned_plugin", body, monkeypatch)
    configs = [PPOConfig(estimator=f"{module}:with_critic"),
               PPOConfig(estimator=f"{module}:without_critic")]  # fmt: skip
    # each worker unpickles its config and reads its estimator's declaration from the module
    executor = LocalExecutor(2)
    try:
        done = dict(executor.map(operator.attrgetter("uses_critic"), [(c,) for c in configs]))
    finally:
        executor.close()
    assert [done[0], done[1]] == [True, False]


# ---------------------------------------------------------------- declarations


def test_a_plugin_without_its_declaration_fails_at_config_time_in_one_line(
    folder: Path, monkeypatch
):
    body = (
        "def gae(x):\n    return x.values * 0\n\n"
        "unsure = Estimator(gae, 'yes', 'needs_critic is not a bool')\n"
    )
    module = write_module(folder, "undeclared", body, monkeypatch)  # found in the working folder
    with pytest.raises(SystemExit) as info:
        cxsim(["train", "--ppo.estimator", f"{module}:gae"])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "cxsim train: error: undeclared:gae declares no needs_critic: it is the function gae, "
        "not a cxsim.estimators.Estimator; declare it in undeclared as `gae = Estimator("
        "advantages=<function>, needs_critic=True or False, help='one line')`"
    ), message
    with pytest.raises(ValueError, match=r"^undeclared:unsure declares needs_critic='yes': it "):
        PPOConfig(estimator=f"{module}:unsure")
    with pytest.raises(ValueError, match=r"^undeclared:gae declares no count, weights: it is "):
        PPOConfig(loss_mode=f"{module}:gae")
    with pytest.raises(ValueError, match=r"^undeclared:nope: module 'undeclared' has no 'nope'$"):
        PPOConfig(estimator=f"{module}:nope")
    with pytest.raises(ValueError, match=r"^no_such_module:gae: cannot import module "):
        PPOConfig(estimator="no_such_module:gae")


def test_what_a_plugin_declares_it_needs_and_computes_is_read_by_config_and_conform(
    folder: Path, monkeypatch, capsys
):
    """``needs_groups``: the config refuses a group size of 1, naming the plug-in;
    ``quantity``: ``cxsim conform`` checks it against that reference with no ``--quantity``
    (and a quantity that is not a str is refused in one line)."""
    from cxsim.conformance import conform_command as conform

    body = (
        "from cxsim.estimators import ESTIMATORS\n\n"
        "grouped = Estimator(ESTIMATORS['group-broadcast'].advantages, False, 'groups', "
        "needs_groups=True, quantity='group-broadcast')\n"
        "wrong = Estimator(ESTIMATORS['local'].advantages, True, 'local', quantity=3)\n"
    )
    module = write_module(folder, "declared", body, monkeypatch)
    with pytest.raises(ValueError, match=r"^estimator='declared:grouped' reads groups .* 2 or"):
        PPOConfig(estimator=f"{module}:grouped", group_size=1)
    PPOConfig(estimator=f"{module}:grouped", group_size=2)  # a group of 2 is taken
    with pytest.raises(ValueError, match=r"^declared:wrong declares quantity=3: it must be a str"):
        PPOConfig(estimator=f"{module}:wrong")
    conform.main([f"{module}:grouped", "--examples", "2", "--only", "segments"])
    report = capsys.readouterr().out
    assert report.startswith(f"conformance of {module}:grouped: group-broadcast, layout estimator")
    assert "agree with the reference" in report


def test_an_unknown_name_lists_the_choices_and_the_plugin_form():
    with pytest.raises(ValueError) as info:
        PPOConfig(estimator="gae")
    assert str(info.value) == (
        "estimator='gae' is unknown; choose one of: cross-segment, local, stitched, "
        "group-broadcast, chain-split, or module:name for your own estimator (docs/training.md)"
    )
    assert "gae" not in ESTIMATORS and PLUGIN in ESTIMATORS
    with pytest.raises(KeyError):  # a failed lookup is a KeyError too
        ESTIMATORS["gae"]


def test_a_loss_mode_plugin_is_what_the_reduction_and_its_diagnostic_read():
    from cxsim.diagnostics.weights import token_weights
    from cxsim.losses import aggregate

    name = f"{__name__}:token_sum"
    assert PPOConfig(loss_mode=name).loss_mode == name
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[True, True, False], [False, True, True]])
    assert float(aggregate(loss, mask, name, torch.tensor([0, 1]))) == 1 + 2 + 5 + 6
    assert torch.equal(token_weights(mask, name, torch.tensor([0, 1])), mask.double())


# ---------------------------------------------------------------- entry points


def test_an_installed_plugin_is_found_by_its_entry_point_name(monkeypatch):
    installed = {
        "cxsim.estimators": [
            EntryPoint("loop-gae", PLUGIN, "cxsim.estimators"),
            EntryPoint("broken-gae", f"{__name__}:_stitched_gae_loop", "cxsim.estimators"),
        ],
        "cxsim.loss_modes": [EntryPoint("token-sum", f"{__name__}:token_sum", "cxsim.loss_modes")],
    }
    monkeypatch.setattr(plugins, "entry_points", lambda group: installed.get(group, []))
    for registry in (ESTIMATORS, LOSS_MODES):  # no plug-in loaded by another test
        monkeypatch.setattr(registry, "_from_entry_points", {})
    assert ESTIMATORS.choices()[-2:] == ("broken-gae", "loop-gae")
    assert list(ESTIMATORS) == ["cross-segment", "local", "stitched", "group-broadcast",
                                "chain-split"]  # fmt: skip
    cfg = PPOConfig(estimator="loop-gae", loss_mode="token-sum")
    assert cfg.uses_critic and ESTIMATORS["loop-gae"] is stitched_loop
    assert LOSS_MODES["token-sum"] is token_sum
    with pytest.raises(ValueError, match=r"choose one of: .*chain-split, broken-gae, loop-gae, or"):
        PPOConfig(estimator="gae")
    with pytest.raises(ValueError) as info:
        PPOConfig(estimator="broken-gae")
    assert str(info.value).startswith(
        f"broken-gae (entry point {__name__}:_stitched_gae_loop in group cxsim.estimators) "
        "declares no needs_critic: it is the function _stitched_gae_loop, not a "
        "cxsim.estimators.Estimator"
    )
    from cxsim.lab.lab import Config as LabConfig
    from cxsim.lab.lab_studies import lab_estimators

    assert lab_estimators(LabConfig())[-2:] == ("broken-gae", "loop-gae")  # in the lab's tables

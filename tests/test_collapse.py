"""Collapse figures of a run (cxsim/diagnostics/collapse.py) and the stability tables
rendered from an artefact alone (cxsim/studies/stability_page.py), on hand-made histories."""

from __future__ import annotations

import math

import pytest

from cxsim.diagnostics.collapse import collapsed, run_collapse
from cxsim.studies.stability_page import render


def history(success: list[float], warmup: int = 2) -> list[dict[str, float]]:
    rows = [{"iteration": k, "warmup": 1.0, "charts/success_rate": 0.5} for k in range(warmup)]
    for k, s in enumerate(success):
        rows.append(
            {
                "iteration": warmup + k,
                "warmup": 0.0,
                "charts/success_rate": s,
                "stability/advantage_std": 0.1 * (k + 1),
                "critic/explained_variance": None,  # NaN, as results.json saves it
            }
        )
    return rows


def test_a_run_that_falls_from_its_best_collapses():
    run = run_collapse(history([0.4, 0.6, 0.8, 0.75, 0.3, 0.4, 0.35]))
    assert run.best == 0.8 and run.best_iteration == 4
    assert run.last == pytest.approx(0.35)
    assert run.drop == pytest.approx(0.45)
    # the largest one-iteration fall: 0.75 -> 0.3, sampled at iteration 6 after iteration 5's update
    assert run.fall == pytest.approx(0.45) and run.fall_iteration == 6
    assert run.before_fall["stability/advantage_std"] == pytest.approx(0.4)
    assert math.isnan(run.before_fall["critic/explained_variance"])
    assert math.isnan(run.before_fall["losses/approx_kl"])  # not logged
    assert collapsed(run, final=0.6, base=0.5)


def test_a_run_that_keeps_climbing_has_no_fall_and_does_not_collapse():
    run = run_collapse(history([0.4, 0.5, 0.6, 0.7]))
    assert run.fall == 0.0 and run.fall_iteration == -1
    assert run.drop == pytest.approx(0.7 - 0.6)
    assert not collapsed(run, final=0.7, base=0.5)
    assert collapsed(run, final=0.45, base=0.5)  # ended below its base


def test_a_history_without_actor_iterations_is_refused():
    with pytest.raises(ValueError, match="no actor iteration"):
        run_collapse(history([], warmup=2))


def test_the_tables_render_from_the_artefact_alone():
    def run(arm, seed, final, drop, is_collapsed=False):
        return {"setting": "main", "arm": arm, "seed": seed, "base": 0.5, "final": final, "drop": drop,
                "collapsed": is_collapsed, "train_s": 60.0}  # fmt: skip

    artefact = {
        "study": "stability.toml",
        "runs": [
            run("compactionrl", 1, 0.9, 0.05), run("compactionrl", 2, 0.4, 0.5, True),
            run("compactionrl", 3, 0.8, 0.1), run("floor", 1, 0.95, 0.0),
            run("floor", 2, 0.85, 0.1), run("floor", 3, 0.85, 0.05),
        ],
    }  # fmt: skip
    page = render(artefact)
    assert "| compactionrl | 3 | 1 | 1 | 1 | 0.700 [" in page
    # floor - compactionrl per seed: +0.05, +0.45, +0.05: mean +0.183
    assert "| floor | 3 | 0 | 0 | 3 | 0.883 [" in page and "+0.183 [" in page
    assert "| 2 | 0.500 | 0.400 (0.50)* | 0.850 (0.10) |" in page


@pytest.mark.parametrize(
    "name",
    [
        "stability-collapse",
        "stability-heldout-collapse",
        "stability-credit-collapse",
        "stability-solved-collapse",
        "stability-16/stability-collapse",
        "stability-solved-4-5/stability-solved-collapse",
    ],
)
def test_the_committed_tables_rebuild_from_their_artefacts(name):
    import json
    from pathlib import Path

    results = Path(__file__).resolve().parent.parent / "docs" / "results"
    artefact = json.loads((results / f"{name}.json").read_text())
    assert render(artefact) == (results / f"{name}.md").read_text()

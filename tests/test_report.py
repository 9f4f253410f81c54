"""``cxsim report``: the pages and figures of a run folder, from a tiny real main job (the
report reproduces what ``cxsim run`` wrote) and from hand-made run folders with known
evaluations (chance, the base, the warm-up, the gain and its interval, one legend)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t

from cxsim.cli import main as cxsim
from cxsim.evaluation import pass_at_1
from cxsim.report.report import by_preset, critic_section, train_runs
from cxsim.report.report_curves import RUN_CURVES, curves_figure, evaluations
from cxsim.tracking import write_json

# The entry-point smoke settings (tests/test_entry_points.py): a short KeyRecall that compacts.
TINY_ENV = [
    "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
    "num_values", "4",
    "--compaction.budget", "160",
]  # fmt: skip
TINY_SFT = ["--sft.episodes", "6", "--sft.epochs", "1", "--sft.heldout-episodes", "2"]
TINY_PPO = [
    "--ppo.rollouts-per-batch", "4", "--ppo.iterations", "2", "--ppo.critic-warmup", "1",
    "--ppo.minibatches", "1", "--ppo.epochs", "1",
]  # fmt: skip
QUIET = ["--no-progress-bar"]
PAGES = ("report.md", "learning_curves.png", "report/report.md", "report/curves.png")
"""What ``cxsim run`` writes from its results.json, and ``cxsim report`` writes again."""


@pytest.fixture(scope="module")
def main_dir(tmp_path_factory) -> Path:
    """A tiny real main job (from a fresh model: the report does not care how good it is);
    15-40 s on 2 shared cores, hence the ``slow`` marker of the tests that use it."""
    run_dir = tmp_path_factory.mktemp("report") / "main"
    # a fresh model fails every rollout: --ppo.no-skip-uniform-batches, so the actor steps
    # and its losses are there to draw
    cxsim(["run", "--run-dir", str(run_dir), "--policy", "None", *TINY_ENV, *TINY_SFT,
           *TINY_PPO, "--ppo.no-skip-uniform-batches", "--eval.episodes", "3", *QUIET])  # fmt: skip
    return run_dir


@pytest.mark.slow
def test_report_reproduces_what_the_main_job_wrote(main_dir: Path, tmp_path: Path, capsys):
    written = {name: (main_dir / name).read_bytes() for name in PAGES}
    for name in PAGES:
        (main_dir / name).unlink()
    cxsim(["report", "--run-dir", str(main_dir)])
    assert {name: (main_dir / name).read_bytes() for name in PAGES} == written
    said = capsys.readouterr().out
    assert f"run page at {main_dir / 'report.md'}" in said
    assert f"report at {main_dir / 'report' / 'report.md'}" in said

    # --out-dir: the full report goes there, the run folder is left as it is
    made = {name: (main_dir / name).stat().st_mtime_ns for name in PAGES}
    out = tmp_path / "pages"
    cxsim(["report", str(main_dir), "--out-dir", str(out)])
    report = (out / "report.md").read_text()
    assert "| compactionrl | compacted |" in report and "| base (SFT) | single |" in report
    assert "| compactionrl-s0 |" in report  # the training run found under train/
    assert (out / "curves.png").stat().st_size > 5000
    assert {name: (main_dir / name).stat().st_mtime_ns for name in PAGES} == made


@pytest.mark.slow
def test_report_of_a_training_run(main_dir: Path, capsys):
    train_dir = main_dir / "train" / "compactionrl-s0"  # what `cxsim train` writes
    cxsim(["report", str(train_dir)])
    out = train_dir / "report"
    report = (out / "report.md").read_text()
    assert "report at" in capsys.readouterr().out
    assert (out / "curves.png").stat().st_size > 5000
    assert "![learning curves](curves.png)" in report
    results = json.loads((train_dir / "results.json").read_text())
    history, final = results["history"], results["final"]
    # the final-metrics table carries the trainer's numbers, formatted to 3 significant digits
    row = next(line for line in report.splitlines() if line.startswith("| `charts/success_rate`"))
    assert row == f"| `charts/success_rate` | {final['charts/success_rate']:.3g} |"
    assert f"| compactionrl | {len(history)} |" in report
    panels = report.split("Panels:")[1].split(".")[0]
    for panel in ("charts/success_rate", "losses/policy", "compaction/compactions_mean"):
        assert panel in panels
    assert "omission" not in panels  # 1 - summary recall is not drawn twice
    assert "dashed: chance (0.250)" in report  # the tiny task's 4 key values
    assert "dotted" not in report  # a training run has no evaluation of its base


def test_report_refuses_a_folder_without_results(tmp_path: Path):
    with pytest.raises(SystemExit, match="cxsim train"):  # one line, no traceback
        cxsim(["report", str(tmp_path)])
    with pytest.raises(SystemExit, match="pass the run folder once"):
        cxsim(["report", str(tmp_path), "--run-dir", str(tmp_path)])


def test_notes_name_the_budget_the_pre_flight_derived():
    from cxsim.pipeline.run_table import report_notes

    rows = [{"label": "base (SFT)", "protocol": "single", "pass_at_1": 0.0, "seeds": 1}]
    env = {"env_id": "cxsim/KeyRecall-v0", "kwargs": {"num_values": 4}}
    unsized = {"env": env, "compaction": {"budget": None}}  # the CLI default: derived later
    base = {"config": {"compaction": {"budget": 200}}}  # what the base evaluation ran with
    notes = report_notes(rows, {"config": unsized, "base": base})
    assert "filled the 200-token window" in notes
    assert "[2] Mean number of compactions" in notes and "[3] Fraction" in notes


# -- hand-made run folders: known evaluations, so the figure's every element is checked -----

TASKS = 64
BASE_SOLVED = 27  # Compacted Pass@1 of the base: 27 / 64 = 0.42
ITERATIONS, WARMUP = 12, 2


def evaluation(label: str, solved: int, recall: float) -> dict:
    """An evaluation payload (``cxsim eval``) with ``solved`` of TASKS tasks solved under
    Compacted, none under Single."""

    def result(protocol: str, per_task: list[float], recall: float | None) -> dict:
        stats = pass_at_1(np.asarray(per_task)[:, None])
        return {
            "protocol": protocol, "episodes": TASKS, "repeats": 1, "runs": TASKS,
            "pass_at_1": stats.mean, "ci95_low": stats.low, "ci95_high": stats.high,
            "mean_compactions": 3.0 if protocol == "compacted" else 0.0,
            "summary_recall": recall, "truncated_rate": 0.0 if protocol == "compacted" else 1.0,
            "per_task_success": per_task,
        }  # fmt: skip

    compacted = [1.0] * solved + [0.0] * (TASKS - solved)
    return {
        "label": label,
        "results": [result("single", [0.0] * TASKS, None), result("compacted", compacted, recall)],
        "config": {"compaction": {"budget": 160, "threshold": 72, "max_compactions": 3}},
    }


def fake_main_job(root: Path, solved_after: tuple[int, ...]) -> Path:
    """A finished ``cxsim run`` folder, one training seed per entry of ``solved_after``
    (tasks each trained policy solves), histories rising from the base's success."""
    from cxsim.pipeline.run_table import pooled

    run_dir = root / "main"
    seeds = list(range(len(solved_after)))
    base = evaluation("base (SFT)", BASE_SOLVED, recall=0.3)
    trained = [evaluation("compactionrl", n, recall=0.9) for n in solved_after]
    env = {"env_id": "cxsim/KeyRecall-v0", "kwargs": {"memory_length": 5, "num_values": 4}}
    table = [pooled("base (SFT)", [base], p) for p in ("single", "compacted")]
    table += [pooled("compactionrl", trained, p) for p in ("single", "compacted")]
    config = {"presets": ["compactionrl"], "seeds": seeds, "env": env,
              "compaction": {"budget": None}, "eval": {"episodes": TASKS, "repeats": 1}}  # fmt: skip
    write_json(run_dir / "results.json", {
        "table": table, "base": base, "evaluations": {"compactionrl": trained},
        "final_policy": str(run_dir / "final" / "policy"), "timings_s": {"sft_s": 1.0},
        "wall_time_s": 9.0, "config": config,
    })  # fmt: skip
    for seed, solved in enumerate(solved_after):
        history = []
        for i in range(ITERATIONS):
            rate = BASE_SOLVED / TASKS + (solved - BASE_SOLVED) / TASKS * i / (ITERATIONS - 1)
            h = {"iteration": i, "warmup": float(i < WARMUP), "charts/success_rate": rate,
                 "compaction/summary_recall": 0.3 + 0.05 * i, "losses/value": 0.1}  # fmt: skip
            if i >= WARMUP:
                h |= {"losses/policy": -0.01 * seed, "losses/approx_kl": 0.001}
            history.append(h)
        write_json(run_dir / "train" / f"compactionrl-s{seed}" / "results.json", {
            "preset": "compactionrl", "iterations_done": ITERATIONS, "wall_time_s": 3.0,
            "final": history[-1], "history": history, "config": {"preset": "compactionrl"},
        })  # fmt: skip
    return run_dir


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval, written out (the code under test asks scipy)."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def run_figure(run_dir: Path):
    results = json.loads((run_dir / "results.json").read_text())
    fig, _ = curves_figure(by_preset(train_runs(run_dir, results)), RUN_CURVES, 2,
                           evaluations(results))  # fmt: skip
    return fig


def drawn(ax, gid: str) -> list:
    return [line for line in ax.lines if line.get_gid() == gid]


def test_learning_curves_draw_chance_base_warmup_and_the_gain(tmp_path: Path):
    import matplotlib.pyplot as plt

    fig = run_figure(fake_main_job(tmp_path, solved_after=(58,)))
    success, recall = fig.axes
    (chance,) = drawn(success, "chance")
    assert set(chance.get_ydata()) == {0.25}  # 1 / num_values
    assert not drawn(recall, "chance")
    (base,) = drawn(success, "base")
    assert set(base.get_ydata()) == {BASE_SOLVED / TASKS}
    (base_recall,) = drawn(recall, "base")
    assert set(base_recall.get_ydata()) == {0.3}
    (after,) = drawn(success, "trained:compactionrl")  # after the last update, at x = 12
    assert list(after.get_xdata()) == [ITERATIONS] and list(after.get_ydata()) == [58 / TASKS]
    for ax in (success, recall):
        (warmup,) = [p for p in ax.patches if p.get_gid() == "warmup"]
        assert warmup.get_x() == -0.5 and warmup.get_x() + warmup.get_width() == WARMUP - 0.5

    # one legend for the figure, none in a panel
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    labels = [text.get_text() for text in fig.legends[0].get_texts()]
    assert labels == [
        "compactionrl: training batches",
        "compactionrl: Compacted evaluation after training (95% CI)",
        "chance: 0.25 (a uniform guess)",
        "base (SFT): Compacted evaluation",
        "value-only warm-up (the actor is not updated)",
    ]

    # the gain in the title: Newcombe's interval from the two Wilson intervals (one seed)
    p1, p2 = 58 / TASKS, BASE_SOLVED / TASKS
    (l1, u1), (l2, u2) = wilson(58, TASKS), wilson(BASE_SOLVED, TASKS)
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    assert fig.get_suptitle() == (
        f"compactionrl: Compacted Pass@1 0.42 → 0.91, gain +0.48 "
        f"(95% CI {low:+.2f} to {high:+.2f}, Newcombe over 64 tasks)"
    )
    assert 0 < low < p1 - p2 < high
    plt.close(fig)


def test_the_gain_over_seeds_is_a_t_interval(tmp_path: Path):
    import matplotlib.pyplot as plt

    solved = (50, 55, 60)
    fig = run_figure(fake_main_job(tmp_path, solved_after=solved))
    gains = np.array(solved) / TASKS - BASE_SOLVED / TASKS
    half = student_t.ppf(0.975, 2) * gains.std(ddof=1) / math.sqrt(3)
    assert fig.get_suptitle().endswith(
        f"gain {gains.mean():+.2f} (95% CI {gains.mean() - half:+.2f} to "
        f"{gains.mean() + half:+.2f}, t over 3 seeds)"
    )
    labels = [text.get_text() for text in fig.legends[0].get_texts()]
    assert labels[0] == "compactionrl: training batches; mean of 3 runs, shaded min-max"
    assert fig.axes[0].collections  # the min-max band
    plt.close(fig)


def test_report_writes_the_run_page_with_its_figure(tmp_path: Path):
    run_dir = fake_main_job(tmp_path, solved_after=(58,))
    cxsim(["report", "--run-dir", str(run_dir)])
    page = (run_dir / "report.md").read_text()
    assert "![learning curves](learning_curves.png)" in page
    assert "- compactionrl: Compacted Pass@1 0.42 → 0.91, gain +0.48 (95% CI +0.3" in page
    assert "dashed: chance (0.250)" in page and "dotted: the base's Compacted evaluation" in page
    assert (run_dir / "learning_curves.png").stat().st_size > 5000
    full = (run_dir / "report" / "report.md").read_text()
    assert "gain +0.48" in full and "omission" not in full.split("Panels:")[1]
    first = {name: (run_dir / name).read_bytes() for name in PAGES}
    cxsim(["report", str(run_dir)])  # the same folder gives the same pages
    assert {name: (run_dir / name).read_bytes() for name in PAGES} == first


def test_the_critic_section_reads_each_run_at_its_last_window():
    history = [
        {"warmup": 1.0, "charts/success_rate": 0.5, "critic/count_seg0": 8.0},
        {"warmup": 0.0, "charts/success_rate": 0.5, "critic/count_seg0": 8.0,
         "critic/count_seg2": 8.0, "critic/mc_ev_seg2": -0.25, "critic/ece_seg2": 0.125,
         "critic/ev_ceiling": 0.5, "critic/ev_ceiling_online": 0.375,
         "critic/ev_ceiling_stated": 0.125, "critic/ev_ceiling_stated_online": 0.25},
    ]  # fmt: skip
    section = critic_section({"a": {"history": history}, "no-critic": {"history": [{}]}})
    assert (
        "| a | 1 | -0.25 | 0.12 | +0.50 | +0.38 | +0.40 | +0.12 | +0.10 | +0.25 | +0.20 | 1 |"
        in section
    )
    assert "no-critic" not in section
    assert critic_section({"no-critic": {"history": [{}]}}) is None


def test_the_survival_table_pools_evaluations_by_facts_and_reads_training_finals():
    from cxsim.report.report_survival import survival_section

    def payload(protocol: str, survival: dict) -> dict:
        return {
            "results": [
                {"protocol": "single", "survival": {}},
                {"protocol": protocol, "survival": survival},
            ]
        }

    def entry(share: list, facts: list, types: dict | None = None) -> dict:
        return {"share": share, "facts": facts, "cliff_round": None, "by_type": types or {}}

    typed = {"key": entry([1.0, 0.5], [2, 2]), "revised": entry([None, 0.0], [0, 2])}
    results = {
        "table": [],
        "base": payload("compacted", entry([1.0, 0.25], [4, 4], typed)),
        "evaluations": {
            "compactionrl": [
                payload("compacted", entry([1.0, 0.5], [10, 10])),
                payload("compacted", entry([0.0, None], [30, 0])),
            ]
        },
    }
    final = {"survival/round1": 0.9, "survival/round2": 0.4, "survival/facts_round1": 8.0}
    final |= {"survival/key/round1": 0.9, "survival/cliff_round": 2.0}
    section = survival_section(results, {"compactionrl-s0": {"final": final}})
    assert section is not None and section.startswith("## Fact survival by compaction round")
    lines = section.splitlines()
    assert "| run | round 1 | round 2 | cliff |" in lines
    assert "| base (SFT) (eval) | 1.00 | 0.25 | 2 |" in lines
    assert "| base (SFT) (eval): key | 1.00 | 0.50 | - |" in lines
    assert "| base (SFT) (eval): revised | - | 0.00 | 2 |" in lines
    # pooled over seeds by facts: round 1 (10 + 0) / 40, round 2 5 / 10 (one half: no cliff)
    assert "| compactionrl (eval) | 0.25 | 0.50 | 1 |" in lines
    # training: one type only, so no type row
    assert "| compactionrl-s0 (training) | 0.90 | 0.40 | 2 |" in lines
    assert not any(line.startswith("| compactionrl-s0 (training):") for line in lines)
    assert (
        survival_section({"history": []}, {"run": {"final": {"charts/success_rate": 1.0}}}) is None
    )

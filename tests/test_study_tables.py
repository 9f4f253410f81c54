"""cxsim/paper_tables/tables.toml, the tables of ``cxsim tables`` as a study file: its settings are the
presets' (``--preset smoke`` and ``full``), its rows the tables' rows, its claims the findings
the page states, its sides and evaluations every cell of Tables 1 and 2; ``cxsim tables`` runs
it on the study engine and a flag changes it as the file's key would."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cxsim.paper_tables import tables
from cxsim.paper_tables.tables_seeds import ROWS
from cxsim.paper_tables.tables_study import SETTING, tables_study
from cxsim.studies.load import load_study
from cxsim.studies.selection import apart_sides, select
from cxsim.studies.spec import StudyError

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "cxsim" / "paper_tables" / "tables.toml"


@pytest.mark.parametrize("preset", ["smoke", "full"])
def test_the_file_at_each_budget_is_the_preset(preset: str):
    made = tables.BUDGETS[preset]
    study = load_study(TABLES, budget=preset)
    setting = study.setting(SETTING)
    assert (setting.env, setting.compaction, setting.sft, setting.ppo) == (
        made.env, made.compaction, made.sft, made.ppo,
    )  # fmt: skip
    assert setting.eval == replace(made.eval, protocols=("compacted", "single"), seed=None)
    assert setting.policy == made.model.policy is None  # a fresh model, as --policy None
    (one_window,) = study.eval_envs
    assert one_window.kwargs == made.one_window_kwargs and not one_window.env_id
    assert (
        setting.arms == made.rows == tuple(dict.fromkeys(r for t in (1, 2, 3, 4) for r in ROWS[t]))
    )
    assert tables.parse(["--preset", preset]).study == str(TABLES)
    if preset == "full":
        assert replace(study, budget=None) == load_study(TABLES)  # the file as written


def test_the_claims_are_the_pages_findings_and_every_cell_is_evaluated():
    study = load_study(TABLES)
    names = [c.name for c in study.claims]
    assert len(names) == len(set(names)) == 15
    assert all(c.prediction and c.predicted_size is not None for c in study.claims)
    sides = apart_sides(select(study))
    table1 = {(s.arm, s.summarizer) for s in sides if s.summarizer}
    summarizers = (
        "scripted:0",
        "scripted:0.3",
        "scripted:0.6",
        "scripted:1",
        "compactionrl",
        "base",
    )
    assert table1 == {(e, s) for e in ("oracle", "base") for s in summarizers}
    one_window = {s.arm for s in sides if s.env == "one-window"}
    assert one_window == {"oracle", "base", "ppo-single", "compactionrl"}
    assert all(s.protocol == "single" for s in sides if s.env)
    by_name = {c.name: c for c in study.claims}
    assert by_name["one-window-compactionrl"].env == "one-window"
    assert by_name["summary-training-recall"].metric == "summary_recall"
    assert [s.evaluation for s in by_name["oracle-omission"].sides] == [
        "external-summarizer+scripted:0", "external-summarizer+scripted:1",
    ]  # fmt: skip


def test_a_flag_changes_the_file_as_its_key_would():
    preset = tables.BUDGETS["smoke"]
    cfg = tables.parse(["--preset", "smoke", "--ppo.iterations", "3", "--eval.episodes", "5",
                        "--one-window-kwargs", "memory_length", "3", "--precision", "bf16"])  # fmt: skip
    study = tables_study(cfg, preset)
    setting = study.setting(SETTING)
    assert setting.ppo.iterations == 3 and setting.eval.episodes == 5
    assert setting.eval.protocols == ("compacted", "single")
    assert study.eval_envs[0].kwargs == {"memory_length": 3}
    assert setting.model.precision == "bf16"
    plain = tables_study(tables.parse(["--preset", "smoke"]), preset)
    assert plain.setting(SETTING) == load_study(TABLES, budget="smoke").setting(SETTING)


def test_a_rate_the_file_lacks_fails_in_one_line(tmp_path: Path):
    cfg = tables.parse(["--preset", "smoke", "--omission-rates", "0.5"])
    with pytest.raises(StudyError) as error:
        tables_study(cfg, tables.BUDGETS["smoke"])
    assert str(error.value) == (
        "--omission-rates 0.5: tables.toml evaluates the scripted summarizer at 0, 0.3, 0.6, "
        "1; add evaluations to it for others"
    )


def test_a_misspelled_scripted_summarizer_or_eval_env_in_the_file_fails_at_load(tmp_path: Path):
    text = TABLES.read_text()
    for old, new, said in (
        ('summarizer = "scripted:0.6"', 'summarizer = "scripted:O.6"', "'scripted:O.6'"),
        ('env = "one-window"', 'env = "one-windw"', "names no [eval_envs.one-windw]"),
    ):
        path = tmp_path / "tables.toml"
        path.write_text(text.replace(old, new, 1))
        with pytest.raises(StudyError) as error:
            load_study(path)
        assert said in str(error.value) and "\n" not in str(error.value)


def test_the_units_results_become_the_pages_per_seed_results(tmp_path: Path):
    """``page_runs``: each unit's evaluations under the page's names (a row, ``row/one-window``,
    ``executor+scripted-P``), each trained row's final figures and history, the SFT base's
    wall time; every evaluation's seconds counted once."""
    import json

    from cxsim.paper_tables.tables_study import evaluation_key, page_runs

    assert evaluation_key("oracle", "external-summarizer+scripted:0.3") == (
        "external", "oracle+scripted-0.3", "external-summarizer",
    )  # fmt: skip
    assert evaluation_key("base", "external-summarizer+compactionrl") == (
        "external", "base+compactionrl", "external-summarizer",
    )  # fmt: skip
    assert evaluation_key("compactionrl", "single@one-window") == (
        "eval", "compactionrl/one-window", "single",
    )  # fmt: skip
    run_dir = tmp_path / "train"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({"history": [{"iteration": 1}]}))
    base = {
        "sft": {"wall_time_s": 5.0}, "train": None, "eval_wall_time_s": 3.0,
        "eval": {"compacted": {"r": 1}, "single": {"r": 2}, "external-summarizer+base": {"r": 3}},
    }  # fmt: skip
    trained = {
        "sft": {"wall_time_s": 5.0}, "eval_wall_time_s": 2.0, "eval": {"compacted": {"r": 4}},
        "train": {"run_dir": str(run_dir), "final": {"k": 1.0}, "wall_time_s": 7.0},
    }  # fmt: skip
    oracle = {**base, "eval_wall_time_s": 1.0, "eval": {"single@one-window": {"r": 5}}}
    study = load_study(TABLES, seeds="4", budget="smoke")
    runs = {"main": {"base": [base], "compactionrl": [trained], "oracle": [oracle]}}
    (seed,) = page_runs(study, runs)
    assert seed["sft"] == {"wall_time_s": 5.0}
    assert seed["train"] == {
        "compactionrl": {"final": {"k": 1.0}, "history": [{"iteration": 1}], "wall_time_s": 7.0}
    }
    assert seed["eval"] == {
        "base": {"results": {"compacted": {"r": 1}, "single": {"r": 2}}, "wall_time_s": 3.0},
        "compactionrl": {"results": {"compacted": {"r": 4}}, "wall_time_s": 2.0},
        "oracle/one-window": {"results": {"single": {"r": 5}}, "wall_time_s": 1.0},
    }
    assert seed["external"] == {
        "base+base": {"results": {"external-summarizer": {"r": 3}}, "wall_time_s": 0.0}
    }

"""A strategy's settings from the command line and study files (cxsim/strategies/settings.py,
``--compaction.strategy-options``): they reach the strategy the run uses and its sizing, an
unknown one fails in one line, they stay with their strategy, and a config without them is
recorded as before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cxsim.compaction import CompactionConfig
from cxsim.config import EnvConfig
from cxsim.pipeline.evaluate import Config as EvalConfig
from cxsim.pipeline.evaluate import scripted_chat
from cxsim.preflight import preflight
from cxsim.strategies import STRATEGIES
from cxsim.strategies.settings import setting_names, settings_of
from cxsim.studies.load import load_study
from cxsim.studies.spec import StudyError
from cxsim.tracking import to_jsonable

UNSET = {"budget": None, "threshold": None, "max_response_tokens": None, "max_summary_tokens": None}


def test_each_built_in_strategy_names_its_settings():
    assert setting_names(STRATEGIES["folding"]) == ("max_depth", "max_branches")
    assert setting_names(STRATEGIES["memory-notes"]) == ("max_notes", "max_note_tokens")
    assert setting_names(STRATEGIES["self-compaction"]) == ("threshold_draw",)
    assert setting_names(STRATEGIES["compacted"]) == ()


def test_options_build_the_strategy_the_run_uses():
    folding = CompactionConfig(protocol="folding", strategy_options={"max_depth": 2})
    assert (folding.strategy.max_depth, folding.strategy.max_branches) == (2, 4)
    assert (
        folding.strategy
        is CompactionConfig(  # built once per setting
            protocol="folding", strategy_options={"max_depth": 2}
        ).strategy
    )
    assert CompactionConfig(protocol="folding").strategy is STRATEGIES["folding"]
    # the registry's drawn variant is self-compaction with one setting
    drawn = CompactionConfig(protocol="self-compaction", strategy_options={"threshold_draw": 0.5})
    assert settings_of(drawn.strategy) == settings_of(STRATEGIES["self-compaction-drawn"])
    assert drawn.strategy.name == "self-compaction"


def test_a_setting_reaches_the_sizing():
    """memory-notes keeps room for its notes in every window: fewer notes, a smaller
    derived budget (FactUpdate-v0: 337 tokens at the default 6 notes, 287 for 1)."""
    chat = scripted_chat(EvalConfig(agent="oracle", tokenizer="pretrained"))
    env = EnvConfig(env_id="cxsim/FactUpdate-v0")
    default = preflight(env, CompactionConfig(protocol="memory-notes", **UNSET), chat)
    one = CompactionConfig(protocol="memory-notes", strategy_options={"max_notes": 1}, **UNSET)
    sized = preflight(env, one, chat)
    assert sized.strategy_options == {"max_notes": 1}
    assert sized.budget < default.budget


@pytest.mark.parametrize(
    ("protocol", "options", "message"),
    [
        ("folding", {"max_dept": 2}, "max_dept: folding takes max_depth, max_branches "
         "(did you mean max_depth?)"),
        ("compacted", {"max_depth": 2}, "max_depth: compacted takes no settings"),
        ("folding", {"max_depth": 0}, "for folding: max_depth (0) must be an integer >= 1"),
    ],
)  # fmt: skip
def test_a_bad_option_fails_in_one_line(protocol: str, options: dict, message: str):
    with pytest.raises(ValueError, match=re.escape(f"--compaction.strategy-options {message}")):
        CompactionConfig(protocol=protocol, strategy_options=options)


def test_options_stay_with_their_strategy():
    folding = CompactionConfig(protocol="folding", strategy_options={"max_depth": 2})
    assert folding.for_protocol("folding") is folding
    compacted = folding.for_protocol("compacted")  # e.g. an evaluation under compacted
    assert compacted.protocol == "compacted" and compacted.strategy_options == {}


def test_a_config_without_options_is_recorded_as_before():
    assert "strategy_options" not in to_jsonable(CompactionConfig())
    recorded = to_jsonable(CompactionConfig(protocol="folding", strategy_options={"max_depth": 2}))
    assert recorded["strategy_options"] == {"max_depth": 2}


STUDY = """
title = "t"
question = "q"
seeds = "0:1"
[settings.fold]
compaction.protocol = "folding"
compaction.strategy-options = { max_depth = 2 }
arms = ["compactionrl"]
[arms.compactionrl]
preset = "compactionrl"
"""


def test_a_study_file_sets_them_and_a_typo_fails_naming_the_setting(tmp_path: Path):
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    (setting,) = load_study(path).settings
    assert setting.compaction.strategy.max_depth == 2
    path.write_text(STUDY.replace("max_depth = 2", "max_dept = 2"))
    with pytest.raises(StudyError, match=r"settings.fold.*max_dept: folding takes max_depth"):
        load_study(path)

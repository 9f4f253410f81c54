"""Sides a study evaluates without training them (cxsim/studies/sides.py, side_runs.py): the
env's oracle acting (``oracle``), the scripted summarizer at an omission rate
(``scripted:P``) and another environment (``[eval_envs.NAME]``, ``env = "NAME"``): each
side's numbers are those of a direct ``cxsim.evaluation.evaluate_protocol`` call with the
same agents on the same seed, a name the file gets wrong stops the load in one line, and the
cache keys of sides that existed before stay where they were."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cxsim.studies.load import load_study
from cxsim.studies.selection import apart_sides, select
from cxsim.studies.spec import StudyError
from cxsim.tracking import to_jsonable

STUDY = """
title = "scripted sides"
seeds = "3"

[settings.s]
policy = "pretrained"
arms = []
env.kwargs = { memory_length = 5, obs_words_mean = 6.0, obs_words_std = 1.0, num_values = 4 }
compaction.budget = 160
sft.episodes = 6
sft.epochs = 1
sft.heldout-episodes = 2
eval.episodes = 3
eval.protocols = ["compacted", "single"]

[eval_envs.short]
kwargs = { memory_length = 2 }

[arms.compactionrl]
preset = "compactionrl"

[[claims]]
name = "summaries"
treatment = "oracle"
treatment_summarizer = "scripted:0"
reference = "oracle"
reference_summarizer = "scripted:0.3"
prediction = "complete summaries help the oracle"

[[evaluations]]
arm = "base"
summarizer = "scripted:0.6"

[[evaluations]]
arm = "base"
protocol = "single"
env = "short"

[[evaluations]]
arm = "oracle"
protocol = "single"
env = "short"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def plain(value: Any) -> Any:
    """As a cached evaluation holds it (NaN as null, tuples as lists)."""
    return json.loads(json.dumps(to_jsonable(value)))


# -- the file --------------------------------------------------------------------------------


def test_the_sides_parse_with_their_evaluation_keys(tmp_path: Path):
    study = load_study(write(tmp_path, STUDY))
    (claim,) = study.claims
    assert [s.evaluation for s in claim.sides] == [
        "external-summarizer+scripted:0", "external-summarizer+scripted:0.3",
    ]  # fmt: skip
    assert [(s.arm, s.evaluation) for s in study.evaluations] == [
        ("base", "external-summarizer+scripted:0.6"),
        ("base", "single@short"),
        ("oracle", "single@short"),
    ]
    selection = select(study)
    assert selection.pairs == (("s", "base"),)  # the oracle needs the base's chat format only
    assert len(apart_sides(selection)) == 5
    assert select(study, ("s",)).evaluations == study.evaluations  # with the whole setting
    one = select(study, ("s:summaries",))  # one claim: its sides, not the other evaluations
    assert one.evaluations == () and len(apart_sides(one)) == 2
    (short,) = study.eval_envs
    assert short.env_of(study.setting("s").env).kwargs["memory_length"] == 2
    assert short.env_of(study.setting("s").env).kwargs["num_values"] == 4  # set over the setting's


BAD = [
    ('reference_summarizer = "scripted:0.3"', 'reference_summarizer = "scripted:0.3x"',
     "reference_summarizer = 'scripted:0.3x': the scripted summarizer's omission rate is a number in [0, 1]"),
    ('reference_summarizer = "scripted:0.3"', 'reference_summarizer = "scripted:1.5"',
     "omission rate is a number in [0, 1]"),
    ('reference_summarizer = "scripted:0.3"', 'reference_summarizer = "scriptd:0.3"',
     "reference_summarizer = 'scriptd:0.3' is not an arm of setting s; choose one of: base or scripted:P"),
    ('reference_summarizer = "scripted:0.3"', 'reference_summarizer = "oracle"',
     '"scripted:0" keeps every fact'),
    ('env = "short"\n', 'env = "shrt"\n',
     "env = 'shrt' names no [eval_envs.shrt]; eval envs: short"),
    ("kwargs = { memory_length = 2 }", "kwargs = { memory_lenght = 2 }",
     "memory_lenght"),
    ("[arms.compactionrl]", "[arms.oracle]", "'oracle' names the env's scripted oracle"),
    ('arm = "base"\nsummarizer', 'arm = "orcle"\nsummarizer', "'orcle' is not an arm of setting s"),
    ('prediction = "complete summaries help the oracle"',
     'prediction = "x"\nmetric = "train_success_auc"', "the oracle trains nothing"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "message"), BAD)
def test_a_wrong_name_fails_at_load_in_one_line(tmp_path: Path, old: str, new: str, message: str):
    assert old in STUDY
    with pytest.raises(StudyError) as error:
        load_study(write(tmp_path, STUDY.replace(old, new, 1)))
    said = str(error.value)
    assert message in said, said
    assert "\n" not in said


def test_a_scripted_side_on_an_env_without_a_family_fails_at_load(tmp_path: Path):
    import gymnasium as gym

    class Plain(gym.Env):  # a text env that declares no EnvFamily: no scripted agents
        observation_space = gym.spaces.Text(64)
        action_space = gym.spaces.Text(64)

        def reset(self, *, seed=None, options=None):
            return "hello", {}

        def step(self, action):
            return "done", 1.0, True, False, {}

    gym.register("nofamily/Plain-v0", entry_point=Plain)
    plain = 'env.env-id = "nofamily/Plain-v0"\nenv.kwargs = {}\n'
    text = STUDY.replace("env.kwargs = { memory_length = 5,", plain + "# ", 1)
    with pytest.raises(StudyError) as error:
        load_study(write(tmp_path, text))
    said = str(error.value)
    assert "claim 1 (summaries): oracle needs the env's scripted agents: nofamily/Plain-v0 " in said
    assert "declares no EnvFamily" in said and "\n" not in said


def test_a_budget_sets_an_eval_env_and_names_only_the_files(tmp_path: Path):
    budget = "\n[budgets.tiny]\neval_envs.short.kwargs = { memory_length = 3 }\n"
    study = load_study(write(tmp_path, STUDY + budget), budget="tiny")
    assert study.eval_envs[0].kwargs == {"memory_length": 3}
    wrong = budget.replace("eval_envs.short", "eval_envs.long")
    with pytest.raises(StudyError, match=re.escape("eval_envs.long names no [eval_envs.long]")):
        load_study(write(tmp_path, STUDY + wrong))


def test_the_reference_pages_example_parses_beside_the_example(tmp_path: Path):
    import shutil

    from test_studies import code_blocks

    root = Path(__file__).resolve().parent.parent
    blocks = code_blocks(root / "docs" / "reference" / "study-files.md", "toml")
    example, sides = blocks[0], next(b for b in blocks if "[eval_envs." in b)
    shutil.copy(root / "examples" / "my_estimator.py", tmp_path)
    study = load_study(write(tmp_path, example + sides), budget="smoke")
    assert [c.name for c in study.claims][-2:] == ["oracle-omission", "one-window"]
    assert study.claims[-1].sides[0].evaluation == "single@one-window"
    assert study.evaluations[0].evaluation == "external-summarizer+scripted:0.6"


# -- the numbers -----------------------------------------------------------------------------


def direct(study: Any, base: str, side: Any, seed: int) -> dict[str, Any]:
    """The side evaluated by hand: its agents built as ``cxsim eval`` builds them (the
    protocol's scripted agents at the omission rate, the base's policy), one
    ``evaluate_protocol`` call on the seed's tasks, the window sized on the setting's task."""
    from cxsim.agents.lm_agent import LMAgent
    from cxsim.agents.models import load_policy
    from cxsim.devices import resolve_device
    from cxsim.diagnostics import summary_omission
    from cxsim.evaluation import evaluate_protocol
    from cxsim.generation import SamplingConfig
    from cxsim.preflight import preflight
    from cxsim.strategies import STRATEGIES, ScriptedOptions
    from cxsim.studies.sides import scripted_rate

    setting = study.setting(side.setting)
    device = resolve_device("cpu")
    policy, _, chat = load_policy(base, device, None)
    sized = preflight(setting.env, setting.compaction, chat)
    rate = scripted_rate(side.summarizer) or 0.0
    runtime = sized.for_protocol(side.protocol)
    scripted = STRATEGIES[side.protocol].scripted_agents(
        setting.env.env_id, chat, ScriptedOptions(rate, seed), config=runtime
    )
    sampling = SamplingConfig(temperature=setting.eval.temperature)
    actor = scripted.actor
    if side.arm == "base":
        actor = LMAgent(policy, chat, sampling, device=device, precision="fp32")
    env = setting.env
    if side.env:
        env = next(e for e in study.eval_envs if e.name == side.env).env_of(setting.env)
    result, records = evaluate_protocol(
        env.env_id, env.kwargs, actor, chat, sized, side.protocol, setting.eval.episodes,
        setting.eval.repeats, seed, summarizer_agent=scripted.summarizer,
    )  # fmt: skip
    return plain(result | {"omission": summary_omission(records)})


def test_scripted_and_other_env_sides_are_direct_evaluations(tmp_path: Path):
    from cxsim.studies.runner import run_study

    study = load_study(write(tmp_path, STUDY))
    runs_dir = str(tmp_path / "runs")
    outcome = run_study(study, select(study), runs_dir, "cpu")
    by_arm = outcome["runs"]["s"]
    base = by_arm["base"][0]["policy"]
    sides = apart_sides(select(study))
    for side in sides:
        made = by_arm[side.arm][0]["eval"][side.evaluation]
        assert made == direct(study, base, side, 3), side
    oracle = by_arm["oracle"][0]["eval"]
    assert oracle["external-summarizer+scripted:0"]["pass_at_1"] == 1.0  # complete summaries
    assert oracle["single@short"]["pass_at_1"] == 1.0  # the short task fits in one window
    assert by_arm["base"][0]["eval"]["single"]["pass_at_1"] == 0.0  # the long one does not
    again = run_study(study, select(study), runs_dir, "cpu")
    assert again["made"]["eval"] == 0
    for arm, seeds in again["runs"]["s"].items():  # read back as made
        assert [r["eval"] for r in seeds] == [r["eval"] for r in by_arm[arm]]


def test_the_swap_files_of_earlier_studies_keep_their_names(tmp_path: Path):
    """A side whose two agents are policies on the setting's own env is cached where the
    Table 1 swap always was; the new sides go beside it, named by what they hold."""
    from cxsim.studies.spec import Side
    from cxsim.studies.unit_files import side_eval_file, swap_eval_file

    text = STUDY.replace('reference_summarizer = "scripted:0.3"', 'reference_summarizer = "base"')
    study = load_study(write(tmp_path, text))
    setting = study.setting("s")
    swap = Side("s", "base", "external-summarizer", "base")
    assert side_eval_file(study, swap, "r", 3, "cpu") == swap_eval_file(
        "r", setting, None, None, 3, "cpu", "external-summarizer"
    )
    names = [side_eval_file(study, s, "r", 3, "cpu").name for s in apart_sides(select(study))]
    assert [n.rsplit("-", 1)[0] for n in names] == [
        "oracle+scripted-0@external-summarizer", "oracle+base@external-summarizer",
        "base+scripted-0.6@external-summarizer", "base@single@short", "oracle@single@short",
    ]  # fmt: skip

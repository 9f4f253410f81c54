"""cxsim study: the file's validation, seed ranges, --only, the cache, the page, the commands."""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import tyro

from cxsim.cli import main as cxsim
from cxsim.studies.load import load_study
from cxsim.studies.selection import select
from cxsim.studies.spec import StudyError, parse_seeds
from cxsim.studies.stats import compare, verdict
from cxsim.studies.where import own_files
from cxsim.tables import Interval
from cxsim.tracking import to_jsonable

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TEST_BUDGET = """
[budgets.test]
sft.episodes = 4
sft.epochs = 1
sft.heldout-episodes = 1
ppo.iterations = 1
ppo.critic-warmup = 0
ppo.rollouts-per-batch = 2
ppo.minibatches = 1
eval.episodes = 2
"""
"""Smaller than the example's own smoke budget: the same path, in a few seconds per unit."""


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    """examples/my_study.toml with its plug-in, in a folder of its own, plus a test budget."""
    folder = tmp_path_factory.mktemp("study")
    shutil.copy(EXAMPLES / "my_estimator.py", folder)
    study = folder / "my_study.toml"
    study.write_text((EXAMPLES / "my_study.toml").read_text() + TEST_BUDGET)
    return study


@pytest.fixture(scope="module")
def first_run(example: Path) -> dict:
    """Seeds 0 and 1 of one claim's two arms (the base and compactionrl), at the test budget."""
    runs, out = example.parent / "runs", example.parent / "page"
    argv = ["study", str(example), "--budget", "test", "--seeds", "0:2", "--runs-dir", str(runs),
            "--out", str(out), "--only", "small:beats-base"]  # fmt: skip
    cxsim(argv)
    page = "my_study.budget-test.seeds-0-1.only-small_beats-base"  # a narrowed run's own page
    return {"runs": runs, "out": out, "page": page,
            "results": json.loads((out / f"{page}.json").read_text())}  # fmt: skip


def results_files(runs: Path) -> dict[Path, float]:
    """Every stage's result file under the cache, with its modification time."""
    found = [*runs.glob("*/s*/sft/results.json"), *runs.glob("*/s*/train/*/results.json"),
             *runs.glob("*/s*/eval/*.json")]  # fmt: skip
    return {p: p.stat().st_mtime_ns for p in found}


def eval_pass(runs: Path, arm: str, seed: int) -> float:
    (path,) = runs.glob(f"small-*/s{seed}/eval/{arm}-*.json")
    return json.loads(path.read_text())["results"][0]["pass_at_1"]


# -- the file ---------------------------------------------------------------------------------


STUDY = """
seeds = "0:2"
[settings.small]
env.kwargs = { memory_length = 5, obs_words_mean = 6.0, obs_words_std = 1.0, num_values = 4 }
compaction.budget = 160
[arms.compactionrl]
preset = "compactionrl"
[arms.local]
preset = "no-cross-segment"
[[claims]]
name = "c"
treatment = "compactionrl"
reference = "local"
prediction = "none"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_parsed_study_reads_every_key(tmp_path: Path):
    text = STUDY.replace('preset = "no-cross-segment"', 'preset = "no-cross-segment"\n'
                         'ppo.lambda-scope = "fixed"\n"ppo.lam" = 0.9')  # fmt: skip
    study = load_study(write(tmp_path, text))
    (setting,) = study.settings
    assert setting.env.kwargs["memory_length"] == 5 and setting.compaction.budget == 160
    assert setting.eval.protocols == ("compacted",) and setting.arms == ("compactionrl", "local")
    local = study.arm("local")
    assert local.overrides == {"lambda_scope": "fixed", "lam": 0.9}
    (claim,) = study.claims
    assert (claim.setting, claim.metric, claim.direction) == ("small", "pass_at_1", "higher")
    assert study.seeds == (0, 1)
    assert load_study(write(tmp_path, text), seeds="5:8").seeds == (5, 6, 7)


BAD = [
    ("seed = 3\n" + STUDY, "unknown key 'seed' (did you mean seeds?)"),
    (STUDY.replace('preset = "no-cross-segment"', 'preset = "no-cross"'), "is not a preset"),
    (STUDY.replace('preset = "no-cross-segment"', 'preset = "no-cross-segment"\nppo.lamda = 1'),
     "arms.local: unknown key 'ppo.lamda' (did you mean ppo.lam?)"),
    (STUDY.replace('preset = "no-cross-segment"', 'preset = "no-cross-segment"\nppo.lam = "x"'),
     "arms.local: ppo.lam = 'x': expected a number"),
    (STUDY.replace('preset = "no-cross-segment"', 'preset = "x"\nsft.epochs = 2'),
     "arms.local: unknown key 'sft.epochs'"),
    (STUDY.replace('preset = "no-cross-segment"',
                   'preset = "no-cross-segment"\nppo.estimator = "nope"'), "estimator"),
    (STUDY.replace("compaction.budget = 160", "sfft.episodes = 3"),
     "settings.small: unknown key 'sfft.episodes'"),
    (STUDY.replace("compaction.budget = 160", "sft.episodes = 0"), "settings.small: sft:"),
    (STUDY.replace('reference = "local"', 'reference = "lokal"'),
     "reference = 'lokal' is not an arm of setting small"),
    (STUDY.replace('prediction = "none"', 'prediction = ""'), "write the prediction"),
    (STUDY + 'metric = "accuracy"\n', "metric = 'accuracy'; choose one of: pass_at_1"),
    (STUDY + 'protocol = "singel"\n', "protocol = 'singel': protocol 'singel' is unknown"),
    (STUDY + 'direction = "up"\n', "choose higher, lower or same"),
    (STUDY.replace('seeds = "0:2"', 'seeds = "4:2"'), "needs b > a"),
    (STUDY.replace("[arms.local]", "[arms.base]"), "'base' names each seed's SFT base"),
    (STUDY + "[budgets.smoke]\nppo.iteration = 1\n", "did you mean ppo.iterations?"),
    ("seeds = [", "is not valid TOML"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_file_fails_in_one_line_naming_the_key(tmp_path: Path, text: str, message: str):
    with pytest.raises(StudyError) as error:
        load_study(write(tmp_path, text))
    said = str(error.value)
    assert message in said and "\n" not in said
    assert said.startswith("study.toml")


def test_an_unknown_budget_names_the_budgets(tmp_path: Path):
    with pytest.raises(StudyError, match=r"--budget big: .* choose: smoke"):
        load_study(write(tmp_path, STUDY + "[budgets.smoke]\nsft.episodes = 4\n"), budget="big")


def test_cli_refuses_a_bad_file_in_one_line_before_any_run(tmp_path: Path):
    study = write(tmp_path, STUDY.replace('reference = "local"', 'reference = "lokal"'))
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as stop:
        cxsim(["study", str(study), "--runs-dir", str(runs)])
    message = str(stop.value)
    assert message.startswith("cxsim study: error: study.toml: claim 1 (c): reference")
    assert "\n" not in message and not runs.exists()


def test_seed_ranges():
    assert parse_seeds("20:28") == tuple(range(20, 28))
    assert parse_seeds("3") == (3,) and parse_seeds(3) == (3,) and parse_seeds([0, 5]) == (0, 5)
    for bad in ("8:4", "4:4", "a:b", "-1:3", [1, 1], True, 1.5, "0:2:3"):
        with pytest.raises(StudyError):
            parse_seeds(bad)


def test_only_picks_settings_claims_and_arms(tmp_path: Path):
    study = load_study(write(tmp_path, STUDY))
    everything = select(study)
    assert everything.pairs == (("small", "base"), ("small", "compactionrl"), ("small", "local"))
    one_claim = select(study, ("small:c",))
    assert one_claim.pairs == (("small", "compactionrl"), ("small", "local"))
    assert [c.name for c in one_claim.claims] == ["c"]
    one_arm = select(study, ("arm:local",))
    assert one_arm.pairs == (("small", "local"),) and one_arm.claims == ()
    assert select(study, ("small",)) == everything
    for bad, said in (("big", "not a setting"), ("small:d", "no such claim"),
                      ("arm:global", "no setting trains an arm")):  # fmt: skip
        with pytest.raises(StudyError, match=said):
            select(study, (bad,))


def code_blocks(doc: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", doc.read_text(), flags=re.S | re.M)


def test_the_docs_study_files_parse_as_written(tmp_path: Path):
    docs = EXAMPLES.parent / "docs"
    tutorial = docs / "tutorials" / "your-estimator.md"
    (estimator,) = [
        b for b in code_blocks(tutorial, "python") if b.startswith("# my_estimators.py")
    ]
    (tmp_path / "my_estimators.py").write_text(estimator)
    first, credit = code_blocks(tutorial, "toml")[-2:]
    assert first.startswith("# my_study.toml") and "[settings.credit]" in credit
    study = load_study(write(tmp_path, first))
    assert study.arm("loop").overrides == {"estimator": "my_estimators:stitched_loop"}
    assert study.settings[0].eval.episodes == 128 and study.seeds == tuple(range(5))
    both = first.replace('name = "loop-vs-correction"', 'name = "loop-vs-correction"\n'
                         'setting = "main"') + credit  # fmt: skip
    study = load_study(write(tmp_path, both))
    assert [(c.name, c.setting) for c in study.claims] == [
        ("loop-vs-correction", "main"), ("loop-vs-correction-credit", "credit"),
    ]  # fmt: skip
    assert study.setting("credit").sft.skip_rate == 0.5
    reference = code_blocks(docs / "reference" / "study-files.md", "toml")[0]  # the example
    shutil.copy(EXAMPLES / "my_estimator.py", tmp_path)
    study = load_study(write(tmp_path, reference), budget="smoke")
    shipped = load_study(EXAMPLES / "my_study.toml", budget="smoke")
    assert replace(study, path="", question="", claims=()) == replace(
        shipped, path="", question="", claims=()
    )


# -- the numbers ------------------------------------------------------------------------------


def evaluation(successes: list[float]) -> dict:
    return {"per_task_success": successes, "pass_at_1": sum(successes) / len(successes)}


def test_verdict_follows_the_interval_and_the_direction():
    above = Interval(0.1, 0.05, 0.15, 4, "t")
    below = Interval(-0.1, -0.15, -0.05, 4, "t")
    across = Interval(0.0, -0.1, 0.1, 4, "t")
    assert verdict(above, "higher") == "reproduced" and verdict(below, "higher") == "contradicted"
    assert verdict(below, "lower") == "reproduced" and verdict(above, "lower") == "contradicted"
    assert verdict(across, "higher") == "not resolved"
    assert verdict(Interval(math.nan, math.nan, math.nan, 0, "none"), "higher") == "not measured"


def test_compare_pairs_by_seed():
    treatment = [evaluation([1, 1, 1, 0]), evaluation([1, 1, 0, 0]), evaluation([1, 1, 1, 1])]
    reference = [evaluation([1, 0, 0, 0]), evaluation([0, 0, 0, 0]), evaluation([1, 1, 0, 0])]
    c = compare(treatment, reference, "pass_at_1")
    assert c.per_seed == pytest.approx((0.5, 0.5, 0.5))
    assert c.difference.mean == pytest.approx(0.5) and c.paired == 3
    # no spread: an interval of no width, which the engine refuses to read as a verdict
    assert c.verdict == "degenerate: the paired differences do not vary (+0.500 on every seed)"
    assert c.detectable == 0.0  # any shift would show
    flipped = compare(reference, treatment, "pass_at_1", direction="lower")
    assert flipped.verdict.startswith("degenerate") and flipped.difference.mean == pytest.approx(
        -0.5
    )
    noisy = compare(treatment, [evaluation([1, 1, 1, 1])] * 3, "pass_at_1")
    assert noisy.verdict == "not resolved" and noisy.detectable > 0


# -- the pipeline -----------------------------------------------------------------------------


def test_example_study_page_and_results(example: Path, first_run: dict):
    runs, results = first_run["runs"], first_run["results"]
    assert results["made_now"] == {"sft": 2, "train": 2, "eval": 4}
    (claim,) = results["claims"]
    assert claim["name"] == "beats-base" and claim["paired_seeds"] == 2  # 2 seeds: no verdict
    assert claim["verdict"] == "too few seeds (2 paired; a verdict needs 3)"
    expected = [eval_pass(runs, "compactionrl", s) - eval_pass(runs, "base", s) for s in (0, 1)]
    assert claim["per_seed_difference"] == pytest.approx(expected)
    assert claim["difference"]["mean"] == pytest.approx(sum(expected) / 2)
    assert claim["difference"]["method"] == "t"
    # every arm of a seed from that seed's base; each seed its own tasks
    for seed in (0, 1):
        (train,) = runs.glob(f"small-*/s{seed}/train/compactionrl-*/results.json")
        config = json.loads(train.read_text())["config"]
        assert config["seed"] == seed and config["policy"].endswith(f"s{seed}/sft/policy")
        (base_eval,) = runs.glob(f"small-*/s{seed}/eval/base-*.json")
        assert json.loads(base_eval.read_text())["config"]["eval"]["seed"] == seed
    page = (first_run["out"] / f"{first_run['page']}.md").read_text()
    assert "# A floor on the cross-segment correction" in page
    assert "**beats-base** (small)" in page and "floor-helps" not in page.split("## Arms")[0]
    for needed in ("sft.episodes 4", "ppo.rollouts-per-batch 2", "eval.episodes 2",
                   "eval.seed s", "eval.temperature 1", "env.kwargs memory_length 5",
                   "policy pretrained", "--ppo.keep-best kept", "last 5 actor iterations"):  # fmt: skip
        assert needed in page, needed
    per_seed = re.search(r"\| `compactionrl` \| ([\d.]+) \| ([\d.]+) \|", page)
    assert per_seed is not None
    assert [float(x) for x in per_seed.groups()] == [
        pytest.approx(eval_pass(runs, "compactionrl", s), abs=5e-4) for s in (0, 1)
    ]
    record = json.loads((own_files(runs, example) / "predictions.json").read_text())
    assert record["small:beats-base"]["results_existed"] is False


def test_a_rerun_with_another_arm_trains_only_that_arm(example: Path, first_run: dict):
    runs, out = first_run["runs"], first_run["out"]
    before = results_files(runs)
    common = ["study", str(example), "--budget", "test", "--runs-dir", str(runs), "--out",
              str(out), "--quiet"]  # fmt: skip
    cxsim([*common, "--seeds", "0:2", "--only", "arm:floored"])
    results = json.loads((out / "my_study.budget-test.seeds-0-1.only-arm_floored.json").read_text())
    assert results["made_now"] == {"sft": 0, "train": 2, "eval": 2}
    assert results["claims"] == []  # one arm alone decides no claim
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in before.items())
    # the whole study, a narrower seed range: every unit is in the cache
    after = results_files(runs)
    cxsim([*common, "--seeds", "1"])
    results = json.loads((out / "my_study.budget-test.seeds-1.json").read_text())
    assert results["made_now"] == {"sft": 0, "train": 0, "eval": 0}
    assert [c["name"] for c in results["claims"]] == ["beats-base", "floor-helps"]
    assert results["arms"]["small"]["floored"]["seeds"] == [1]
    assert results_files(runs) == after
    (floored,) = runs.glob("small-*/s1/train/floored-*/results.json")
    assert json.loads(floored.read_text())["config"]["ppo"]["estimator"] == "my_estimator:floored"


def test_print_commands_parse_into_the_configs_the_study_runs(
    example: Path, first_run: dict, capsys: pytest.CaptureFixture[str]
):
    from cxsim.pipeline import evaluate as evaluate_entry
    from cxsim.pipeline import sft as sft_entry
    from cxsim.pipeline import train as train_entry
    from cxsim.pipeline.presets import cli_with_preset, preset_ppo
    from cxsim.studies import runner

    runs = first_run["runs"]
    cxsim(["study", str(example), "--budget", "test", "--runs-dir", str(runs),
           "--print-commands", "--seeds", "1"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in lines if line.startswith("cxsim ")]
    assert [c[1] for c in commands] == ["sft", "eval", "train", "eval", "train", "eval"]
    assert any(line.startswith("export PYTHONPATH=") for line in lines)

    def parse(command: list[str]):
        name, args = command[1], command[2:]
        if name == "sft":
            return tyro.cli(sft_entry.Config, args=args)
        if name == "train":
            return cli_with_preset(
                train_entry.Config, lambda p: train_entry.Config(preset=p, ppo=preset_ppo(p)), args
            )
        policy = Path(args[args.index("--policy") + 1])  # a checkpoint the commands would make
        policy.mkdir(parents=True, exist_ok=True)
        (policy / "config.json").write_text("{}")
        return tyro.cli(evaluate_entry.Config, args=args)

    parsed = [parse(c) for c in commands]
    study = load_study(example, "1", "test")
    setting = study.settings[0]
    seed_dir = own_files(runs, example) / "replicate" / "small" / "s1"
    sft = runner.sft_config(setting, 1, seed_dir, "cpu")
    assert parsed[0] == sft
    base_policy = str(Path(sft.run_dir) / "policy")
    for train, arm in ((parsed[2], "compactionrl"), (parsed[4], "floored")):
        made = runner.train_config(setting, study.arm(arm), 1, seed_dir, base_policy, "cpu")
        assert train == replace(made, run_dir=str(seed_dir / "train" / arm))
        (cached,) = runs.glob(f"small-*/s1/train/{arm}-*/results.json")
        assert to_jsonable(train.ppo) == json.loads(cached.read_text())["config"]["ppo"]
    for evaluated, arm in ((parsed[1], "base"), (parsed[3], "compactionrl")):
        out = seed_dir / "eval" / f"{arm}.json"
        made = runner.eval_config(setting, 1, seed_dir, evaluated.model.policy, out, "cpu")
        assert evaluated == made and evaluated.eval.seed == 1


def test_the_example_estimator_checks_against_cxsim(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(EXAMPLES)
    quick = ["--quantity", "cross-segment-gae", "--examples", "2", "--shrink-seconds", "1",
             "--only", "segments/fixed", "--quiet"]  # fmt: skip
    cxsim(["conform", "my_estimator:floor_0", *quick])  # floor 0: the paper's correction
    with pytest.raises(SystemExit) as stop:  # the floor changes early segments' credit
        cxsim(["conform", "my_estimator:floored", *quick])
    assert stop.value.code == 1


@pytest.mark.slow
def test_example_study_at_its_smoke_budget(tmp_path: Path):
    runs, out = tmp_path / "runs", tmp_path / "page"
    cxsim(["study", str(EXAMPLES / "my_study.toml"), "--budget", "smoke", "--seeds", "0:2",
           "--runs-dir", str(runs), "--out", str(out), "--quiet"])  # fmt: skip
    results = json.loads((out / "my_study.budget-smoke.seeds-0-1.json").read_text())
    assert results["made_now"] == {"sft": 2, "train": 4, "eval": 6}
    assert [c["name"] for c in results["claims"]] == ["beats-base", "floor-helps"]
    for claim in results["claims"]:
        assert len(claim["per_seed_difference"]) == 2
    page = (out / "my_study.budget-smoke.seeds-0-1.md").read_text()
    assert "**floor-helps** (small)" in page and "ppo.estimator my_estimator:floored" in page


# -- claims across settings, metrics, the figure ----------------------------------------------

TWO_STRATEGIES = """
seeds = "0:2"
reading = "Masking wins **here** because the key is in the task."
metrics = ["pass_at_1", "tokens_processed"]
[figure]
x = "tokens_processed"
y = "pass_at_1"
arm = "compactionrl"
[settings.summary]
compaction.protocol = "compacted"
eval.protocols = ["compacted"]
[settings.masked]
compaction.protocol = "observation-masking"
eval.protocols = ["observation-masking"]
[arms.compactionrl]
preset = "compactionrl"
[[claims]]
name = "masking-wins"
setting = "masked"
treatment = "masked:compactionrl"
reference = "summary:compactionrl"
protocol = "own"
prediction = "higher"
[[claims]]
name = "cheaper"
setting = "masked"
treatment = "masked:compactionrl"
reference = "summary:compactionrl"
metric = "tokens_processed"
protocol = "own"
direction = "lower"
prediction = "lower"
"""


def test_a_claim_pairs_arms_of_two_settings_each_under_its_own_protocol(tmp_path: Path):
    study = load_study(write(tmp_path, TWO_STRATEGIES))
    wins = study.claims[0]
    assert [(s.setting, s.arm, s.protocol) for s in wins.sides] == [
        ("masked", "compactionrl", "observation-masking"),
        ("summary", "compactionrl", "compacted"),
    ]
    assert wins.across_settings and wins.side_label(wins.reference_side) == "summary:compactionrl"
    one = select(study, ("masked:masking-wins",))
    assert one.pairs == (("summary", "compactionrl"), ("masked", "compactionrl"))
    assert [c.name for c in one.claims] == ["masking-wins", "cheaper"]  # the same two runs
    # a setting alone leaves out the claims that need the other one
    assert select(study, ("masked",)).claims == ()
    assert study.metrics == ("pass_at_1", "tokens_processed")
    assert (study.figure.x, study.figure.y, study.figure.arm) == (
        "tokens_processed", "pass_at_1", "compactionrl",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('treatment = "masked:compactionrl"', 'treatment = "maskd:compactionrl"',
         "names no setting 'maskd'; settings: summary, masked"),
        ('treatment = "masked:compactionrl"', 'treatment = "masked:local"',
         "'masked:local' is not an arm of setting masked"),
        ('x = "tokens_processed"', 'x = "tokens"', "figure.x = 'tokens'; choose from"),
        ('metrics = ["pass_at_1", "tokens_processed"]', 'metrics = ["calls"]',
         "metrics: 'calls'; choose from"),
    ],
)  # fmt: skip
def test_bad_sides_metrics_and_figures_fail_in_one_line(
    tmp_path: Path, old: str, new: str, message: str
):
    with pytest.raises(StudyError, match=re.escape(message)):
        load_study(write(tmp_path, TWO_STRATEGIES.replace(old, new, 1)))


def unit(setting: str, arm: str, seed: int, protocol: str, solved: list[float], tokens: float):
    result = {**evaluation(solved), "protocol": protocol, "tokens_processed": tokens}
    return {"setting": setting, "arm": arm, "seed": seed, "eval": {protocol: result},
            "train": None, "eval_file": f"{setting}/{arm}/{seed}"}  # fmt: skip


def test_the_page_compares_two_settings_and_draws_the_figure(tmp_path: Path):
    from cxsim.studies.page import comparison, draw_figure, metric_lines, reading_lines

    study = load_study(write(tmp_path, TWO_STRATEGIES))
    masked = [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]]
    summary = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    runs = {
        "masked": {"compactionrl": [
            unit("masked", "compactionrl", s, "observation-masking", x, 400.0 + s)
            for s, x in enumerate(masked)]},
        "summary": {"compactionrl": [
            unit("summary", "compactionrl", s, "compacted", x, 300.0 + 2 * s)
            for s, x in enumerate(summary)]},
    }  # fmt: skip
    selection = select(study, ("arm:compactionrl",))
    wins, cheaper = study.claims
    c = comparison(runs, wins)
    assert c.per_seed == pytest.approx((0.5, 0.5, 0.5))  # no spread: refused
    assert c.verdict == "degenerate: the paired differences do not vary (+0.500 on every seed)"
    costs = comparison(runs, cheaper)
    assert costs.per_seed == pytest.approx((100.0, 99.0, 98.0))
    assert costs.verdict == "contradicted"  # more tokens, not fewer
    lines = "\n".join(metric_lines(study, selection, runs, "study.png"))
    assert "| `masked:compactionrl` | observation-masking | 0.75 [" in lines
    assert "| `summary:compactionrl` | compacted | 0.25 [" in lines and "](study.png)" in lines
    figure = tmp_path / "study.png"
    assert draw_figure(study, selection, runs, figure) and figure.stat().st_size > 1000
    assert reading_lines(study)[0] == "## What it means"
    assert "Masking wins **here** because the key is in the task." in reading_lines(study)


def test_the_strategies_study_file_parses_with_every_claim_across_settings():
    study = load_study(EXAMPLES.parent / "studies" / "strategies.toml", budget="smoke")
    protocols = {s.name: s.compaction.protocol for s in study.settings}
    assert {s.name: s.eval.protocols for s in study.settings} == {
        name: (protocol,) for name, protocol in protocols.items()
    }
    assert {s.compaction.budget for s in study.settings} == {360}  # one working budget
    assert study.tuning_seeds == tuple(range(200, 208))  # the calibration's seeds
    for claim in study.claims:
        for side in claim.sides:
            assert side.protocol == protocols[side.setting]


CHECKED = (
    STUDY
    + """
[[checks]]
name = "gain"
arm = "compactionrl"
minus = "base"
metric = "pass_at_1"
at_least = 0.2
[budgets.quick]
checks = ["gain"]
"""
)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("at_least = 0.2", "", "give at_least, each_at_least or range"),
        ('minus = "base"', 'minus = "bse"', "minus = 'bse' is not an arm of setting small"),
        ('metric = "pass_at_1"', 'metric = "accuracy"', "an evaluation metric (pass_at_1"),
        ('metric = "pass_at_1"', 'metric = "pass_at_1"\nover = "max"', "over = 'max'"),
        ('metric = "pass_at_1"', 'metric = "critic/explained_variance"', "the base trains nothing"),
        ("at_least = 0.2", "range = [1, 0]", "write [low, high] with low <= high"),
        ('checks = ["gain"]', 'checks = ["gains"]', "checks names 'gains', which is no check"),
    ],
)  # fmt: skip
def test_a_bad_check_fails_in_one_line(tmp_path: Path, old: str, new: str, message: str):
    with pytest.raises(StudyError, match=re.escape(message)):
        load_study(write(tmp_path, CHECKED.replace(old, new, 1)), budget="quick")


def shipped_study(name: str) -> Path:
    """A study file of studies/, or a paper table's (shipped with cxsim/paper_tables)."""
    if name in ("verdicts", "tables"):
        from cxsim import paper_tables

        return Path(paper_tables.__file__).with_name(f"{name}.toml")
    return EXAMPLES.parent / "studies" / f"{name}.toml"


@pytest.mark.parametrize("name", ["verdicts", "table4-horizons", "tables"])
def test_the_shipped_studies_keep_the_critic_their_pages_were_made_with(name: str):
    from cxsim.config import PPOConfig
    from cxsim.paper_tables import tables
    from cxsim.pipeline.presets import PUBLISHED_CRITIC, PUBLISHED_RECIPE
    from cxsim.studies.stages import arm_ppo

    study = load_study(shipped_study(name))
    for setting in study.settings:
        for arm in setting.arms:
            ppo = arm_ppo(setting, study.arm(arm))
            assert (ppo.value_head, ppo.critic_lam) == ("last", None), (setting.name, arm)
    # so is the tables page's own full budget; the default critic is another since
    made = tables.BUDGETS["full"].ppo
    assert (made.value_head, made.critic_lam) == tuple(PUBLISHED_CRITIC.values())
    assert made.kl_coef == 0.0 and not made.skip_uniform_batches
    assert (PPOConfig().value_head, PPOConfig().critic_lam) == ("context-ridge", 1.0)
    # and their run folders keep their names: a record without the two stands for them
    recorded = to_jsonable(PPOConfig(**PUBLISHED_CRITIC))
    assert "value_head" not in recorded and "critic_lam" not in recorded
    recorded = to_jsonable(PPOConfig(**PUBLISHED_RECIPE))  # as recorded before the two
    assert "kl_coef" not in recorded and "skip_uniform_batches" not in recorded


@pytest.mark.parametrize("name", ["verdicts", "table4-horizons", "table4-critic"])
def test_the_shipped_studies_keep_the_recipe_their_pages_were_made_with(name: str):
    from cxsim.config import PPOConfig
    from cxsim.studies.stages import arm_ppo

    study = load_study(shipped_study(name))
    for setting in study.settings:
        for arm in setting.arms:
            ppo = arm_ppo(setting, study.arm(arm))
            assert ppo.kl_coef == 0.0 and ppo.iterations in (8, 12), (setting.name, arm)
            assert not ppo.skip_uniform_batches, (setting.name, arm)
    default = PPOConfig()  # the defaults since
    assert (default.kl_coef, default.iterations, default.skip_uniform_batches) == (0.1, 16, True)


def test_a_setting_folder_refuses_runs_made_with_another_preset(tmp_path: Path):
    """A setting folder's name hashes the settings as written, so a preset changed since
    (FactUpdate-v0 became the calibrated default) would reuse its old runs; env.json records
    how the env was built, and a setting built otherwise is refused in one line."""
    import json

    from cxsim.config import EnvConfig
    from cxsim.studies.runner import record_settings
    from cxsim.studies.unit_files import check_env_record, setting_folder

    (setting, *_) = load_study(write(tmp_path, STUDY)).settings
    record_settings([setting], str(tmp_path / "runs"), "cpu")
    folder = setting_folder(tmp_path / "runs", setting, "cpu")
    made = json.loads((folder / "env.json").read_text())
    assert made["env_id"] == setting.env.env_id and made["kwargs"]["num_values"] == 4
    record_settings([setting], str(tmp_path / "runs"), "cpu")  # the same env: no complaint
    update = EnvConfig(env_id="cxsim/FactUpdate-v0")
    check_env_record(tmp_path / "fu", update)
    assert json.loads((tmp_path / "fu" / "env.json").read_text())["kwargs"]["num_revisions"] == 2
    old = {"env_id": "cxsim/FactUpdate-v0", "kwargs": {"num_facts": 3, "num_revisions": 3}}
    (tmp_path / "fu" / "env.json").write_text(json.dumps(old))  # made before the calibration
    with pytest.raises(ValueError, match=r"its preset changed.*write the kwargs out"):
        check_env_record(tmp_path / "fu", update)

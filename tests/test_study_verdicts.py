"""cxsim/paper_tables/verdicts.toml, the verdict run as a study file, and what the study engine gained
for it: claims under another protocol, "does not change" claims with a margin, a stage-0
checkpoint made by the study, settings that share SFT bases, and sides whose summaries
another arm writes (the Table 1 swap)."""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cxsim.cli import main as cxsim
from cxsim.studies import runner
from cxsim.studies.load import load_study
from cxsim.studies.selection import select, swapped_sides
from cxsim.studies.spec import StudyError
from cxsim.studies.stats import compare, seed_values, verdict
from cxsim.studies.stats import interval as seed_mean_interval
from cxsim.studies.where import own_files
from cxsim.tables import Interval
from cxsim.tracking import to_jsonable

ROOT = Path(__file__).resolve().parent.parent
VERDICTS = ROOT / "cxsim" / "paper_tables" / "verdicts.toml"

# -- the file against cxsim verdicts ----------------------------------------------------------


def test_the_file_holds_the_verdict_runs_settings_arms_and_claims():
    study = load_study(VERDICTS)
    assert replace(load_study(VERDICTS, budget="full"), budget=None) == study  # as written
    main, credit, critic = (study.setting(n) for n in ("main", "credit", "credit-critic"))
    assert len(main.arms) == 11 and credit.arms[:4] == critic.arms
    assert credit.env.env_id == "cxsim/KeyRecallActive-v0" and credit.sft.skip_rate == 0.5
    assert credit.ppo == main.ppo and (main.sft.episodes, main.eval.episodes) == (512, 256)
    assert critic.ppo.critic_warmup == 12 and critic.bases_from == "credit"
    (stage,) = study.stage0  # every setting starts from the one stage 0, on the main task
    assert all(s.stage0 == stage for s in study.settings) and stage.env == main.env
    assert stage.sft.omission_rate == 0.0 and stage.policy is None
    assert (stage.seeds, stage.copy_loss) == (tuple(range(1000, 1008)), 0.01)
    assert len(study.claims) == 18
    (unchanged,) = [c for c in study.claims if c.direction == "same"]
    assert unchanged.margin == 0.05  # verdicts_claims.NO_EFFECT_MARGIN
    swap = next(c for c in study.claims if c.name == "summarizer")
    assert [(s.arm, s.summarizer, s.evaluation) for s in swap.sides] == [
        ("base", "compactionrl", "external-summarizer+compactionrl"),
        ("base", "base", "external-summarizer+base"),
    ]


def test_one_claim_selects_its_two_arms_and_a_protocol_claim_its_evaluations():
    study = load_study(VERDICTS, seeds="20:24", budget="smoke")
    one = select(study, ("credit:correction-fixed-lambda",))
    assert one.pairs == (("credit", "fixed-lambda"), ("credit", "local-fixed-lambda"))
    assert [(c.setting, c.name) for c in one.claims] == [("credit", "correction-fixed-lambda")]
    single = select(study, ("main:single-unchanged",))
    assert single.pairs == (("main", "base"), ("main", "compactionrl"))
    from cxsim.studies.selection import extra_protocols

    assert extra_protocols(study, single, "main", "compactionrl") == ("single",)
    assert extra_protocols(study, select(study, ("main:beats-base",)), "main", "base") == ()
    # claim names repeat across settings: SETTING:CLAIM picks one
    critic = select(study, ("credit-critic:correction-fixed-lambda",))
    assert {s for s, _ in critic.pairs} == {"credit-critic"}
    # the swap: the acting base and the arm whose summaries it reads, evaluated apart
    swap = select(study, ("main:summarizer",))
    assert swap.pairs == (("main", "base"), ("main", "compactionrl"))
    assert extra_protocols(study, swap, "main", "base") == ()
    assert [(s.arm, s.summarizer) for s in swapped_sides(swap)] == [
        ("base", "compactionrl"), ("base", "base"),
    ]  # fmt: skip
    # a claim with a swap is kept when named or its whole setting runs, as a protocol claim
    assert "summarizer" not in [c.name for c in select(study, ("arm:compactionrl",)).claims]
    assert "summarizer" in [c.name for c in select(study, ("main",)).claims]


# -- the new claim kinds, on hand numbers -----------------------------------------------------


def interval(low: float, high: float, n: int = 8) -> Interval:
    return Interval((low + high) / 2, low, high, n, "t")


SAME = [  # (interval, the verdict of a "same" claim at margin 0.05)
    (interval(-0.04, 0.03), "reproduced"),
    (interval(0.0, 0.0), "reproduced"),
    (interval(-0.05, 0.05), "reproduced"),
    (interval(0.01, 0.08), "contradicted"),  # not inside the band, and it excludes 0
    (interval(-0.20, -0.06), "contradicted"),
    (interval(-0.03, 0.07), "not resolved"),  # covers 0, reaches past the band
    (interval(-0.10, 0.10), "not resolved"),
]


@pytest.mark.parametrize(("diff", "said"), SAME)
def test_a_same_claim_follows_the_verdict_pages_rule(diff: Interval, said: str):
    from cxsim.paper_tables.verdicts_claims import page_claims
    from cxsim.paper_tables.verdicts_page import verdict_of

    assert verdict(diff, "same", 0.05) == said
    (no_effect,) = [c for c in page_claims(load_study(VERDICTS)) if c.kind == "no-effect"]
    page = re.sub(r"\*\*|\s*\(inside .*\)", "", verdict_of(no_effect, diff))
    assert page == said


def test_a_same_claim_needs_its_margin_and_one_seed_resolves_nothing():
    with pytest.raises(ValueError, match="margin"):
        verdict(interval(-0.01, 0.01), "same")
    one = Interval(0.0, math.nan, math.nan, 1, "t")
    assert verdict(one, "same", 0.05) == "not resolved (one seed: no interval)"


def evaluation(successes: list[float]) -> dict[str, Any]:
    return {"per_task_success": successes, "pass_at_1": sum(successes) / len(successes)}


def test_compare_a_same_claim_by_seed():
    zero = [evaluation([0.0] * 4)] * 3
    c = compare(zero, zero, "pass_at_1", "same", 0.05)
    # Pass@1 0 on every seed on both sides: the metric could not have moved
    assert c.per_seed == (0.0, 0.0, 0.0)
    assert c.verdict == "degenerate: both arms at the metric's floor or ceiling on every seed"
    treatment = [evaluation(t) for t in ([1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0])]
    reference = [evaluation(r) for r in ([1, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0])]
    moved = compare(treatment, reference, "pass_at_1", "same", 0.05)
    assert moved.per_seed == (0.25, 0.5, 0.25, 0.25)
    assert moved.difference.low > 0.05 and moved.verdict == "contradicted"
    near = compare(treatment, treatment[1:] + treatment[:1], "pass_at_1", "same", 0.05)
    assert near.difference.low < 0 < near.difference.high and near.verdict == "not resolved"


def test_survival_by_round_is_read_from_each_seeds_evaluation():
    """``survival_round{k}``: the k-th share of the evaluation's ``survival`` entry; a seed
    whose summaries never reached round k (or wrote none) gives no value, not a zero."""
    seeds = [
        {"survival": {"share": [1.0, 0.5, 0.25], "facts": [4, 4, 4], "cliff_round": 3}},
        {"survival": {"share": [0.75, 0.25], "facts": [4, 4], "cliff_round": 2}},
        {"survival": {}},
    ]
    assert seed_values(seeds, "survival_round1")[:2] == [1.0, 0.75]
    second = seed_values(seeds, "survival_round2")
    assert second[:2] == [0.5, 0.25] and math.isnan(second[2])
    third = seed_mean_interval(seeds, "survival_round3")
    assert third.mean == 0.25 and third.n == 1  # one seed reached round 3
    low = seed_mean_interval(seeds[:2], "survival_round2")
    assert low.mean == pytest.approx(0.375) and low.low == 0.0  # clipped to the share's range


# -- the file's new keys, validated -----------------------------------------------------------

STUDY = """
seeds = "0:2"
[stage0.start]
seeds = "1000:1003"
sft.episodes = 4
[settings.a]
policy = "stage0:start"
env.kwargs = { memory_length = 5, obs_words_mean = 6.0, obs_words_std = 1.0, num_values = 4 }
compaction.budget = 160
[settings.b]
policy = "stage0:start"
bases_from = "a"
env.kwargs = { memory_length = 5, obs_words_mean = 6.0, obs_words_std = 1.0, num_values = 4 }
compaction.budget = 160
ppo.critic-warmup = 0
[arms.compactionrl]
preset = "compactionrl"
[arms.local]
preset = "no-cross-segment"
[[claims]]
name = "single-same"
setting = "a"
treatment = "compactionrl"
reference = "base"
protocol = "single"
direction = "same"
margin = 0.05
prediction = "no change: nothing fits one window"
[[claims]]
name = "correction"
setting = "a"
treatment = "compactionrl"
reference = "local"
prediction = "not resolved"
diagnostics = ["summary_recall", "charts/success_rate"]
[[claims]]
name = "correction"
setting = "b"
treatment = "compactionrl"
reference = "local"
prediction = "not resolved"
"""


SWAP_CLAIM = """
[[claims]]
name = "summaries"
setting = "a"
treatment = "base"
treatment_summarizer = "compactionrl"
reference = "base"
reference_summarizer = "base"
prediction = "positive: the trained policy's summaries keep more"
diagnostics = ["summary_recall"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_the_new_keys_parse(tmp_path: Path):
    study = load_study(write(tmp_path, STUDY + "[budgets.tiny]\nstage0.copy-loss = 9.0\n"))
    (stage,) = study.stage0
    assert (stage.setting, stage.seeds, stage.copy_loss, stage.policy) == (
        "a", (1000, 1001, 1002), 0.01, None,
    )  # fmt: skip
    assert stage.env == study.setting("a").env and stage.sft.episodes == 4
    assert study.setting("b").bases_owner == "a" and study.setting("a").bases_owner == "a"
    same = study.claims[0]
    assert (same.protocol, same.direction, same.margin) == ("single", "same", 0.05)
    assert same.commitments == {
        "prediction": same.prediction, "predicted_size": None, "margin": 0.05,
    }  # fmt: skip
    assert study.claims[1].diagnostics == ("summary_recall", "charts/success_rate")
    tiny = load_study(
        write(tmp_path, STUDY + "[budgets.tiny]\nstage0.copy-loss = 9.0\n"), None, "tiny"
    )
    assert tiny.stage0[0].copy_loss == 9.0


def swap(old: str, new: str) -> str:
    assert old in STUDY
    return STUDY.replace(old, new, 1)


BAD = [
    (swap("margin = 0.05\n", ""), 'direction = "same" needs a margin'),
    (swap('direction = "same"\n', ""), 'margin goes with direction = "same"'),
    (swap("margin = 0.05", "margin = 0"), "margin = 0: a number > 0"),
    (swap("margin = 0.05", "margin = 0.05\npredicted_size = 0.1"), "predicted_size is for higher"),
    (swap('direction = "same"', 'direction = "up"'), "choose higher, lower or same"),
    (swap('protocol = "single"', 'protocol = "singel"'), "protocol = 'singel': protocol 'singel'"),
    (swap('diagnostics = ["summary_recall"', 'diagnostics = ["recall"'), "diagnostics = ['recall'"),
    (swap('policy = "stage0:start"', 'policy = "stage0:begin"'),
     "settings.a: policy = 'stage0:begin' names no [stage0.begin] table; choose: start"),
    (swap("[settings.a]", "[stage0.unused]\n[settings.a]"), "stage0.unused: no setting starts"),
    (STUDY + SWAP_CLAIM.replace('_summarizer = "base"', '_summarizer = "nope"'),
     "reference_summarizer = 'nope' is not an arm of setting a; choose one of: base,"),
    (STUDY + SWAP_CLAIM.replace('prediction =', 'protocol = "compacted"\nprediction ='),
     "treatment_summarizer needs a protocol whose summaries another agent writes"),
    (STUDY + SWAP_CLAIM.replace('"compactionrl"', '"base"'),
     "treatment and reference are the same"),
    (swap('seeds = "1000:1003"', 'seeds = "1000:1003"\nsetting = "c"'), "setting = 'c': name"),
    (swap('seeds = "1000:1003"', 'seeds = "0:3"'), "seeds: seed 0 is also a candidate seed"),
    (swap('seeds = "1000:1003"', 'seeds = "1000:1003"\ncopy-loss = -1'), "copy_loss = -1"),
    (swap("sft.episodes = 4", "sft.episodes = 0"), "stage0.start: sft:"),
    (swap('bases_from = "a"', 'bases_from = "c"'), "bases_from = 'c': name another setting"),
    (swap('bases_from = "a"', 'bases_from = "b"'), "bases_from = 'b': name another setting"),
    (swap('bases_from = "a"', 'bases_from = "a"\nsft.epochs = 2'), "its sft differs"),
    (STUDY + '[[claims]]\nname = "correction"\nsetting = "a"\ntreatment = "local"\n'
     'reference = "base"\nprediction = "x"\n', "another claim of setting a is named"),
    (STUDY + "[budgets.x]\nstage0.sft.epoch = 2\n", "did you mean sft.epochs?"),
    (STUDY + '[budgets.x]\nstage0.seeds = "3:1"\n', "needs b > a"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_new_key_fails_in_one_line_naming_it(tmp_path: Path, text: str, message: str):
    with pytest.raises(StudyError) as error:
        load_study(write(tmp_path, text), budget="x" if "[budgets.x]" in text else None)
    said = str(error.value)
    assert message in said and "\n" not in said


def test_the_reference_pages_stage0_tables_parse_beside_the_example(tmp_path: Path):
    import shutil

    from test_studies import code_blocks

    blocks = code_blocks(ROOT / "docs" / "reference" / "study-files.md", "toml")
    example, stage0 = blocks[0], next(b for b in blocks if "[stage0." in b)
    shutil.copy(ROOT / "examples" / "my_estimator.py", tmp_path)
    for claim in ("beats-base", "floor-helps"):  # two settings now: each claim names its own
        example = example.replace(f'name = "{claim}"', f'name = "{claim}"\nsetting = "small"')
    study = load_study(write(tmp_path, example + stage0), budget="smoke")
    (stage,) = study.stage0
    setting = study.setting("from-stage0")
    assert setting.stage0 == stage and (stage.setting, stage.policy) == ("small", None)
    assert stage.env == study.setting("small").env and stage.sft.omission_rate == 0.0
    assert (stage.seeds, stage.copy_loss, setting.arms) == (
        tuple(range(1000, 1008)), 0.01, ("compactionrl",),
    )  # fmt: skip


# -- the runner, with the stages replaced by recorders ----------------------------------------


class Stages:
    """Stand-ins for run_sft, train and evaluate that record their configs and return what
    the real ones return, with figures that depend on the config: a stage-0 candidate's
    held-out execution loss by its seed, Pass@1 by arm, 0 under Single."""

    LOSSES: ClassVar[dict[int, float]] = {1000: 0.05, 1001: 0.004, 1002: 0.001}
    PASS: ClassVar[dict[str, float]] = {"base": 0.25, "compactionrl": 0.75, "local": 0.5}

    def __init__(self) -> None:
        self.sft: list[Any] = []
        self.train: list[Any] = []
        self.evaluate: list[Any] = []

    def run_sft(self, cfg: Any) -> dict[str, Any]:
        self.sft.append(cfg)
        (Path(cfg.run_dir) / "policy").mkdir(parents=True)  # a saved model, as run_sft leaves
        (Path(cfg.run_dir) / "policy" / "config.json").write_text("{}")
        return {
            "policy": str(Path(cfg.run_dir) / "policy"),
            "final": {"losses/heldout_execution": self.LOSSES.get(cfg.seed, 0.002)},
            "wall_time_s": 1.0,
            "config": {"compaction": {"budget": 160, "threshold": 65, "max_response_tokens": 3,
                                      "max_summary_tokens": 32}},
        }  # fmt: skip

    def run_train(self, cfg: Any) -> dict[str, Any]:
        self.train.append(cfg)
        (Path(cfg.run_dir) / "policy").mkdir(parents=True)
        (Path(cfg.run_dir) / "policy" / "config.json").write_text("{}")
        return {
            "policy": str(Path(cfg.run_dir) / "policy"),
            "iterations_done": cfg.ppo.iterations,
            "wall_time_s": 2.0,
            "final": {"charts/success_rate": 0.5 + 0.1 * cfg.seed},
            "config": {"ppo": to_jsonable(cfg.ppo)},
        }

    def run_evaluate(self, cfg: Any, label: str | None = None) -> dict[str, Any]:
        self.evaluate.append(cfg)
        rate = 0.0 if cfg.eval.protocols == ("single",) else self.PASS[label or ""]
        tasks = [1.0] * round(4 * rate) + [0.0] * (4 - round(4 * rate))
        results = [
            {"protocol": p, "pass_at_1": rate, "per_task_success": tasks,
             "summary_recall": None if p == "single" else rate}
            for p in cfg.eval.protocols
        ]  # fmt: skip
        return {"results": results, "wall_time_s": 0.5}


@pytest.fixture
def stages(monkeypatch: pytest.MonkeyPatch) -> Stages:
    from cxsim.pipeline import evaluate, sft, train

    made = Stages()
    monkeypatch.setattr(sft, "run_sft", made.run_sft)
    monkeypatch.setattr(train, "train", made.run_train)
    monkeypatch.setattr(evaluate, "evaluate", made.run_evaluate)
    return made


def test_stage0_bases_from_and_protocol_claims_run_what_they_need(tmp_path: Path, stages: Stages):
    from cxsim.studies.page import write_page

    study = load_study(write(tmp_path, STUDY))
    runs_dir = str(tmp_path / "runs")
    outcome = runner.run_study(study, select(study), runs_dir)
    # stage 0: candidates in order until one copies (1000 does not, 1001 does; 1002 unmade)
    candidates = [c.seed for c in stages.sft if "stage0-start" in c.run_dir]
    assert candidates == [1000, 1001] and outcome["stage0"]["start"]["seed"] == 1001
    assert all(c.model.policy is None for c in stages.sft[:2])  # a fresh model, as the table says
    # one base per seed, in setting a's folder, started from the stage's checkpoint
    bases = [c for c in stages.sft if "stage0-start" not in c.run_dir]
    assert [c.seed for c in bases] == [0, 1]
    assert all(c.model.policy == outcome["stage0"]["start"]["policy"] for c in bases)
    assert all(Path(c.run_dir).parts[-3].startswith("a-") for c in bases)
    for cfg in stages.train:  # every arm of both settings from its seed's base
        assert cfg.model.policy == str(Path(bases[cfg.seed].run_dir) / "policy")
    assert len(stages.train) == 2 * 2 * 2  # 2 settings x 2 arms x 2 seeds
    # the base's evaluation made once, shared by b; Single only for the claim's two arms
    protocols = sorted((c.model.policy.split("/runs/")[1].split("/")[0][0], c.eval.protocols)
                       for c in stages.evaluate)  # fmt: skip
    assert protocols.count(("a", ("single",))) == 4  # base and compactionrl, 2 seeds
    assert not any(p == ("single",) for _, p in protocols if _ == "b")
    assert len(stages.evaluate) == 2 * 3 + 2 * 2 + 4  # a: 3 evaluated, b: 2 arms, + Single
    assert outcome["made"] == {"sft": 2, "train": 8, "eval": 14, "stage0": 2}
    b_base = [r["eval_file"] for r in outcome["runs"]["b"]["base"]]
    assert b_base == [r["eval_file"] for r in outcome["runs"]["a"]["base"]]
    # the page: the same claim's verdict from these numbers, the stage, the shared bases
    out = write_page(tmp_path / "page", study, select(study), outcome, made_by(runs_dir))
    page = out["page"].read_text()
    data = json.loads(out["results"].read_text())
    same = next(c for c in data["claims"] if c["name"] == "single-same")
    assert same["margin"] == 0.05 and same["paired_seeds"] == 2  # 2 seeds: no verdict
    assert same["verdict"] == "too few seeds (2 paired; a verdict needs 3)"
    assert same["difference"]["mean"] == 0.0 and same["per_seed_difference"] == [0.0, 0.0]
    correction = next(c for c in data["claims"] if c["name"] == "correction")
    assert correction["per_seed_difference"] == [0.25, 0.25]
    diag = correction["diagnostics"]["charts/success_rate"]
    assert diag["treatment"]["mean"] == pytest.approx(0.55)
    assert "`compactionrl` within +/-0.05 of `base`" in page and "| within +/-0.05 |" in page
    assert "**Stage 0 `start`, shared.**" in page and "seed 1001 (tried: seed 1000: 0.0500" in page
    assert "setting **a**'s (bases_from" in page and "Pass@1 (single)" in page
    assert "`summary_recall` 0.75 [0.75, 0.75] vs 0.50 [0.50, 0.50]" in page
    # a rerun reads everything, the stage's choice included
    before = len(stages.sft) + len(stages.train) + len(stages.evaluate)
    again = runner.run_study(study, select(study), runs_dir)
    assert again["made"] == {"sft": 0, "train": 0, "eval": 0, "stage0": 0}
    assert len(stages.sft) + len(stages.train) + len(stages.evaluate) == before


def test_a_stage0_where_no_candidate_copies_says_what_to_change(tmp_path: Path, stages: Stages):
    runs_dir = str(tmp_path / "runs")
    study = load_study(write(tmp_path, swap('seeds = "1000:1003"', 'seeds = "1000:1001"')))
    with pytest.raises(StudyError, match=r"stage0.start: no candidate .* \(.*1000: 0\.0500\);"):
        runner.run_study(study, select(study), runs_dir)
    assert not stages.train
    # more candidates, as the line says: the one made is read, not made again
    study = load_study(write(tmp_path, STUDY))
    outcome = runner.run_study(study, select(study), runs_dir)
    assert [c.seed for c in stages.sft if "stage0-start" in c.run_dir] == [1000, 1001]
    assert outcome["stage0"]["start"]["seed"] == 1001 and outcome["made"]["stage0"] == 1


def test_a_swap_is_evaluated_after_both_arms_with_their_policies(
    tmp_path: Path, stages: Stages, monkeypatch: pytest.MonkeyPatch
):
    from cxsim.studies.page import write_page

    swapped: list[tuple[Any, str]] = []

    def evaluate_with_summarizer(cfg: Any, summarizer: str, label: str) -> dict[str, Any]:
        assert len(stages.train) == 4  # every arm of setting a trained first (2 arms x 2 seeds)
        swapped.append((cfg, summarizer))
        rate = 0.75 if "/compactionrl-" in summarizer else 0.25
        tasks = [1.0] * round(4 * rate) + [0.0] * (4 - round(4 * rate))
        result = {"protocol": cfg.eval.protocols[0], "pass_at_1": rate,
                  "per_task_success": tasks, "summary_recall": rate}  # fmt: skip
        return {"results": [result], "wall_time_s": 0.5}

    monkeypatch.setattr(runner, "evaluate_with_summarizer", evaluate_with_summarizer)
    arms = STUDY[STUDY.index("[arms.") : STUDY.index("[[claims]]")]
    text = STUDY.split("[settings.b]")[0] + arms  # setting a alone, with its two arms
    study = load_study(write(tmp_path, text + SWAP_CLAIM))
    runs_dir = str(tmp_path / "runs")
    selection = select(study)
    outcome = runner.run_study(study, selection, runs_dir)
    assert len(swapped) == 4  # two sides x two seeds
    bases = {c.seed: str(Path(c.run_dir) / "policy") for c in stages.sft if c.seed in (0, 1)}
    trained = {(c.seed, Path(c.run_dir).name.rsplit("-", 1)[0]): c for c in stages.train}
    for cfg, summarizer in swapped:
        seed = cfg.eval.seed
        assert cfg.model.policy == bases[seed] and cfg.eval.protocols == ("external-summarizer",)
        assert summarizer in (
            bases[seed],
            str(Path(trained[(seed, "compactionrl")].run_dir) / "policy"),
        )
        assert Path(cfg.out).name.startswith("base+") and Path(cfg.out).parent.name == "eval"
    base = outcome["runs"]["a"]["base"]
    assert [r["eval"]["external-summarizer+compactionrl"]["pass_at_1"] for r in base] == [0.75] * 2
    assert [r["eval"]["external-summarizer+base"]["pass_at_1"] for r in base] == [0.25] * 2
    assert outcome["made"]["eval"] == 2 * 3 + 4  # base and two arms per seed, then the swaps
    out = write_page(tmp_path / "page", study, selection, outcome, made_by(runs_dir))
    claim = next(c for c in json.loads(out["results"].read_text())["claims"]
                 if c["name"] == "summaries")  # fmt: skip
    assert claim["per_seed_difference"] == [0.5, 0.5]  # 2 seeds: no verdict
    assert claim["verdict"] == "too few seeds (2 paired; a verdict needs 3)"
    assert claim["treatment"] == "base + compactionrl's summaries"
    page = out["page"].read_text()
    assert "Pass@1 (external-summarizer+compactionrl)" in page
    assert "`summary_recall` 0.75 [0.75, 0.75] vs 0.25 [0.25, 0.25]" in page
    again = runner.run_study(study, selection, runs_dir)
    assert again["made"]["eval"] == 0 and len(swapped) == 4  # read from the cache


def test_a_swap_evaluation_is_a_direct_evaluation_of_the_two_policies(tmp_path: Path):
    """The study's swap (runner.evaluate_with_summarizer) plays the rollouts a direct
    ``cxsim.evaluation.evaluate_protocol`` of the acting and the writing policy plays (as
    ``cxsim tables``'s Table 1 did before it ran on the study engine): same tasks, successes
    and summaries kept."""
    from cxsim.agents.lm_agent import LMAgent
    from cxsim.agents.models import load_policy
    from cxsim.devices import resolve_device
    from cxsim.evaluation import evaluate_protocol
    from cxsim.generation import SamplingConfig
    from cxsim.preflight import preflight
    from cxsim.pretrained import PRETRAINED

    study = load_study(write(tmp_path, STUDY))
    setting = replace(study.setting("a"), eval=replace(study.setting("a").eval, episodes=3))
    out = tmp_path / "swap.json"
    cfg = runner.eval_config(
        runner.under(setting, "external-summarizer"), 2, tmp_path, PRETRAINED, out, "cpu"
    )
    made = runner.evaluate_with_summarizer(cfg, PRETRAINED, "swap")
    assert json.loads(out.read_text())["summarizer"] == PRETRAINED
    device = resolve_device("cpu")
    agents = []
    for _ in range(2):  # the actor, then the summarizer
        policy, _, chat = load_policy(PRETRAINED, device, None)
        sampling = SamplingConfig(temperature=setting.eval.temperature)
        agents.append(LMAgent(policy, chat, sampling, device=device, precision="fp32"))
    direct, _ = evaluate_protocol(
        setting.env.env_id, setting.env.kwargs, agents[0], chat,
        preflight(setting.env, setting.compaction, chat), "external-summarizer",
        3, 1, 2, summarizer_agent=agents[1],
    )  # fmt: skip
    (result,) = made["results"]
    for key in ("per_task_success", "summary_recall", "mean_compactions", "tokens_generated"):
        assert result[key] == direct[key], key
    assert result["mean_compactions"] > 0  # summaries were written


def made_by(runs_dir: str) -> dict[str, Any]:
    return {"command": "cxsim study", "commit": "abc", "wall_time_s": 1.0,
            "runs_dir": runs_dir, "device": "cpu"}  # fmt: skip


def test_print_commands_start_the_bases_from_the_stage0_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    import tyro

    from cxsim.pipeline import sft as sft_entry
    from cxsim.studies.stages import stage0_sft_config

    runs = tmp_path / "runs"
    cxsim(["study", str(VERDICTS), "--budget", "smoke", "--seeds", "8", "--runs-dir", str(runs),
           "--print-commands", "--only", "credit:correction-fixed-lambda", "main:single-unchanged"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in lines if line.startswith("cxsim ")]
    assert [c[1] for c in commands] == ["sft", "sft", "eval", "eval", "train", "eval", "eval",
                                        "sft", "train", "eval", "train", "eval"]  # fmt: skip
    assert any("stage0.copies: candidate seeds [1000]" in line for line in lines)
    stage0 = tyro.cli(sft_entry.Config, args=commands[0][2:])
    study = load_study(VERDICTS, "8", "smoke")
    made = stage0_sft_config(
        study.stage0[0],
        1000,
        own_files(runs, VERDICTS) / "replicate" / "stage0-copies" / "p1000",
        "cpu",
    )
    assert stage0 == made and stage0.model.policy is None
    (Path(made.run_dir) / "policy").mkdir(parents=True)  # the checkpoint the command would make
    (Path(made.run_dir) / "policy" / "config.json").write_text("{}")
    for base in (commands[1], commands[7]):  # main's and credit's bases, from the stage
        parsed = tyro.cli(sft_entry.Config, args=base[2:])
        assert parsed.model.policy == str(Path(made.run_dir) / "policy") and parsed.seed == 8
    evals = [c for c in commands if c[1] == "eval"]
    singles = [c for c in evals if c[c.index("--eval.protocols") + 1] == "single"]
    assert [Path(c[c.index("--out") + 1]).name for c in singles] == [
        "base@single.json", "compactionrl@single.json",
    ]  # fmt: skip


# -- the shipped file end to end --------------------------------------------------------------


@pytest.mark.slow
def test_one_claim_of_the_verdict_file_on_two_seeds(tmp_path: Path):
    runs, out = tmp_path / "runs", tmp_path / "page"
    cxsim(["study", str(VERDICTS), "--budget", "smoke", "--seeds", "0:2", "--only",
           "credit:correction-fixed-lambda", "--runs-dir", str(runs), "--out", str(out),
           "--quiet"])  # fmt: skip

    # only that claim's two arms were trained, from one stage 0 and the credit setting's bases
    def unit(path: Path, depth: int) -> tuple[str, ...]:
        setting, seed = path.parents[depth + 1].name, path.parents[depth].name
        return (setting.rsplit("-", 1)[0], seed, path.parts[-depth].rsplit("-", 1)[0])

    trained = sorted(unit(p, 2) for p in runs.glob("*/s*/train/*/results.json"))
    assert trained == [("credit", f"s{k}", arm) for k in (0, 1)
                       for arm in ("fixed-lambda", "local-fixed-lambda")]  # fmt: skip
    evaluated = sorted(unit(p, 1) for p in runs.glob("*/s*/eval/*.json"))
    assert evaluated == trained
    assert len(list(runs.glob("*/s*/sft/results.json"))) == 2
    assert len(list(runs.glob("stage0-copies-*/p*/sft/results.json"))) == 1
    assert sorted(p.name.split("-")[0] for p in runs.iterdir() if p.is_dir()) == [
        "credit",
        "stage0",
        "studies",  # the study file's own records (its predictions)
    ]
    (page,) = out.glob("verdicts.*.json")  # a narrowed run's page, beside the full one's name
    assert page.name == "verdicts.budget-smoke.seeds-0-1.only-credit_correction-fixed-lambda.json"
    results = json.loads(page.read_text())
    assert results["made_now"] == {"sft": 2, "train": 4, "eval": 4, "stage0": 1}
    (claim,) = results["claims"]
    assert (claim["setting"], claim["name"]) == ("credit", "correction-fixed-lambda")
    assert len(claim["per_seed_difference"]) == 2
    page = page.with_suffix(".md").read_text()
    study = load_study(VERDICTS, "0:2", "smoke")
    (expected,) = [
        c for c in study.claims if (c.setting, c.name) == (claim["setting"], claim["name"])
    ]
    row = next(
        line
        for line in page.splitlines()
        if line.startswith("| **correction-fixed-lambda** (credit)")
    )
    assert claim["verdict"] in row and expected.statement in row
    assert f"| **correction-fixed-lambda** | {expected.prediction} |" in page

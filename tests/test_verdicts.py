"""cxsim verdicts: the verdict rules, the run as a study, the page from known per-seed
numbers, a cache of the older layout adopted, the pipeline."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from cxsim.cli import main as cxsim
from cxsim.paper_tables.verdicts import STUDY_FILE, Config, parse, verdict_study
from cxsim.paper_tables.verdicts_claims import (
    Claim,
    evaluation_name,
    evaluation_side,
    page_claims,
)
from cxsim.paper_tables.verdicts_page import (
    critic_by_segment,
    informative_mean,
    render_page,
    verdict_of,
)
from cxsim.tables import Interval

FULL = verdict_study(parse(["--preset", "full"]))
CLAIMS = page_claims(FULL)
ARMS = FULL.setting("main").arms
CREDIT_ARMS = FULL.setting("credit").arms

PAPER = Claim("c", "Table 3", "x helps", "compactionrl", "base", "", "summary_recall")
EXTRA = Claim("e", "not in the paper", "x beats y", "compactionrl", "base", "", "summary_recall")
NULL = Claim("n", "Table 2", "x does not change y", "compactionrl@single", "base@single", "",
             "single_end", kind="no-effect")  # fmt: skip


def interval(low: float, high: float) -> Interval:
    return Interval((low + high) / 2, low, high, 8, "t")


def test_verdict_words_follow_the_interval_and_the_claim_kind():
    assert verdict_of(PAPER, interval(0.05, 0.3)) == "**reproduced**"
    assert verdict_of(PAPER, interval(-0.3, -0.05)) == "**contradicted**"
    assert verdict_of(PAPER, interval(-0.1, 0.2)) == "not resolved"
    assert verdict_of(EXTRA, interval(0.05, 0.3)) == "**holds**"
    assert verdict_of(EXTRA, interval(-0.3, -0.05)) == "**reversed**"
    assert verdict_of(NULL, interval(0.0, 0.0)).startswith("**reproduced**")
    assert verdict_of(NULL, interval(-0.02, 0.04)).startswith("**reproduced**")
    assert verdict_of(NULL, interval(-0.02, 0.2)) == "not resolved"
    assert verdict_of(NULL, interval(0.1, 0.2)) == "**contradicted**"
    assert verdict_of(PAPER, Interval(math.nan, math.nan, math.nan, 0, "none")) == "not measured"


def test_the_run_is_the_study_file_at_the_presets_budget():
    study = FULL
    main, credit, critic = study.settings
    assert study.path == str(STUDY_FILE) and STUDY_FILE.parent.name == "paper_tables"
    assert [s.name for s in study.settings] == ["main", "credit", "credit-critic"]
    assert len(ARMS) == 11 and critic.arms == CREDIT_ARMS[:4] and len(CREDIT_ARMS) == 6
    (stage,) = study.stage0  # one stage 0, on the main task, shared by every setting
    assert all(s.stage0 == stage for s in study.settings) and stage.env == main.env
    assert (stage.sft.episodes, stage.sft.epochs, stage.sft.omission_rate) == (512, 8, 0.0)
    assert (stage.seeds, stage.copy_loss) == (tuple(range(1000, 1008)), 0.01)
    assert credit.env.env_id == "cxsim/KeyRecallActive-v0" and credit.sft.skip_rate == 0.5
    assert credit.ppo == main.ppo and critic.ppo.critic_warmup == 12
    assert critic.bases_from == "credit" and critic.sft == credit.sft
    assert all(
        s.eval.protocols == ("compacted",) and s.eval.episodes == 256 for s in study.settings
    )
    assert study.seeds == tuple(range(8))
    # each claim of the file is a row of the page: its evaluations named from its sides
    assert len(CLAIMS) == len(study.claims) == 18
    for claim, made in zip(CLAIMS, study.claims, strict=True):
        assert (made.setting, made.name, made.prediction) == (
            claim.setting,
            claim.key,
            claim.prediction,
        )
        assert made.statement == f"{claim.statement} ({claim.source})"
        for name, side in (
            (claim.treatment, made.treatment_side),
            (claim.reference, made.reference_side),
        ):
            assert side.arm in ("base", *study.setting(side.setting).arms), claim.key
            assert evaluation_name(side.arm, side.protocol, side.summarizer) == name
        assert made.direction == ("same" if claim.kind == "no-effect" else "higher")
    swap = next(c for c in study.claims if c.name == "summarizer")
    assert [(s.arm, s.protocol, s.summarizer) for s in swap.sides] == [
        ("base", "external-summarizer", "compactionrl"), ("base", "external-summarizer", "base"),
    ]  # fmt: skip
    assert evaluation_side("compactionrl@single") == ("compactionrl", "single", "")
    sources = {c.source for c in CLAIMS}
    assert {"Table 1", "Table 2", "Table 3", "Table 4", "not in the paper"} == sources
    # what only the page adds, from verdicts_claims.PAGE_NOTES
    row = next(c for c in CLAIMS if (c.setting, c.key) == ("credit", "correction-fixed-lambda"))
    assert row.diagnostic == "first_window_credit" and row.paper_share == (0.54, 0.65)
    assert next(c for c in CLAIMS if c.key == "correction-segment-scope").added
    smoke = verdict_study(parse([]))
    assert smoke.budget == "smoke" and smoke.seeds == (0, 1)
    assert smoke.setting("main").env.kwargs["memory_length"] == 5


def claims_file(tmp_path: Path, old: str, new: str) -> str:
    path = tmp_path / "verdicts.toml"
    text = STUDY_FILE.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return str(path)


def test_a_claim_the_page_cannot_show_fails_before_any_work(tmp_path: Path):
    unknown = claims_file(tmp_path, 'name = "stitched"', 'name = "stitched-again"')
    with pytest.raises(ValueError, match="claim main:stitched-again of the verdict study: give"):
        Config(study=unknown)
    sourceless = claims_file(
        tmp_path, "beats its SFT base under Compacted (Table 2)", "beats its SFT base"
    )
    with pytest.raises(ValueError, match="end its statement with its source"):
        Config(study=sourceless)
    with pytest.raises(ValueError, match=r"--budget huge: verdicts.toml has no \[budgets.huge\]"):
        Config(preset="huge")


def test_seeds_are_a_count_or_a_range():
    assert parse(["--seeds", "3"]).seed_list == (0, 1, 2)
    assert parse(["--preset", "full"]).seed_list == tuple(range(8))
    assert parse(["--seeds", "20:24"]).seed_list == (20, 21, 22, 23)
    assert parse([]).seed_list == (0, 1)  # the smoke preset: the file's first two
    from dataclasses import replace

    with pytest.raises(ValueError, match="--seeds 5:6: a paired interval needs at least 2"):
        replace(Config(), seeds="5:6")
    with pytest.raises(ValueError, match="--seeds '2-4': write a:b"):
        replace(Config(), seeds="2-4")


# -- the page from synthetic seeds ------------------------------------------------------


PASS = {"base": 0.4, "compactionrl": 0.9, "no-summary-training": 0.5, "t1:compactionrl": 0.8,
        "t1:base": 0.4}  # fmt: skip


def result(p: float, seed: int, n: int = 100) -> dict:
    solved = round(n * min(max(p + 0.02 * (seed - 1), 0.0), 1.0))
    return {"per_task_success": [1.0] * solved + [0.0] * (n - solved), "summary_recall": p}


def history(seed: int) -> list[dict]:
    # one informative iteration (success 0.5) and one at success 1 (EV undefined there)
    return [
        {"charts/success_rate": 0.5, "critic/mc_ev_seg0": 0.1, "critic/mc_ev_seg4": 0.6 + 0.01 * seed},
        {"charts/success_rate": 1.0, "critic/mc_ev_seg0": math.nan, "critic/mc_ev_seg4": math.nan},
    ]  # fmt: skip


CREDIT_PASS = {"base": 0.6, "compactionrl": 0.95, "fixed-lambda": 0.7}


def synthetic_runs(seeds: int = 3, credit: bool = False) -> list[dict]:
    runs = []
    arms = CREDIT_ARMS if credit else ARMS
    for s in range(seeds):
        evals = {}
        for name in ("base", *arms):
            p = CREDIT_PASS.get(name, 0.9) if credit else PASS.get(name, 0.7)
            evals[name] = {"results": {"compacted": result(p, s)}}
        for name in () if credit else ("base", "compactionrl"):
            evals[f"{name}@single"] = {"results": {"single": result(0.0, 1)}}
        for name in () if credit else ("compactionrl", "base"):
            key = f"t1:{name}"
            evals[key] = {"results": {"external-summarizer": result(PASS[key], s)}}
        final = {"charts/success_rate": 0.9, "credit/abs_adv_summary": 0.5,
                 "credit/abs_adv_seg0": 0.25, "compaction/summary_recall": 0.8,
                 "weights/token-mean/summary_share": 0.66}  # fmt: skip
        train = {arm: {"final": final, "history": history(s)} for arm in arms}
        runs.append({"seed": s, "seconds": 60.0, "eval": evals, "train": train})
    return runs


def test_page_pairs_by_seed_and_gives_every_claim_a_verdict(tmp_path: Path):
    study = verdict_study(parse(["--preset", "full"]))
    invocations = [
        {"commit": "abc1234", "command": "cxsim verdicts --preset full", "wall_time_s": 3000.0},
        {"commit": "abc1234", "command": "cxsim verdicts --preset full", "wall_time_s": 5.0},
        {"commit": "def5678", "command": "cxsim verdicts --preset full", "wall_time_s": 1200.0},
    ]
    settings = {"main": synthetic_runs(), "credit": synthetic_runs(credit=True),
                "credit-critic": synthetic_runs(credit=True)}  # fmt: skip
    setting_of = {s.name: s for s in study.settings}
    chosen = {"seed": 1003, "tried": [{"seed": 1000, "heldout_execution": 0.0517},
                                      {"seed": 1003, "heldout_execution": 0.0014}]}  # fmt: skip
    page = render_page(setting_of, settings, CLAIMS, "cxsim verdicts --preset full", invocations,
                       2, tmp_path, (study.stage0[0], chosen))  # fmt: skip
    text = page.read_text()
    assert "**70 minutes** of wall time in all" in text  # 50 + 20; the 5 s rerun left out
    assert "at commit abc1234 (50 min) then" in text and "**3 independent seeds.**" in text
    assert "add up to 9 process-minutes" in text  # the three settings' recorded seconds
    assert "2 seeds at a time" in text
    assert "cloned from 512 omission-0 demonstrations x 8 epochs" in text
    assert "(tried: seed 1000: 0.0517, seed 1003: 0.0014)" in text
    for claim in CLAIMS:
        assert claim.statement in text and claim.prediction in text
    # the shifts are equal on every seed, so each difference is exact with no spread
    row = next(line for line in text.splitlines() if "CompactionRL beats its SFT base" in line)
    assert "+0.50 [+0.50, +0.50]" in row and "**reproduced**" in row
    row = next(line for line in text.splitlines() if "training the summary tokens" in line)
    assert "+0.40" in row and "**reproduced**" in row
    row = next(line for line in text.splitlines() if "does not improve Single" in line)
    assert "+0.00" in row and "| degenerate: both arms at 0 on every seed |" in row
    # the paper's token-level loss effect is 97-103% of the gain (+0.50 here); this run's
    # difference is +0.20 on every seed, so it lies below that size
    row = next(
        line for line in text.splitlines() if "| token-level loss" in line and "of the gain" in line
    )
    assert "+0.48 to +0.52" in row and "+0.20 [+0.20, +0.20]: **below it**" in row
    assert re.search(r"\| `s0` \| `s1` \| `s2` \||\| s0 \| s1 \| s2 \|", text)
    # the credit setting's claims pair that setting's seeds: 0.7 - 0.9 on every seed
    row = next(line for line in text.splitlines() if "fixed lambda 0.95), where credit" in line)
    assert "a critic that tracks" not in row  # the credit setting's row comes first
    assert "-0.20 [-0.20, -0.20]" in row and "**contradicted**" in row
    assert "window 0 |advantage| 0.250" in row
    assert "**The credit setting**: `cxsim/KeyRecallActive-v0`" in text
    assert "The credit setting:" in text and "`fixed-lambda` | 0.680" in text
    assert (tmp_path / "verdicts_critic.png").stat().st_size > 1000
    assert "The same figure on the credit setting:" in text
    assert "The same figure on the credit-critic setting:" in text
    assert "**The credit-critic setting** (12 value-only warm-up iterations, not 2" in text
    assert "PPO 2 value-only iterations then 8 with the actor" in text
    row = next(line for line in text.splitlines() if "the summarizer changes success" in line)
    assert "+0.40 [+0.40, +0.40]" in row
    assert "summary recall (evaluation) 0.80 [0.80, 0.80] vs 0.40 [0.40, 0.40]" in row


def test_a_page_made_outside_a_git_checkout_says_so():
    from cxsim.paper_tables.verdicts_page import made_by

    said = made_by([{"commit": "unknown", "command": "cxsim verdicts", "wall_time_s": 120.0}])
    assert said.startswith("`cxsim verdicts` outside a git checkout (cxsim ")
    assert "commit unknown" not in said
    assert "at commit abc1234 (2 min)" in made_by(
        [{"commit": "abc1234", "command": "cxsim verdicts", "wall_time_s": 120.0}]
    )


def test_a_row_true_by_construction_is_degenerate(tmp_path: Path, monkeypatch):
    # PPO without compaction at the base's Pass@1 on every seed (every reward 0 under Single)
    monkeypatch.setitem(PASS, "ppo-single", PASS["base"])
    study = verdict_study(parse(["--preset", "full"]))
    invocations = [{"commit": "abc1234", "command": "cxsim verdicts", "wall_time_s": 60.0}]
    settings = {"main": synthetic_runs(), "credit": synthetic_runs(credit=True),
                "credit-critic": synthetic_runs(credit=True)}  # fmt: skip
    setting_of = {s.name: s for s in study.settings}
    chosen = {"seed": 1003, "tried": [{"seed": 1003, "heldout_execution": 0.0014}]}
    page = render_page(setting_of, settings, CLAIMS, "cxsim verdicts", invocations, 2, tmp_path,
                       (study.stage0[0], chosen))  # fmt: skip
    rows = page.read_text().splitlines()
    row = next(line for line in rows if "CompactionRL beats PPO without compaction" in line)
    assert "+0.50 [+0.50, +0.50]" in row
    assert "| degenerate: `ppo-single` is the base on every seed (the same Pass@1)" in row
    row = next(line for line in rows if "CompactionRL beats its SFT base" in line)
    assert "**reproduced**" in row  # the row it repeats keeps its verdict


def test_a_page_of_one_claim_leaves_out_what_was_not_run(tmp_path: Path):
    study = verdict_study(parse([]))
    credit = synthetic_runs(credit=True)
    for run in credit:  # --only credit:correction-fixed-lambda: its two arms, no base
        run["eval"] = {k: v for k, v in run["eval"].items() if k.endswith("fixed-lambda")}
        run["train"] = {k: v for k, v in run["train"].items() if k.endswith("fixed-lambda")}
    (claim,) = [c for c in CLAIMS if (c.setting, c.key) == ("credit", "correction-fixed-lambda")]
    setting_of = {s.name: s for s in study.settings}
    page = render_page(setting_of, {"credit": credit}, [claim], "cxsim verdicts", [], 1, tmp_path)
    text = page.read_text()
    assert "CompactionRL" not in text.split("**Verdicts.**")[0]  # no gain: neither was run
    rows = [line for line in text.splitlines() if line.startswith("| the cross-segment")]
    assert len(rows) == 3  # its verdict, its row against the paper's sizes, its prediction
    assert "-0.20 [-0.20, -0.20]" in rows[0] and "| - | - |" in rows[1]
    assert "## The critic by segment" not in text  # a figure of the main setting


def test_critic_by_segment_reads_only_informative_iterations():
    runs = synthetic_runs()
    assert informative_mean(runs[0]["train"]["compactionrl"]["history"], "critic/mc_ev_seg4") == 0.6
    table = critic_by_segment(runs, ("compactionrl",))
    cells = table["compactionrl"]
    assert len(cells) == 5  # segments 0..4; the history names 0 and 4 only
    assert cells[4].mean == pytest.approx(0.61) and cells[0].mean == pytest.approx(0.1)
    assert math.isnan(cells[2].mean)


# -- a cache of the older layout --------------------------------------------------------------


def old_cache(cfg: Config, loss_1001: float = 0.002) -> dict[str, float]:
    """The files ``cxsim verdicts`` wrote before it ran through the study engine, for ``cfg``
    (its folders named after a hash of their settings, recorded in settings.json; candidate
    1000 of stage 0 does not copy, 1001 does); returns each evaluation's Pass@1 by
    (setting, seed, name), which its tasks encode."""
    from cxsim.paper_tables.verdicts_adopt import old_settings
    from cxsim.tracking import write_json

    study = verdict_study(cfg)
    root = Path(cfg.runs_dir)
    main = root / f"{cfg.preset}-0123abcd"

    def policy(where: str) -> str:  # a saved model, as the old runs left beside their results
        folder = root.parent / "old" / where / "policy"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        return str(folder)

    write_json(main / "settings.json", old_settings(study, study.settings[0], cfg.compute.device))
    write_json(main / "invocations.json", {"invocations": [
        {"commit": "old1234", "command": "cxsim verdicts --preset full", "wall_time_s": 1800.0}
    ]})  # fmt: skip
    for seed, loss in ((1000, 0.5), (1001, loss_1001)):
        write_json(main / "pretrain" / f"p{seed}" / "sft" / "results.json", {
            "policy": policy(f"p{seed}"), "wall_time_s": 30.0,
            "final": {"losses/heldout_execution": loss},
        })  # fmt: skip
    main_setting, *credits = study.settings
    folders = {"main": (main, main_setting.arms, False)}
    for credit in credits:
        folder = root / f"{cfg.preset}-{credit.name}-4567cdef"
        write_json(folder / "settings.json", old_settings(study, credit, cfg.compute.device, 1001))
        folders[credit.name] = (folder, credit.arms, bool(credit.bases_from))
    passes: dict[tuple[str, int, str], float] = {}
    for name, (folder, arms, reused) in folders.items():
        for seed in (0, 1):
            seed_dir = folder / f"s{seed}"
            evaluations = [*arms] if reused else ["base", *arms]
            if name == "main":
                evaluations += ["base@single", "compactionrl@single", "t1:compactionrl", "t1:base"]
            if not reused:
                write_json(seed_dir / "sft" / "results.json", {
                    "policy": policy(f"{name}/s{seed}/sft"), "wall_time_s": 20.0,
                    "final": {}, "config": {"compaction": {"budget": 160}},
                })  # fmt: skip
            for arm in arms:
                history = [{"charts/success_rate": 0.5, "critic/mc_ev_seg0": 0.1 * (seed + 1)}]
                write_json(seed_dir / "train" / f"{arm}-s{seed}" / "results.json", {
                    "policy": policy(f"{name}/s{seed}/{arm}"), "iterations_done": 3,
                    "wall_time_s": 40.0, "final": {"charts/success_rate": 0.5},
                    "history": history, "config": {"ppo": {"iterations": 1}},
                })  # fmt: skip
            for index, evaluation in enumerate(evaluations):
                solved = (index + seed) % 5
                protocol = evaluation_side(evaluation)[1]
                passes[(name, seed, evaluation)] = solved / 5
                file = evaluation.replace("@", "-").replace(":", "-")
                result = {"protocol": protocol, "pass_at_1": solved / 5, "summary_recall": 0.5,
                          "per_task_success": [1.0] * solved + [0.0] * (5 - solved)}  # fmt: skip
                write_json(seed_dir / "verdicts" / f"eval-{file}.json", {
                    "label": evaluation, "results": {protocol: result}, "wall_time_s": 5.0,
                })  # fmt: skip
    return passes


def refuse_every_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    from cxsim.pipeline import evaluate, sft, train
    from cxsim.studies import runner

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a stage ran: the adopted cache holds every result")

    for module, name in ((sft, "run_sft"), (train, "train"), (evaluate, "evaluate"),
                         (runner, "evaluate_with_summarizer")):  # fmt: skip
        monkeypatch.setattr(module, name, refuse)


def test_a_cache_of_the_older_layout_is_adopted_and_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from cxsim.paper_tables.verdicts import run_verdicts

    study = claims_file(  # the smoke budget's stage 0 with three candidates that must copy
        tmp_path, 'stage0.seeds = "1000:1001"\nstage0.copy-loss = 100.0',
        'stage0.seeds = "1000:1003"\nstage0.copy-loss = 0.01',
    )  # fmt: skip
    cfg = Config(
        study=study, runs_dir=str(tmp_path / "runs"), out_dir=str(tmp_path / "page"), jobs=1
    )
    passes = old_cache(cfg)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*")}
    refuse_every_stage(monkeypatch)
    done = run_verdicts(cfg, "cxsim verdicts --preset smoke")
    assert done["outcome"]["made"] == {"sft": 0, "train": 0, "eval": 0, "stage0": 0}
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # the old files as they were
    # the stage 0 as the old run chose it: 1001, after 1000 did not copy
    assert done["outcome"]["stage0"]["copies"]["seed"] == 1001
    text = done["page"].read_text()
    assert "(tried: seed 1000: 0.5000, seed 1001: 0.0020)" in text
    assert "`cxsim verdicts --preset full` at commit old1234 (30 min)" in text
    # every evaluation read back under its name, per seed, in each setting's table
    tables = text.split("## Pass@1 per seed")[1]
    for (setting, seed, name), value in passes.items():
        block = tables.split(f"The {setting} setting:")[1].split("The ")[0]
        row = next(line for line in block.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.split("|")[2 + seed].strip() == f"{value:.3f}", (setting, name, seed)
    # a second run reads the engine's own files and adopts nothing more
    again = run_verdicts(cfg, "cxsim verdicts --preset smoke")
    assert again["outcome"]["made"]["train"] == 0 and again["page"].read_text().count(
        "|"
    ) == text.count("|")


def test_a_cache_of_other_settings_is_not_adopted(tmp_path: Path):
    from cxsim.paper_tables.verdicts_adopt import adopt_old_runs

    cfg = Config(runs_dir=str(tmp_path))
    old_cache(cfg)
    # another SFT: another cache
    other = Config(study=claims_file(tmp_path, "sft.epochs = 1\n", "sft.epochs = 2\n"))
    assert adopt_old_runs(verdict_study(other), "smoke", tmp_path, "cpu") == 0
    assert adopt_old_runs(verdict_study(cfg), "smoke", tmp_path, "cpu") > 0


# -- the pipeline ------------------------------------------------------------------------


@pytest.mark.slow
def test_smoke_run_writes_the_page(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CXSIM_QUIET", "0")  # --quiet sets it; restored after the test
    out, runs = tmp_path / "page", tmp_path / "runs"
    cxsim(["verdicts", "--out", str(out), "--runs-dir", str(runs), "--jobs", "1", "--quiet"])
    text = (out / "verdicts.md").read_text()
    for claim in CLAIMS:
        assert claim.statement in text
    assert "2 independent seeds" in text
    # the study engine's cache: main-<hash>, credit-<hash>, credit-critic-<hash> (and studies/,
    # each study file's own records: its predictions)
    folders = {p.name.rsplit("-", 1)[0]: p for p in runs.iterdir() if p.is_dir()}
    assert folders.pop("studies").is_dir()
    assert folders.pop("stage0-copies").is_dir()  # the one starting checkpoint of every setting
    assert set(folders) == {"main", "credit", "credit-critic"}
    main, credit, critic = (folders[n] for n in ("main", "credit", "credit-critic"))
    assert len(list(critic.glob("s0/train/*/results.json"))) == 4
    assert not (critic / "s0" / "sft").exists()  # it trains from the credit setting's bases
    assert not list(critic.glob("s0/eval/base-*.json"))  # and reuses their evaluation
    assert len(list(main.glob("s1/train/*/results.json"))) == len(ARMS)
    assert len(list(main.glob("s0/eval/base+*@external-summarizer-*.json"))) == 2  # Table 1
    assert len(list(main.glob("s0/eval/*@single-*.json"))) == 2  # base and compactionrl
    assert len(list(credit.glob("s1/train/*/results.json"))) == len(CREDIT_ARMS)
    sft = (credit / "s0" / "sft" / "results.json").read_text()
    assert "KeyRecallActive" in sft and '"skip_rate": 0.5' in sft
    # a rerun reads every result and makes nothing
    cxsim(["verdicts", "--out", str(out), "--runs-dir", str(runs), "--jobs", "1", "--quiet"])
    invocations = json.loads((main / "invocations.json").read_text())["invocations"]
    assert len(invocations) == 2 and invocations[1]["wall_time_s"] < invocations[0]["wall_time_s"]


@pytest.mark.slow
def test_one_claim_on_new_seeds_runs_only_what_it_needs(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CXSIM_QUIET", "0")
    out, runs = tmp_path / "page", tmp_path / "runs"
    cxsim(["verdicts", "--seeds", "20:24", "--only", "credit:correction-fixed-lambda",
           "--out", str(out), "--runs-dir", str(runs), "--jobs", "1", "--quiet"])  # fmt: skip
    folders = {p.name.rsplit("-", 1)[0]: p for p in runs.iterdir() if p.is_dir()}
    assert folders.pop("studies").is_dir()  # the study file's own records
    assert folders.pop("stage0-copies").is_dir()  # the credit bases start from it
    assert set(folders) == {"credit", "main"}  # main: only the record of this invocation
    assert [p.name for p in folders["main"].iterdir()] == ["invocations.json"]
    credit = folders["credit"]
    seeds = [f"s{s}" for s in range(20, 24)]
    assert sorted(p.name for p in credit.glob("s[0-9]*")) == seeds
    trained = sorted(p.parent.name.rsplit("-", 1)[0] + "/" + p.parents[2].name
                     for p in credit.glob("s*/train/*/results.json"))  # fmt: skip
    assert trained == sorted(f"{arm}/{s}" for arm in ("fixed-lambda", "local-fixed-lambda")
                             for s in seeds)  # fmt: skip
    assert len(list(credit.glob("s*/sft/results.json"))) == 4  # the bases they train from
    assert len(list(credit.glob("s*/eval/*.json"))) == 8  # the two arms, not the base
    text = (out / "verdicts.md").read_text()
    (claim,) = [c for c in CLAIMS if (c.setting, c.key) == ("credit", "correction-fixed-lambda")]
    rows = [line for line in text.splitlines() if line.startswith("| the ")]
    assert len(rows) == 3 and all(claim.statement in r for r in rows)  # verdict, paper, prediction
    assert "**4 independent seeds.**" in text and "| s20 | s21 | s22 | s23 |" in text


def test_bad_flags_fail_before_any_work(tmp_path: Path):
    with pytest.raises(SystemExit, match="at least 2 seeds"):
        cxsim(["verdicts", "--seeds", "1", "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"has no \[budgets.huge\]; choose: full, smoke"):
        cxsim(["verdicts", "--preset", "huge", "--runs-dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())

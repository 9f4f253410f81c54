"""Study pages a reader can recompute: each page's JSON holds what the page is computed from,
``cxsim study --render`` rebuilds the page from it alone, byte for byte (every committed study
page here), and two study files of one name, or a narrowed run, never overwrite each other's
folder or page."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_study_verdicts import STUDY, Stages

from cxsim.studies.artefact import dumps
from cxsim.studies.render import render_artefact
from cxsim.studies.study import main as study_main
from cxsim.studies.where import OWNER_FILE, claim_folder, own_files, page_name, study_folder

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"

NOT_RENDERED: dict[str, str] = {}
"""Committed study pages that cannot be rebuilt, and why (their claims and per-seed Pass@1
are in their JSON; the figures only their runs hold are not)."""


@pytest.fixture
def stages(monkeypatch: pytest.MonkeyPatch) -> Stages:
    """The SFT, training and evaluation stages replaced by test_study_verdicts' fakes."""
    from cxsim.pipeline import evaluate, sft, train

    made = Stages()
    monkeypatch.setattr(sft, "run_sft", made.run_sft)
    monkeypatch.setattr(train, "train", made.run_train)
    monkeypatch.setattr(evaluate, "evaluate", made.run_evaluate)
    return made


MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:home|work|tmp|Users|root|mnt|var|opt|private)/")


HISTORY = RESULTS / "history"
"""Superseded pages kept as made, each headed with its commit and the command that remakes it."""


def study_pages() -> list[Path]:
    """Every committed page that ``cxsim study`` wrote, but the superseded ones in history/."""
    return sorted(
        p
        for p in RESULTS.rglob("*.md")
        if "written by `cxsim study " in p.read_text() and HISTORY not in p.parents
    )


def test_a_superseded_page_says_so_with_its_commit_and_command():
    pages = sorted(HISTORY.glob("*.md"))
    assert pages, "docs/results/history/ holds the superseded study pages"
    for page in pages:
        head = page.read_text().split("\n\n", 3)[1]
        assert head.startswith("> **Superseded, kept as made.**"), page.name
        assert re.search(r"commit [0-9a-f]{7}", head) and "`cxsim study " in head, page.name


def rendered_pages() -> list[Path]:
    return [p for p in study_pages() if p.stem not in NOT_RENDERED]


def test_every_committed_study_page_keeps_its_inputs_or_says_why_not():
    pages = {
        p.stem: "inputs" in json.loads(p.with_suffix(".json").read_text()) for p in study_pages()
    }
    assert {
        "stability-heldout",
        "stability-credit",
        "weighting",
        "table4-critic",
        "strategies",
        "suite",
    } <= set(pages)
    assert {name for name, kept in pages.items() if not kept} == set(NOT_RENDERED)


@pytest.mark.parametrize("page", rendered_pages(), ids=lambda p: p.stem)
def test_a_committed_study_page_rebuilds_from_its_json_byte_for_byte(
    page: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(REPO)  # the artefact names its study file relative to the repository
    rebuilt = render_artefact(page.with_suffix(".json"))
    assert rebuilt["name"] == page.stem
    assert rebuilt["markdown"] == page.read_text(), (
        f"{page.name} differs from what its JSON renders: after a change to how pages are "
        f"written, `cxsim study --render {page.with_suffix('.json').relative_to(REPO)}`"
    )
    assert dumps(rebuilt["data"]) == page.with_suffix(".json").read_text()


@pytest.mark.parametrize(
    "path", sorted([*RESULTS.rglob("*.md"), *RESULTS.rglob("*.json")]), ids=lambda p: p.name
)
def test_no_results_page_or_artefact_holds_a_machine_path(path: Path):
    found = MACHINE_PATH.findall(path.read_text())
    assert not found, f"{path.name}: {found[:3]}"


def test_a_page_rebuilds_from_its_json_with_no_cache_and_a_narrowed_run_writes_beside_it(
    tmp_path: Path, stages: Stages, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)  # a user's own folder, with cxsim outside a git checkout
    monkeypatch.setattr("cxsim.provenance._HERE", tmp_path)  # an installed package's folder
    Path("study.toml").write_text(STUDY)
    study_main(["study.toml"])
    folder = Path("runs/studies/study")
    assert (folder / OWNER_FILE).read_text() == "study.toml\n"
    full_md, full_json = folder / "page/study.md", folder / "page/study.json"
    page, data = full_md.read_text(), full_json.read_text()
    assert "written by `cxsim study study.toml` outside a git checkout (cxsim " in page
    assert "at commit unknown" not in page
    assert str(tmp_path) not in page and str(tmp_path) not in data
    given = json.loads(data)["inputs"]
    assert given["study_file"] == "study.toml" and given["study_text"] == STUDY
    run = given["runs"]["a"]["compactionrl"][1]
    assert run["train"]["final"] == {"charts/success_rate": pytest.approx(0.6)}  # claim's
    assert run["eval"]["compacted"]["per_task_success"] == [1.0, 1.0, 1.0, 0.0]
    assert run["eval_file"].startswith("a-") and "/s1/eval/compactionrl-" in run["eval_file"]
    # narrowed runs: their own pages beside the full one, which stays as it was
    study_main(["study.toml", "--seeds", "0"])
    study_main(["study.toml", "--only", "a:correction"])
    made = sorted(p.name for p in (folder / "page").glob("*.md"))
    assert made == ["study.md", "study.only-a_correction.md", "study.seeds-0.md"]
    assert full_md.read_text() == page and full_json.read_text() == data
    # the cache gone, each page renders from its JSON alone, byte for byte
    shutil.rmtree(folder / "runs")
    for name in made:
        md = folder / "page" / name
        study_main(["--render", str(md.with_suffix(".json")), "--out", "rendered"])
        assert (Path("rendered") / name).read_bytes() == md.read_bytes()
        json_name = name.replace(".md", ".json")
        assert (Path("rendered") / json_name).read_bytes() == md.with_suffix(".json").read_bytes()


def test_render_refuses_a_study_file_changed_since_the_page(
    tmp_path: Path, stages: Stages, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    Path("study.toml").write_text(STUDY)
    study_main(["study.toml", "--seeds", "0"])
    Path("study.toml").write_text(STUDY.replace('seeds = "0:2"', 'seeds = "0:3"'))
    artefact = "runs/studies/study/page/study.seeds-0.json"
    with pytest.raises(ValueError, match="differs from the study file"):
        study_main(["study.toml", "--render", artefact, "--out", "r"])
    study_main(["--render", artefact, "--out", "r"])  # as made: from the file it recorded
    assert Path("r/study.seeds-0.md").read_bytes() == Path(artefact).with_suffix(".md").read_bytes()


def test_two_study_files_of_one_name_never_share_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    mine, example = Path("my_study.toml"), Path("examples/my_study.toml")
    first = study_folder(mine)
    claim_folder(first, mine)
    second = study_folder(example)
    assert first == Path("runs/studies/my_study")
    assert second.parent == first.parent and re.fullmatch(r"my_study-[0-9a-f]{8}", second.name)
    claim_folder(second, example)
    assert (second / OWNER_FILE).read_text() == "examples/my_study.toml\n"
    assert study_folder(mine) == first and study_folder(example) == second  # stable
    with pytest.raises(ValueError, match=r"belongs to the study file my_study\.toml"):
        claim_folder(first, example)
    # two files of one name outside the current folder differ too (their absolute paths)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other"
    (elsewhere / "a").mkdir(parents=True)
    (elsewhere / "b").mkdir()
    outside_a, outside_b = elsewhere / "a" / "x.toml", elsewhere / "b" / "x.toml"
    claim_folder(study_folder(outside_a), outside_a)
    assert study_folder(outside_a) == Path("runs/studies/x")
    assert study_folder(outside_b) != study_folder(outside_a)
    # a folder made before the markers belongs to the first file that uses it
    Path("runs/studies/old/runs").mkdir(parents=True)
    assert study_folder("studies/old.toml") == Path("runs/studies/old")


def test_two_study_files_sharing_a_runs_folder_keep_their_own_predictions(
    tmp_path: Path, stages: Stages, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    one, other = Path("one.toml"), Path("other.toml")
    one.write_text(STUDY)
    other.write_text(STUDY.replace('"no change: nothing fits one window"', '"no change, said B"'))
    for file in (one, other):  # one cache for both: the same runs, made once
        study_main([str(file), "--runs-dir", "shared", "--out", f"page-{file.stem}"])
    first, second = (own_files("shared", f) / "predictions.json" for f in (one, other))
    assert first.parent != second.parent and not Path("shared/predictions.json").exists()
    said = {
        f: json.loads(p.read_text())["a:single-same"] for f, p in ((one, first), (other, second))
    }
    assert said[one]["prediction"] == "no change: nothing fits one window"
    assert said[other]["prediction"] == "no change, said B"
    assert said[one]["changes"] == [] and said[other]["changes"] == []
    assert said[other]["results_existed"] is True  # the runs were one's, made before
    assert "changed since it was first seen" not in Path("page-other/other.md").read_text()
    # a record from before the key: read in the file's own folder's cache, never in a shared one
    old = {"a:single-same": {**said[one], "first_seen": "2020-01-01 00:00"}}
    Path("runs/studies/one/runs").mkdir(parents=True)
    Path("runs/studies/one/runs/predictions.json").write_text(json.dumps(old))
    Path("shared/predictions.json").write_text(json.dumps(old))
    study_main([str(one), "--seeds", "0"])
    kept = json.loads((own_files("runs/studies/one/runs", one) / "predictions.json").read_text())
    assert kept["a:single-same"]["first_seen"] == "2020-01-01 00:00"
    Path("third.toml").write_text(STUDY)
    study_main(["third.toml", "--seeds", "0", "--runs-dir", "shared", "--out", "third"])
    third = json.loads((own_files("shared", "third.toml") / "predictions.json").read_text())
    assert third["a:single-same"]["first_seen"] != "2020-01-01 00:00"


def test_a_narrowed_run_names_its_page_by_what_narrowed_it():
    full = (0, 1, 2, 3)
    assert page_name("s", full, full) == "s"
    assert page_name("s", (0, 1), full) == "s.seeds-0-1"
    assert page_name("s", (0, 1, 2, 3, 40, 41, 7), full) == "s.seeds-0-3+40-41+7"
    assert page_name("s", full, full, ("small:floor-helps", "arm:x")) == (
        "s.only-small_floor-helps+arm_x"
    )
    assert page_name("s", (2,), full, budget="smoke") == "s.budget-smoke.seeds-2"

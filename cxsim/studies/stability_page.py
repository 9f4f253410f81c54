"""``cxsim stability``: which runs of a study kept what they learned, from its run cache.

For every (setting, arm, seed) of a study file whose runs are in the cache: the base's and
the trained policy's Compacted Pass@1, the run's best and last training success, its
drop and largest one-iteration fall, and the logged figures around that fall
(``cxsim.diagnostics.collapse``). Written as a compact artefact (``<stem>-collapse.json``,
no machine path in it) and rendered as Markdown tables (``<stem>-collapse.md``) from that
artefact alone, so a committed page can be rebuilt without the cache:

    cxsim stability studies/stability.toml --seeds 0:4,40:46 --runs-dir runs/studies/stability/runs
    cxsim stability --render docs/results/stability-tuning-collapse.json   # no cache needed
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import tyro

from cxsim.tracking import write_json

PASS_MARK = 0.85
"""Compacted Pass@1 a run of the main job should reach (the stability issue's bar)."""


@dataclass(frozen=True)
class Config:
    """Collapse figures of a study's runs, from its cache, as an artefact and Markdown."""

    study: Annotated[str | None, tyro.conf.Positional, tyro.conf.arg(metavar="FILE.toml")] = None
    """The study file (``studies/stability.toml``); not needed with ``--render``."""
    runs_dir: tuple[str, ...] = ()
    """The study's run caches, searched in turn for each seed's runs (none given:
    the study's folder's ``runs``, as ``cxsim study`` keys it: cxsim/studies/where.py)."""
    seeds: str | None = None
    """Seeds instead of the file's: ``a:b``, one seed, or several of these joined by commas
    (``0:4,40:46``)."""
    out: str = "runs/stability"
    """Where ``<stem>-collapse.json`` and ``<stem>-collapse.md`` go."""
    reference: str = "compactionrl"
    """The arm every other arm is paired with."""
    render: str | None = None
    """An artefact (``...-collapse.json``) to render as Markdown alone, printed."""


def collect(cfg: Config) -> dict[str, Any]:
    """The artefact: per setting, arm and seed, the run's figures (from the cache)."""
    from cxsim.diagnostics.collapse import collapsed, run_collapse
    from cxsim.studies.load import load_study
    from cxsim.studies.spec import parse_seeds
    from cxsim.studies.unit_files import seed_folder, train_folder, unit_eval_file
    from cxsim.studies.where import study_folder

    if cfg.study is None:
        raise ValueError("name the study file (or --render an artefact)")
    study = load_study(cfg.study)
    if cfg.seeds is not None:
        parts = [parse_seeds(part, "--seeds") for part in cfg.seeds.split(",")]
        study = replace(study, seeds=tuple(dict.fromkeys(s for part in parts for s in part)))
    caches = cfg.runs_dir or (str(study_folder(cfg.study) / "runs"),)
    out: dict[str, Any] = {"study": Path(cfg.study).name, "seeds": list(study.seeds), "runs": []}
    for setting in study.settings:
        for seed in study.seeds:
            held = [d for d in caches if unit_eval_file(d, setting, None, seed, "cpu").is_file()]
            if not held:
                continue
            runs_dir = held[0]
            base_eval = unit_eval_file(runs_dir, setting, None, seed, "cpu")
            base = pass_at_1(base_eval)
            for name in setting.arms:
                arm = study.arm(name)
                results = train_folder(seed_folder(runs_dir, setting, seed, "cpu"), setting, arm)
                evaluation = unit_eval_file(runs_dir, setting, arm, seed, "cpu")
                if not (results / "results.json").is_file() or not evaluation.is_file():
                    continue
                trained = json.loads((results / "results.json").read_text())
                run = run_collapse(trained["history"])
                final = pass_at_1(evaluation)
                out["runs"].append(
                    {
                        "setting": setting.name, "arm": name, "seed": seed, "base": base,
                        "final": final, "collapsed": collapsed(run, final, base),
                        "train_s": trained["wall_time_s"], **run.as_dict(),
                    }
                )  # fmt: skip
    return out


def pass_at_1(path: Path) -> float:
    """Compacted Pass@1 of an evaluation file (its first protocol)."""
    return float(json.loads(path.read_text())["results"][0]["pass_at_1"])


def render(artefact: dict[str, Any], reference: str = "compactionrl") -> str:
    """Markdown tables from an artefact alone: per arm, then per seed."""
    from cxsim.evaluation import t_interval

    settings = list(dict.fromkeys(r["setting"] for r in artefact["runs"]))
    if len(settings) > 1:  # one row per setting and arm, each paired within its setting
        runs = [{**r, "arm": f"{r['setting']}:{r['arm']}"} for r in artefact["runs"]]
    else:
        runs = artefact["runs"]
    arms = list(dict.fromkeys(r["arm"] for r in runs))
    by = {(r["arm"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    lines = [
        f"Seeds {', '.join(map(str, seeds))} ({artefact['study']}). Collapsed: training success "
        "fell more than 0.2 from its best iteration to the mean of its last three, or the "
        "final Compacted Pass@1 ended below the base's.",
        "",
        "| arm | runs | collapsed | ended below base | reached 0.85 | Compacted Pass@1 "
        f"| paired with {reference} | drop from best | train s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        own = [by[(arm, s)] for s in seeds if (arm, s) in by]
        finals = [r["final"] for r in own]
        low, high = t_interval(finals, (0.0, 1.0))
        ref = f"{arm.split(':')[0]}:{reference}" if len(settings) > 1 else reference
        pairs = [by[(arm, s)]["final"] - by[(ref, s)]["final"]
                 for s in seeds if (arm, s) in by and (ref, s) in by]  # fmt: skip
        paired = "-"
        if arm != ref and len(pairs) >= 2:
            d_low, d_high = t_interval(pairs, (-1.0, 1.0))
            paired = f"{mean(pairs):+.3f} [{d_low:+.3f}, {d_high:+.3f}] ({len(pairs)} seeds)"
        lines.append(
            f"| {arm} | {len(own)} | {sum(r['collapsed'] for r in own)} "
            f"| {sum(r['final'] < r['base'] for r in own)} "
            f"| {sum(r['final'] >= PASS_MARK for r in own)} "
            f"| {mean(finals):.3f} [{low:.3f}, {high:.3f}] | {paired} "
            f"| {mean([r['drop'] for r in own]):.2f} (max {max(r['drop'] for r in own):.2f}) "
            f"| {mean([r['train_s'] for r in own]):.0f} |"
        )
    lines += ["", "Per seed: base -> final Compacted Pass@1 (drop from best; * collapsed).", ""]
    lines.append("| seed | base | " + " | ".join(arms) + " |")
    lines.append("|---|---|" + "---|" * len(arms))
    for s in seeds:
        bases = dict.fromkeys(f"{r['base']:.3f}" for r in runs if r["seed"] == s)
        base = " / ".join(bases)  # one per setting, in order, when they differ
        cells = []
        for arm in arms:
            r = by.get((arm, s))
            star = "*" if r and r["collapsed"] else ""
            cells.append(f"{r['final']:.3f} ({r['drop']:.2f}){star}" if r else "-")
        lines.append(f"| {s} | {base} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def main(argv: list[str] | None = None) -> None:
    cfg = tyro.cli(Config, args=sys.argv[1:] if argv is None else argv)
    if cfg.render is not None:
        print(render(json.loads(Path(cfg.render).read_text()), cfg.reference), end="")
        return
    artefact = collect(cfg)
    stem = Path(cfg.study or "study").stem
    out = Path(cfg.out)
    write_json(out / f"{stem}-collapse.json", artefact)
    (out / f"{stem}-collapse.md").write_text(render(artefact, cfg.reference))
    print(f"stability: {len(artefact['runs'])} runs -> {out / f'{stem}-collapse.md'}")


if __name__ == "__main__":
    main()

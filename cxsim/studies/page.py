"""A study's page: the claims with their verdicts, the predictions, every arm, and every
setting that decides a number, from plain results.

:func:`write_page` takes the parsed study (:mod:`cxsim.studies.spec`), the units' results
(:func:`cxsim.studies.runner.run_study`: plain dicts read from the cache) and a few words on
how the results were made; it writes ``<page>.md`` and ``<page>.json`` (the same numbers
as data, and the inputs the page is computed from: :mod:`cxsim.studies.artefact`). Intervals, verdicts and power: :mod:`cxsim.studies.stats`; each claim's numbers
and the page-level correction: :mod:`cxsim.studies.outcomes`; the claims and predictions
sections: :mod:`cxsim.studies.page_claims`; the settings tables:
:mod:`cxsim.studies.page_settings`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from cxsim.provenance import made_at
from cxsim.studies.artefact import compact_stage0, dumps, write_text
from cxsim.studies.checks import check_lines, run_checks
from cxsim.studies.outcomes import Runs, claim_comparisons, comparison, side_value
from cxsim.studies.page_claims import FINAL_ITERATIONS, claim_lines, metric_label, prediction_lines
from cxsim.studies.page_settings import group_text, how_it_trains, setting_lines
from cxsim.studies.selection import Selection
from cxsim.studies.sides import ORACLE
from cxsim.studies.spec import BASE, Side, Study
from cxsim.studies.stats import METRICS, diagnostic, interval
from cxsim.studies.where import shown_path
from cxsim.tables import Interval, fmt, markdown_table

# -- sections -------------------------------------------------------------------------------


def header_lines(
    study: Study, runs: Runs, made_by: dict[str, Any], stage0: dict[str, Any]
) -> list[str]:
    units = {r["eval_file"]: r for arms in runs.values() for rs in arms.values() for r in rs}
    stage_s = sum(stage_seconds(r) for r in units.values())
    bases = {r["sft"]["run_dir"]: r["sft"] for r in units.values()}
    stage_s += sum(float(b["wall_time_s"]) for b in bases.values())
    stage_s += sum(float(t["sft_wall_time_s"]) for c in stage0.values() for t in c["tried"])
    lines = [f"# {study.title}", ""]
    if study.question:
        lines += [study.question, ""]
    seeds = ", ".join(str(s) for s in study.seeds)
    budget = f" at budget `{study.budget}`" if study.budget else ""
    replicate = f"cxsim study {Path(study.path).name} --print-commands --seeds s" + (
        f" --budget {study.budget}" if study.budget else ""
    )
    lines += [
        f"Study file `{Path(study.path).name}`{budget}, written by `{made_by['command']}` "
        f"{made_at(made_by.get('commit'), made_by.get('version'))} in {made_by['wall_time_s']:.0f}s; the runs it read (cache "
        f"`{made_by['runs_dir']}`) took {stage_s / 60:.1f} process-minutes when made, on "
        f"`{made_by['device']}`. A rerun that finds them in the cache rewrites this page in "
        "seconds; without them, `cxsim study --render` of the JSON beside it rebuilds it, byte "
        "for byte, from what that JSON keeps of them.",
        "",
        f"**{len(study.seeds)} independent seeds** ({seeds}). Seed s has its own SFT base (SFT "
        "seed s), training seed s and its own evaluation tasks; every arm of a seed starts "
        "from that seed's base, so each claim pairs its two arms by seed. The `cxsim sft`, "
        f"`cxsim train` and `cxsim eval` commands that make seed s's runs: `{replicate}`.",
        "",
    ]
    if study.tuning_seeds:
        tuned = ", ".join(str(s) for s in study.tuning_seeds)
        lines += [
            f"**Tuning seeds: {tuned}** (`tuning_seeds`). The file's settings were chosen on "
            "them, so no verdict on this page uses them (a run that would is refused).",
            "",
        ]
    return lines


def stage_seconds(result: dict[str, Any]) -> float:
    train = result["train"]["wall_time_s"] if result["train"] else 0.0
    return float(train) + float(result["eval_wall_time_s"])


def stage0_lines(study: Study, selection: Selection, stage0: dict[str, Any]) -> list[str]:
    """Each stage 0 the selected settings start from: how it was made, the candidates tried."""
    lines = []
    for name, chosen in stage0.items():
        stage = next(s for s in study.stage0 if s.name == name)
        users = [
            s.name
            for s in study.settings
            if s.stage0 is not None
            and s.stage0.name == name
            and any(p[0] == s.name for p in selection.pairs)
        ]
        tried = ", ".join(
            f"seed {t['seed']}: {t['heldout_execution']:.4f}" for t in chosen["tried"]
        )
        start = "a fresh model" if stage.policy is None else f"`{stage.policy}`"
        lines += [
            f"**Stage 0 `{name}`, shared.** Every seed's SFT in "
            + ", ".join(f"**{u}**" for u in users)
            + f" starts from one checkpoint made once: {start} cloned from "
            f"{stage.sft.episodes} demonstrations x {stage.sft.epochs} epochs (omission "
            f"{stage.sft.omission_rate:g}) on the task and compaction of setting "
            f"**{stage.setting}**, with SFT seeds no study seed uses; the first candidate "
            f"seed whose held-out execution loss fell to {stage.copy_loss:g} nats per token or "
            f"below, i.e. that learned to copy: seed {chosen['seed']} (tried: {tried}). "
            + (stage.about + " " if stage.about else "")
            + f"Its SFT settings: {group_text(stage.sft, 'sft')}.",
            "",
        ]
    return lines


def arm_lines(study: Study, selection: Selection, runs: Runs) -> list[str]:
    lines = ["## Arms", ""]
    for setting in study.settings:
        arms = [a for s, a in selection.pairs if s == setting.name]
        if not arms:
            continue
        arms += [ORACLE] if ORACLE in runs.get(setting.name, {}) else []  # evaluated only
        protocols = list(setting.eval.protocols)
        for arm in arms:  # a claim's protocol evaluated besides the setting's
            for protocol in runs[setting.name][arm][0]["eval"]:
                if protocol not in protocols:
                    protocols.append(protocol)
        header = [
            "arm",
            "how it trains",
            *(f"Pass@1 ({p})" for p in protocols),
            *(f"`{k}`" for k in study.diagnostics),
        ]
        rows = []
        for arm in arms:
            results = runs[setting.name][arm]
            cells = [
                fmt(interval([r["eval"][p] for r in results], "pass_at_1"))
                if p in results[0]["eval"]
                else "-"
                for p in protocols
            ]
            finals = [r["train"]["final"] if r["train"] else {} for r in results]
            diags = [
                fmt(diagnostic(finals, k), 3) if arm not in (BASE, ORACLE) else "-"
                for k in study.diagnostics
            ]
            rows.append([f"`{arm}`", how_it_trains(study, arm), *cells, *diags])
        lines += [f"Setting **{setting.name}**:", "", markdown_table(header, rows), ""]
    if study.diagnostics:
        lines += [
            f"Diagnostics: per seed, the mean of each figure over the run's last "
            f"{FINAL_ITERATIONS} actor iterations (results.json `final`), then the mean over "
            "seeds with a t interval, clipped to the figure's range (a fraction to [0, 1]). "
            "docs/tensorboard.md says what each one measures.",
            "",
        ]
        missing = [k for k in study.diagnostics if not recorded(runs, k)]
        if missing:
            lines += [
                "Not recorded by any run: "
                + ", ".join(f"`{k}`" for k in missing)
                + " (check the names against docs/tensorboard.md).",
                "",
            ]
    return lines


def reading_lines(study: Study) -> list[str]:
    if not study.reading.strip():
        return []
    return [
        "## What it means",
        "",
        "Written after the runs (the study file's `reading`), unlike the predictions below.",
        "",
        study.reading.strip(),
        "",
    ]


def checks_section(study: Study, selection: Selection, runs: Runs) -> list[str]:
    results = run_checks(study, selection, runs)
    if not results:
        return []
    failed = [r["name"] for r in results if not r["passed"]]
    verdict = f"**{len(failed)} failed**: {', '.join(failed)}" if failed else "all passed"
    return [
        "## Checks",
        "",
        f"{len(results)} pass/fail thresholds of the file (`[[checks]]`): {verdict}.",
        "",
        *(f"- {line}" for line in check_lines(results)),
        "",
    ]


def metric_points(study: Study, selection: Selection, runs: Runs) -> list[tuple[Side, str]]:
    """Every selected (setting, arm) as a side under its setting's first protocol, with the
    label the metrics table and the figure give it."""
    points = []
    for setting in study.settings:
        protocol = setting.eval.protocols[0]
        for name, arm in selection.pairs:
            if name == setting.name and protocol in runs[name][arm][0]["eval"]:
                points.append((Side(name, arm, protocol), f"{name}:{arm}"))
    return points


def metric_lines(study: Study, selection: Selection, runs: Runs, figure: str = "") -> list[str]:
    """``metrics``: one row per (setting, arm), each metric's mean over seeds with its
    interval, under the setting's first protocol; then the figure, when one was drawn."""
    if not study.metrics:
        return []
    rows = []
    for side, label in metric_points(study, selection, runs):
        cells = [
            fmt(side_value(runs, side, key), 2 if METRICS[key].bounds[1] <= 1 else 1)
            for key in study.metrics
        ]
        rows.append([f"`{label}`", side.protocol, *cells])
    lines = [
        "## Metrics by setting",
        "",
        markdown_table(
            ["setting:arm", "evaluated under", *(f"`{k}`" for k in study.metrics)], rows
        ),
        "",
        "Each cell: the mean over seeds with its 95% interval, under the setting's own "
        "protocol. " + " ".join(f"`{k}`: {METRICS[k].about}." for k in study.metrics),
        "",
    ]
    if figure:
        lines += [f"![{study.figure.y} against {study.figure.x}]({figure})", ""]
    return lines


def draw_figure(study: Study, selection: Selection, runs: Runs, path: Path) -> bool:
    """The ``[figure]``: one point per (setting, arm) (only ``arm`` when it names one), with
    the 95% intervals of both metrics as error bars; False when nothing was drawn."""
    chosen = study.figure
    if chosen is None:
        return False
    points = [
        (side, label)
        for side, label in metric_points(study, selection, runs)
        if not chosen.arm or side.arm == chosen.arm
    ]
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    xs = [side_value(runs, side, chosen.x).mean for side, _ in points]
    log_x = min(xs) > 0 and max(xs) / min(xs) > 5
    for side, label in points:
        x, y = side_value(runs, side, chosen.x), side_value(runs, side, chosen.y)
        errors = [
            None
            if math.isnan(value.low) or (log and value.low <= 0)  # no bar to 0 on a log axis
            else [[value.mean - value.low], [value.high - value.mean]]
            for value, log in ((x, log_x), (y, False))
        ]
        ax.errorbar(x.mean, y.mean, xerr=errors[0], yerr=errors[1], fmt="o", capsize=3)
        ax.annotate(
            side.setting if chosen.arm else label,
            (x.mean, y.mean),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=8,
        )
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(f"{chosen.x} (mean over seeds, 95% interval)")
    ax.set_ylabel(f"{chosen.y} (mean over seeds, 95% interval)")
    ax.set_title(f"{study.title}: {len(study.seeds)} seeds", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def recorded(runs: Runs, key: str) -> bool:
    return any(
        r["train"] and key in r["train"]["final"]
        for arms in runs.values()
        for results in arms.values()
        for r in results
    )


def per_seed_lines(study: Study, selection: Selection, runs: Runs) -> list[str]:
    lines = ["## Per seed", ""]
    seeds = [f"s{s}" for s in study.seeds]
    for setting in study.settings:
        arms = [a for s, a in selection.pairs if s == setting.name]
        if not arms:
            continue
        protocol = setting.eval.protocols[0]
        rows = [
            [
                f"`{arm}`",
                *(
                    f"{r['eval'][protocol]['pass_at_1']:.3f}" if protocol in r["eval"] else "-"
                    for r in runs[setting.name][arm]
                ),
            ]
            for arm in arms
        ]
        lines += [
            f"Setting **{setting.name}**, Pass@1 ({protocol}):",
            "",
            markdown_table(["arm", *seeds], rows),
            "",
        ]
        claims = [c for c in selection.claims if c.setting == setting.name]
        if claims:
            rows = [
                [
                    f"**{c.name}** ({metric_label(c)})",
                    *(f"{d:+.3f}" for d in comparison(runs, c).per_seed),
                ]
                for c in claims
            ]
            lines += ["Treatment - reference:", "", markdown_table(["claim", *seeds], rows), ""]
    return lines


# -- the page -------------------------------------------------------------------------------


def interval_data(x: Interval) -> dict[str, Any]:
    return {"mean": x.mean, "low": x.low, "high": x.high, "n": x.n, "method": x.method}


def summary(study: Study, selection: Selection, runs: Runs) -> dict[str, Any]:
    """The page's numbers as data: each claim's comparison, each arm's per-seed Pass@1."""
    claims = []
    comparisons = claim_comparisons(study, selection, runs)
    for claim in selection.claims:
        c = comparisons[(claim.setting, claim.name)]
        claims.append(
            {
                "name": claim.name,
                "setting": claim.setting,
                "treatment": claim.side_label(claim.treatment_side),
                "reference": claim.side_label(claim.reference_side),
                "metric": claim.metric,
                "protocol": claim.protocol,
                "protocols": [side.protocol for side in claim.sides],
                "direction": claim.direction,
                "margin": claim.margin,
                "prediction": claim.prediction,
                "predicted_size": claim.predicted_size,
                "threshold": claim.threshold,
                "verdict": c.verdict,
                "paired_seeds": c.paired,
                "p_value": c.p_value,
                "adjusted_p": c.adjusted_p,
                "treatment_interval": interval_data(c.treatment),
                "reference_interval": interval_data(c.reference),
                "difference": interval_data(c.difference),
                "per_seed_difference": list(c.per_seed),
                "smallest_detectable": c.detectable,
                "diagnostics": {
                    key: {
                        name: interval_data(side_value(runs, side, key))
                        for name, side in zip(("treatment", "reference"), claim.sides, strict=True)
                    }
                    for key in claim.diagnostics
                },
            }
        )
    arms = {
        setting: {
            arm: {
                "seeds": [r["seed"] for r in results],
                "pass_at_1": {
                    p: [r["eval"][p]["pass_at_1"] for r in results] for p in results[0]["eval"]
                },
                "made_now": [r["made"] for r in results],
            }
            for arm, results in by_arm.items()
        }
        for setting, by_arm in runs.items()
    }
    return {
        "study": shown_path(study.path),
        "budget": study.budget,
        "seeds": list(study.seeds),
        "tuning_seeds": list(study.tuning_seeds),
        "correction": study.correction,
        "claims": claims,
        "arms": arms,
    }


def render(
    study: Study,
    selection: Selection,
    outcome: dict[str, Any],
    made_by: dict[str, Any],
    figure: str = "",
) -> str:
    """The page's Markdown; ``figure``: the file name of the drawn ``[figure]`` (empty: none)."""
    runs, stage0 = outcome["runs"], outcome.get("stage0", {})
    lines = [
        *header_lines(study, runs, made_by, stage0),
        *stage0_lines(study, selection, stage0),
        *claim_lines(study, selection, runs),
        *reading_lines(study),
        *prediction_lines(selection, outcome["predictions"]),
        *checks_section(study, selection, runs),
        *metric_lines(study, selection, runs, figure),
        *arm_lines(study, selection, runs),
        *setting_lines(study, selection, runs, outcome.get("settings")),
        *per_seed_lines(study, selection, runs),
    ]
    return "\n".join(lines).rstrip() + "\n"


def page_data(
    study: Study,
    selection: Selection,
    outcome: dict[str, Any],
    made_by: dict[str, Any],
    inputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The page's JSON: its numbers as data, its checks, how it was made and, when given,
    the ``inputs`` it is computed from (:mod:`cxsim.studies.artefact`)."""
    return {
        **summary(study, selection, outcome["runs"]),
        "checks": run_checks(study, selection, outcome["runs"]),
        "made_by": made_by,
        "made_now": outcome["made"],
        "stage0": {n: compact_stage0(c) for n, c in outcome.get("stage0", {}).items()},
        **({"inputs": inputs} if inputs is not None else {}),
    }


def write_page(
    out_dir: str | Path,
    study: Study,
    selection: Selection,
    outcome: dict[str, Any],
    made_by: dict[str, Any],
    name: str | None = None,
    inputs: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """``<name>.md`` and ``<name>.json`` in ``out_dir`` (and ``<name>.png``, the study's
    ``[figure]``); returns their paths. ``outcome``: :func:`cxsim.studies.runner.run_study`'s
    result; ``made_by``: ``command``, ``commit``, ``wall_time_s``, ``runs_dir``, ``device``;
    ``name``: the page's file stem (None: the study file's); ``inputs``: the artefact
    (:func:`cxsim.studies.artefact.inputs`), kept in the JSON with the page's name and figure."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or study.stem
    page, data = out / f"{name}.md", out / f"{name}.json"
    drawn = out / f"{name}.png"
    figure = drawn.name if draw_figure(study, selection, outcome["runs"], drawn) else ""
    page.write_text(render(study, selection, outcome, made_by, figure))
    if inputs is not None:
        inputs = {**inputs, "name": name, "figure": figure}
    write_text(data, dumps(page_data(study, selection, outcome, made_by, inputs)))
    return {"page": page, "results": data, **({"figure": drawn} if figure else {})}

"""The page of ``cxsim verdicts``: per-seed results -> paired intervals, verdicts, the critic
by segment, and the per-seed numbers.

verdicts.py (this package) makes the runs through the study engine and hands this module
plain results (one dict per seed, see ``verdicts.page_runs``) with the settings they were
made with (the study engine's :class:`cxsim.studies.spec.Setting` and ``Stage0``);
verdicts_claims.py the rows (the study file's claims with what the page adds), and
verdicts_cells.py the per-seed numbers and each claim's diagnostic cell; this
module lays them out and writes nothing but verdicts.md and verdicts_critic.png. Intervals and the power calculation live in
cxsim/tables.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cxsim.diagnostics.tracking import INFORMATIVE, informative_mean
from cxsim.paper_tables.verdicts_cells import (
    DIAGNOSTICS,
    Runs,
    Settings,
    evaluated,
    evaluation,
    passes,
    segment_count,
    segment_label,
)
from cxsim.provenance import commit, cxsim_version, made_at
from cxsim.tables import (
    Interval,
    detectable_difference,
    fmt,
    markdown_table,
    mean_interval,
    paired_difference,
    seed_interval,
)

BASE_ARM = "base"
"""The untrained SFT base, an arm of every setting."""

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cxsim.paper_tables.verdicts_claims import Claim
    from cxsim.studies.spec import Setting, Stage0


# -- verdicts ---------------------------------------------------------------------------


def verdict_of(claim: Claim, diff: Interval) -> str:
    """reproduced / contradicted / not resolved (see verdicts_claims.Claim.kind)."""
    from cxsim.paper_tables.verdicts_claims import NO_EFFECT_MARGIN

    if math.isnan(diff.low):
        return "not measured"
    holds, fails = (
        ("reproduced", "contradicted")
        if claim.source.startswith("Table")
        else ("holds", "reversed")
    )  # fmt: skip
    if claim.kind == "no-effect":
        if diff.low >= -NO_EFFECT_MARGIN and diff.high <= NO_EFFECT_MARGIN:
            return f"**{holds}** (inside +/-{NO_EFFECT_MARGIN:g})"
        return f"**{fails}**" if diff.excludes_zero() else "not resolved"
    if diff.low > 0:
        return f"**{holds}**"
    if diff.high < 0:
        return f"**{fails}**"
    return "not resolved"


def by_construction(runs: Runs, claim: Claim) -> str:
    """Why a row is true by construction, or empty: both arms at 0 (or both at 1) on every
    seed, or a trained arm that is the base on every seed under Compacted (the row repeats
    the one against the base)."""
    sides = {
        name: [p.value for p in passes(runs, name)] for name in (claim.treatment, claim.reference)
    }
    for end in (0.0, 1.0):
        if all(math.isclose(v, end) for values in sides.values() for v in values):
            return f"degenerate: both arms at {end:g} on every seed"
    if BASE_ARM in sides or not evaluated(runs, BASE_ARM):
        return ""
    base = [p.value for p in passes(runs, BASE_ARM)]
    for name, values in sides.items():
        if ":" in name or "@" in name:  # another protocol or summarizer: not the base's own
            continue
        if all(math.isclose(v, b) for v, b in zip(values, base, strict=True)):
            return (
                f"degenerate: `{name}` is the base on every seed (the same Pass@1), so the row "
                "repeats the one against the base"
            )
    return ""


def claim_row(runs: Runs, claim: Claim) -> list[str]:
    treatment, reference = passes(runs, claim.treatment), passes(runs, claim.reference)
    diff = paired_difference(treatment, reference)
    diffs = [a.value - b.value for a, b in zip(treatment, reference, strict=True)]
    return [
        f"{claim.statement} ({claim.source})",
        f"`{claim.treatment}` {fmt(seed_interval(treatment))}",
        f"`{claim.reference}` {fmt(seed_interval(reference))}",
        fmt(diff, signed=True),
        by_construction(runs, claim) or verdict_of(claim, diff),
        f"{detectable_difference(diffs):.2f}",
        DIAGNOSTICS[claim.diagnostic](runs, claim),
    ]


# -- the critic by segment --------------------------------------------------------------


def critic_by_segment(runs: Runs, arms: tuple[str, ...]) -> dict[str, list[Interval]]:
    """arm -> explained variance (Monte Carlo returns, segment start) per segment index,
    mean over seeds of each seed's mean over its informative iterations."""
    out = {}
    for arm in arms:
        n = segment_count(runs, arm)
        if n == 0:
            continue
        out[arm] = [
            mean_interval(
                [informative_mean(r["train"][arm]["history"], f"critic/mc_ev_seg{k}") for r in runs]
            )
            for k in range(n)
        ]
    return out


def plot_critic(table: dict[str, list[Interval]], path: Path, band: str = "compactionrl") -> None:
    """Each arm's explained variance by segment, the arm ``band`` with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, cells in table.items():
        xs = list(range(len(cells)))
        ys = [c.mean for c in cells]
        (line,) = ax.plot(xs, ys, marker="o", label=arm)
        if arm == band:
            lows = [c.low if not math.isnan(c.low) else c.mean for c in cells]
            highs = [c.high if not math.isnan(c.high) else c.mean for c in cells]
            ax.fill_between(xs, lows, highs, alpha=0.2, color=line.get_color())
    n = max((len(c) for c in table.values()), default=0)
    ax.set_xticks(range(n), [segment_label(k) for k in range(n)])
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_ylabel("explained variance of the outcome")
    shown = "CompactionRL" if band == "compactionrl" else band
    ax.set_title(f"Critic by segment (informative iterations; band: {shown}, 95% CI)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- the page ---------------------------------------------------------------------------


def made_by(invocations: list[dict[str, Any]]) -> str:
    """The invocations that made the runs (those of a minute or more) and their total."""
    working = [i for i in invocations if i["wall_time_s"] >= 60] or invocations[-1:]
    total = sum(i["wall_time_s"] for i in working) / 60
    parts = [f"`{i['command']}` {made_at(i['commit'], cxsim_version())} ({i['wall_time_s'] / 60:.0f} min)"
             for i in working]  # fmt: skip
    return f"{' then '.join(parts)}: **{total:.0f} minutes** of wall time in all"


def gain(runs: Runs) -> Interval | None:
    """CompactionRL over its base, paired by seed; None when either was not evaluated."""
    if not evaluated(runs, "compactionrl", "base"):
        return None
    return paired_difference(passes(runs, "compactionrl"), passes(runs, "base"))


def setting_line(setting: Setting, runs: Runs, what: str) -> str:
    env, sft, ppo = setting.env, setting.sft, setting.ppo
    line = (
        f"{what}: `{env.env_id}` {dict(env.kwargs) or '(default kwargs)'}; "
        f"SFT {sft.episodes} demonstrations x {sft.epochs} epochs at omission "
        f"{sft.omission_rate:g}, skip rate {sft.skip_rate:g}; PPO "
        f"{ppo.critic_warmup} value-only iterations then {ppo.iterations} with the "
        f"actor, of {ppo.rollouts_per_batch} rollouts each, critic ratio "
        f"{ppo.critic_ratio}, critic lr {ppo.critic_lr:g}, actor lr {ppo.actor_lr:g}, "
        f"micro-batches of {ppo.micro_batch_rows} rows. Arms: "
        + ", ".join(f"`{a}`" for a in setting.arms)
        + " (cxsim/pipeline/presets.py)."
    )
    made = gain(runs)
    if made is None:
        return line
    return (
        f"{line} Base {fmt(seed_interval(passes(runs, 'base')))}, "
        f"CompactionRL {fmt(seed_interval(passes(runs, 'compactionrl')))}: a gain of "
        f"{fmt(made, signed=True)}."
    )


def setup_lines(
    setting_of: dict[str, Setting],
    settings: Settings,
    command: str,
    invocations: list[dict[str, Any]],
    jobs: int,
) -> list[str]:
    runs = next(iter(settings.values()))
    first = next(iter(runs[0]["eval"]))
    tasks = len(evaluation(runs[0], first)["per_task_success"])
    compute_min = sum(r["seconds"] for rs in settings.values() for r in rs) / 60
    lines = [
        "# Verdicts on the paper's claims",
        "",
        f"Runs made by {made_by(invocations)}, {jobs} seeds at a time in single-threaded "
        f"processes (the recorded stage times add up to {compute_min:.0f} process-minutes). "
        f"This page was written by `{command}` {made_at(commit(), cxsim_version())}; a rerun that finds the "
        "runs in the cache rewrites it in seconds.",
        "",
        f"**{len(runs)} independent seeds.** Seed s has its own SFT base (SFT seed s), its own "
        f"training seed, and its own {tasks} evaluation tasks per protocol (task seeds "
        "`EVAL_SEED_OFFSET + s * 10000 + i`, disjoint between seeds), as a new user's run "
        "would. Every arm of a seed starts from that seed's base, so differences are paired "
        "by seed: the mean over seeds with a Student-t 95% interval (proportions clipped to "
        "[0, 1], differences to [-1, 1]).",
        "",
    ]
    if "main" in settings:
        what = "**The main setting**, the main job's task"
        lines += [setting_line(setting_of["main"], settings["main"], what), ""]
    for name, runs in settings.items():
        if name == "main":
            continue
        setting = setting_of[name]
        what = f"**The {name} setting**" + (f" ({setting.about})" if setting.about else "")
        lines += [
            setting_line(setting, runs, what)
            + " Its key is shown only if the first action is `open box`; its demonstrations "
            "skip that action at the skip rate and keep every fact they saw, so a base opens "
            "the box about half the time and what PPO must learn is that first action, two "
            "compactions before the reward: the credit the cross-segment correction scales "
            "by (gamma lambda)^N (docs/method.md). Same seeds, same stage-0 checkpoint.",
            "",
        ]
    legend = [
        "**Verdicts.** *reproduced*: the interval excludes 0 in the claim's direction; "
        "*contradicted*: it excludes 0 the other way; *not resolved*: it covers 0. A claim "
        "that something does not change is reproduced when its interval lies inside "
        "+/-0.05. Rows not in the paper say *holds* / *reversed*. A row true by construction "
        "is *degenerate*, with no verdict: both arms at 0 (or at 1) on every seed, or an arm "
        "that is the base on every seed. *Smallest detectable*: the "
        "true difference a two-sided paired t-test over these seeds would detect with 80% "
        "power, at the spread of the per-seed differences measured here.",
        "",
    ]
    return [*lines, *legend]


def paper_lines(settings: Settings, claims: Sequence[Claim]) -> list[str]:
    """Each claim's figures in the paper; for ablations, the paper's effect as a share of
    its CompactionRL gain, scaled by this run's gain in the claim's setting (when both were
    evaluated), against this run's interval."""
    rows = []
    for c in claims:
        if not c.paper:
            continue
        runs = settings[c.setting]
        made = gain(runs)
        scaled, inside = "-", "-"
        if c.paper_share is not None and made is not None:
            low, high = (share * made.mean for share in c.paper_share)
            diff = paired_difference(passes(runs, c.treatment), passes(runs, c.reference))
            scaled = f"{low:+.2f} to {high:+.2f}"
            where = (
                "below it" if diff.high < low else "above it" if diff.low > high
                else "overlaps it"
            )  # fmt: skip
            shown = where if where == "overlaps it" else f"**{where}**"
            inside = f"{fmt(diff, signed=True)}: {shown}"
        rows.append([c.statement, f"{c.source}, {c.setting}", c.paper, scaled, inside])
    return [
        "## Against the sizes the paper reports",
        "",
        "The paper's own figures (Compacted Pass@1 points, two evaluation runs, no seeds or "
        "intervals). For an ablation, its effect as a share of CompactionRL's gain over the "
        "base, times this run's gain in the claim's setting, is the size the paper's result "
        "predicts here; the last column gives this run's paired interval and where it lies "
        "against that size. This is context for the verdict column, not part of it: the "
        "verdict asks only whether the interval excludes 0.",
        "",
        markdown_table(
            [
                "claim",
                "source, setting",
                "the paper",
                "the paper's share x this run's gain",
                "this run",
            ],
            rows,
        ),
        "",
    ]


def prediction_lines(claims: Sequence[Claim]) -> list[str]:
    rows = [
        [c.statement, f"{c.source}, {c.setting}",
         c.prediction + (f" (*row added {c.added}*)" if c.added else "")]
        for c in claims
    ]  # fmt: skip
    return [
        "## Predictions, written before the runs",
        "",
        "From the estimator lab (docs/results/estimators.md) and pilots; they are constants "
        "of cxsim/paper_tables/verdicts.py, committed before the runs (a row added later says "
        "so).",
        "",
        markdown_table(["claim", "source, setting", "prediction"], rows),
        "",
    ]


VERDICT_HEADINGS = {
    "main": "## Verdicts",
    "credit": "### The credit setting: credit must reach the first action",
    "credit-critic": "### The credit-critic setting: the same, with a critic that tracks",
}


def verdict_lines(settings: Settings, claims: Sequence[Claim]) -> list[str]:
    header = ["claim", "treatment Pass@1", "reference Pass@1", "paired difference",
              "verdict", "smallest detectable", "diagnostic"]  # fmt: skip
    lines = []
    for name, runs in settings.items():
        lines += [VERDICT_HEADINGS[name], ""]
        if name == "main":
            lines += [
                "Pass@1 under Compacted unless the name says `@single` (Single) or `t1:` (the "
                "base as executor with that policy's summaries, the Table 1 swap).",
                "",
            ]
        rows = [claim_row(runs, c) for c in claims if c.setting == name]
        lines += [markdown_table(header, rows), ""]
    return lines


def critic_table(table: dict[str, list[Interval]]) -> str:
    n = max(len(c) for c in table.values())
    header = ["arm", *(segment_label(k) for k in range(n))]
    rows = [
        [arm, *(fmt(c) for c in cells)] + ["-"] * (n - len(cells)) for arm, cells in table.items()
    ]
    return markdown_table(header, rows)


def trained_arms(runs: Runs) -> tuple[str, ...]:
    return tuple(runs[0]["train"]) if runs else ()


def critic_lines(setting_of: dict[str, Setting], settings: Settings, out_dir: Path) -> list[str]:
    runs = settings.get("main", [])
    table = critic_by_segment(runs, trained_arms(runs))
    if not table:
        return []
    ppo = setting_of["main"].ppo
    plot_critic(table, out_dir / "verdicts_critic.png")
    lines = [
        "## The critic by segment",
        "",
        "On the main setting. Explained variance of the outcome by the critic's value at each "
        "segment's first token (`critic/mc_ev_seg{k}`: 1 - Var(R - V) / Var(R), Monte Carlo "
        "returns), per seed the mean over the actor iterations (after the value-only warm-up) "
        "whose training success lay in "
        f"[{INFORMATIVE[0]}, {INFORMATIVE[1]}] (where outcomes vary; at 0 or 1 the figure is "
        "undefined), then the mean over seeds with a 95% interval.",
        "",
        "![critic by segment](verdicts_critic.png)",
        "",
        critic_table(table),
        "",
        "The recipe of the paper is on in every arm with a critic: value-only warm-up "
        f"({ppo.critic_warmup} iterations), {ppo.critic_ratio} critic updates per actor "
        f"update, critic learning rate {ppo.critic_lr:g} against the actor's "
        f"{ppo.actor_lr:g}. What else was tried, with its figures: docs/results.md, "
        '"The critic by segment".',
        "",
    ]
    for name, runs in settings.items():
        table = critic_by_segment(runs, trained_arms(runs)) if name != "main" else {}
        if table:
            lines += [
                f"The same figure on the {name} setting:",
                "",
                critic_table(table),
                "",
            ]
    return lines


def per_seed_lines(settings: Settings) -> list[str]:
    lines = ["## Pass@1 per seed", ""]
    for name, runs in settings.items():
        names = list(runs[0]["eval"])
        header = ["evaluation", *(f"s{r['seed']}" for r in runs)]
        rows = [[f"`{n}`", *(f"{p.value:.3f}" for p in passes(runs, n))] for n in names]
        lines += [f"The {name} setting:", "", markdown_table(header, rows), ""]
    return lines


def start_lines(start: tuple[Stage0, dict[str, Any]] | None) -> list[str]:
    """The stage 0 (its settings, and the study engine's record of the candidates tried)."""
    if start is None:
        return ["Every seed's SFT starts from a fresh model.", ""]
    stage, chosen = start
    tried = ", ".join(f"seed {t['seed']}: {t['heldout_execution']:.4f}" for t in chosen["tried"])
    return [
        f"**Stage 0, shared.** Every seed's SFT starts from one checkpoint, as every user of "
        f"the paper's recipe starts from one pretrained LLM: a fresh model cloned from "
        f"{stage.sft.episodes} omission-0 demonstrations x {stage.sft.epochs} epochs on "
        f"tasks no seed uses, the first candidate whose held-out execution loss fell to "
        f"{stage.copy_loss:g} nats per token or below, i.e. that learned to copy the key "
        f"(tried: {tried}). Without it, bases made from a fresh model at these budgets "
        'often never learn to copy (docs/results.md, "Independent seeds").',
        "",
    ]


def render_page(
    setting_of: dict[str, Setting],
    settings: Settings,
    claims: Sequence[Claim],
    command: str,
    invocations: list[dict[str, Any]],
    jobs: int,
    out_dir: Path,
    start: tuple[Stage0, dict[str, Any]] | None = None,
) -> Path:
    """Write verdicts.md (and verdicts_critic.png) to ``out_dir``; returns the page's path.

    ``setting_of``: each setting as run; ``settings``: each run setting's seeds (plain
    results); ``claims``: the rows, in order (their evaluations among the seeds');
    ``invocations``: the commands that made the runs, with their wall seconds; ``jobs``: runs
    at once; ``start``: the stage 0 and its record of the candidates tried."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        *setup_lines(setting_of, settings, command, invocations, jobs),
        *start_lines(start),
        *verdict_lines(settings, claims),
        *paper_lines(settings, claims),
        *prediction_lines(claims),
        *critic_lines(setting_of, settings, out_dir),
        *per_seed_lines(settings),
    ]
    page = out_dir / "verdicts.md"
    page.write_text("\n".join(lines) + "\n")
    return page

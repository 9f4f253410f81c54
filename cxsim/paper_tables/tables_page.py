"""The page of ``cxsim tables``: per-seed results -> intervals, Tables 1-4, findings, plots.

``cxsim/paper_tables/tables.py`` makes the runs through the study engine, and
``tables_study.page_runs`` turns them into one dict per seed; this module reads them
through :class:`Seeds`, with what the page says about the run
in a :class:`PageSetup` (plain settings, not the entry point's Config; both in
``tables_seeds.py`` with the per-seed intervals), and writes
nothing but text and PNGs. The interval math (Wilson over pooled tasks, Student-t
over seeds, paired differences) lives in ``cxsim/tables.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

from cxsim.config import DEFAULT_COMPACTION, EnvConfig
from cxsim.paper_tables.tables_seeds import (
    ROW_LABELS,
    ROWS,
    PageSetup,
    Seeds,
    omission_by_compaction,
    omission_interval,
    pass_interval,
    recall_interval,
)
from cxsim.pipeline.presets import preset_ppo
from cxsim.tables import (
    Interval,
    fmt,
    markdown_table,
    mean_interval,
    paired_difference,
    verdict,
)

# -- the page ---------------------------------------------------------------------------


def table1(cfg: PageSetup, s: Seeds) -> str:
    rows = []
    for executor in cfg.executors:
        for rate in cfg.omission_rates:
            rows.append((executor, f"scripted, omission {rate:g}", f"{executor}+scripted-{rate:g}"))
        rows.append((executor, "CompactionRL (trained)", f"{executor}+compactionrl"))
        rows.append((executor, "SFT base (untrained)", f"{executor}+base"))
    body = []
    for executor, name, key in rows:
        res = s.external(key)
        by_k = omission_by_compaction(res)
        body.append([
            "oracle" if executor == "oracle" else "SFT base", name, fmt(pass_interval(res)),
            fmt(recall_interval(res)), fmt(by_k[0]) if 0 in by_k else "-",
            fmt(by_k[max(by_k)]) + f" (k={max(by_k)})" if by_k else "-",
        ])  # fmt: skip
    header = ["executor", "summarizer", "Pass@1", "summary recall", "omission, 1st summary",
              "omission, last summary"]  # fmt: skip
    return markdown_table(header, body)


def over_base(s: Seeds, row: str, protocol: str = "compacted") -> str:
    """``row`` minus the SFT base, paired by seed (each seed's row starts from its base)."""
    if row == "base":
        return "-"
    return fmt(paired_difference(s.passes(row, protocol), s.passes("base", protocol)), signed=True)


def never_rewarded(s: Seeds, row: str) -> bool:
    """No training rollout of ``row`` succeeded, on any seed or iteration."""
    return all(h["charts/success_rate"] == 0 for run in s.histories(row) for h in run)


ONE_WINDOW = "one-window"
"""Suffix of the Table 2 rows evaluated on the task that fits in one window."""


def has_one_window(cfg: PageSetup, s: Seeds) -> bool:
    return bool(cfg.one_window_kwargs) and all(
        f"base/{ONE_WINDOW}" in run["eval"] for run in s.runs
    )


def table2(cfg: PageSetup, s: Seeds) -> str:
    short = has_one_window(cfg, s)
    body = []
    for row in ("base", "ppo-single", "compactionrl"):
        single, compacted = s.result(row, "single"), s.result(row, "compacted")
        gain = paired_difference(s.passes(row), s.passes(row, "single"))
        cells = [ROW_LABELS[row], fmt(pass_interval(single)), fmt(pass_interval(compacted)),
                 fmt(gain, signed=True), over_base(s, row)]  # fmt: skip
        if short:
            cells.append(fmt(pass_interval(s.result(f"{row}/{ONE_WINDOW}", "single"))))
        body.append(cells)
    header = ["model", "Single Pass@1", "Compacted Pass@1", "Compacted - Single",
              "Compacted - base (paired)"]  # fmt: skip
    if short:
        header.append("Single Pass@1, one-window task")
    return markdown_table(header, body)


def one_window_note(cfg: PageSetup, s: Seeds) -> str:
    kwargs = ", ".join(f"{k} = {v}" for k, v in cfg.one_window_kwargs.items())
    oracle = fmt(pass_interval(s.result(f"oracle/{ONE_WINDOW}", "single")))
    return (
        f"The last column evaluates Single on the same task with {kwargs}, a task short "
        f"enough for one window (the oracle's Single Pass@1 there: {oracle}), with the same "
        "policies: trained on the long task, tested without compaction."
    )


def table3(s: Seeds) -> str:
    body = []
    for row in ("base", "no-summary-training", "compactionrl"):
        res = s.result(row, "compacted")
        by_k = omission_by_compaction(res)
        body.append([
            ROW_LABELS[row], fmt(pass_interval(res)), over_base(s, row), fmt(omission_interval(res)),
            " / ".join(fmt(by_k[k]) for k in sorted(by_k)) or "-",
        ])  # fmt: skip
    header = [
        "model",
        "Compacted Pass@1",
        "- base (paired)",
        "summary omission",
        "omission by compaction k = 0 / 1 / ...",
    ]
    return markdown_table(header, body)


TRAIN_DIAGNOSTICS = (
    ("critic/explained_variance", "critic EV"),
    ("critic/ece", "critic ECE"),
    ("gap/rel_err", "gap to stitched GAE (rel. err.)"),
    ("credit/summary_first_over_last", "credit, 1st / last summary"),
)
"""Training diagnostics shown in Table 4 when the trainer's ``final`` metrics carry them."""


def table4(cfg: PageSetup, s: Seeds) -> str:
    single = "single" in cfg.eval.protocols
    diagnostics = [
        (key, name) for key, name in TRAIN_DIAGNOSTICS
        if any(not math.isnan(v) for row in ROWS[4] for v in s.final(row, key))
    ]  # fmt: skip
    body = []
    ref = s.passes("compactionrl")
    for row in ROWS[4]:
        res = s.result(row, "compacted")
        has_critic = preset_ppo(row).uses_critic
        delta = (
            "-"
            if row == "compactionrl"
            else fmt(paired_difference(s.passes(row), ref), signed=True)
        )
        body.append([
            ROW_LABELS[row], fmt(pass_interval(res)), delta,
            fmt(pass_interval(s.result(row, "single"))) if single else "-",
            fmt(omission_interval(res)),
            fmt(mean_interval(s.final(row, "charts/success_rate"))),
            *("-" if not has_critic and key.startswith("critic/")
              else fmt(mean_interval(s.final(row, key)), digits=3) for key, _ in diagnostics),
        ])  # fmt: skip
    header = ["model", "Compacted Pass@1", "- CompactionRL (paired)", "Single Pass@1",
              "summary omission", "train success (last 5 it.)",
              *(f"{name} (last 5 it.)" for _, name in diagnostics)]  # fmt: skip
    return markdown_table(header, body)


def findings(cfg: PageSetup, s: Seeds) -> list[str]:
    """One sentence per question the rows answer, each from paired intervals."""
    rows = set(cfg.rows)
    out = []
    if "compactionrl" in rows:
        out.append(learning_finding(s, "no-summary-training" in rows))
    if {"no-summary-training", "compactionrl"} <= rows:
        out.append(omission_finding(s))
    if {"no-cross-segment", "stitched", "compactionrl"} <= rows:
        out.append(correction_finding(s))
    if "single" in cfg.eval.protocols and {"compactionrl", "ppo-single"} <= rows:
        out.append(single_window_finding(cfg, s))
    if 1 in cfg.tables:
        out.append(summarizer_finding(cfg, s))
    return out


def learning_finding(s: Seeds, with_ablation: bool) -> str:
    gain = paired_difference(s.passes("compactionrl"), s.passes("base"))
    line = (
        "**Does CompactionRL learn?** Compacted Pass@1 of CompactionRL minus its SFT base: "
        f"{verdict(gain, 'higher after training', 'lower after training')}"
    )
    if with_ablation:
        alone = paired_difference(s.passes("no-summary-training"), s.passes("base"))
        versus = paired_difference(s.passes("compactionrl"), s.passes("no-summary-training"))
        line += (
            "; w/o summary training minus the base: "
            f"{verdict(alone, 'higher after training', 'lower after training')}; "
            "CompactionRL minus w/o summary training: "
            f"{verdict(versus, 'higher with summary training', 'lower with summary training')}"
        )
    return line + "."


def omission_finding(s: Seeds) -> str:
    om = paired_difference(s.omissions("compactionrl"), s.omissions("no-summary-training"))
    base = paired_difference(s.omissions("compactionrl"), s.omissions("base"))
    return (
        "**Does summary training reduce omission?** Summary omission of CompactionRL minus "
        f"w/o summary training: {verdict(om, 'higher with summary training', 'lower with summary training')}; "
        f"CompactionRL minus the SFT base: {verdict(base, 'higher after training', 'lower after training')}."
    )


def correction_finding(s: Seeds) -> str:
    vs_local = paired_difference(s.passes("compactionrl"), s.passes("no-cross-segment"))
    vs_stitched = paired_difference(s.passes("compactionrl"), s.passes("stitched"))
    return (
        "**Does the cross-segment correction change success?** Compacted Pass@1 of "
        "CompactionRL minus w/o correction (local GAE): "
        f"{verdict(vs_local, 'higher with the correction', 'lower with the correction')}; "
        f"minus stitched GAE: {verdict(vs_stitched, 'higher than stitched', 'lower than stitched')}."
    )


def single_window_finding(cfg: PageSetup, s: Seeds) -> str:
    def over_base(row: str, suffix: str = "") -> str:
        diff = paired_difference(
            s.passes(row + suffix, "single"), s.passes("base" + suffix, "single")
        )
        return verdict(diff, "improves", "drops")

    line = (
        "**Does Single-window success improve?** Single Pass@1 of CompactionRL minus the SFT "
        f"base: {over_base('compactionrl')}; PPO w/o compaction minus the base: "
        f"{over_base('ppo-single')}."
    )
    rows_single = [s.passes(r, "single") for r in ("base", "compactionrl", "ppo-single")]
    if all(p.successes == 0 for seeds in rows_single for p in seeds):
        line += (
            " No model solved a task within one window (Single Pass@1 = 0 for every model "
            "and seed)."
        )
        if cfg.env == EnvConfig() and cfg.compaction == DEFAULT_COMPACTION:
            line += (
                " The default task is sized so that no episode fits in one window "
                "(cxsim/config.py), so Single cannot improve on it."
            )
    if has_one_window(cfg, s):
        short = f"/{ONE_WINDOW}"
        line += (
            " On the task that fits in one window (Table 2, last column), CompactionRL "
            f"minus the base: {over_base('compactionrl', short)}; PPO w/o compaction minus the "
            f"base: {over_base('ppo-single', short)}."
        )
    return line


def summarizer_finding(cfg: PageSetup, s: Seeds) -> str:
    lo, hi = min(cfg.omission_rates), max(cfg.omission_rates)
    parts = []
    for executor in cfg.executors:

        def diff(a: str, b: str, e: str = executor) -> Interval:
            return paired_difference(s.external_passes(f"{e}+{a}"), s.external_passes(f"{e}+{b}"))

        name = "the oracle" if executor == "oracle" else "the SFT base"
        spread = diff(f"scripted-{lo:g}", f"scripted-{hi:g}")
        trained = diff("compactionrl", "base")
        parts.append(
            f"with {name} as executor, Pass@1 with the scripted summarizer at omission "
            f"{lo:g} minus at {hi:g}: {verdict(spread, 'higher', 'lower')}, and with the "
            f"trained CompactionRL summarizer minus the untrained SFT base: "
            f"{verdict(trained, 'higher', 'lower')}"
        )
    text = "; ".join(parts)
    return f"**Does the summarizer matter (Table 1)?** {text[0].upper()}{text[1:]}."


def compute_seconds(s: Seeds) -> float:
    """Wall time of every cached stage this page reads (SFT, training, evaluations)."""
    total = 0.0
    for run in s.runs:
        total += run["sft"]["wall_time_s"]
        total += sum(r["wall_time_s"] for r in run["train"].values())
        total += sum(e["wall_time_s"] for e in run["eval"].values())
        total += sum(e["wall_time_s"] for e in run["external"].values())
    return total


def setup_lines(cfg: PageSetup, s: Seeds, command: str, wall_s: float, cache: Path) -> list[str]:
    """What was run, how the intervals are made and what it cost."""
    k = len(cfg.seeds)
    method = (
        f"mean over K = {k} training seeds with a Student-t 95% interval over the per-seed values"
        if k >= 2
        else "one training seed: a Wilson 95% interval over the pooled proportion (tasks for "
        "Pass@1, needed facts for omission and recall); it counts evaluation noise only"
    )
    ppo = cfg.ppo
    return [
        "# The paper's tables in miniature",
        "",
        f"Made by `{command}` ({cfg.preset} preset). Environment `{cfg.env.env_id}` "
        f"{cfg.env.kwargs}; budget C = {cfg.compaction.budget}, T_comp = "
        f"{cfg.compaction.threshold}, at most {cfg.compaction.max_compactions} compactions; "
        f"`{cfg.sft.model}` policy. Per seed: one SFT base ({cfg.sft.episodes} demonstrations "
        f"x {cfg.sft.epochs} epochs, summarizer omission {cfg.sft.omission_rate:g}); each row "
        f"trained from it for {ppo.critic_warmup} critic warm-up + {ppo.iterations} PPO "
        f"iterations of {ppo.rollouts_per_batch} rollouts; evaluation on {cfg.eval.episodes} "
        f"held-out tasks x {cfg.eval.repeats} sample(s), the same tasks for every row.",
        "",
        f'**Intervals**: {method}. Differences ("paired") pair rows by seed (same SFT base, '
        "same tasks). Formulas: `cxsim/tables.py`. Omission = fraction of the needed facts "
        "(current values) a summary misses, from the evaluation records "
        "(`cxsim.diagnostics.summary_omission`); summary recall = 1 - omission.",
        "",
        f"**Runtime**: about {compute_seconds(s) / 60 / min(cfg.jobs, k):.0f} min of wall time "
        f"from scratch with --jobs {min(cfg.jobs, k)} ({compute_seconds(s) / 60:.0f} min of "
        "SFT, training and evaluation, measured when each ran). The runs are cached under "
        f"`{Path(cache).parent}/`: the same command again only re-renders this page.",
        "",
    ]


def findings_lines(cfg: PageSetup, s: Seeds) -> list[str]:
    k, iterations = len(cfg.seeds), cfg.ppo.iterations
    return [
        "## Findings",
        "",
        *[f"- {sentence}" for sentence in findings(cfg, s)],
        "",
        f"An interval that covers 0 says that this budget ({k} seed(s), {iterations} PPO "
        "iterations per row) cannot tell the two rows apart, not that they do not differ.",
        "",
    ]


def table_lines(cfg: PageSetup, s: Seeds) -> list[str]:
    """The sections of the chosen tables, each with its notes."""
    lines: list[str] = []
    if 1 in cfg.tables:
        lines += [
            "## Table 1: fixed executor, swapped summarizers",
            "",
            "Protocol `external-summarizer`: the executor acts, another agent writes every "
            "summary. The oracle executor acts from what its context holds (a lost fact costs a "
            "guess), so its Pass@1 measures the summaries alone. Omission, last summary: over "
            "the last summary the rollouts wrote, the (k=N) after it being that summary's index "
            "(k = 0 is the first summary, so k=1 means the second).",
            "",
            table1(cfg, s),
            "",
            "![Table 1](tables_summarizers.png)",
            "",
        ]
    if 2 in cfg.tables:
        lines += ["## Table 2: Single and Compacted evaluation", "", table2(cfg, s), ""]
        if never_rewarded(s, "ppo-single"):
            lines += [
                "PPO w/o compaction trains under Single, where no episode of this task fits: "
                "none of its training rollouts earned a reward, so PPO had nothing to learn "
                "from and it stays at the base.",
                "",
            ]
        if has_one_window(cfg, s):
            lines += [one_window_note(cfg, s), ""]
    if 3 in cfg.tables:
        lines += ["## Table 3: summary training", "", table3(s), ""]
    if 4 in cfg.tables:
        lines += [
            "## Table 4: ablations of the estimator and the loss",
            "",
            "Train success and the columns marked (last 5 it.) are training diagnostics, the "
            "mean of the last five iterations (`results.json` `final`; docs/tensorboard.md): "
            "critic EV = explained variance of the critic's values against the returns it is "
            "trained on, 1 - Var(return - V) / Var(return) (1: exact, 0: no better than a "
            "constant); critic ECE = expected calibration error of V against the realised "
            "return (reward units); gap to stitched GAE = relative error of the trained-on "
            "advantages against the exact stitched estimator; credit, 1st / last summary = "
            "mean absolute advantage of the first summary over that of the last. Rows without "
            "a critic show - in the critic columns.",
            "",
            table4(cfg, s),
            "",
        ]
    return lines


def render(cfg: PageSetup, s: Seeds, command: str, wall_s: float, cache: Path) -> str:
    """tables.md: the setup, the findings, the tables and the plots."""
    lines = [
        *setup_lines(cfg, s, command, wall_s, cache),
        *findings_lines(cfg, s),
        *table_lines(cfg, s),
        "## Plots",
        "",
        "![learning curves](tables_learning_curves.png)",
        "",
        "Learning curves: mean over seeds, shaded min-max.",
        "",
        "![omission by compaction](tables_omission.png)",
        "",
    ]
    return "\n".join(lines)

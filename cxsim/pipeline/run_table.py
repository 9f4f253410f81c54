"""The main job's evaluation table (``cxsim run``): rows pooled over training seeds, the
Markdown table and its footnotes, and the chance level they quote. ``cxsim run`` prints and
stores them; ``cxsim report`` rewrites them from results.json (plain dicts in, text out)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from cxsim.config import EnvConfig


def pooled(name: str, evals: list[dict[str, Any]], protocol: str) -> dict[str, Any]:
    """One row over training seeds: Wilson over all (seed, task) pairs, and a t-interval over
    seeds clipped to [0, 1]."""
    from cxsim.evaluation import t_interval, wilson_interval

    per_seed = [next(r for r in e["results"] if r["protocol"] == protocol) for e in evals]
    tasks = np.concatenate([r["per_task_success"] for r in per_seed])
    low, high = wilson_interval(float(tasks.sum()), len(tasks))
    seed_low, seed_high = t_interval([r["pass_at_1"] for r in per_seed], bounds=(0.0, 1.0))
    recalls = [r["summary_recall"] for r in per_seed if r["summary_recall"] is not None]
    recalls = [x for x in recalls if not np.isnan(x)]  # Single writes no summaries
    return {
        "label": name,
        "protocol": protocol,
        "seeds": len(per_seed),
        "pass_at_1": float(tasks.mean()),
        "ci95_low": low,
        "ci95_high": high,
        "seed_ci95_low": seed_low,
        "seed_ci95_high": seed_high,
        "per_seed_pass_at_1": [r["pass_at_1"] for r in per_seed],
        "mean_compactions": float(np.mean([r["mean_compactions"] for r in per_seed])),
        "summary_recall": float(np.mean(recalls)) if recalls else float("nan"),
        "truncated_rate": float(np.mean([r.get("truncated_rate", 0.0) for r in per_seed])),
        "runs": int(sum(r["runs"] for r in per_seed)),
    }


def report_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table: Pass@1 (Wilson CI over seed x task pairs; t-interval over seeds and
    the per-seed values, columns only when some row has 2 seeds or more).
    :func:`report_notes` explains it."""
    with_seed_ci = any(r["seeds"] >= 2 for r in rows)
    header = "| model | protocol | seeds | Pass@1 | 95% CI (tasks) [1] | "
    header += "95% CI (seeds) [2] | " if with_seed_ci else ""
    header += "per seed | " if with_seed_ci else ""  # one seed: per seed = Pass@1
    first = 3 if with_seed_ci else 2  # footnotes are numbered as their columns appear
    header += f"compactions [{first}] | summary recall [{first + 1}] |"  # notes: report_notes
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        seed_ci = (
            "-" if r["seeds"] < 2 else f"[{r['seed_ci95_low']:.3f}, {r['seed_ci95_high']:.3f}]"
        )
        recall = "-" if np.isnan(r["summary_recall"]) else f"{r['summary_recall']:.2f}"
        per_seed = " ".join(f"{p:.2f}" for p in r["per_seed_pass_at_1"])
        seed_cell = f"{seed_ci} | {per_seed} | " if with_seed_ci else ""
        lines.append(
            f"| {r['label']} | {r['protocol']} | {r['seeds']} | {r['pass_at_1']:.3f} | "
            f"[{r['ci95_low']:.3f}, {r['ci95_high']:.3f}] | {seed_cell}"
            f"{r['mean_compactions']:.2f} | {recall} |"
        )
    return "\n".join(lines)


def chance_level(env: dict[str, Any] | EnvConfig) -> float | None:
    """Pass@1 of a uniform guess, where the task defines one: KeyRecall asks for one of
    ``num_values`` key values (1 / num_values); None for other tasks."""
    env_id = env["env_id"] if isinstance(env, dict) else env.env_id
    kwargs = env["kwargs"] if isinstance(env, dict) else env.kwargs
    if "KeyRecall" not in env_id:
        return None
    import gymnasium as gym

    import cxsim.envs  # noqa: F401  (registers the environments)

    made = gym.make(env_id, **(kwargs or {}))
    values = getattr(made.unwrapped, "num_values", None)
    made.close()
    return 1.0 / values if values else None


def report_notes(rows: list[dict[str, Any]], results: dict[str, Any]) -> str:
    """The table's footnotes: chance level, why Single is 0 when it is, the columns."""
    cfg = results["config"]
    budget = cfg["compaction"]["budget"]
    if budget is None:  # derived by the pre-flight: the base evaluation's config holds it
        budget = results["base"]["config"]["compaction"]["budget"]
    chance = chance_level(cfg["env"])
    notes = []
    if chance is not None:
        notes.append(f"Chance level: {chance:.3f} (a uniform guess among the key values).")
    single = [r for r in rows if r["protocol"] == "single"]
    zero = [r for r in single if r["pass_at_1"] == 0.0]
    if zero:
        who = "every model" if len(zero) == len(single) else ", ".join(r["label"] for r in zero)
        full = min(r.get("truncated_rate", 1.0) for r in zero)
        share = "all" if full == 1.0 else f"at least {full:.0%}"
        notes.append(
            f"Single is 0 for {who}: Single allows no compaction, and {share} of those "
            f"episodes filled the {budget}-token window before the answer was due "
            "(the default task is sized so that no episode fits in one window). Compacted "
            "is the protocol under which the task can be solved."
        )
    notes.append("[1] Wilson score interval over every (training seed, evaluation task) pair.")
    first = 2
    if any(r["seeds"] >= 2 for r in rows):
        notes.append(
            "[2] Student-t interval over the per-seed Pass@1 values, clipped to [0, 1]; it "
            "counts the variance between training seeds (shown from 2 seeds on)."
        )
        first = 3
    notes += [
        f"[{first}] Mean number of compactions per episode: times the window filled and the "
        "policy summarised its history into a fresh window.",
        f"[{first + 1}] Fraction of the facts the task needs later (the key's current value) "
        "that the summaries kept, over all summaries written and the facts shown before "
        "each was written (a fact not shown yet counts for no summary); - where none were "
        "written.",
    ]
    return "\n\n".join(notes)

"""The settings a study's page lists: every setting that decides a number, as run, in the
names the command line writes, from plain results.

:func:`setting_lines` writes that section of the page, one table per setting (its task,
starting checkpoint, compaction with the sizes the pre-flight derived, SFT, PPO, each trained
arm's PPO where it differs from the setting's, evaluation); :func:`how_it_trains` says in a
few words how an arm trains (its preset, then its own PPO settings), for the page's arms;
:func:`group_text` writes every field of a config group (a stage 0's SFT too).
:mod:`cxsim.studies.page` assembles the page.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from cxsim.config import PPOConfig
from cxsim.evaluation import EVAL_SEED_OFFSET
from cxsim.studies.model_settings import CHAT, ModelSettings
from cxsim.studies.selection import Selection
from cxsim.studies.sides import ORACLE
from cxsim.studies.spec import BASE, Setting, Study
from cxsim.tables import markdown_table
from cxsim.tracking import to_jsonable, with_unrecorded

Runs = dict[str, dict[str, list[dict[str, Any]]]]
"""``runs[setting][arm]``: one unit result per seed, as :mod:`cxsim.studies.page` takes them."""


def how_it_trains(study: Study, arm: str) -> str:
    if arm == BASE:
        return "the seed's SFT base, untrained"
    if arm == ORACLE:
        return "the env's scripted oracle, evaluated only"
    found = study.arm(arm)
    own = ", ".join(f"`ppo.{k.replace('_', '-')}` {value_text(v)}" for k, v in found.ppo)
    return f"preset `{found.preset}`" + (f", then {own}" if own else "")


def value_text(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return " ".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k} {value_text(v)}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def group_text(config: Any, group: str) -> str:
    return ", ".join(  # every field, those recorded only when set included
        f"{group}.{f.name.replace('_', '-')} {value_text(to_jsonable(getattr(config, f.name)))}"
        for f in fields(config)
    )


GROUPS = ("compaction", "sft", "ppo", "eval")


def setting_groups(study: Study) -> dict[str, dict[str, Any]]:
    """Each setting's config groups as run, every field as data (:data:`GROUPS`), and
    ``ppo_start``: its PPO as a run records it, for the arms' rows; a page's artefact keeps
    them, so that a page rebuilt after a default or a field changed still says what ran."""
    return {
        s.name: {
            **{
                g: {
                    f.name: to_jsonable(getattr(getattr(s, g), f.name))
                    for f in fields(getattr(s, g))
                }
                for g in GROUPS
            },
            "ppo_start": with_unrecorded(to_jsonable(s.ppo), PPOConfig),
        }
        for s in study.settings
    }


def values_text(values: dict[str, Any], group: str) -> str:
    """A config group's fields as data, as :func:`group_text` writes them."""
    return ", ".join(f"{group}.{k.replace('_', '-')} {value_text(v)}" for k, v in values.items())


def setting_lines(
    study: Study,
    selection: Selection,
    runs: Runs,
    groups: dict[str, dict[str, Any]] | None = None,
) -> list[str]:
    """The settings section; ``groups``: each setting's config groups as recorded
    (:func:`setting_groups`; None: the study's as parsed now)."""
    groups = groups or setting_groups(study)
    shown = [s for s in study.settings if s.name in runs]
    computes = (
        "in float32"
        if all(s.model == ModelSettings() for s in shown)
        else ", in float32 unless its setting's model row says otherwise"
    )
    lines = [
        "## Every setting that decides a number",
        "",
        "Names as the command line writes them (`cxsim sft|train|eval --help`). Seed s is the "
        "SFT seed, the training seed and the evaluation seed; the PPO training tasks of seed s "
        "are s * 1000000 + k (cxsim/pipeline/train.py), its evaluation tasks "
        f"{EVAL_SEED_OFFSET} + s * 10000 + i for i below `eval.episodes`, and repeat r samples "
        "with torch seeded s * 1000 + r (cxsim/evaluation.py). Every stage runs with one torch "
        f"thread {computes}.",
        "",
    ]
    for setting in shown:
        first = next(iter(runs[setting.name].values()))[0]
        derived = first["sft"]["compaction"]
        ran = groups[setting.name]
        sizes = ", ".join(
            f"{k.replace('_', '-')} {derived[k]}"
            for k in ("budget", "threshold", "max_response_tokens", "max_summary_tokens")
        )
        rows = [
            [
                "task",
                f"env.env-id {setting.env.env_id}, env.kwargs "
                f"{value_text(dict(setting.env.kwargs))}",
            ],
            *start_rows(setting),
            [
                "compaction",
                values_text(ran["compaction"], "compaction")
                + f"; sizes as run (unset ones derived by the pre-flight): {sizes}",
            ],
            ["SFT", values_text(ran["sft"], "sft")],
            ["PPO every arm starts from", values_text(ran["ppo"], "ppo")],
            *arm_rows(setting, selection, runs, ran["ppo_start"]),
            [
                "evaluation",
                values_text(ran["eval"], "eval").replace("eval.seed None", "eval.seed s")
                + "; each arm's last checkpoint, sampled at eval.temperature",
            ],
            *eval_env_rows(study, setting),
        ]
        lines += [
            f"Setting **{setting.name}**" + (f": {setting.about}" if setting.about else "") + ":",
            "",
            markdown_table(["what", "settings"], rows),
            "",
        ]
    return lines


def eval_env_rows(study: Study, setting: Setting) -> list[list[str]]:
    """The ``[eval_envs.NAME]`` a side of the setting is evaluated on: its env as made."""
    sides = (*(s for c in study.claims for s in c.sides), *study.evaluations)
    used = {s.env for s in sides if s.env and s.setting == setting.name}
    rows = []
    for found in (e for e in study.eval_envs if e.name in used):
        env = found.env_of(setting.env)
        rows.append([
            f"eval env `{found.name}`",
            f"env.env-id {env.env_id}, env.kwargs {value_text(dict(env.kwargs))}; the window "
            "sized on the setting's task" + (f" ({found.about})" if found.about else ""),
        ])  # fmt: skip
    return rows


def start_rows(setting: Setting) -> list[list[str]]:
    """What a setting's runs start from: its starting checkpoint, the setting whose SFT bases
    it takes, and its model settings (precision, gradient checkpointing, chat options) when
    they are not the defaults."""
    stage0 = f": stage 0 `{setting.stage0.name}`, above)" if setting.stage0 is not None else ")"
    rows = [
        [
            "starting checkpoint",
            f"policy {value_text(setting.policy)} (each seed's SFT starts from it{stage0}",
        ]
    ]
    if setting.bases_from:
        rows.append(
            [
                "SFT bases",
                f"setting **{setting.bases_from}**'s (bases_from: same task, "
                "compaction, SFT and start), with their evaluations",
            ]
        )
    model = setting.model
    if model != ModelSettings():
        rows.append(
            [
                "model",
                f"precision {model.precision}, gradient-checkpointing "
                f"{value_text(model.gradient_checkpointing)}, {group_text(model.chat, CHAT)}; "
                "in every stage (SFT, PPO, evaluation)",
            ]
        )
    return rows


def arm_rows(
    setting: Setting, selection: Selection, runs: Runs, start: dict[str, Any]
) -> list[list[str]]:
    """Each trained arm's PPO settings where they differ from the setting's (``start``: its
    PPO as a run records it), as run."""
    rows = []
    for name, results in runs[setting.name].items():
        if name == BASE or (setting.name, name) not in selection.pairs:
            continue
        ran = results[0]["train"]
        as_run = with_unrecorded(ran["ppo"], PPOConfig)  # a field left out is at its old default
        # a field the setting's record lacks came after the runs: not one they changed
        changed = {k: v for k, v in as_run.items() if k in start and start[k] != v}
        said = ", ".join(f"ppo.{k.replace('_', '-')} {value_text(v)}" for k, v in changed.items())
        rows.append([f"arm `{name}`", (said or "no change") + "; " + evaluated_at(results)])
    return rows


def kept_version(best: dict[str, Any]) -> int:
    """The version a ``--ppo.keep-best`` run ended with (runs before ``--ppo.keep-best-rule``
    record only the best-scored one, which they kept)."""
    return best.get("kept_version", best["best_version"])


def evaluated_at(results: list[dict[str, Any]]) -> str:
    """Which policy of an arm's runs was evaluated: the last checkpoint, or under
    ``--ppo.keep-best`` the version each seed's run kept (after how many actor updates)."""
    ran = results[0]["train"]
    if "best_policy" not in ran:
        return f"evaluated at its last checkpoint, iteration {ran['iterations_done']}"
    kept = ", ".join(
        f"{kept_version(r['train']['best_policy'])} of {r['train']['best_policy']['version'] - 1}"
        for r in results
    )
    return f"evaluated at the version --ppo.keep-best kept, after this many actor updates per seed: {kept}"

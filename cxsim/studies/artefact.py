"""A study page's artefact: what the page is computed from, compact, in the page's JSON.

``cxsim study`` writes ``<page>.json`` beside ``<page>.md``; its ``inputs`` hold everything the
page is computed from, so that ``cxsim study --render <page>.json`` rebuilds the page, byte for
byte, with no run cache (:func:`render_artefact`):

- the study file's path (relative, :func:`cxsim.studies.where.shown_path`) and text as run,
  and the invocation's ``--seeds``, ``--only`` and ``--budget``;
- per (setting, arm, seed) run: each protocol's evaluation (Pass@1, the per-task successes,
  tokens, calls, recall), the evaluation's wall time, the SFT base's wall time and derived
  compaction sizes, and the training's iterations, wall time, PPO config as run, the
  ``final`` figures the page shows (the diagnostics: means over its last iterations), its
  success curve and the max / mean over its actor iterations of the figures the file's
  checks read; folders are written relative to the runs folder (they only tell runs apart);
- each setting's compaction, SFT, PPO and evaluation configs as run, every field (the page's
  settings tables, which then do not follow a later change of a default);
- each stage 0's choice, the predictions' record (``predictions.json`` as read) and how many
  stages the run made.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from cxsim.studies.spec import Study

VERSION = 1
_NUMBER = r"(?:-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|NaN|-?Infinity)"
_NUMBER_LIST = re.compile(rf"\[\s*({_NUMBER}(?:,\s*{_NUMBER})*)\s*\]")


def dumps(payload: Any) -> str:
    """A page's JSON as text: indented, with each list of numbers on one line (a run's
    per-task successes are one line, not one line each)."""
    from cxsim.tracking import to_jsonable

    text = json.dumps(to_jsonable(payload), indent=2)
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(re.split(r",\s*", m[1])) + "]", text) + "\n"


def write_text(path: str | Path, text: str) -> None:
    """``text`` to ``path`` atomically (temp file, then ``os.replace``), readable by all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def relative(path: str, runs_dir: str) -> str:
    """``path`` relative to the runs folder (it only tells runs apart; outside it, its last
    three parts): no machine path."""
    try:
        return str(Path(path).resolve().relative_to(Path(runs_dir).resolve()))
    except ValueError:
        return "/".join(Path(path).parts[-3:])


def checked_keys(study: Study) -> set[str]:
    """The training figures the file's checks read over a run's actor iterations."""
    return {c.metric for c in study.checks if c.over in ("max", "mean")}


def final_keys(study: Study) -> set[str]:
    """The ``final`` figures the page reads: the file's diagnostics, its claims' and its
    checks' (of a run's last iterations)."""
    named = {*study.diagnostics, *(k for c in study.claims for k in c.diagnostics)}
    return named | {c.metric for c in study.checks if c.over == "final"}


def compact_run(
    result: dict[str, Any], runs_dir: str, keys: set[str], finals: set[str]
) -> dict[str, Any]:
    """One unit's result with what a page reads (``keys``: the figures its checks read over
    the actor iterations; ``finals``: the ``final`` figures it shows), folders relative to
    ``runs_dir``."""
    train = result["train"]
    if train is not None:
        train = {
            "run_dir": relative(train["run_dir"], runs_dir),
            "iterations_done": train["iterations_done"],
            "wall_time_s": train["wall_time_s"],
            "final": {k: v for k, v in train["final"].items() if k in finals},
            "actor_max": {k: v for k, v in train["actor_max"].items() if k in keys},
            "actor_mean": {k: v for k, v in train["actor_mean"].items() if k in keys},
            "success_curve": train["success_curve"],
            "ppo": train["ppo"],
        }
        if "best_policy" in result["train"]:  # --ppo.keep-best: which version, and of how many
            best = result["train"]["best_policy"]
            kept = ("version", "best_version", "kept_version")  # kept_version: since the rule
            train["best_policy"] = {k: best[k] for k in kept if k in best}
    return {
        "setting": result["setting"],
        "arm": result["arm"],
        "seed": result["seed"],
        "made": result["made"],
        "eval_file": relative(result["eval_file"], runs_dir),
        "eval": result["eval"],
        "eval_wall_time_s": result["eval_wall_time_s"],
        "sft": {
            "run_dir": relative(result["sft"]["run_dir"], runs_dir),
            "wall_time_s": result["sft"]["wall_time_s"],
            "compaction": result["sft"]["compaction"],
        },
        "train": train,
    }


def compact_stage0(chosen: dict[str, Any]) -> dict[str, Any]:
    """A stage 0's choice without its checkpoint's path."""
    return {k: v for k, v in chosen.items() if k != "policy"}


def inputs(
    study: Study,
    outcome: dict[str, Any],
    runs_dir: str,
    seeds: str | None = None,
    only: tuple[str, ...] = (),
    budget: str | None = None,
) -> dict[str, Any]:
    """The artefact of one run of ``study`` (``outcome``: :func:`cxsim.studies.runner.run_study`'s
    result, read from ``runs_dir``; ``seeds``, ``only``, ``budget``: the invocation's)."""
    from cxsim.studies.page_settings import setting_groups
    from cxsim.studies.where import shown_path

    keys, finals = checked_keys(study), final_keys(study)
    return {
        "version": VERSION,
        "study_file": shown_path(study.path),
        "study_text": Path(study.path).read_text(),
        "seeds": seeds,
        "only": list(only),
        "budget": budget,
        "runs": {
            setting: {
                arm: [compact_run(r, runs_dir, keys, finals) for r in results]
                for arm, results in by_arm.items()
            }
            for setting, by_arm in outcome["runs"].items()
        },
        "stage0": {name: compact_stage0(c) for name, c in outcome.get("stage0", {}).items()},
        "settings": setting_groups(study),
        "predictions": outcome["predictions"],
        "made": outcome["made"],
    }


def read_artefact(path: str | Path) -> dict[str, Any]:
    """A page's JSON with its ``inputs``; one line when it has none."""
    data = json.loads(Path(path).read_text())
    if "inputs" not in data:
        raise ValueError(
            f"{path} holds no inputs to render from (written before `cxsim study` kept them); "
            "rerun the study with its cache to write them"
        )
    return data

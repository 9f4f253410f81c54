"""``cxsim study FILE --print-commands``: the ``cxsim sft`` / ``train`` / ``eval`` command lines
that make one seed's runs of a study, each equivalent to the unit the study runs.

Each command is built from the very config the runner uses (:mod:`cxsim.studies.runner`):
every field that differs from the command's own default becomes a flag (nested groups as
``--ppo.lam 0.9``, a group recorded flat as its own fields, ``--device cpu``, booleans as
``--x`` / ``--no-x``, None as ``None``), and the task is always written out. Only the
folders differ: the commands write under the study file's own folder in the runs folder
(:func:`cxsim.studies.where.own_files`),
``<runs-dir>/studies/<stem>-<hash>/replicate/<setting>/s<seed>/`` (a stage 0 under
``.../replicate/stage0-<name>/``), beside the study's cache and never in another file's.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import MISSING, Field, fields, is_dataclass, replace
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

from cxsim.pipeline.presets import preset_ppo
from cxsim.pretrained import PRETRAINED
from cxsim.studies.runner import eval_config, sft_config, train_config
from cxsim.studies.selection import Selection, apart_sides, extra_protocols
from cxsim.studies.spec import BASE, Arm, Setting, Stage0, Study
from cxsim.studies.stage0 import chosen_file
from cxsim.studies.stages import arm_ppo, stage0_sft_config, under
from cxsim.studies.values import type_hints
from cxsim.studies.where import own_files
from cxsim.tracking import RECORDED_FLAT


def field_default(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def flag(name: str, value: Any, optional: bool = False) -> list[str]:
    """One field as command-line words (tyro's forms); ``optional``: the field may be None
    (a boolean that may be None is written ``--x True``, as tyro takes it)."""
    if isinstance(value, bool) and optional:
        return [f"--{name}", str(value)]
    if isinstance(value, bool):
        group, dot, leaf = name.rpartition(".")
        return [f"--{name}" if value else f"--{group}{dot}no-{leaf}"]
    if value is None:
        return [f"--{name}", "None"]
    if isinstance(value, (tuple, list)):
        return [f"--{name}", *(str(v) for v in value)]
    if isinstance(value, dict):
        return [f"--{name}", *(w for k, v in value.items() for w in (str(k), str(v)))]
    return [f"--{name}", repr(value) if isinstance(value, float) else str(value)]


def config_flags(
    values: dict[str, Any], config_type: type, default: Any = None, prefix: str = ""
) -> list[str]:
    """Flags for the fields of ``config_type`` whose value in ``values`` differs from
    ``default``'s (an instance) or, without one, from the field's default; ``env`` always."""
    words: list[str] = []
    hints = type_hints(config_type)
    for f in fields(config_type):
        if f.name not in values:
            continue
        value = values[f.name]
        base = getattr(default, f.name) if default is not None else field_default(f)
        name = prefix + f.name.replace("_", "-")
        if f.name == "env" and not prefix:
            words += flag("env.env-id", value.env_id) + flag("env.kwargs", dict(value.kwargs))
        elif is_dataclass(value):
            nested = base if is_dataclass(base) else None
            inner = prefix if f.metadata.get(RECORDED_FLAT) else name + "."  # --device
            words += config_flags(field_values(value), type(value), nested, inner)
        elif value != base:
            words += flag(name, value, may_be_none(hints[f.name]))
    return words


def may_be_none(hint: Any) -> bool:
    """Whether a field of type ``hint`` (``Annotated`` or not) takes None."""
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    return type(None) in get_args(hint)


def field_values(config: Any) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in fields(config)}


def seed_commands(
    study: Study, selection: Selection, seed: int, runs_dir: str, device: str
) -> list[list[str]]:
    """The commands of one seed, as argument lists (``cxsim`` first; a comment is one ``#``
    line): per setting, its stage 0's SFT (once), its SFT base (once per setting that makes
    bases), the base's evaluation, then each arm's training and evaluation, and each
    evaluation under a claim's protocol the setting lacks."""
    from cxsim.pipeline import sft as sft_entry

    replicate = own_files(runs_dir, study.path) / "replicate"
    commands: list[list[str]] = []
    starts: dict[str, str] = {}
    bases: set[str] = set()
    for setting in study.settings:
        arms = [a for s, a in selection.pairs if s == setting.name]
        if not arms:
            continue
        seed_dir = replicate / setting.name / f"s{seed}"
        base_dir = replicate / setting.bases_owner / f"s{seed}"
        start = setting.policy
        if setting.stage0 is not None:
            stage = setting.stage0
            if stage.name not in starts:
                stage_commands, starts[stage.name] = stage0_commands(
                    stage, replicate, runs_dir, device
                )
                commands += stage_commands
            start = starts[stage.name]
        # built with a start that exists (a stage 0 is made by the commands above), then given it
        sft = sft_config(setting, seed, base_dir, device)
        if setting.bases_owner not in bases:
            values = {**field_values(sft), "model": replace(sft.model, policy=start)}
            commands.append(
                ["cxsim", "sft", *config_flags(values, sft_entry.Config, sft_entry.Config())]
            )
            bases.add(setting.bases_owner)
        base_policy = str(Path(sft.run_dir) / "policy")
        for name in arms:
            policy = base_policy
            if name != BASE:
                arm = study.arm(name)
                train, policy = train_command(setting, arm, seed, seed_dir, base_policy, device)
                commands.append(train)
            for protocol in (None, *extra_protocols(study, selection, setting.name, name)):
                commands.append(
                    eval_command(setting, name, protocol, seed, seed_dir, policy, device)
                )
        commands += swap_comments(selection, setting.name)
    return commands


def stage0_commands(
    stage: Stage0, replicate: Path, runs_dir: str, device: str
) -> tuple[list[list[str]], str]:
    """A stage 0's SFT, the candidate the study chose (:func:`stage0_seed`), after a comment
    on how the candidates are tried; and where its policy goes."""
    from cxsim.pipeline import sft as sft_entry

    candidate = stage0_seed(stage, runs_dir, device)
    cfg = stage0_sft_config(
        stage, candidate, replicate / f"stage0-{stage.name}" / f"p{candidate}", device
    )
    comment = (
        f"# stage0.{stage.name}: candidate seeds {list(stage.seeds)} are tried "
        "in turn until one's held-out execution loss (results.json final "
        f"losses/heldout_execution) is at most {stage.copy_loss:g}; seed "
        f"{candidate}'s"
        + (" (the study's choice)" if candidate != stage.seeds[0] else "")
        + ", the others differ only in --seed and --run-dir:"
    )
    sft = ["cxsim", "sft", *sft_flags(cfg, sft_entry.Config)]
    return [[comment], sft], str(Path(cfg.run_dir) / "policy")


def train_command(
    setting: Setting, arm: Arm, seed: int, seed_dir: Path, base_policy: str, device: str
) -> tuple[list[str], str]:
    """An arm's ``cxsim train`` from the seed's base (``--preset`` first: the command takes
    its defaults from it, then the flags), and where its last checkpoint's policy goes."""
    from cxsim.checkpoint import checkpoint_dir
    from cxsim.pipeline import train as train_entry

    train = replace(
        train_config(setting, arm, seed, seed_dir, base_policy, device),
        run_dir=str(seed_dir / "train" / arm.name),
    )
    default = train_entry.Config(preset=arm.preset, ppo=preset_ppo(arm.preset))
    values = field_values(train)
    del values["preset"]
    flags = config_flags(values, train_entry.Config, default)
    policy = str(checkpoint_dir(train.run_dir, train.total_iterations) / "policy")
    return ["cxsim", "train", "--preset", arm.preset, *flags], policy


def eval_command(
    setting: Setting,
    name: str,
    protocol: str | None,
    seed: int,
    seed_dir: Path,
    policy: str,
    device: str,
) -> list[str]:
    """``cxsim eval`` of ``policy`` (arm or base ``name``) under the setting's protocols, or
    ``protocol`` alone."""
    from cxsim.pipeline import evaluate as evaluate_entry

    label = name + (f"@{protocol}" if protocol else "")
    out = seed_dir / "eval" / f"{label}.json"
    # built with a policy that exists (the shipped one), then given the one to evaluate
    evaluated = under(setting, protocol)
    made = eval_config(evaluated, seed, seed_dir, PRETRAINED, out, device)
    values = {**field_values(made), "model": replace(made.model, policy=policy)}
    return ["cxsim", "eval", *config_flags(values, evaluate_entry.Config)]


def swap_comments(selection: Selection, setting: str) -> list[list[str]]:
    """A comment for each of the setting's sides evaluated apart (another agent's summaries,
    the oracle acting, another env): the study evaluates them itself."""
    return [
        [
            f"# {side.arm} acting"
            + (f" with {side.summarizer}'s summaries" if side.summarizer else "")
            + f" under {side.protocol}"
            + (f" on eval env {side.env}" if side.env else "")
            + ": evaluated by the study itself (cxsim/studies/side_runs.py)"
        ]
        for side in apart_sides(selection)
        if side.setting == setting
    ]


def sft_flags(cfg: Any, config_type: type) -> list[str]:
    return config_flags(field_values(cfg), config_type, config_type())


def stage0_seed(stage: Stage0, runs_dir: str, device: str) -> int:
    """The candidate the study chose, when its runs folder holds the choice; else the first."""
    chosen = chosen_file(runs_dir, stage, device)
    if chosen.is_file():
        return int(json.loads(chosen.read_text())["seed"])
    return stage.seeds[0]


def print_commands(
    study: Study, selection: Selection, seeds: tuple[int, ...], runs_dir: str, device: str
) -> str:
    """The commands of each seed in ``seeds`` as a shell script's text."""
    lines = [
        f"# the runs of {Path(study.path).name}"
        + (f" at budget {study.budget}" if study.budget else "")
        + ", one seed at a time; each block makes what one seed of the study makes"
    ]
    plugins = [
        value
        for setting in study.settings
        for name in setting.arms
        for value in (
            arm_ppo(setting, study.arm(name)).estimator,
            arm_ppo(setting, study.arm(name)).loss_mode,
        )
        if ":" in value
    ]
    if plugins:
        folder = shlex.quote(str(Path(study.path).parent))
        lines.append(
            f"export PYTHONPATH={folder}${{PYTHONPATH:+:$PYTHONPATH}}  # the plug-ins "
            f"{', '.join(sorted(set(plugins)))}"
        )
    for seed in seeds:
        lines.append(f"# seed {seed}")
        lines += [
            c[0] if c[0].startswith("#") else shlex.join(c)
            for c in seed_commands(study, selection, seed, runs_dir, device)
        ]
    return "\n".join(lines) + "\n"

"""A study file, parsed and validated into frozen dataclasses before any run.

The file is TOML (every key, with an example: docs/reference/study-files.md)::

    title = "A floor on the cross-segment correction"
    seeds = "0:8"                      # seeds 0..7; --seeds on the command line overrides it
    diagnostics = ["credit/abs_adv_seg0"]

    [settings.small]                   # a task and the budgets that make one seed's runs
    policy = "pretrained"
    env.env-id = "cxsim/KeyRecall-v0"
    env.kwargs = { memory_length = 5, num_values = 4 }
    compaction.budget = 160
    sft.episodes = 64
    ppo.iterations = 6
    eval.episodes = 64

    [arms.floored]                     # a preset of cxsim/pipeline/presets.py, then ppo.* keys
    preset = "compactionrl"
    ppo.estimator = "my_estimator:floored"

    [[claims]]
    name = "floor-helps"
    treatment = "floored"
    reference = "compactionrl"
    prediction = "small, positive; not resolved at 8 seeds"
    predicted_size = 0.03

    [budgets.smoke]                    # --budget smoke: set over every setting
    sft.episodes = 6

A setting may start from a checkpoint the study makes itself (``policy = "stage0:NAME"``
and a ``[stage0.NAME]`` table: SFT on a setting's task, candidate seeds tried in turn until
one copies; made once, shared by every seed of every setting that names it), or reuse
another setting's SFT bases (``bases_from``). A claim may compare its arms under a
protocol its setting does not evaluate (both arms are then evaluated under it too), or
say that the arms do not differ (``direction = "same"`` with a ``margin``).

Inside ``env``, ``compaction``, ``sft``, ``ppo`` and ``eval`` a key is the command line's flag
without the leading ``--`` (``ppo.lambda-scope``, ``sft.heldout-episodes``; underscores are
taken too), and a value is checked against the flag's type here, then by the config's own
validation; ``"None"`` is None. A name the file gets wrong ends the command before any run
with one line naming the key (:class:`StudyError`).

A setting's model settings (``precision``, ``gradient-checkpointing``, ``chat.*``, at the file's
top or in the setting): :mod:`cxsim.studies.model_settings`.

A study's defaults are the command line's, except ``eval.protocols``: ``compacted`` only.
An arm's PPO settings are its setting's ``ppo`` table, then its preset's changes on top (as
``cxsim run --presets`` applies them), then the arm's own ``ppo`` keys.

This module holds the dataclasses and the parsing of the budgets and seeds (the metrics,
figure and diagnostics: :mod:`cxsim.studies.load`);
the settings, arms and stage-0 tables are parsed in :mod:`cxsim.studies.settings`, the
claims in :mod:`cxsim.studies.claims`,
the checks in :mod:`cxsim.studies.checks`, and the file is read whole by
:func:`cxsim.studies.load.load_study`; ``--only``: :mod:`cxsim.studies.selection`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, PPOConfig, SFTConfig
from cxsim.studies.model_settings import ModelSettings
from cxsim.studies.sides import EvalEnv
from cxsim.studies.values import (
    StudyError,
    build_group,
    check_name,
    split_groups,
)

BASE = "base"
"""The name of a seed's SFT base among the arms (evaluated as it is; no arm may take it)."""
ARM_PREFIX = "arm:"
"""``--only arm:NAME``: that arm in every setting that has it."""
STAGE0_PREFIX = "stage0:"
"""``policy = "stage0:NAME"``: each seed's SFT starts from the ``[stage0.NAME]`` checkpoint."""
STAGE0_SEEDS = tuple(range(1000, 1008))
"""A stage 0's candidate seeds unless its table names others (as ``cxsim verdicts``)."""
COPY_LOSS = 0.01
"""A stage-0 candidate copies when its held-out execution loss (nats per token) is at most
this, unless its table says otherwise (as ``cxsim verdicts --copy-loss``)."""

GROUPS: dict[str, Any] = {
    "env": EnvConfig(),
    "compaction": DEFAULT_COMPACTION,
    "sft": SFTConfig(),
    "ppo": PPOConfig(),
    "eval": EvalConfig(protocols=("compacted",)),
}
"""The config groups a setting sets, with a study's defaults (the command line's; evaluation
under Compacted only)."""
BUDGET_GROUPS = ("env", "compaction", "sft", "ppo", "eval")
FIGURE_KEYS = ("x", "y", "arm")
CHECK_OVER = ("final", "max", "mean")
"""How a check reads a training history key per seed: ``final`` (the mean of the run's last
5 actor iterations, results.json ``final``), ``max`` or ``mean`` over its actor iterations."""
SETTING_OWN = ("about", "policy", "arms", "bases_from")
SETTING_KEYS = (*SETTING_OWN, *GROUPS)
STAGE0_OWN = ("about", "setting", "policy", "seeds", "copy_loss")
"""A ``[stage0.NAME]`` table's own keys (``copy-loss`` is taken too); its group: ``sft.*``."""
ARM_KEYS = ("about", "preset", "ppo")
SWAP_PROTOCOL = "external-summarizer"
"""The protocol a claim side with a summarizer is evaluated under, unless the claim's
``protocol`` names another whose summaries another agent writes."""


@dataclass(frozen=True)
class Stage0:
    """A starting checkpoint the study makes once (``[stage0.NAME]``) and every seed of the
    settings that name it (``policy = "stage0:NAME"``) starts its SFT from, as every user of
    a recipe starts from one pretrained model: SFT on the task and compaction of
    ``setting``, from ``policy``, with each candidate seed in turn until one copies (its
    held-out execution loss at most ``copy_loss``), as ``cxsim verdicts``'s stage 0."""

    name: str
    setting: str
    """The setting whose task and compaction its demonstrations use."""
    env: EnvConfig
    compaction: CompactionConfig
    sft: SFTConfig
    policy: str | None = None
    """What it starts from: None (a fresh ``sft.model``, the default), ``pretrained`` or a
    folder."""
    seeds: tuple[int, ...] = STAGE0_SEEDS
    """Candidate SFT seeds, tried in this order."""
    copy_loss: float = COPY_LOSS
    about: str = ""
    model: ModelSettings = field(default_factory=ModelSettings)
    """Precision, gradient checkpointing and chat options: its setting's."""


@dataclass(frozen=True)
class Setting:
    """A task with the budgets that make one seed's runs: the SFT base, every arm's PPO from
    it, and the evaluations."""

    name: str
    env: EnvConfig
    compaction: CompactionConfig
    sft: SFTConfig
    ppo: PPOConfig
    """The PPO settings every arm starts from (its preset, then its own keys, on top)."""
    eval: EvalConfig
    """Evaluation; its ``seed`` is replaced by each study seed."""
    policy: str | None
    """What each seed's SFT starts from: ``pretrained``, a folder (absolute), None: fresh,
    or ``stage0:NAME`` (then :attr:`stage0` is that stage)."""
    arms: tuple[str, ...]
    """The arms trained in this setting (besides the base)."""
    about: str = ""
    stage0: Stage0 | None = None
    """The stage 0 whose checkpoint each seed's SFT starts from (``policy = "stage0:NAME"``)."""
    bases_from: str = ""
    """Another setting (same task, compaction, SFT, start and model settings) whose SFT bases
    this one uses, with their evaluations; empty: its own."""
    model: ModelSettings = field(default_factory=ModelSettings)
    """Precision, gradient checkpointing and chat options of every stage of its units."""

    @property
    def bases_owner(self) -> str:
        """The setting whose folder holds this setting's SFT bases."""
        return self.bases_from or self.name


@dataclass(frozen=True)
class Arm:
    """A way of training from the base: a preset plus PPO changes."""

    name: str
    preset: str
    ppo: tuple[tuple[str, Any], ...] = ()
    """``(PPOConfig field, value)`` pairs set over the preset."""
    about: str = ""

    @property
    def overrides(self) -> dict[str, Any]:
        return dict(self.ppo)


OWN_PROTOCOL = "own"
"""``protocol = "own"``: each side of a claim is evaluated under its own setting's first
``eval.protocols`` (two context strategies compared, each under its own)."""


@dataclass(frozen=True)
class Side:
    """One side of a claim: an arm (or ``base``) of a setting, under one protocol; with a
    ``summarizer``, that arm acts while another arm's (or the base's) policy writes the
    summaries (the Table 1 swap: a fixed executor, another summarizer)."""

    setting: str
    arm: str
    protocol: str
    summarizer: str = ""
    """An arm of the same setting, or ``base``, whose policy writes the summaries, or
    ``scripted:P`` (:mod:`cxsim.studies.sides`; empty: the protocol's own summarizer)."""
    env: str = ""
    """An ``[eval_envs.NAME]`` the side is evaluated on (empty: its setting's task)."""

    @property
    def evaluation(self) -> str:
        """The key of this side's evaluation in a unit's results: the protocol, followed by
        ``+SUMMARIZER`` when another agent writes the summaries, ``@ENV`` on another env."""
        swap = f"+{self.summarizer}" if self.summarizer else ""
        return self.protocol + swap + (f"@{self.env}" if self.env else "")


@dataclass(frozen=True)
class Claim:
    """Two evaluations paired by seed, with the prediction made before the run: two arms of
    one setting, or (``SETTING:ARM`` sides) of two settings, such as two context strategies
    each trained from its own SFT base."""

    name: str
    setting: str
    treatment: str
    reference: str
    """Arm names, or ``base`` (the seed's SFT base)."""
    prediction: str
    metric: str = "pass_at_1"
    """A key of :data:`cxsim.studies.stats.CLAIM_METRICS` (an evaluation or training metric)."""
    protocol: str = "compacted"
    """The evaluation protocol compared; both arms are evaluated under it (besides their
    setting's ``eval.protocols``) when the setting does not name it."""
    direction: Literal["higher", "lower", "same"] = "higher"
    """The claim: treatment above (``higher``) or below (``lower``) the reference, or no
    different (``same``: within +/- ``margin``)."""
    predicted_size: float | None = None
    """The predicted size of treatment - reference in the claim's direction (>= 0)."""
    statement: str = ""
    margin: float | None = None
    """``same`` claims: how close counts as the same (the verdict page's +/-0.05)."""
    diagnostics: tuple[str, ...] = ()
    """Figures shown beside the claim for both sides: evaluation metrics (a key of
    :data:`cxsim.studies.stats.METRICS`, under the claim's protocol) or training history
    keys (``charts/success_rate``; each run's ``final`` mean)."""
    treatment_setting: str = ""
    reference_setting: str = ""
    """The setting of each side (empty: :attr:`setting`)."""
    treatment_protocol: str = ""
    reference_protocol: str = ""
    """The protocol each side is evaluated under (empty: :attr:`protocol`; with ``protocol =
    "own"``, its setting's first ``eval.protocols``)."""
    treatment_summarizer: str = ""
    reference_summarizer: str = ""
    """The arm (or ``base``) whose policy writes each side's summaries while the side's arm
    acts (:attr:`Side.summarizer`; empty: none)."""
    threshold: float | None = None
    """``iterations_to_success``: the training success rate a run must reach."""
    env: str = ""
    """An ``[eval_envs.NAME]`` both sides are evaluated on (:attr:`Side.env`)."""

    @property
    def treatment_side(self) -> Side:
        return Side(
            self.treatment_setting or self.setting,
            self.treatment,
            self.treatment_protocol or self.protocol,
            self.treatment_summarizer,
            self.env,
        )

    @property
    def reference_side(self) -> Side:
        return Side(
            self.reference_setting or self.setting,
            self.reference,
            self.reference_protocol or self.protocol,
            self.reference_summarizer,
            self.env,
        )

    @property
    def sides(self) -> tuple[Side, Side]:
        return (self.treatment_side, self.reference_side)

    @property
    def across_settings(self) -> bool:
        return self.treatment_side.setting != self.reference_side.setting

    def side_label(self, side: Side) -> str:
        """How the page names a side: its arm, with its setting when the claim pairs two,
        and the arm that wrote its summaries when another did."""
        label = f"{side.setting}:{side.arm}" if self.across_settings else side.arm
        return label + (f" + {side.summarizer}'s summaries" if side.summarizer else "")

    @property
    def commitments(self) -> dict[str, Any]:
        """What the claim commits to before the run (``predictions.json``): its prediction
        and predicted size, and a ``same`` claim's margin."""
        said: dict[str, Any] = {
            "prediction": self.prediction,
            "predicted_size": self.predicted_size,
        }
        if self.direction == "same":
            said["margin"] = self.margin
        return said


@dataclass(frozen=True)
class Figure:
    """``[figure]``: one point per (setting, arm) with its 95% intervals on both axes, two
    evaluation metrics (each side under its setting's first ``eval.protocols``)."""

    x: str
    y: str
    arm: str = ""
    """Only this arm of each setting (empty: every arm and the base)."""


@dataclass(frozen=True)
class Check:
    """``[[checks]]``: a pass/fail threshold on one figure per seed, for regression suites
    (``cxsim bench learning``): an arm's evaluation metric or training figure, optionally
    minus another arm's on the same seed; the study exits 1 when one fails."""

    name: str
    setting: str
    arm: str
    metric: str
    """A key of METRICS (evaluated under the setting's first protocol) or a training
    history key (``losses/first_log_ratio_max``)."""
    minus: str = ""
    """Another arm (or ``base``) whose figure is subtracted seed by seed (a paired gain)."""
    over: str = "final"
    """A history key's reduction per seed: :data:`CHECK_OVER`."""
    at_least: float | None = None
    """The mean over seeds must reach it."""
    each_at_least: float | None = None
    """Every seed must reach it."""
    range: tuple[float, float] | None = None
    """Every seed must lie inside [low, high] (NaN never does)."""
    about: str = ""


@dataclass(frozen=True)
class Study:
    """A parsed, validated study file."""

    path: str
    """The file (absolute)."""
    title: str
    question: str
    seeds: tuple[int, ...]
    settings: tuple[Setting, ...]
    arms: tuple[Arm, ...]
    claims: tuple[Claim, ...]
    diagnostics: tuple[str, ...]
    budget: str | None = None
    """The ``[budgets.NAME]`` applied over every setting (None: the settings as written)."""
    stage0: tuple[Stage0, ...] = ()
    """The ``[stage0.NAME]`` checkpoints settings start from."""
    checks: tuple[Check, ...] = ()
    """Pass/fail thresholds (``[[checks]]``); any failing makes the study exit 1."""
    metrics: tuple[str, ...] = ()
    """Evaluation metrics shown for every (setting, arm) in one table (keys of
    :data:`cxsim.studies.stats.METRICS`), each under its setting's first protocol."""
    figure: Figure | None = None
    reading: str = ""
    """What the results mean, written after a run (Markdown; the page shows it under the
    claims). The predictions are the file's claims, written before."""
    tuning_seeds: tuple[int, ...] = ()
    """The seeds the file's settings were chosen on (``tuning_seeds``): no verdict uses them."""
    correction: str = "none"
    """The page-level correction for many claims: ``none`` or ``holm``."""
    evaluations: tuple[Side, ...] = ()
    """``[[evaluations]]``: sides evaluated besides the claims' (a table's cells no claim
    pairs); each in its acting arm's results, as a claim side is."""
    eval_envs: tuple[EvalEnv, ...] = ()
    """``[eval_envs.NAME]``: the environments sides may be evaluated on."""

    @property
    def stem(self) -> str:
        return Path(self.path).stem

    def setting(self, name: str) -> Setting:
        return next(s for s in self.settings if s.name == name)

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


# -- the file's tables --------------------------------------------------------------------


def parse_seeds(value: Any, where: str = "seeds") -> tuple[int, ...]:
    """``"a:b"`` (seeds a..b-1), ``"n"`` or an int (seed n), or a list of distinct ints."""
    if isinstance(value, bool):
        raise StudyError(f'{where} = {value!r}: write a range such as "0:8"')
    if isinstance(value, int):
        value = [value]
    if isinstance(value, list):
        if not value or not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
            raise StudyError(f"{where} = {value!r}: a list of seeds holds integers, e.g. [0, 3]")
        seeds = tuple(value)
    elif isinstance(value, str):
        found = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", value)
        if not found:
            raise StudyError(f"{where} {value!r}: write a:b (seeds a to b-1, e.g. 0:8) or one seed")
        first = int(found.group(1))
        end = int(found.group(2)) if found.group(2) is not None else first + 1
        if end <= first:
            raise StudyError(f"{where} {value!r}: a:b needs b > a (it means seeds a to b-1)")
        seeds = tuple(range(first, end))
    else:
        raise StudyError(f'{where} = {value!r}: write a range such as "0:8"')
    if min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise StudyError(f"{where} = {value!r}: seeds are distinct integers >= 0")
    return seeds


def parse_budgets(raw: Any, where: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Each budget's groups (``sft``: its keys), and under ``stage0`` what it sets over every
    ``[stage0.NAME]`` (``sft``: its keys, then ``seeds``, ``copy_loss``)."""
    if not isinstance(raw, dict):
        raise StudyError(f"{where}: budgets is a table of [budgets.NAME] tables")
    budgets = {}
    for name, table in raw.items():
        here = f"{where}: budgets.{name}"
        check_name(name, here)
        table = dict(table) if isinstance(table, dict) else table
        stage0 = table.pop("stage0", {}) if isinstance(table, dict) else {}
        checks = table.pop("checks", None) if isinstance(table, dict) else None
        eval_envs = table.pop("eval_envs", {}) if isinstance(table, dict) else {}
        if checks is not None and (
            not isinstance(checks, list) or not all(isinstance(c, str) for c in checks)
        ):
            raise StudyError(f'{here}: checks = {checks!r}: a list of check names, e.g. ["gain"]')
        groups, _ = split_groups(table, here, BUDGET_GROUPS, ())
        for group, values in groups.items():  # the names and types now; the values per setting
            build_group(group, GROUPS[group], values, here)
        stage_here = f"{here}: stage0"
        stage_groups, own = split_groups(
            spelled_own(stage0), stage_here, ("sft",), ("seeds", "copy_loss")
        )
        build_group("sft", GROUPS["sft"], stage_groups.get("sft", {}), stage_here)
        if "seeds" in own:
            parse_seeds(own["seeds"], f"{stage_here}.seeds")
        if "copy_loss" in own:
            copy_loss(own["copy_loss"], stage_here)
        budgets[name] = {**groups, "stage0": {**stage_groups, **own}, "eval_envs": eval_envs}
        if checks is not None:
            budgets[name]["checks"] = checks
    return budgets


def spelled_own(table: Any) -> Any:
    """A table with ``copy-loss`` spelled ``copy_loss`` (both are taken)."""
    if not isinstance(table, dict):
        return table
    return {("copy_loss" if k == "copy-loss" else k): v for k, v in table.items()}


def copy_loss(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise StudyError(
            f"{where}: copy_loss = {value!r}: the held-out execution loss (nats per token) at "
            "or below which a candidate copies, a number > 0 (e.g. 0.01)"
        )
    return float(value)

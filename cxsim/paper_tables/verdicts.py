"""``cxsim verdicts``: a verdict on each claim of the paper, from runs sized to tell its
ablations apart (docs/results/verdicts.md).

Reads top to bottom. The preset's settings become a study (:func:`verdict_study`, in the
terms of cxsim/studies/spec.py): the main setting, each credit setting
(:class:`CreditSetting`), the arms of :data:`ARMS` (presets of cxsim/pipeline/presets.py) and
the claims of ``verdicts_claims.CLAIMS``, each with its prediction written before the runs.
The study engine then makes every run they need, cached per unit under ``--runs-dir``
(cxsim/studies/runner.py ``run_study``), on this machine's processes or on Ray
(``--executor``), for the seeds of ``--seeds``, each with everything of its own, as a new
user's run would be:

0. (once, shared) with ``--pretrain`` settings, the starting checkpoint every seed's SFT
   starts from, as every user of the paper's recipe starts from one pretrained LLM: a
   fresh model cloned from omission-0 demonstrations of tasks no seed uses, the first
   of ``--pretrain-seeds`` that learns to copy the key;
1. an SFT base (``--sft`` settings, seed s, its own demonstrations);
2. PPO from that base for every arm the claims compare, training seed s;
3. Compacted Pass@1 of the base and of every arm on the seed's own tasks (evaluation seed
   s: task seeds never shared between seeds), Single for the Table 2 claim, and the
   Table 1 swap: the base acting with another policy's summaries.

Then cxsim/paper_tables/verdicts_page.py pairs the claims' evaluations by seed (the mean
difference with its 95% Student-t interval, the verdict, the smallest effect the run could
have detected, the diagnostic that explains the row) from plain per-seed results
(:func:`page_runs`). ``--only`` narrows the run as ``cxsim study --only`` does. A cache
made before the study engine ran this command (one folder per preset and setting, then
per seed) is adopted once into the engine's layout (:func:`adopt_old_runs`), so its runs
are read, not made again.

    cxsim verdicts                                    # smoke: the pipeline in a few minutes
    cxsim verdicts --preset full --out docs/results   # the committed page: 8 seeds, 2 at a time
    cxsim verdicts --preset full --seeds 20:24 --only credit:correction-fixed-lambda
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import tyro

from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, PPOConfig, SFTConfig
from cxsim.model_options import check_device_name
from cxsim.paper_tables.tables import SMOKE_ENV
from cxsim.paper_tables.verdicts_adopt import adopt_old_runs
from cxsim.paper_tables.verdicts_claims import (
    ARMS,
    CLAIMS,
    CREDIT_ARMS,
    NO_EFFECT_MARGIN,
    Claim,
    evaluation_side,
)
from cxsim.pipeline.presets import PUBLISHED_CRITIC, PUBLISHED_RECIPE, cli_with_budget
from cxsim.tracking import say

if TYPE_CHECKING:
    from cxsim.studies.spec import Claim as StudyClaim
    from cxsim.studies.spec import Study

BudgetName = Literal["smoke", "full"]


STAGE0 = "copies"
"""The stage 0's name in the study (``[stage0.copies]``, as in studies/verdicts.toml)."""


@dataclass(frozen=True)
class CreditSetting:
    """A credit setting: KeyRecallActive, whose key is shown only if the first action is
    ``open box``. Its SFT demonstrations skip that action half the time (``skip_rate``) and
    keep every fact they saw (omission 0), so the base opens the box about half the time
    and what PPO must learn is that first action, two compactions before the reward: the
    credit the cross-segment correction scales by ``(gamma lambda)^N`` (docs/method.md).
    Every seed's SFT starts from the main setting's stage-0 checkpoint."""

    name: str
    """The page's and the claims' name for it (``Claim.setting``)."""
    env: EnvConfig
    sft: SFTConfig
    arms: tuple[str, ...] = CREDIT_ARMS
    ppo: PPOConfig | None = None
    """PPO settings every arm starts from (None: the main setting's)."""
    about: str = ""
    """What sets it apart, for the page."""
    bases_from: str = ""
    """An earlier credit setting with the same task and SFT whose bases this one reuses."""


@dataclass(frozen=True)
class Config:
    """Verdicts on the paper's claims: K independent seeds, paired intervals, one page.

    The defaults shown are those of the --preset given (smoke when none is):
    ``cxsim verdicts --preset full --help`` shows the full preset's, with its stage-0
    ``--pretrain.*`` flags."""

    preset: BudgetName = "smoke"
    """Budget preset, resolved first (it sets every default; other flags override them):
    ``smoke`` (a short task and tiny budgets, 2 seeds: checks the pipeline, its numbers
    mean nothing) or ``full`` (the committed page: the main job's settings, 8 seeds two
    at a time)."""
    seeds: str = "2"
    """The independent seeds, each with its own SFT base and evaluation tasks: ``K`` (seeds
    0 to K-1) or ``a:b`` (seeds a to b-1); at least 2."""
    only: tuple[str, ...] = ()
    """Run only these, as ``cxsim study --only``: ``SETTING`` (``main``, ``credit``,
    ``credit-critic``: its base and arms), ``SETTING:CLAIM`` (that claim's evaluations and
    what they need, e.g. ``credit:correction-fixed-lambda``), ``arm:NAME``; several add up.
    The page then shows the claims whose evaluations were made."""
    out_dir: Annotated[str, tyro.conf.arg(aliases=("--out",))] = "runs/verdicts/page"
    """Where verdicts.md and its figures go (``docs/results`` for the committed page)."""
    runs_dir: str = "runs/verdicts"
    """The cache of runs (the study engine's: one folder per setting, then per seed); a
    rerun reads what is there and makes only what is new."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    sft: SFTConfig = field(default_factory=SFTConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings every arm starts from; each arm's preset applies its changes on top."""
    eval: EvalConfig = field(default_factory=lambda: EvalConfig(episodes=256))
    """Evaluation (``--eval.seed`` is replaced by each training seed; the protocols are the
    claims': Compacted, Single for Table 2, external-summarizer for Table 1)."""
    pretrain: Annotated[SFTConfig | None, tyro.conf.AvoidSubcommands] = None
    """Stage 0, the shared starting checkpoint (the analog of the pretrained LLM every
    user of the paper's recipe starts from): SFT of a fresh model on demonstrations of
    tasks no seed uses, with these settings; every seed's own SFT then starts from it.
    None: each seed's SFT starts from a fresh model. Set by the preset (full: on, with
    ``--pretrain.*`` flags; smoke: none)."""
    pretrain_seeds: tuple[int, ...] = tuple(range(1000, 1008))
    """Stage 0's candidate seeds, tried in turn until one learns to copy (its held-out
    execution loss at most ``copy_loss``); the page names the one used and the others."""
    copy_loss: float = 0.01
    """Held-out execution loss (nats per token) below which the stage-0 model copies the key."""
    jobs: int = 2
    """Runs at once, each in its own single-threaded process (with ``--executor ray`` and no
    ``--ray-address``: the CPUs of the local Ray instance)."""
    executor: Literal["local", "ray"] = "local"
    """Where runs execute: ``local`` (this machine's processes) or ``ray`` (one Ray task per
    run; ``pip install 'cxsim[ray]'``), as ``cxsim study --executor``."""
    ray_address: str | None = None
    """A running Ray cluster to join (``HOST:PORT``; with ``--executor ray``)."""
    device: str = "cpu"
    """Device of every run."""
    credit_setting: bool = True
    """Also run the preset's credit settings (:class:`CreditSetting`) and their claims."""
    credit: Annotated[tuple[CreditSetting, ...], tyro.conf.Suppress] = ()
    """The credit settings (set by the preset; empty: the main setting only)."""
    arms: Annotated[tuple[str, ...], tyro.conf.Suppress] = ARMS
    """Arms every seed trains in the main setting."""

    def __post_init__(self) -> None:
        if self.pretrain is not None and not self.pretrain_seeds:
            raise ValueError("--pretrain-seeds is empty: pass at least one stage-0 seed")
        if len(self.seed_list) < 2:
            raise ValueError(f"--seeds {self.seeds}: a paired interval needs at least 2 seeds")
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")
        if self.executor == "ray":
            from cxsim.studies.executors import gpus_per_run

            gpus_per_run(self.device)
        else:
            if self.ray_address is not None:
                raise ValueError("--ray-address joins a Ray cluster: pass --executor ray too")
            check_device_name(self.device)
        seen: dict[str, CreditSetting] = {}
        for setting in self.credit:
            other = seen.get(setting.bases_from)
            if setting.bases_from and (
                other is None or (other.env, other.sft) != (setting.env, setting.sft)
            ):
                raise ValueError(
                    f"credit setting {setting.name!r} reuses the bases of "
                    f"{setting.bases_from!r}: name an earlier setting with the same env and SFT"
                )
            seen[setting.name] = setting
        verdict_study(self)  # every setting, arm and stage config checked before any work

    @property
    def seed_list(self) -> tuple[int, ...]:
        """``--seeds``: ``K`` is seeds 0..K-1 (the count), ``a:b`` seeds a..b-1."""
        from cxsim.studies.spec import parse_seeds

        text = self.seeds.strip()
        return tuple(range(int(text))) if text.isdigit() else parse_seeds(text, "--seeds")


# -- the verdict run as a study -----------------------------------------------------------


def verdict_study(cfg: Config) -> Study:
    """The settings, arms and claims of this run as a study (cxsim/studies/spec.py), checked:
    every setting shares one stage 0 (with ``--pretrain``), is evaluated under Compacted
    (a claim's other protocols are evaluated for its two sides), and trains its arms with
    their presets over its PPO settings."""
    from cxsim.studies.selection import side_pairs
    from cxsim.studies.spec import STAGE0_PREFIX, Arm, Setting, Stage0, Study
    from cxsim.studies.stages import arm_ppo, main_job_config, stage0_sft_config

    stage0 = None
    if cfg.pretrain is not None:
        stage0 = Stage0(
            STAGE0, "main", cfg.env, cfg.compaction, cfg.pretrain, None, cfg.pretrain_seeds,
            cfg.copy_loss, about="without it, bases made from a fresh model at these budgets "
            'often never learn to copy (docs/results.md, "Independent seeds")',
        )  # fmt: skip
        stage0_sft_config(stage0, stage0.seeds[0], Path(), cfg.device)  # the SFT stage's checks
    policy = None if stage0 is None else STAGE0_PREFIX + STAGE0
    evaluation = replace(cfg.eval, protocols=("compacted",))
    settings = [
        Setting("main", cfg.env, cfg.compaction, cfg.sft, cfg.ppo, evaluation, policy, cfg.arms,
                stage0=stage0)
    ]  # fmt: skip
    for credit in cfg.credit if cfg.credit_setting else ():
        settings.append(
            Setting(credit.name, credit.env, cfg.compaction, credit.sft, credit.ppo or cfg.ppo,
                    evaluation, policy, credit.arms, about=credit.about, stage0=stage0,
                    bases_from=credit.bases_from)
        )  # fmt: skip
    arms = tuple(Arm(name, name) for name in dict.fromkeys(a for s in settings for a in s.arms))
    for setting in settings:
        main_job_config(setting, 0, Path(), cfg.device)  # the main job's checks
        for name in setting.arms:
            arm_ppo(setting, next(a for a in arms if a.name == name))
    made = {(s.name, a) for s in settings for a in ("base", *s.arms)}  # the claims they decide
    return Study(
        path=str(Path(__file__).absolute()),
        title="Verdicts on the paper's claims",
        question="",
        seeds=cfg.seed_list,
        settings=tuple(settings),
        arms=arms,
        claims=tuple(c for c in map(study_claim, CLAIMS) if side_pairs(c) <= made),
        diagnostics=(),
        budget=cfg.preset,
        stage0=() if stage0 is None else (stage0,),
    )


def study_claim(claim: Claim) -> StudyClaim:
    """A claim of the page as the study engine's claim: its two evaluations as sides (arm,
    protocol, summarizer); a claim of no effect is a ``same`` claim within
    :data:`NO_EFFECT_MARGIN`."""
    from cxsim.studies.spec import Claim as StudyClaim

    (arm, protocol, summarizer), (ref_arm, ref_protocol, ref_summarizer) = (
        evaluation_side(claim.treatment), evaluation_side(claim.reference),
    )  # fmt: skip
    same = claim.kind == "no-effect"
    return StudyClaim(
        claim.key, claim.setting, arm, ref_arm, claim.prediction, protocol=protocol,
        direction="same" if same else "higher", statement=claim.statement,
        margin=NO_EFFECT_MARGIN if same else None, treatment_protocol=protocol,
        reference_protocol=ref_protocol, treatment_summarizer=summarizer,
        reference_summarizer=ref_summarizer,
    )  # fmt: skip


CREDIT_KWARGS = {"obs_words_mean": 8.0, "obs_words_std": 2.0, "num_values": 4}
"""The credit settings' KeyRecallActive: the main job's corridor text and key values."""
CREDIT_SFT = SFTConfig(
    episodes=512, epochs=4, bucket_by_length=True, omission_rate=0.0, skip_rate=0.5
)
"""The credit settings' SFT: the base opens the box about half the time, forgets nothing."""

BUDGETS: dict[str, Config] = {
    "smoke": Config(
        preset="smoke", seeds="2", env=SMOKE_ENV,
        compaction=replace(DEFAULT_COMPACTION, budget=160),
        sft=SFTConfig(episodes=6, epochs=1, heldout_episodes=2),
        credit=(
            CreditSetting(
                "credit", EnvConfig("cxsim/KeyRecallActive-v0", dict(SMOKE_ENV.kwargs)),
                SFTConfig(episodes=6, epochs=1, heldout_episodes=2, omission_rate=0.0,
                          skip_rate=0.5),
            ),
            CreditSetting(
                "credit-critic", EnvConfig("cxsim/KeyRecallActive-v0", dict(SMOKE_ENV.kwargs)),
                SFTConfig(episodes=6, epochs=1, heldout_episodes=2, omission_rate=0.0,
                          skip_rate=0.5),
                ppo=PPOConfig(rollouts_per_batch=4, iterations=1, critic_warmup=2, minibatches=1),
                arms=CREDIT_ARMS[:4], bases_from="credit",
            ),
        ),
        ppo=PPOConfig(rollouts_per_batch=4, iterations=1, critic_warmup=1, minibatches=1),
        eval=EvalConfig(episodes=4),
    ),
    "full": Config(
        preset="full", seeds="8", jobs=2,
        pretrain=SFTConfig(episodes=512, omission_rate=0.0, epochs=8, bucket_by_length=True),
        sft=SFTConfig(episodes=512, epochs=4, bucket_by_length=True),
        ppo=PPOConfig(
            iterations=8, micro_batch_rows=16, minibatches=2, **PUBLISHED_CRITIC,
            **PUBLISHED_RECIPE,
        ),
        credit=(
            CreditSetting(
                "credit", EnvConfig("cxsim/KeyRecallActive-v0", CREDIT_KWARGS), CREDIT_SFT
            ),
            CreditSetting(
                "credit-critic", EnvConfig("cxsim/KeyRecallActive-v0", CREDIT_KWARGS),
                CREDIT_SFT,
                ppo=PPOConfig(
                    iterations=8, micro_batch_rows=16, critic_warmup=12, minibatches=2,
                    **PUBLISHED_CRITIC, **PUBLISHED_RECIPE,
                ),
                arms=CREDIT_ARMS[:4], bases_from="credit",
                about="12 value-only warm-up iterations, not 2: 48 critic steps before the "
                "actor moves, after which the critic reads the context; the credit setting's "
                "bases",
            ),
        ),
    ),
}  # fmt: skip
"""``full``: the main job's task, compaction and model (cxsim/config.py), 8 seeds, 256
tasks per protocol, with budgets sized for 90 minutes on 2 cores: stage 0 (omission 0,
8 epochs) shared, then per seed SFT 4 epochs at omission 0.5 from it, length-bucketed;
PPO 2 + 8 iterations in 16-row micro-batches (why: docs/results/verdicts.md, "Setting"),
the critic and recipe the page was made with (``PUBLISHED_CRITIC``, ``PUBLISHED_RECIPE``).
Then the credit setting (:class:`CreditSetting`) on the same seeds and budgets."""


# -- the run ------------------------------------------------------------------------------


def run_verdicts(cfg: Config, command: str) -> dict[str, Any]:
    """Every run the selected claims need, through the study engine (cached), then
    verdicts.md and its figures from their plain results."""
    import torch

    from cxsim.paper_tables.verdicts_page import render_page
    from cxsim.studies.executors import make_executor
    from cxsim.studies.runner import run_study
    from cxsim.studies.selection import select
    from cxsim.studies.unit_files import setting_folder

    began = time.perf_counter()
    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy 2-core box
    study = verdict_study(cfg)
    selection = select(study, cfg.only)
    adopted = adopt_old_runs(cfg, study)
    if adopted:
        log(f"adopted {adopted} result files of the cache's older layout under {cfg.runs_dir}")
    executor = make_executor(cfg.executor, cfg.jobs, cfg.device, cfg.ray_address)
    try:
        outcome = run_study(study, selection, cfg.runs_dir, cfg.device, executor=executor)
    finally:
        executor.close()
    made = ", ".join(f"{n} {stage}" for stage, n in outcome["made"].items())
    log(f"made now: {made}")
    folder = setting_folder(cfg.runs_dir, study.settings[0], cfg.device)
    invocations = record_invocation(folder, command, time.perf_counter() - began)
    chosen = next(iter(outcome["stage0"].values()), None)
    claims = [
        c
        for c in CLAIMS
        if any((s.setting, s.name) == (c.setting, c.key) for s in selection.claims)
    ]
    page = render_page(
        {s.name: s for s in study.settings},
        page_runs(study, outcome["runs"]),
        claims,
        command,
        invocations,
        cfg.jobs,
        Path(cfg.out_dir),
        (study.stage0[0], chosen) if chosen is not None else None,
    )
    log(f"wrote {page} ({invocations[-1]['wall_time_s']:.0f}s)")
    return {"page": page, "outcome": outcome, "cache": folder, "invocations": invocations}


def page_runs(study: Study, runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, list]:
    """The study's unit results as the page reads them: per setting, one dict per seed with
    its evaluations by the claims' names (``arm``, ``arm@single``, ``t1:summarizer``: each
    ``{"results": {protocol: result}}``), each trained arm's ``final`` figures and history
    (read from the run's results.json), and the process-seconds of the stages it made
    itself (those of a base made by another setting counted there)."""
    from cxsim.paper_tables.verdicts_claims import evaluation_name
    from cxsim.studies.spec import BASE

    pages = {}
    for setting in study.settings:
        by_arm = runs.get(setting.name)
        if not by_arm:
            continue
        seeds = []
        for index, seed in enumerate(study.seeds):
            run: dict[str, Any] = {"seed": seed, "eval": {}, "train": {}, "seconds": 0.0}
            for arm, results in by_arm.items():
                unit = results[index]
                own = arm != BASE or not setting.bases_from
                for key, result in unit["eval"].items():
                    protocol, _, summarizer = key.partition("+")
                    name = evaluation_name(arm, protocol, summarizer)
                    run["eval"][name] = {"results": {protocol: result}}
                if own:
                    run["seconds"] += float(unit["eval_wall_time_s"])
                if unit["train"] is not None:
                    trained = json.loads(
                        (Path(unit["train"]["run_dir"]) / "results.json").read_text()
                    )
                    run["train"][arm] = {
                        "final": unit["train"]["final"],
                        "history": trained["history"],
                    }
                    run["seconds"] += float(unit["train"]["wall_time_s"])
            if not setting.bases_from:  # the seed's SFT base, made for this setting
                run["seconds"] += float(next(iter(by_arm.values()))[index]["sft"]["wall_time_s"])
            run["eval"] = dict(sorted(run["eval"].items(), key=lambda i: page_order(i[0])))
            seeds.append(run)
        pages[setting.name] = seeds
    return pages


def page_order(name: str) -> int:
    """Where an evaluation goes on the page: Compacted first, other protocols, then swaps."""
    _, protocol, summarizer = evaluation_side(name)
    return 2 if summarizer else int(protocol != "compacted")


def log(message: str) -> None:
    say(f"[verdicts {time.strftime('%H:%M:%S')}] {message}")


def record_invocation(cache: Path, command: str, wall_s: float) -> list[dict[str, Any]]:
    """Append this invocation (commit, command, wall seconds) to ``invocations.json`` in the
    main setting's cache folder and return them all: the page adds up the wall time of the
    invocations that made the runs, which a rerun that only reads them barely moves."""
    from cxsim.provenance import commit
    from cxsim.tracking import write_json

    path = cache / "invocations.json"
    made = json.loads(path.read_text())["invocations"] if path.is_file() else []
    made.append({"commit": commit(), "command": command, "wall_time_s": wall_s})
    write_json(path, {"invocations": made})
    return made


def parse(argv: list[str]) -> Config:
    """``--preset`` picks the defaults (BUDGETS); the other flags override them."""
    return cli_with_budget(Config, BUDGETS, argv)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_verdicts(parse(argv), shlex.join(["cxsim", "verdicts", *argv]))


if __name__ == "__main__":
    main()

"""``cxsim verdicts``: a verdict on each claim of the paper, from runs sized to tell its
ablations apart (docs/results/verdicts.md).

Reads top to bottom. For each of K seeds (``--seeds``, 8 in the full preset), in ``--jobs``
single-threaded processes, everything of its own, as a new user's run would be:

0. (once, shared) with ``--pretrain`` settings, the starting checkpoint every seed's SFT
   starts from, as every user of the paper's recipe starts from one pretrained LLM: a
   fresh model cloned from omission-0 demonstrations of tasks no seed uses, the first
   of ``--pretrain-seeds`` that learns to copy the key;
1. an SFT base (``--sft`` settings, seed s, its own demonstrations);
2. PPO from that base for every arm the claims compare (:data:`ARMS`, presets of
   experiments/presets.py), training seed s;
3. Compacted Pass@1 of the base and of every arm on the seed's own tasks (``--eval.seed``
   s: task seeds never shared between seeds), Single for the Table 2 claim, and the
   Table 1 swap: the base as executor with another summarizer.

Then each claim of ``verdicts_claims.CLAIMS`` pairs two of those evaluations by seed: the mean
difference with its 95% Student-t interval over seeds, the verdict (reproduced:
the interval excludes 0 in the claim's direction; contradicted: it excludes 0 the
other way; not resolved), the smallest effect the run could have detected (80%
power, ``scipy.stats.nct``), and the diagnostic that explains the row.
:data:`verdicts_claims.CLAIMS` holds each claim's prediction, written before the runs. The page
is rendered by experiments/verdicts_page.py. Every (arm, seed) result is cached
under ``--runs-dir`` as ``cxsim tables`` caches its rows: a killed run resumes.

    cxsim verdicts                                    # smoke: the pipeline in a few minutes
    cxsim verdicts --preset full --out docs/results   # the committed page: 8 seeds, 2 at a time
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, PPOConfig, SFTConfig
from cxsim.experiments import run as run_entry
from cxsim.experiments.presets import cli_with_budget
from cxsim.experiments.processes import map_in_processes
from cxsim.experiments.tables import SMOKE_ENV
from cxsim.tables import cached_json, config_tag
from cxsim.tracking import say

BudgetName = Literal["smoke", "full"]


ARMS: tuple[str, ...] = (
    "compactionrl", "ppo-single", "no-summary-training", "segment-mean-loss",
    "no-cross-segment", "stitched", "supo", "segment-scope", "fixed-lambda", "local-fixed-lambda",
    "local-segment-scope",
)  # fmt: skip
"""The PPO presets every seed trains from its base (experiments/presets.py)."""

CREDIT_ARMS: tuple[str, ...] = (
    "compactionrl", "no-cross-segment", "fixed-lambda", "local-fixed-lambda", "segment-scope",
    "local-segment-scope",
)  # fmt: skip
"""The arms of the credit setting: the correction on and off at each lambda scope."""

SINGLE = ("base", "compactionrl")
"""Policies also evaluated under Single (Table 2)."""
SUMMARIZERS = ("compactionrl", "base")
"""Table 1: summarizers paired with the base as executor (``t1:<name>``)."""


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
    seeds: int = 2
    """K: independent seeds (0..K-1), each with its own SFT base and evaluation tasks."""
    out_dir: Annotated[str, tyro.conf.arg(aliases=("--out",))] = "runs/verdicts/page"
    """Where verdicts.md and its figures go (``docs/results`` for the committed page)."""
    runs_dir: str = "runs/verdicts"
    """Cache of runs and evaluations, one folder per settings hash, then per seed."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    sft: SFTConfig = field(default_factory=SFTConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO settings every arm starts from; each arm's preset applies its changes on top."""
    eval: EvalConfig = field(default_factory=lambda: EvalConfig(episodes=256))
    """Evaluation (``--eval.seed`` is replaced by each training seed)."""
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
    """Seeds run at once, each in its own single-threaded process."""
    device: str = "cpu"
    """Device of every run."""
    credit_setting: bool = True
    """Also run the preset's credit settings (:class:`CreditSetting`) and their claims."""
    credit: Annotated[tuple[CreditSetting, ...], tyro.conf.Suppress] = ()
    """The credit settings (set by the preset; empty: the main setting only)."""
    arms: Annotated[tuple[str, ...], tyro.conf.Suppress] = ARMS
    """Arms every seed trains (the main setting's; :meth:`credit_config` swaps them)."""
    single: Annotated[tuple[str, ...], tyro.conf.Suppress] = SINGLE
    summarizers: Annotated[tuple[str, ...], tyro.conf.Suppress] = SUMMARIZERS

    def __post_init__(self) -> None:
        if self.pretrain is not None and not self.pretrain_seeds:
            raise ValueError("--pretrain-seeds is empty: pass at least one stage-0 seed")
        if self.seeds < 2:
            raise ValueError(f"--seeds {self.seeds}: a paired interval needs at least 2 seeds")
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")
        self.run_config(Path(), 0)  # the main job's checks
        seen: dict[str, CreditSetting] = {}
        for setting in self.credit:
            self.credit_config(setting)
            other = seen.get(setting.bases_from)
            if setting.bases_from and (
                other is None or (other.env, other.sft) != (setting.env, setting.sft)
            ):
                raise ValueError(
                    f"credit setting {setting.name!r} reuses the bases of "
                    f"{setting.bases_from!r}: name an earlier setting with the same env and SFT"
                )
            seen[setting.name] = setting

    def credit_config(self, setting: CreditSetting) -> Config:
        """A credit setting as a config of its own: its task, SFT, PPO and arms, no stage 0
        (its seeds start from the main setting's), no Single or Table 1 evaluations."""
        return replace(
            self, env=setting.env, sft=setting.sft, ppo=setting.ppo or self.ppo,
            arms=setting.arms, single=(), summarizers=(), pretrain=None, credit=(),
        )  # fmt: skip

    def run_config(self, seed_dir: Path, seed: int, start: str | None = None) -> run_entry.Config:
        """The main job's config for one seed (its own SFT seed and evaluation tasks),
        its SFT starting from ``start`` (a policy folder) or a fresh model."""
        return run_entry.Config(
            run_dir=str(seed_dir), presets=self.arms, seeds=(seed,), sft_seed=seed, env=self.env,
            compaction=self.compaction, sft=self.sft, ppo=self.ppo,
            eval=replace(self.eval, seed=seed), threads=1, progress_bar=False,
            device=self.device, policy=start,
        )  # fmt: skip

    def evaluation_config(self, seed: int) -> Any:
        """The ``cxsim tables`` config its evaluation helpers read (this seed's tasks)."""
        from cxsim.experiments import tables

        return tables.Config(
            preset="full", seeds=1, tables=(1,), env=self.env, compaction=self.compaction,
            sft=self.sft, ppo=self.ppo, eval=replace(self.eval, seed=seed), device=self.device,
        )  # fmt: skip


CREDIT_KWARGS = {"obs_words_mean": 8.0, "obs_words_std": 2.0, "num_values": 4}
"""The credit settings' KeyRecallActive: the main job's corridor text and key values."""
CREDIT_SFT = SFTConfig(
    episodes=512, epochs=4, bucket_by_length=True, omission_rate=0.0, skip_rate=0.5
)
"""The credit settings' SFT: the base opens the box about half the time, forgets nothing."""

BUDGETS: dict[str, Config] = {
    "smoke": Config(
        preset="smoke", seeds=2, env=SMOKE_ENV,
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
        preset="full", seeds=8, jobs=2,
        pretrain=SFTConfig(episodes=512, omission_rate=0.0, epochs=8, bucket_by_length=True),
        sft=SFTConfig(episodes=512, epochs=4, bucket_by_length=True),
        ppo=PPOConfig(iterations=8, micro_batch_rows=16, minibatches=2),
        credit=(
            CreditSetting(
                "credit", EnvConfig("cxsim/KeyRecallActive-v0", CREDIT_KWARGS), CREDIT_SFT
            ),
            CreditSetting(
                "credit-critic", EnvConfig("cxsim/KeyRecallActive-v0", CREDIT_KWARGS),
                CREDIT_SFT,
                ppo=PPOConfig(iterations=8, micro_batch_rows=16, critic_warmup=12, minibatches=2),
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
PPO 2 + 8 iterations in 16-row micro-batches (why: docs/results/verdicts.md, "Setting").
Then the credit setting (:class:`CreditSetting`) on the same seeds and budgets."""


# -- one seed ---------------------------------------------------------------------------


def pretrain_candidate(cfg: Config, cache: Path, seed: int) -> dict[str, Any]:
    """One stage-0 candidate (cached): SFT of a fresh model with ``cfg.pretrain``, seed
    ``seed``; its held-out execution loss and policy folder."""
    from cxsim.experiments import sft as sft_entry

    assert cfg.pretrain is not None
    rc = replace(cfg.run_config(cache / "pretrain" / f"p{seed}", seed), sft=cfg.pretrain)
    sft_cfg = run_entry.sft_config(rc)
    result = cached_json(Path(sft_cfg.run_dir) / "results.json", lambda: sft_entry.run_sft(sft_cfg))
    loss = float(result["final"]["losses/heldout_execution"])
    return {"seed": seed, "heldout_execution": loss, "policy": result["policy"],
            "wall_time_s": float(result["wall_time_s"])}  # fmt: skip


def pretrained_start(cfg: Config, cache: Path) -> dict[str, Any] | None:
    """Stage 0 (cached): the first of ``cfg.pretrain_seeds`` whose model learns to copy,
    candidates trained ``cfg.jobs`` at a time; None without ``cfg.pretrain``. Their
    demonstration tasks (SFT seeds >= 1000) are disjoint from every seed's SFT and
    evaluation tasks."""
    if cfg.pretrain is None:
        return None
    tried: list[dict[str, Any]] = []
    seeds = list(cfg.pretrain_seeds)
    for first in range(0, len(seeds), cfg.jobs):
        batch = seeds[first : first + cfg.jobs]
        n = len(batch)
        for candidate in map_in_processes(
            pretrain_candidate, cfg.jobs, [cfg] * n, [cache] * n, batch
        ):
            tried.append(candidate)
            copies = candidate["heldout_execution"] <= cfg.copy_loss
            log(f"stage 0, seed {candidate['seed']}: held-out execution loss "
                f"{candidate['heldout_execution']:.4f} ({'copies' if copies else 'does not copy'}; "
                f"{candidate['wall_time_s']:.0f}s)")  # fmt: skip
            if copies:
                return {"policy": candidate["policy"], "seed": candidate["seed"], "tried": tried}
    raise RuntimeError(
        f"no stage-0 seed of {cfg.pretrain_seeds} learned to copy (held-out execution loss "
        f"<= {cfg.copy_loss}): {[(t['seed'], round(t['heldout_execution'], 4)) for t in tried]}; "
        "pass more --pretrain-seeds or more --pretrain.epochs"
    )


def run_seed(
    cfg: Config,
    seed_dir: Path,
    seed: int,
    start: str | None = None,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """SFT base (from ``start``, else a fresh model), every arm, every evaluation of one
    seed; each stage cached. ``base``: another setting's run of this seed, whose SFT base
    and its evaluation this one reuses (both marked ``reused``)."""
    from cxsim.experiments import sft as sft_entry
    from cxsim.experiments import train as train_entry
    from cxsim.experiments.tables import agent_by_name, evaluate_agent, evaluate_policy

    rc = cfg.run_config(seed_dir, seed, start)
    ec = cfg.evaluation_config(seed)
    sft_cfg = run_entry.sft_config(rc)
    tick = time.perf_counter()
    if base is not None:
        sft = base["sft"] | {"reused": True}
    else:
        sft = cached_json(
            Path(sft_cfg.run_dir) / "results.json", lambda: sft_entry.run_sft(sft_cfg)
        )
    log(f"seed {seed}: SFT base ready ({time.perf_counter() - tick:.0f}s)")
    policies = {"base": sft["policy"]}
    trained: dict[str, dict[str, Any]] = {}
    for i, arm in enumerate(cfg.arms, start=1):
        tick = time.perf_counter()
        train_cfg = run_entry.train_config(rc, sft["policy"], arm, seed)
        trained[arm] = cached_json(
            Path(train_cfg.run_dir) / "results.json", lambda c=train_cfg: train_entry.train(c)
        )
        policies[arm] = trained[arm]["policy"]
        log(f"seed {seed}: arm {i} of {len(cfg.arms)}, {arm} ({time.perf_counter() - tick:.0f}s)")
    tick = time.perf_counter()
    folder = seed_dir / "verdicts"
    evals = {
        name: cached_json(folder / f"eval-{name}.json",
                          lambda n=name, p=policy: evaluate_policy(ec, p, n, protocols=("compacted",)))
        for name, policy in policies.items()
        if base is None or name != "base"
    }  # fmt: skip
    if base is not None:
        evals = {"base": base["eval"]["base"] | {"reused": True}, **evals}
    for name in cfg.single:
        evals[f"{name}@single"] = cached_json(
            folder / f"eval-{name}-single.json",
            lambda n=name: evaluate_policy(ec, policies[n], n, protocols=("single",)),
        )
    for name in cfg.summarizers:

        def swapped(s: str = name) -> dict[str, Any]:
            executor, chat = agent_by_name("base", ec, seed, policies)
            summarizer, _ = agent_by_name(s, ec, seed, policies)
            return evaluate_agent(ec, executor, chat, f"base + {s}",
                                  protocols=("external-summarizer",), summarizer=summarizer)  # fmt: skip

        evals[f"t1:{name}"] = cached_json(folder / f"eval-t1-{name}.json", swapped)
    log(f"seed {seed}: {len(evals)} evaluations ({time.perf_counter() - tick:.0f}s)")
    return {"seed": seed, "sft": sft, "train": trained, "eval": evals}


def run_seeds(
    cfg: Config, cache: Path, start: str | None, bases: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """run_seed for seeds 0..K-1, ``cfg.jobs`` at a time; in seed order. Each seed writes
    only under its own folder. ``bases``: another setting's seeds, whose SFT bases these
    seeds reuse."""
    seeds = list(range(cfg.seeds))
    dirs = [cache / f"s{s}" for s in seeds]
    n = cfg.seeds
    return map_in_processes(
        run_seed, cfg.jobs, [cfg] * n, dirs, seeds, [start] * n, bases or [None] * n
    )


def log(message: str) -> None:
    say(f"[verdicts {time.strftime('%H:%M:%S')}] {message}")


def cache_folder(cfg: Config, name: str, start: dict[str, Any] | None = None) -> Path:
    """``runs_dir/<name>-<hash of the settings>``, with settings.json saying what the hash
    stands for (``start``: the stage-0 checkpoint a setting without its own starts from)."""
    settings = {"env": cfg.env, "compaction": cfg.compaction, "sft": cfg.sft, "ppo": cfg.ppo,
                "eval": cfg.eval, "device": cfg.device, "pretrain": cfg.pretrain,
                "pretrain_seeds": cfg.pretrain_seeds, "copy_loss": cfg.copy_loss}  # fmt: skip
    if cfg.arms != ARMS:
        settings["arms"] = cfg.arms
    if start is not None:
        settings["start_seed"] = start["seed"]
    cache = Path(cfg.runs_dir) / config_tag(name, settings)
    cached_json(cache / "settings.json", lambda: settings)
    return cache


def run_verdicts(cfg: Config, command: str) -> dict[str, Any]:
    """Every run the claims need (cached): the main setting, then each credit setting from
    the same stage-0 checkpoint; then verdicts.md and its figures."""
    import torch

    from cxsim.experiments.verdicts_page import render_page

    began = time.perf_counter()
    torch.set_num_threads(1)  # tiny models: one thread is faster on a busy 2-core box
    cache = cache_folder(cfg, cfg.preset)
    start = pretrained_start(cfg, cache)
    policy = start["policy"] if start else None
    runs = {"main": run_seeds(cfg, cache, policy)}
    for setting in cfg.credit if cfg.credit_setting else ():
        credit = cfg.credit_config(setting)
        log(f"the {setting.name} setting")
        folder = cache_folder(credit, f"{cfg.preset}-{setting.name}", start)
        bases = runs[setting.bases_from] if setting.bases_from else None
        runs[setting.name] = run_seeds(credit, folder, policy, bases)
    invocations = record_invocation(cache, command, time.perf_counter() - began)
    page = render_page(cfg, runs, command, invocations, Path(cfg.out_dir), start)
    log(f"wrote {page} ({invocations[-1]['wall_time_s']:.0f}s)")
    return {"page": page, "seeds": runs, "cache": cache, "invocations": invocations}


def record_invocation(cache: Path, command: str, wall_s: float) -> list[dict[str, Any]]:
    """Append this invocation (commit, command, wall seconds) to ``invocations.json`` in the
    cache and return them all: the page adds up the wall time of the invocations that
    made the runs, which a rerun that only reads them barely moves."""
    from cxsim.experiments.verdicts_page import commit
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

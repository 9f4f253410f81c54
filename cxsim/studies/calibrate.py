"""``cxsim calibrate``: search an env's dials for a setting whose SFT base lands in a band.

Reads top to bottom: parse and check everything (the dials against the env's constructor,
the band, the seeds, the recipe) before any work; list the candidates (every combination of
``--dials`` and ``--omission-rates``, cxsim/calibration.py); build each candidate's env and
run the pre-flight on it (a strategy that cannot serve a candidate fails here, in one
line); then score candidates: each seed's SFT base made and evaluated under
``--compaction.protocol`` by the study engine's own unit (cxsim/studies/runner.py
``run_unit`` with no arm: ``cxsim run``'s SFT and evaluation stages, seed s the SFT seed and
the evaluation seed), cached under ``--runs-dir`` in a folder per candidate keyed by its
settings, so a rerun reads what is there; pick the candidate whose mean Pass@1 over the
seeds is inside ``--target`` and closest to its middle; write the preset and the search's
record (cxsim/studies/calibration_preset.py). No candidate in the band: the record alone is
written, and the command exits 1 naming the nearest.

    cxsim calibrate --env.env-id cxsim/FactTrail-v0 --seeds 0:8 \\
        --dials num_facts=1,2,3 num_distractors=0,2 --omission-rates 0.25 0.5 \\
        --out presets/FactTrail-default.toml
    cxsim calibrate --env.env-id cxsim/FactUpdate-v0 --search bisect \\
        --dials memory_length=4,6,8,12,16,24 --seeds 0:8 --jobs 2 --out presets/fu.toml
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tyro

from cxsim.calibration import (
    BISECT_NOTE,
    PICK_RULE,
    Band,
    Candidate,
    Dial,
    Evaluate,
    Scored,
    SearchOutcome,
    check_search,
    grid,
    parse_band,
    parse_dial,
    run_search,
)
from cxsim.compaction import CompactionConfig
from cxsim.compute import FLAT, ComputeFlags, DeviceCompute
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, PPOConfig, SFTConfig
from cxsim.model_group import PolicyOnly
from cxsim.provenance import commit_state
from cxsim.toml_text import Inline
from cxsim.tracking import say

if TYPE_CHECKING:
    from cxsim.studies.executors import Executor
    from cxsim.studies.spec import Setting


@dataclass(frozen=True)
class Config:
    """Search an env's dials (and the SFT omission rate) for a setting whose SFT base solves
    a target band of Pass@1 under a strategy; write it as a named preset with the record."""

    out: str | None = None
    """The preset file (TOML) to write; None: ``<runs-dir>/<name>.toml``."""
    name: str | None = None
    """The preset's name (letters, digits, - and _); None: the out file's stem, else the
    env id's family with ``-calibrated`` (``FactTrail-v0-calibrated``)."""
    seeds: str = "0:2"
    """``a:b`` (seeds a to b-1) or one seed: each its own SFT base and evaluation tasks."""
    dials: tuple[str, ...] = ()
    """``NAME=v1,v2,...`` per searched env keyword (e.g. ``num_facts=1,2,3``), set over
    ``--env.kwargs``; several make a grid, the first varying slowest."""
    omission_rates: tuple[float, ...] = ()
    """SFT omission rates to search (the scripted summarizer's); none: ``--sft.omission-rate``."""
    target: str = "0.2:0.6"
    """The band of mean Pass@1 over the seeds, ``low:high`` within [0, 1], ends included."""
    search: Literal["grid", "bisect"] = "grid"
    """``grid``: score every candidate; ``bisect``: one searched axis only, assumed to move
    Pass@1 one way along its listed values: about log2(n) + 2 of n candidates scored."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    """The strategy (``--compaction.protocol``) the bases are trained and evaluated under,
    and its sizes (unset sizes are derived per candidate, as every command does)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """The recipe's SFT (``--sft.omission-rate`` unless ``--omission-rates`` searches it)."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """The evaluation (episodes, repeats, temperature), always under
    ``--compaction.protocol``; its seed is each calibration seed."""
    model: PolicyOnly = field(default_factory=PolicyOnly, metadata=FLAT)
    """What each SFT base starts from (``--policy``)."""
    runs_dir: str = "runs/calibrate"
    """The cache: one folder per candidate (keyed by its settings) and seed, the study
    engine's layout; a rerun makes only what is missing."""
    jobs: int = 1
    """Units run at once, each in its own single-threaded process."""
    compute: ComputeFlags[DeviceCompute] = field(default_factory=DeviceCompute, metadata=FLAT)
    """Where every run computes (``--device``); part of the cache's key."""

    def __post_init__(self) -> None:
        from cxsim.studies.spec import parse_seeds
        from cxsim.studies.values import check_name

        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: pass at least one process")
        protocol = self.compaction.protocol
        if self.eval.protocols not in (EvalConfig().protocols, (protocol,)):
            raise ValueError(
                f"--eval.protocols: a calibration evaluates under --compaction.protocol "
                f"({protocol}) only; drop --eval.protocols"
            )
        object.__setattr__(self, "eval", replace(self.eval, protocols=(protocol,)))
        if self.omission_rates and self.sft.omission_rate != SFTConfig().omission_rate:
            raise ValueError("pass --omission-rates or --sft.omission-rate, not both")
        parse_seeds(self.seeds, "--seeds")
        parse_band(self.target)
        check_search(self.env.env_id, self.parsed_dials, self.rates, self.search)
        check_name(self.preset_name, "--name")
        from cxsim.pipeline.sft import check_starting_policy

        check_starting_policy(self.model.policy, self.sft)

    @property
    def parsed_dials(self) -> list[Dial]:
        return [parse_dial(text) for text in self.dials]

    @property
    def rates(self) -> tuple[float, ...]:
        return self.omission_rates or (self.sft.omission_rate,)

    @property
    def preset_name(self) -> str:
        if self.name is not None:
            return self.name
        if self.out is not None:
            return Path(self.out).stem
        return self.env.env_id.rpartition("/")[2] + "-calibrated"

    @property
    def out_file(self) -> Path:
        return Path(self.out) if self.out else Path(self.runs_dir) / f"{self.preset_name}.toml"


def parse(argv: list[str]) -> Config:
    return tyro.cli(Config, args=argv)


# -- candidates as study settings -----------------------------------------------------------


def candidate_setting(cfg: Config, candidate: Candidate) -> Setting:
    """A candidate as a study setting (no arms): the dials over ``--env.kwargs``, its
    omission rate in the recipe's SFT; its folder name says its values."""
    from cxsim.studies.spec import Setting

    kwargs = {**dict(cfg.env.kwargs), **dict(candidate.dials)}
    return Setting(
        name=candidate.folder_name,
        env=EnvConfig(env_id=cfg.env.env_id, kwargs=kwargs),
        compaction=cfg.compaction,
        sft=replace(cfg.sft, omission_rate=candidate.omission_rate),
        ppo=PPOConfig(),
        eval=cfg.eval,
        policy=cfg.model.policy,
        arms=(),
    )


def check_candidates(cfg: Config, candidates: list[Candidate]) -> None:
    """Each candidate's env builds and the pre-flight passes under the strategy, in the
    starting policy's chat format (as its SFT will run it), before any work; one line naming
    the candidate otherwise."""
    from cxsim.agents import WordChatFormat, default_tokenizer
    from cxsim.pipeline.evaluate import Config as EvalEntryConfig
    from cxsim.pipeline.evaluate import scripted_chat
    from cxsim.pipeline.sft import env_words
    from cxsim.preflight import preflight

    chat = scripted_chat(EvalEntryConfig(agent="oracle", tokenizer=cfg.model.policy))
    for candidate in candidates:
        setting = candidate_setting(cfg, candidate)
        if cfg.model.policy is None:  # a fresh model's tokenizer holds the env's own words (sft)
            chat = WordChatFormat(default_tokenizer(env_words(setting.env)))
        try:  # the pre-flight builds the env (the constructor's checks) and plays the oracle
            preflight(setting.env, setting.compaction, chat)
        except ValueError as error:
            raise ValueError(f"--dials candidate {candidate.label}: {error}") from error


def study_evaluator(cfg: Config, seeds: tuple[int, ...], executor: Executor) -> Evaluate:
    """Scores candidates with the study engine: each seed's SFT base made (or read) and
    evaluated by ``run_unit`` with no arm, every (candidate, seed) through ``executor``."""
    from cxsim.studies.calls import mapped
    from cxsim.studies.runner import record_settings, run_unit

    protocol = cfg.compaction.protocol

    def evaluate(candidates: Sequence[Candidate]) -> list[Scored]:
        settings = [candidate_setting(cfg, c) for c in candidates]
        device = cfg.compute.device
        record_settings(settings, cfg.runs_dir, device)
        calls = [(s, None, seed, cfg.runs_dir, device) for s in settings for seed in seeds]
        units = mapped(executor, run_unit, calls, "")
        scored = []
        for i, candidate in enumerate(candidates):
            mine = units[i * len(seeds) : (i + 1) * len(seeds)]
            results = [u["eval"][protocol] for u in mine]
            scored.append(
                Scored(
                    candidate,
                    tuple(float(r["pass_at_1"]) for r in results),
                    tuple(float(r["summary_recall"]) for r in results),
                    sum(float(u["wall_time_s"]) for u in mine),
                    tuple(stage for u in mine for stage in u["made"]),
                )
            )
        return scored

    return evaluate


# -- the record -----------------------------------------------------------------------------


def candidate_row(scored: Scored, band: Band, chosen: bool) -> dict[str, Any]:
    candidate = scored.candidate
    return {
        "label": candidate.label,
        "dials": Inline(dict(candidate.dials)),
        "omission-rate": candidate.omission_rate,
        "pass-at-1": list(scored.pass_at_1),
        "mean": scored.mean,
        "in-band": band.holds(scored.mean),
        "chosen": chosen,
        "summary-recall": list(scored.summary_recall),
        "wall-time-s": round(scored.wall_time_s, 1),
        "made": Inline({stage: scored.made.count(stage) for stage in dict.fromkeys(scored.made)}),
    }


def search_record(
    cfg: Config,
    outcome: SearchOutcome,
    seeds: tuple[int, ...],
    argv: list[str],
    elapsed: float,
) -> dict[str, Any]:
    """``[search]``: what was searched and how, every candidate scored, the commit, the
    wall time."""
    band = parse_band(cfg.target)
    chosen = outcome.chosen
    record: dict[str, Any] = {
        "mode": outcome.mode,
        "note": BISECT_NOTE if outcome.mode == "bisect" else "grid: every candidate scored",
        "rule": PICK_RULE,
        "target": [band.low, band.high],
        "seeds": list(seeds),
        "dials": Inline({d.name: list(d.values) for d in cfg.parsed_dials}),
        "omission-rates": list(cfg.rates),
        "candidates-total": outcome.candidates,
        "candidates-scored": len(outcome.scored),
        "chosen": chosen.candidate.label if chosen is not None else "none",
        "command": shlex.join(["cxsim", "calibrate", *argv]),
        **commit_state(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "wall-time-s": round(elapsed, 1),
        "unit-time-s": round(sum(s.wall_time_s for s in outcome.scored), 1),
        "runs-dir": cfg.runs_dir,
        "device": cfg.compute.device,
    }
    if chosen is not None:
        from cxsim.studies.calibration_preset import full_kwargs

        env = candidate_setting(cfg, chosen.candidate).env
        record["full-kwargs"] = Inline(full_kwargs(env))
    record["candidates"] = [candidate_row(s, band, s is chosen) for s in outcome.scored]
    return record


def write_outcome(
    cfg: Config, outcome: SearchOutcome, record: dict[str, Any], seeds: tuple[int, ...]
) -> Path:
    """The preset file (or, with no pick, the record alone) at ``cfg.out_file``."""
    from cxsim.studies.calibration_preset import preset_text, record_text

    band = parse_band(cfg.target)
    on = f"seeds {seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    made = f"Made by cxsim calibrate on {on}"
    measure = f"mean {cfg.compaction.protocol} Pass@1 of the SFT bases"
    out = cfg.out_file
    out.parent.mkdir(parents=True, exist_ok=True)
    if outcome.chosen is None:
        missed = (
            f"{made}: no candidate's {measure} lay in {band.low}-{band.high}; the record alone."
        )
        out.write_text(record_text(record, (missed,)))
        return out
    comments = (
        f"{made}: the candidate whose {measure} lay in {band.low}-{band.high}, nearest its middle.",
        "Use it with the flags below, or paste [settings.NAME] into a study file.",
    )
    setting = candidate_setting(cfg, outcome.chosen.candidate)
    out.write_text(preset_text(cfg.preset_name, setting, outcome.chosen.mean, record, comments))
    return out


# -- the command ----------------------------------------------------------------------------


def calibrate(
    cfg: Config, argv: list[str] | None = None, evaluate: Evaluate | None = None
) -> SearchOutcome:
    """The search, its file written; ``evaluate`` (None: the study engine's, through
    ``--jobs`` processes) scores candidates."""
    from cxsim.studies.executors import LocalExecutor
    from cxsim.studies.spec import parse_seeds

    began = time.perf_counter()
    seeds = parse_seeds(cfg.seeds, "--seeds")
    band = parse_band(cfg.target)
    candidates = grid(cfg.parsed_dials, cfg.rates)
    if evaluate is None:
        check_candidates(cfg, candidates)
    note(f"{len(candidates)} candidate(s) x {len(seeds)} seed(s), {cfg.search} search, band "
         f"{band.low}-{band.high} of {cfg.compaction.protocol} Pass@1")  # fmt: skip
    if evaluate is not None:
        outcome = run_search(candidates, band, evaluate, cfg.search)
    else:
        executor = LocalExecutor(cfg.jobs)
        try:
            outcome = run_search(
                candidates, band, study_evaluator(cfg, seeds, executor), cfg.search
            )
        finally:
            executor.close()
    record = search_record(cfg, outcome, seeds, list(argv or []), time.perf_counter() - began)
    out = write_outcome(cfg, outcome, record, seeds)
    for scored in outcome.scored:
        seen = ", ".join(f"{p:.2f}" for p in scored.pass_at_1)
        mark = " <- chosen" if scored is outcome.chosen else ""
        note(f"{scored.candidate.label}: mean {scored.mean:.3f} ({seen}){mark}")
    note(f"wrote {out} ({time.perf_counter() - began:.0f}s)")
    return outcome


def note(message: str) -> None:
    say(f"[calibrate {time.strftime('%H:%M:%S')}] {message}")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse(argv)
    outcome = calibrate(cfg, argv)
    if outcome.chosen is None:
        band = parse_band(cfg.target)
        nearest = outcome.nearest(band)
        raise SystemExit(
            f"no candidate's mean Pass@1 fell in {band.low}-{band.high}; nearest: "
            f"{nearest.candidate.label} at {nearest.mean:.3f}; the record is at {cfg.out_file}"
        )


if __name__ == "__main__":
    main()

"""Benchmark: each horizon's share of the rollouts against its share of the policy gradient.

A batch with KeyRecall's horizon dial (``memory_length_min`` / ``memory_length_max``,
docs/environments.md) mixes rollouts of one window and rollouts of six. The scripted oracle
(perfect summaries unless ``--omission-rate``) plays ``--episodes`` tasks under the
configured context strategy (Compacted by default); no model, no training. The rollouts are
packed into one batch and grouped by their number of windows K; for each group,
``cxsim.diagnostics.horizon_shares`` gives the share of rollouts and the share of the total
per-token gradient weight under each loss mode (``cxsim.loss_modes.LOSS_MODES``, the weights
of the ``weights/`` tags). Training logs the same numbers every iteration
(``horizon/rollout_share_k{K}``, ``horizon/{mode}/grad_share_k{K}``, docs/tensorboard.md).

Writes to ``--out``: ``horizons.png`` (x = K; bars: share of rollouts and share of the
gradient under each mode), ``horizons.md`` (the table, with the command and its wall time)
and ``horizons.json``.

    cxsim bench horizons
    cxsim bench horizons --episodes 64 --env.kwargs num_values 4 memory_length_min 1 memory_length_max 12
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tyro

from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig
from cxsim.envs.defaults import default_kwargs
from cxsim.loss_modes import LOSS_MODES

HORIZON_ENV = "cxsim/KeyRecall-v0"
HORIZON_KWARGS = {**default_kwargs(HORIZON_ENV), "memory_length_min": 2, "memory_length_max": 24}
"""The main job's KeyRecall (short corridor text, 4 key values) with the horizon dial on:
each episode's memory length drawn from 2 .. 24."""
HORIZON_COMPACTION = replace(DEFAULT_COMPACTION, max_compactions=9)
"""The main job's sizes (the published 200-token window), with room for the longest episodes
to take up to 10 windows (docs/training.md, "Critic variants")."""


@dataclass(frozen=True)
class Config:
    """Share of rollouts vs share of the policy gradient, by a rollout's number of windows."""

    env: EnvConfig = field(default_factory=lambda: EnvConfig(HORIZON_ENV, dict(HORIZON_KWARGS)))
    compaction: CompactionConfig = field(default_factory=lambda: HORIZON_COMPACTION)
    episodes: int = 256
    """Oracle rollouts (one task each), packed into one batch."""
    first_seed: int = 0
    """Task seeds ``first_seed + i``."""
    omission_rate: float = 0.0
    """The scripted summarizer drops each needed fact with this probability."""
    train_summaries: bool = True
    """Summary tokens in the policy mask (False: the "w/o summary training" ablation)."""
    modes: tuple[str, ...] | None = None
    """Loss modes to weigh (None: every registered one, ``cxsim.loss_modes.LOSS_MODES``)."""
    out: Path = Path("runs/horizons")
    """Folder for horizons.png, horizons.md and horizons.json."""
    threads: int = 1
    """torch threads."""
    runs: tuple[str, ...] = ()
    """Training runs (a run folder, or a folder searched for ``train/*/results.json``) to read instead of
    playing the oracle: the shares the trainer logged every actor iteration
    (``horizon/`` tags) on the policy's own rollouts, averaged over iterations and runs."""

    def __post_init__(self) -> None:
        if self.episodes < 2:
            raise ValueError(f"--episodes {self.episodes}: pass at least 2 rollouts to compare")
        if not 0.0 <= self.omission_rate <= 1.0:
            raise ValueError(f"--omission-rate {self.omission_rate} must lie in [0, 1]")
        for mode in self.modes or ():
            LOSS_MODES.check("--modes", mode)

    @property
    def loss_modes(self) -> tuple[str, ...]:
        return tuple(LOSS_MODES) if self.modes is None else self.modes


def bench(cfg: Config) -> dict[str, Any]:
    """Oracle rollouts, one packed batch, the shares by window count; the result as plain data."""
    import torch

    from cxsim.agents.chat import WordChatFormat
    from cxsim.agents.tokenizer import default_tokenizer
    from cxsim.diagnostics import horizon_shares
    from cxsim.preflight import preflight
    from cxsim.runtime import collect_rollouts
    from cxsim.segments import pack_segments
    from cxsim.strategies import ScriptedOptions

    torch.set_num_threads(cfg.threads)
    chat = WordChatFormat(default_tokenizer())
    compaction = preflight(cfg.env, cfg.compaction, chat)
    options = ScriptedOptions(omission_rate=cfg.omission_rate, seed=cfg.first_seed)
    agents = compaction.strategy.scripted_agents(cfg.env.env_id, chat, options)
    seeds = [cfg.first_seed + i for i in range(cfg.episodes)]
    rollouts = collect_rollouts(
        cfg.env.env_id, cfg.env.kwargs, agents.actor, compaction, seeds, chat, agents.summarizer
    )
    batch = pack_segments(rollouts.segments, chat.pad_id)
    mask = batch.policy_mask(cfg.train_summaries)
    shares = horizon_shares(mask, batch.rollout_id, batch.is_summary, cfg.loss_modes)
    return {
        "env_id": cfg.env.env_id,
        "env_kwargs": dict(cfg.env.kwargs),
        "protocol": compaction.protocol,
        "budget": compaction.budget,
        "max_compactions": compaction.max_compactions,
        "episodes": cfg.episodes,
        "success": sum(r.success for r in rollouts.records) / cfg.episodes,
        "train_summaries": cfg.train_summaries,
        "windows": shares.windows.tolist(),
        "rollouts": shares.rollouts.tolist(),
        "policy_tokens_per_rollout": shares.tokens.tolist(),
        "rollout_share": shares.rollout_share.tolist(),
        "grad_share": {mode: s.tolist() for mode, s in shares.grad_share.items()},
        "summary_token_share": summary_token_share(mask, batch.is_summary),
        "summary_share": dict(shares.summary_share),
    }


def summary_token_share(mask, is_summary) -> float:
    """The summary tokens' share of the policy tokens."""
    return float(mask[is_summary].sum()) / max(float(mask.sum()), 1.0)


def from_runs(cfg: Config) -> dict[str, Any]:
    """The shares the trainer logged (``horizon/rollout_share_k{K}``,
    ``horizon/{mode}/grad_share_k{K}``) in every actor iteration of every training run under
    ``cfg.runs``, each averaged over iterations and runs (a K absent from a batch counts 0)."""
    import json
    import re

    files = sorted(
        {
            f
            for r in cfg.runs
            for f in (
                [Path(r) / "results.json"]
                if (Path(r) / "results.json").is_file()
                else Path(r).glob("**/train/*/results.json")
            )
        }
    )
    if not files:
        raise FileNotFoundError(
            f"--runs {' '.join(cfg.runs)}: no training run (train/*/results.json) found there"
        )
    iterations = [
        h for f in files for h in json.loads(f.read_text())["history"] if not h.get("warmup")
    ]
    found = {
        int(m.group(1))
        for h in iterations
        for k in h
        if (m := re.fullmatch(r"horizon/rollout_share_k(\d+)", k))
    }
    if not found:
        raise ValueError(f"--runs: the runs under {' '.join(cfg.runs)} logged no horizon/ tags")
    windows = sorted(found)

    def mean_of(key: str) -> float:
        return sum(float(h.get(key, 0.0)) for h in iterations) / len(iterations)

    summary_share = {
        mode: mean_of(f"weights/{mode}/summary_share")
        for mode in cfg.loss_modes
        if any(f"weights/{mode}/summary_share" in h for h in iterations)
    }
    return {
        "source": "training",
        "runs": [str(f.parent) for f in files],
        "iterations": len(iterations),
        "windows": windows,
        "rollout_share": [mean_of(f"horizon/rollout_share_k{k}") for k in windows],
        "grad_share": {
            mode: [mean_of(f"horizon/{mode}/grad_share_k{k}") for k in windows]
            for mode in cfg.loss_modes
        },
        "summary_share": summary_share,
    }


def markdown(result: dict[str, Any]) -> str:
    """The table: one row per window count; each mode's gradient share, with its ratio to the
    share of rollouts (1.00x: the mode weighs those rollouts as many as they are)."""
    modes = list(result["grad_share"])
    lines = [
        "| windows K | rollouts | policy tokens per rollout | share of rollouts | "
        + " | ".join(f"{m} grad share" for m in modes)
        + " |",
        "|---" * (4 + len(modes)) + "|",
    ]

    def fraction(x: float) -> str:  # float sums a hair off a tie round as the tie does
        return f"{round(x, 12):.3f}"

    counts = result.get("rollouts")  # not logged by training
    for i, k in enumerate(result["windows"]):
        share = result["rollout_share"][i]
        cells = [
            f"{fraction(result['grad_share'][m][i])} ({result['grad_share'][m][i] / share:.2f}x)"
            if share > 0
            else fraction(result["grad_share"][m][i])
            for m in modes
        ]
        known = f"{counts[i]} | {result['policy_tokens_per_rollout'][i]:.1f}" if counts else "- | -"
        lines.append(f"| {k} | {known} | {fraction(share)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(result: dict[str, Any]) -> str:
    """The summary tokens' share of the gradient under each mode (in brackets: over their share
    of the policy tokens, where known); "" when the result has none."""
    shares = result.get("summary_share") or {}
    if not shares:
        return ""
    tokens = result.get("summary_token_share")
    head = "| loss mode | summary tokens' share of the gradient |\n|---|---|\n"
    rows = [
        f"| {mode} | {share:.3f}" + (f" ({share / tokens:.2f}x)" if tokens else "") + " |"
        for mode, share in shares.items()
    ]
    where = (
        f"Summary tokens are {tokens:.3f} of the policy tokens; each mode's share of the "
        "gradient weight on them (in brackets: over their share of the tokens).\n\n"
        if tokens
        else "Each mode's share of the gradient weight on the summary tokens, averaged.\n\n"
    )
    return "\n" + where + head + "\n".join(rows) + "\n"


def page(result: dict[str, Any]) -> str:
    """horizons.md: the setting, the command and its wall time, the table."""
    if result.get("source") == "training":
        return (
            "# Gradient share by horizon, under training\n\n"
            f"`{result['command']}`: the shares the trainer logged on the policy's own "
            f"rollouts in {result['iterations']} actor iterations of {len(result['runs'])} "
            f"training runs, averaged; wall time {result['wall_s']:.1f} s.\n\n"
            "Per number of windows K: the share of the rollouts, and each loss mode's share "
            "of the total per-token gradient weight (in brackets: over the share of "
            "rollouts).\n\n" + markdown(result) + summary_markdown(result)
        )
    kwargs = " ".join(f"{k} {v}" for k, v in result["env_kwargs"].items())
    return (
        "# Gradient share by horizon\n\n"
        f"`{result['command']}`: {result['episodes']} scripted-oracle rollouts of "
        f"{result['env_id']} ({kwargs}) under {result['protocol']} (window {result['budget']} "
        f"tokens, at most {result['max_compactions']} compactions), success "
        f"{result['success']:.3f}, summaries trained: {result['train_summaries']}; "
        f"wall time {result['wall_s']:.1f} s.\n\n"
        "Per number of windows K: the share of the rollouts, and each loss mode's share of the "
        "total per-token gradient weight (in brackets: over the share of rollouts).\n\n"
        + markdown(result)
        + summary_markdown(result)
    )


def plot(result: dict[str, Any], path: Path) -> None:
    """Grouped bars: x = windows K; the share of rollouts, then each mode's gradient share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    windows, modes = result["windows"], list(result["grad_share"])
    series = [("share of rollouts", result["rollout_share"], "0.6")]
    series += [
        (f"gradient share, {m}", result["grad_share"][m], f"C{i}") for i, m in enumerate(modes)
    ]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for j, (label, heights, color) in enumerate(series):
        offsets = [k + (j - (len(series) - 1) / 2) * width for k in windows]
        ax.bar(offsets, heights, width=width, label=label, color=color)
    ax.set_xticks(windows)
    ax.set_xlabel("windows per rollout (K)")
    ax.set_ylabel("share")
    title = (
        f"policy rollouts of {len(result['runs'])} training runs, by number of windows"
        if result.get("source") == "training"
        else f"{result['episodes']} oracle rollouts of {result['env_id']}, by number of windows"
    )
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    from cxsim.tracking import say, write_json

    began = time.perf_counter()
    args = list(sys.argv[1:] if argv is None else argv)
    cfg = tyro.cli(Config, args=args)
    result = from_runs(cfg) if cfg.runs else bench(cfg)
    result["command"] = shlex.join(["cxsim", "bench", "horizons", *args])
    result["wall_s"] = time.perf_counter() - began
    cfg.out.mkdir(parents=True, exist_ok=True)
    plot(result, cfg.out / "horizons.png")
    (cfg.out / "horizons.md").write_text(page(result))
    write_json(cfg.out / "horizons.json", result)
    say((markdown(result) + summary_markdown(result)).rstrip())
    say(
        f"wrote {cfg.out / 'horizons.png'}, horizons.md and horizons.json ({result['wall_s']:.1f} s)"
    )


if __name__ == "__main__":
    main()

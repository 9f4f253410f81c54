"""Named PPO presets: the paper's rows (and two it lacks), overridable from the command line.

``cxsim train --preset no-summary-training --ppo.actor-lr 3e-4`` starts from the
preset's :class:`~cxsim.config.PPOConfig` and applies the flags on top: the
preset is resolved before tyro parses the rest.

| preset                | paper row                         | change from ``compactionrl``        |
|-----------------------|-----------------------------------|-------------------------------------|
| `compactionrl`        | CompactionRL                      | (the defaults)                      |
| `ppo-single`          | PPO without compaction            | ``protocol="single"``               |
| `no-summary-training` | w/o summary training              | ``train_summaries=False``           |
| `segment-mean-loss`   | w/o token-level loss              | ``loss_mode="segment-mean"``        |
| `no-cross-segment`    | w/o cross-trajectory GAE          | ``estimator="local"``               |
| `stitched`            | (not in the paper) exact GAE      | ``estimator="stitched"``            |
| `supo`                | (not in the paper) SUPO/GRPO-like | group broadcast, group of 4, no critic |
| `segment-scope`       | (not in the paper) lambda scope   | ``lambda_scope="segment"``          |
| `local-segment-scope` | w/o correction, segment scope     | ``estimator="local"``, ``lambda_scope="segment"`` |
| `fixed-lambda`        | (not in the paper) fixed lambda   | ``lambda_scope="fixed"`` (``lam`` 0.95) |
| `local-fixed-lambda`  | w/o correction, fixed lambda      | ``estimator="local"``, ``lambda_scope="fixed"`` |
| `chain-split`         | (not in the paper) reward/K       | ``estimator="chain-split"``: R/K on each of K chains, no critic |
| `rollout-mean-loss`   | (not in the paper) per rollout    | ``loss_mode="rollout-mean"``: each rollout one vote |

``segment-scope`` and ``local-segment-scope`` put the length-adaptive lambda at segment
scope (l = the segment's trainable tokens); the ``fixed-lambda`` pair uses the usual fixed lambda, where the
cross-segment correction's factor ``(gamma lambda)^N_after`` is far below 1 for early
segments (docs/results/verdicts.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import tyro

from cxsim.config import PPOConfig

PresetName = Literal[
    "compactionrl",
    "ppo-single",
    "no-summary-training",
    "segment-mean-loss",
    "no-cross-segment",
    "stitched",
    "supo",
    "segment-scope",
    "local-segment-scope",
    "fixed-lambda",
    "local-fixed-lambda",
    "chain-split",
    "rollout-mean-loss",
]

PRESETS: dict[str, tuple[str, PPOConfig]] = {
    "compactionrl": ("CompactionRL: cross-segment GAE, token-mean loss, summaries trained", PPOConfig()),
    "ppo-single": ("PPO without compaction (one window; full = failure)", PPOConfig(protocol="single")),
    "no-summary-training": ("w/o summary training (summary tokens masked out)", PPOConfig(train_summaries=False)),
    "segment-mean-loss": ("w/o token-level loss (each segment one vote)", PPOConfig(loss_mode="segment-mean")),
    "no-cross-segment": ("w/o cross-segment correction (local GAE)", PPOConfig(estimator="local")),
    "stitched": ("exact stitched GAE across boundaries", PPOConfig(estimator="stitched")),
    "supo": (
        "group-broadcast advantages (SUPO/GRPO-like), group of 4, no critic",
        PPOConfig(estimator="group-broadcast", group_size=4, critic_warmup=0),
    ),
    "segment-scope": ("CompactionRL with segment-scope adaptive lambda", PPOConfig(lambda_scope="segment")),
    "local-segment-scope": (
        "local GAE (no correction) with segment-scope adaptive lambda",
        PPOConfig(estimator="local", lambda_scope="segment"),
    ),
    "fixed-lambda": ("CompactionRL with a fixed lambda (--ppo.lam)", PPOConfig(lambda_scope="fixed")),
    "local-fixed-lambda": (
        "local GAE (no correction) with a fixed lambda (--ppo.lam)",
        PPOConfig(estimator="local", lambda_scope="fixed"),
    ),
    "chain-split": (
        "the rollout's reward split as R/K over its K chains (segments), no critic",
        PPOConfig(estimator="chain-split", critic_warmup=0),
    ),
    "rollout-mean-loss": (
        "CompactionRL with per-rollout loss denominators (each rollout one vote)",
        PPOConfig(loss_mode="rollout-mean"),
    ),
}  # fmt: skip

DEFAULT_PRESET: PresetName = "compactionrl"

PUBLISHED_CRITIC: dict[str, Any] = {"value_head": "last", "critic_lam": None}
"""The critic the verdict page, the tables page and the shipped studies were made with: a
value head on the last hidden state, trained on the actor's targets (the default until the
tracking critic, ``context-ridge`` with Monte-Carlo targets, took its place). Their full
budgets and study files set it, so they still reproduce what they publish."""
PUBLISHED_RECIPE: dict[str, Any] = {
    "kl_coef": 0.0,
    "skip_uniform_batches": False,
    "keep_best": False,
}
"""The PPO recipe of every page made before the KL penalty became the default (with 16
iterations instead of 12) and the actor stopped stepping on batches whose rollouts all ended
alike: no penalty, a step from every batch, and the last version kept (no keep-best: a page
made before keep-best became the default pins it off too). The verdict and tables pages' full budgets and the
shipped studies made before it set it (and 12 iterations where they used the default), so
they still reproduce what they publish (docs/results/stability.md)."""
T = TypeVar("T")


def preset_ppo(name: str) -> PPOConfig:
    """The PPOConfig of a named preset; a ValueError listing the names if unknown."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name][1]


def preset_from_argv(argv: Sequence[str], default: str = DEFAULT_PRESET) -> str:
    """The value of ``--preset NAME`` / ``--preset=NAME`` in ``argv`` (else ``default``)."""
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == "--preset" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--preset="):
            return arg.split("=", 1)[1]
    return default


def cli_with_preset(
    config_type: type[T], build: Callable[[str], T], argv: Sequence[str] | None
) -> T:
    """``tyro.cli(config_type)`` with defaults from ``build(preset)``; the flags override them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = preset_from_argv(argv)
    preset_ppo(name)  # unknown names fail here, with the list
    return tyro.cli(config_type, args=argv, default=build(name))


def cli_with_budget(config_type: type[T], budgets: dict[str, T], argv: Sequence[str]) -> T:
    """``tyro.cli(config_type)`` with defaults from ``budgets[--preset]`` (``smoke`` when
    absent); the other flags override them; an unknown name exits listing the names."""
    name = preset_from_argv(argv, default="smoke")
    if name not in budgets:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(budgets)}")
    return tyro.cli(config_type, args=list(argv), default=budgets[name])

"""Critic variants, one registry per concept: how the value head reads the backbone, and
the loss it is trained with.

``VALUE_HEADS[name]`` is a :class:`~cxsim.value_heads.ValueHead` (every head, what its pool reads:
:mod:`cxsim.value_heads`; the pool modules: :mod:`cxsim.value_pools`), re-exported here.

``VALUE_LOSSES[name]`` is a :class:`ValueLoss`: the per-token loss the critic update
reduces, and the support its head's outputs are read against.

- ``mse`` (default): ``0.5 (V - G)^2``, PPO-clipped with ``--ppo.value-clip-eps``; a
  scalar head;
- ``hl-gauss``: the histogram loss of Imani and White (2018) in the HL-Gauss form of
  Farebrother et al. (2024): the head gives logits over ``value_bins`` equal bins on
  ``[value_min, value_max]``, the target is a Gaussian of width ``value_sigma`` around the
  return, integrated over each bin (:func:`cxsim.losses.hl_gauss_target`), the loss is the
  cross-entropy, and the value is the expectation over the bin centres.

``PPOConfig.value_head`` / ``value_loss`` (choices, ``--help``, validation), the trainer's
critic (:func:`build_critic`), ``Critic.from_pretrained`` and ``ppo.critic_update`` all
read these registries. Each is a :class:`cxsim.plugins.Registry`: a variant can come
from the user's module (``--ppo.value-head my_module:my_head``) or an installed package's
entry point (groups ``cxsim.value_heads`` and ``cxsim.value_losses``). torch is imported
only when a variant runs, so configs and ``--help`` stay light.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from cxsim.plugins import Registry
from cxsim.value_heads import POOL_INPUTS, VALUE_HEADS, ValueHead

if TYPE_CHECKING:
    import torch
    from torch import nn

    from cxsim.agents.critic import Critic
    from cxsim.config import PPOConfig


__all__ = [
    "CRITIC_FIELDS",
    "POOL_INPUTS",
    "VALUE_HEADS",
    "VALUE_LOSSES",
    "ValueHead",
    "ValueLoss",
    "ValueLossInputs",
    "build_critic",
    "check_critic",
    "check_critic_settings",
    "critic_optimizer",
    "set_value_head_lr",
]


@dataclass(frozen=True)
class ValueLossInputs:
    """What a value loss may read, for one micro-batch. All (S, T) unless noted."""

    values: torch.Tensor
    """The critic's values now (with gradient)."""
    logits: torch.Tensor | None
    """(S, T, K) the head's outputs where the loss has a support of K bins (with gradient);
    None for a scalar head."""
    old_values: torch.Tensor
    """The values at scoring time (the value clip's reference)."""
    returns: torch.Tensor
    """The critic targets G."""
    config: PPOConfig
    """The run's PPO settings (clip range, bins, sigma)."""


@dataclass(frozen=True)
class ValueLoss:
    """A critic loss and the outputs it needs from the head."""

    loss: Callable[[ValueLossInputs], torch.Tensor]
    """``inputs -> (S, T)`` per-token loss (reduced by the critic update over the mask)."""
    support: Callable[[PPOConfig], tuple[float, ...] | None]
    """``config -> the K values the head's K softmax outputs stand for`` (the value is their
    expectation), or None: one scalar output, the value itself."""
    help: str
    """One line for ``--ppo.value-loss``'s help."""


CRITIC_FIELDS = (
    "critic_lam",
    "value_pretrain_steps",
    "value_head",
    "value_loss",
    "value_head_lr",
    "value_head_lr_after_warmup",
)
"""PPOConfig's fields that set up the critic: refused, set, with an estimator that has none."""


def check_critic_settings(cfg: PPOConfig) -> None:
    """The critic variants' settings of ``cfg`` hold together, and a critic-free estimator is
    given none (PPOConfig calls this when it is built); a one-line ValueError saying what to
    change."""
    if cfg.value_bins < 2 or not cfg.value_min < cfg.value_max:
        raise ValueError(
            f"value bins: need --ppo.value-bins >= 2 and --ppo.value-min < --ppo.value-max, "
            f"got {cfg.value_bins} bins on [{cfg.value_min}, {cfg.value_max}]"
        )
    if cfg.value_sigma is not None and not cfg.value_sigma > 0:
        raise ValueError(f"value_sigma={cfg.value_sigma} must be positive (or None)")
    if VALUE_HEADS[cfg.value_head].adds_value and cfg.value_loss != "mse":
        raise ValueError(
            f"--ppo.value-head {cfg.value_head} adds a value of its own to a scalar head; "
            f"--ppo.value-loss {cfg.value_loss} reads bins: use --ppo.value-loss mse, or a "
            f"head without a value of its own (--ppo.value-head last, for one)"
        )
    if cfg.value_loss == "hl-gauss" and cfg.value_clip_eps is not None:
        raise ValueError(
            "--ppo.value-clip-eps clips a scalar value; the hl-gauss loss has no clipped "
            "form: drop --ppo.value-clip-eps or use --ppo.value-loss mse"
        )
    if cfg.critic_lam is not None and not 0.0 <= cfg.critic_lam <= 1.0:
        raise ValueError(f"critic_lam={cfg.critic_lam} must lie in [0, 1] (or None)")
    if cfg.value_pretrain_steps < 0:
        raise ValueError(f"value_pretrain_steps={cfg.value_pretrain_steps} must be >= 0")
    if not 0.0 < cfg.value_pretrain_heldout < 1.0:
        raise ValueError(f"value_pretrain_heldout={cfg.value_pretrain_heldout} must lie in (0, 1)")
    held = cfg.pretrain_heldout_rollouts
    if cfg.value_pretrain_steps and (held < 2 or cfg.value_pretrain_rollouts - held < 1):
        raise ValueError(
            f"--ppo.value-pretrain-rollouts {cfg.value_pretrain_rollouts} with "
            f"--ppo.value-pretrain-heldout {cfg.value_pretrain_heldout} holds out {held} "
            f"rollouts and fits on {cfg.value_pretrain_rollouts - held}: need at least 2 "
            "held out and 1 to fit on"
        )
    given = [name for name in CRITIC_FIELDS if _sets_up(cfg, name)]
    if given and not cfg.uses_critic:
        flag = "--ppo." + given[0].replace("_", "-")
        raise ValueError(
            f"{flag} sets up the critic, and estimator={cfg.estimator!r} has no critic: "
            f"drop {flag} or choose a critic estimator"
        )


def _sets_up(cfg: PPOConfig, name: str) -> bool:
    """The field ``name`` differs from its default and from the default it had before
    (``when_set``'s ``recorded_default``): it asks something of the critic."""
    from cxsim.tracking import unrecorded_value

    f = next(f for f in fields(cfg) if f.name == name)
    value = getattr(cfg, name)
    return value != f.default and value != unrecorded_value(f)


# --------------------------------------------------------------------------- losses


def _mse(x: ValueLossInputs) -> torch.Tensor:
    from cxsim.losses import value_loss

    return value_loss(x.values, x.old_values, x.returns, x.config.value_clip_eps)


def _scalar(config: PPOConfig) -> None:
    return None


def _hl_gauss(x: ValueLossInputs) -> torch.Tensor:
    from cxsim.losses import histogram_edges, hl_gauss_loss

    if x.logits is None:
        raise ValueError("the hl-gauss value loss needs the head's logits (a critic with bins)")
    cfg = x.config
    edges = histogram_edges(cfg.value_min, cfg.value_max, cfg.value_bins, x.logits.device)
    return hl_gauss_loss(x.logits, x.returns, edges, cfg.histogram_sigma)


def _bin_centres(config: PPOConfig) -> tuple[float, ...]:
    width = (config.value_max - config.value_min) / config.value_bins
    return tuple(config.value_min + (k + 0.5) * width for k in range(config.value_bins))


VALUE_LOSSES: Registry[ValueLoss] = Registry(
    {
        "mse": ValueLoss(
            _mse, _scalar, "0.5 (V - G)^2 on a scalar head (clipped with value-clip-eps)"
        ),
        "hl-gauss": ValueLoss(
            _hl_gauss, _bin_centres, "cross-entropy to a Gaussian over value bins (HL-Gauss)"
        ),
    },
    entry_type=ValueLoss,
    kind="value loss",
    group="cxsim.value_losses",
    declaration="loss=<function>, support=<function: config -> bin values or None>, help='one line'",
)
"""Every value loss by name; the first is the default. A name it does not hold is looked up
as a plug-in (``module:name`` or an entry point of group ``cxsim.value_losses``)."""


def build_critic(policy: nn.Module, config: PPOConfig) -> Critic:
    """A fresh critic from ``policy`` (a copy of its backbone) with the configured value head
    and the head outputs the configured value loss reads (``Critic.from_policy``)."""
    from cxsim.agents.critic import Critic

    support = VALUE_LOSSES[config.value_loss].support(config)
    return Critic.from_policy(policy, value_head=config.value_head, support=support)


def critic_optimizer(critic: nn.Module, config: PPOConfig) -> torch.optim.Adam:
    """Adam over the critic's parameters: the backbone at ``config.critic_lr``, the value head
    and its pool at ``config.value_head_lr`` (one group at ``critic_lr`` when that is None)."""
    import torch

    if config.value_head_lr is None:
        return torch.optim.Adam(critic.parameters(), lr=config.critic_lr)
    head = [p for name, p in critic.named_parameters() if not name.startswith("backbone.")]
    backbone = [p for name, p in critic.named_parameters() if name.startswith("backbone.")]
    return torch.optim.Adam(
        [{"params": backbone, "lr": config.critic_lr}, {"params": head, "lr": config.value_head_lr}]
    )


def set_value_head_lr(optimizer: torch.optim.Optimizer, config: PPOConfig, warmup: bool) -> None:
    """The value head's Adam rate for this iteration: ``config.value_head_lr`` in the value-only
    warm-up, ``config.value_head_lr_after_warmup`` once the actor moves (when set; else
    nothing changes). ``optimizer`` is :func:`critic_optimizer`'s, whose second group is
    the head's."""
    if config.value_head_lr_after_warmup is None:
        return
    lr = config.value_head_lr if warmup else config.value_head_lr_after_warmup
    optimizer.param_groups[1]["lr"] = lr


def check_critic(critic: nn.Module, config: PPOConfig) -> None:
    """Raises a one-line ValueError when a loaded critic's head does not match the configured
    value head and loss (a resumed run's critic was made with other flags)."""
    support = VALUE_LOSSES[config.value_loss].support(config)
    head = getattr(critic, "value_head", config.value_head)
    have = getattr(critic, "support_values", None)
    if head != config.value_head or (have is None) != (support is None):
        raise ValueError(
            f"the critic was made with value head {head!r} and "
            f"{'a scalar head' if have is None else f'{len(have)} bins'}; the config asks for "
            f"--ppo.value-head {config.value_head} and --ppo.value-loss {config.value_loss}: "
            "use the flags it was made with"
        )
    if support is not None and have is not None and len(have) != len(support):
        raise ValueError(
            f"the critic has {len(have)} value bins and the config {len(support)}: set "
            f"--ppo.value-bins {len(have)}"
        )

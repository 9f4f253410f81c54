"""Critic variants, one registry per concept: how the value head reads the backbone, and
the loss it is trained with.

``VALUE_HEADS[name]`` is a :class:`ValueHead`: the module that turns the backbone's hidden
states (S, T, H) into the features the value of each prefix is read from. Every one is
causal: the value at token t reads positions <= t - 1 only, so it never changes when later
tokens change.

- ``context-ridge`` (default, with Monte-Carlo targets, ``--ppo.critic-lam 1.0``): the last
  hidden state, plus a value of its own added to the head's: a ridge regression of the
  return on which words the row's opening context holds (up to its first assistant header:
  a window's rebuilt context), solved in closed form before each critic update over the
  batches so far, each batch back weighted half as much
  (:class:`cxsim.agents.critic.ContextRidge`). It reads the last summary from the first
  batches, where a trained head needs tens of steps, and keeps the earlier batches' failures
  when a batch has none.
- ``last``: the hidden state of the prefix's last token, as a language model reads its next
  token (no module); the default before ``context-ridge``, it explains about nothing of the
  outcome at the main task's last window (docs/results.md, "The tracking critic is the
  default");
- ``prefix-mean``: the mean of the hidden states of every attended position of the prefix
  (a causal cumulative mean; padding is left out);
- ``attention-pool``: a softmax-weighted mean of the prefix's hidden states, the weights
  from one learned query (``score_j = q . h_j / sqrt(H)``; the query starts at 0, so the
  pool starts as the prefix mean);
- ``words-pool``: the last hidden state plus an attention pool (as above) of the prefix's
  input embeddings: which words the context holds, whatever the last layer kept of them.
  On KeyRecall the outcome turns on one word of the last summary (``k1`` or ``unknown``),
  which the last layer, made to predict the next token, does not keep
  (docs/results.md, "The critic by segment");
- ``words-max``: the last hidden state plus the running elementwise maximum of the prefix's
  input embeddings (each at unit scale): whether the context holds a word is a large
  feature from the start, with nothing to learn but the head;
- ``words-seen``: the last hidden state plus the sum of one learned vector per distinct token
  id of the prefix (a table of its own, not the base's embeddings): linear in which words
  the context holds, so it reads them the same way on every base.

A head's entry says what its pool module is called with (``ValueHead.reads``):
``pool(hidden, attended)``; with ``reads="embeddings"`` ``pool(hidden, attended, embedded)``,
the backbone's input embeddings (S, T, H); with ``reads="ids"`` ``pool(hidden, attended,
input_ids)``, the token ids (S, T). With ``reads="context"`` ``pool(hidden, attended, input_ids, context)``,
``context`` (S, T) bool each row's opening context (``cxsim.segments.opening_context``). A pool with
``adds_value`` returns ``(features, value)``; a ``refit`` runs before each critic update.

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

if TYPE_CHECKING:
    import torch
    from torch import nn

    from cxsim.agents.critic import Critic
    from cxsim.config import PPOConfig
    from cxsim.ppo import GlobalSum, ScoredBatch


@dataclass(frozen=True)
class ValueHead:
    """How the critic reads a prefix's features from the backbone's hidden states."""

    pool: Callable[[int], nn.Module | None]
    """``hidden_size -> module`` mapping ``(hidden (S, T, H), attended (S, T) bool)`` to
    causal features (S, T, H) (position t reads positions <= t only); None: the hidden
    state itself (``last``)."""
    help: str
    """One line for ``--ppo.value-head``'s help."""
    reads: str = "hidden"
    """What the pool module takes besides the hidden states and the attended mask (S, T):
    nothing (``hidden``), the backbone's input embeddings (S, T, H) (``embeddings``), or the
    token ids (S, T) (``ids``)."""

    adds_value: bool = False
    """The pool returns ``(features, value (S, T))`` and its value is added to the head's (a
    scalar head only: ``--ppo.value-loss mse``)."""
    refit: Callable[[nn.Module, ScoredBatch, GlobalSum], None] | None = None
    """``(pool, scored batch, global_sum) -> None``, called by the critic update before its
    optimiser steps: a closed-form fit of the pool's own state (None: nothing)."""

    def __post_init__(self) -> None:
        if self.reads not in POOL_INPUTS:
            raise ValueError(f"ValueHead reads={self.reads!r}: choose one of {POOL_INPUTS}")


POOL_INPUTS = ("hidden", "embeddings", "ids", "context")
"""What a value head's pool may read (``ValueHead.reads``)."""


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


# --------------------------------------------------------------------------- heads


def _last(hidden_size: int) -> None:
    return None


def _prefix_mean(hidden_size: int) -> nn.Module:
    from cxsim.agents.critic import PrefixMeanPool

    return PrefixMeanPool()


def _attention_pool(hidden_size: int) -> nn.Module:
    from cxsim.agents.critic import AttentionPool

    return AttentionPool(hidden_size)


def _words_pool(hidden_size: int) -> nn.Module:
    from cxsim.agents.critic import WordsPool

    return WordsPool(hidden_size)


def _words_max(hidden_size: int) -> nn.Module:
    from cxsim.agents.critic import WordsMaxPool

    return WordsMaxPool()


def _words_seen(hidden_size: int) -> nn.Module:
    from cxsim.agents.critic import WordsSeenPool

    return WordsSeenPool(hidden_size)


def _context_ridge(hidden_size: int) -> nn.Module:
    from cxsim.agents.critic import ContextRidge

    return ContextRidge(hidden_size)


def _refit_context_ridge(pool: nn.Module, scored: ScoredBatch, global_sum: GlobalSum) -> None:
    """Each row with policy tokens: its return at the first of them, against the words of
    its opening context."""
    from cxsim.segments import OPENING_CONTEXT

    batch, mask = scored.batch, scored.policy_mask
    first = mask.long().argmax(dim=1, keepdim=True)
    targets = scored.returns.gather(1, first).squeeze(1)
    context = batch.extras[OPENING_CONTEXT]
    pool.refit(batch.token_ids, context, targets, mask.any(dim=1), global_sum)


VALUE_HEADS: Registry[ValueHead] = Registry(
    {
        "context-ridge": ValueHead(
            _context_ridge,
            "the last hidden state's value plus a ridge regression on the context's words",
            reads="context",
            adds_value=True,
            refit=_refit_context_ridge,
        ),
        "last": ValueHead(_last, "the prefix's last hidden state (a language model's reading)"),
        "prefix-mean": ValueHead(_prefix_mean, "the mean of the prefix's hidden states"),
        "attention-pool": ValueHead(
            _attention_pool, "the prefix's hidden states pooled by one learned query"
        ),
        "words-pool": ValueHead(
            _words_pool,
            "the last hidden state plus the prefix's input embeddings pooled by one query",
            reads="embeddings",
        ),
        "words-max": ValueHead(
            _words_max,
            "the last hidden state plus the running maximum of the prefix's input embeddings",
            reads="embeddings",
        ),
        "words-seen": ValueHead(
            _words_seen,
            "the last hidden state plus a learned vector for each distinct word of the prefix",
            reads="ids",
        ),
    },
    entry_type=ValueHead,
    kind="value head",
    group="cxsim.value_heads",
    declaration=(
        "pool=<function: hidden_size -> causal module or None>, help='one line'"
        "[, reads='embeddings' | 'ids' | 'context', adds_value=True, refit=<function>]"
    ),
)
"""Every value head by name; the first is the default. A name it does not hold is looked up
as a plug-in (``module:name`` or an entry point of group ``cxsim.value_heads``)."""


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

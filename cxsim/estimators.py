"""The advantage estimators the trainer can run, one registry keyed by name.

``ESTIMATORS[name]`` is an :class:`Estimator`: the function from an
:class:`EstimatorInputs` to (S, T) advantages, whether it needs a critic, and
its help text. ``PPOConfig.estimator`` (its choices, its ``--help`` and its
validation), ``ppo.score_batch``'s dispatch, whether the trainer builds a
critic, ``cxsim lab`` and ``cxsim conform`` are all read from this registry, so
adding an estimator is one entry here (and its test). The registry is a
:class:`cxsim.plugins.Registry`: an estimator can also come from outside cxsim, an
``Estimator`` in the user's module (``--ppo.estimator my_module:my_gae``) or an
installed package's entry point in group ``cxsim.estimators`` (docs/training.md,
"Your own estimator or loss mode"). The math lives in :mod:`cxsim.advantages`;
this module imports torch only when an estimator runs, so configs and ``--help``
stay light.

Shapes: S segments, T tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cxsim.plugins import Registry

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EstimatorInputs:
    """Everything an estimator may read, already restricted to the policy mask."""

    values: torch.Tensor
    """(S, T) float: critic values ``V(tokens_<t)`` (zeros without a critic)."""
    mask: torch.Tensor
    """(S, T) bool: the tokens the estimator steps over (the policy mask)."""
    rewards: torch.Tensor
    """(S,) float: terminal reward ``R`` of each row's rollout (bootstrapped truncations
    already added when the config asks for it, :func:`cxsim.advantages.bootstrapped_rewards`)."""
    step_rewards: torch.Tensor
    """(S, T) float: rewards of non-final steps at the last token of their response."""
    rollout_id: torch.Tensor
    """(S,) long."""
    segment_index: torch.Tensor
    """(S,) long."""
    group_id: torch.Tensor
    """(S,) long: rollouts of one task share it."""
    gamma: float
    lam: float | torch.Tensor
    """A float or (S,) per-row lambdas."""
    parent_index: torch.Tensor | None = None
    """(S,) long: each row's parent segment when a rollout's segments form a tree
    (``SegmentBatch.parent_index``); None: every rollout is the chain of its rows. The
    estimators that look across segments follow the tree's paths (``cxsim.advantages``,
    "Segment trees")."""


@dataclass(frozen=True)
class Estimator:
    """One way of turning a scored batch into advantages."""

    advantages: Callable[[EstimatorInputs], torch.Tensor]
    """``inputs -> (S, T)`` advantages, 0 off the mask."""
    needs_critic: bool
    """The trainer builds, scores with and trains a critic only when True."""
    help: str
    """One line for ``--ppo.estimator``'s help."""
    needs_groups: bool = False
    """It reads groups of rollouts of one task: the config refuses ``--ppo.group-size`` 1."""
    quantity: str | None = None
    """The conformance quantity whose reference it computes (a name of
    cxsim/conformance/quantity_names.py served by the estimator layout): ``cxsim conform
    NAME`` checks it against that reference with no ``--quantity``."""


def _local(x: EstimatorInputs) -> torch.Tensor:
    from cxsim.advantages import segment_gae

    return segment_gae(x.values, x.mask, x.rewards, x.gamma, x.lam, step_rewards=x.step_rewards)


def _cross_segment(x: EstimatorInputs) -> torch.Tensor:
    from cxsim.advantages import cross_segment_gae

    return cross_segment_gae(
        x.values, x.mask, x.rewards, x.rollout_id, x.segment_index, x.gamma, x.lam,
        step_rewards=x.step_rewards, parent_index=x.parent_index,
    )  # fmt: skip


def _stitched(x: EstimatorInputs) -> torch.Tensor:
    from cxsim.advantages import stitched_gae

    return stitched_gae(
        x.values, x.mask, x.rewards, x.rollout_id, x.segment_index, x.gamma, x.lam,
        step_rewards=x.step_rewards, parent_index=x.parent_index,
    )  # fmt: skip


def _group_broadcast(x: EstimatorInputs) -> torch.Tensor:
    from cxsim.advantages import group_broadcast
    from cxsim.scans import per_group_sum

    # the rollout's return: R plus its step rewards, whichever segment they fell in
    returns = x.rewards + per_group_sum(x.step_rewards.sum(dim=1), x.rollout_id)
    return group_broadcast(returns, x.mask, x.rollout_id, x.group_id)


def split_over_chains(
    returns: torch.Tensor, mask: torch.Tensor, rollout_id: torch.Tensor
) -> torch.Tensor:
    """(S, T): each rollout's return divided by its number of chains ``K``, on every masked
    token of each chain (``R / K``: the rollout's chains carry ``R`` in total).

    A chain is a row with at least one masked token; a row without one (a rejected
    summary attempt, mask 0) is not counted. Float64 reference:
    :func:`cxsim.conformance.rules.chain_split`.

    Args:
        returns: (S,) float, the rollout's return on each of its rows.
        mask: (S, T) bool; rollout_id: (S,) integer.
    """
    import torch

    from cxsim.scans import per_group_sum

    chains = per_group_sum(mask.any(dim=1).to(returns.dtype), rollout_id)
    share = returns / chains.clamp(min=1)
    return torch.where(mask, share[:, None], torch.zeros((), dtype=returns.dtype))


def _chain_split(x: EstimatorInputs) -> torch.Tensor:
    from cxsim.scans import per_group_sum

    returns = x.rewards + per_group_sum(x.step_rewards.sum(dim=1), x.rollout_id)
    return split_over_chains(returns, x.mask, x.rollout_id)


ESTIMATORS: Registry[Estimator] = Registry(
    {
        "cross-segment": Estimator(
            _cross_segment,
            True,
            "the paper: local GAE times (gamma lambda)^N_{>s}",
            quantity="cross-segment-gae",
        ),
        "local": Estimator(
            _local,
            True,
            "GAE inside each segment, no cross-segment correction",
            quantity="local-gae",
        ),
        "stitched": Estimator(
            _stitched,
            True,
            "exact GAE over the rollout's segments in order",
            quantity="stitched-gae",
        ),
        "group-broadcast": Estimator(
            _group_broadcast,
            False,
            "SUPO/GRPO: group-normalised return on every token; no critic",
            needs_groups=True,
            quantity="group-broadcast",
        ),
        "chain-split": Estimator(
            _chain_split,
            False,
            "the rollout's return split as R/K over its K chains; no critic",
            quantity="chain-split",
        ),
    },
    entry_type=Estimator,
    kind="estimator",
    group="cxsim.estimators",
    declaration="advantages=<function>, needs_critic=True or False, help='one line'",
)
"""Every estimator by name; the first is the default. A name it does not hold is looked up
as a plug-in (``module:name`` or an entry point of group ``cxsim.estimators``)."""

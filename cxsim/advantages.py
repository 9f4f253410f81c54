"""Advantage estimators for segmented (compacted) rollouts (docs/method.md section 3).

Pure tensor functions over right-padded batches. Dimension names used below:
``S`` segments (rows), ``T`` tokens per row (padded), ``R`` rollouts. Rows need
not be grouped or ordered by rollout: a row's rollout and its position in it
come from ``rollout_id`` and ``segment_index`` (both ``(S,)`` integer tensors).
Alignment follows ``cxsim.segments``: ``values[s, t] = V(tokens_<t)``.

GAE steps over trainable tokens only. Writing ``i`` for the i-th trainable
token of a sequence (1-based, ``n`` of them) and ``q = gamma * lam``::

    delta_i = r_i + gamma * V_{i+1} - V_i        (V_{n+1} = 0, r_i = R [i == n] + rstep_i)
    A_i     = delta_i + q * A_{i+1}              (A_{n+1} = 0)

``R`` is the terminal reward (S,) and ``rstep`` the optional per-token step
rewards (S, T) (``step_rewards=``: a step's reward at the last token of the
response that earned it, ``cxsim.segments``). Bootstrapping an episode the
environment truncated is a choice made on ``R`` (:func:`bootstrapped_rewards`),
never a default: the method treats every ending as terminal.

Untrainable positions (prompt, observations, padding) pass ``V_{i+1}`` and the
running ``A`` through unchanged and get advantage 0, so their values never
enter any output. The recurrence is a first-order linear recurrence
``A_t = d_t + c_t A_{t+1}`` with ``c_t = 1, d_t = 0`` at untrainable positions,
solved by a log-depth parallel scan (:func:`cxsim.gae_scan.gae_scan`; no Python loop over
tokens or segments, no host synchronisation except one validation check per call).

Segment trees
-------------

A rollout's segments form a tree when a context strategy opens child windows
(``folding``, ``cxsim.strategies.folding``): ``parent_index`` (S,) names each row's
parent segment (-1 for the rollout's first). A linear rollout is the chain in which each
segment's parent is the previous one; the estimators below take ``parent_index=None`` for
that reading (every figure then as before) and read any tree along the paths of
``cxsim.segment_trees``: ``path(s) = (s, c(s), c(c(s)), ...)``, ``c(s)`` the latest child
of s, ending at the last segment, in time, of the subtree under s. So:

- **The leaf of a path carries the reward.** The rollout's terminal reward ``R`` is put
  at the last trainable token of every path's leaf: the main path's leaf, as on a chain,
  and each returned child's (the child's summary is its outcome, credited with the
  rollout's outcome as the main path's last action is, FoldGRPO-style). Step rewards stay
  at their own tokens.
- **Later tokens on a tree.** ``N_>s`` counts the trainable tokens of the segments after
  s on its path: ``N_>s = sum_{j in path(s), j != s} n_j``. On a chain that is every later
  segment, the paper's ``N_>s``. A child window's tokens are not later tokens of its
  parent (the parent's path goes on through its continuation), and the parent's
  continuation is not on the child's path.
- **Stitched GAE on a tree** is the exact GAE along the same paths: a token bootstraps from
  the next trainable token on its segment's path (across a boundary: the first trainable
  token of ``c(s)``), and the leaf's last one gets ``R``. So at zero values
  cross-segment equals stitched on trees too: token i of s gets
  ``R (gamma lam)^{N_>s + n_s - i}``.
- The paths cut the tree into disjoint chains (:func:`cxsim.segment_trees.segment_chains`);
  both estimators run on those chains as on rollouts. ``group_broadcast`` (and
  ``adaptive_lambda``) read only rollout ids: every segment of a rollout, on any path, gets
  the rollout's group-normalised return, the same as on a chain.

Sources: GAE (Schulman et al. 2016); the cross-segment correction is Eq. 15 of
CompactionRL (arXiv 2607.05378, section 4.2); the stitched estimator is the
exact GAE over the concatenated rollout, the reference the correction
approximates.
"""

from __future__ import annotations

from typing import Literal

import torch

from cxsim.advantage_checks import (
    Lam,
    _check_gamma,
    _check_mask,
    _check_rows,
    _check_tokens,
    _duplicate_check,
    _lam_rows,
    _nan_check,
    _raise_if_any,
    _step_checks,
)
from cxsim.gae_scan import gae_scan
from cxsim.scans import (
    first_in_group,
    last_in_run,
    per_group_sum,
    rollout_order,
)
from cxsim.segment_trees import _path_keys

AdaptiveScope = Literal["segment", "rollout"]
ADAPTIVE_SCOPES: tuple[AdaptiveScope, ...] = ("segment", "rollout")
"""What the length-adaptive lambda counts: the segment's or the whole rollout's tokens."""


# --------------------------------------------------------------------------- estimators


def segment_gae(
    values: torch.Tensor,
    trainable: torch.Tensor,
    rewards: torch.Tensor,
    gamma: float,
    lam: Lam,
    *,
    step_rewards: torch.Tensor | None = None,
) -> torch.Tensor:
    """Local GAE inside each segment, ``A_loc`` (docs/method.md section 3).

    ``A_loc_{s,i} = sum_{l=0}^{n_s-i} (gamma lam_s)^l delta_{s,i+l}``, with
    ``delta_{s,i} = r_{s,i} + gamma V(x_{s,i+1}) - V(x_{s,i})`` over the trainable
    tokens of segment s; ``r`` is ``rewards[s]`` at the last trainable token and
    0 before it; the value after the last trainable token is 0.

    Args:
        values: (S, T) float, ``V`` at each position (ignored where untrainable).
        trainable: (S, T) bool.
        rewards: (S,) float, reward placed at each segment's last trainable token.
        gamma: discount in [0, 1].
        lam: GAE lambda in [0, 1], a float or an (S,) tensor (one per segment).
        step_rewards: (S, T) float or None, rewards of non-final steps at their tokens.

    Returns:
        (S, T) advantages, 0 at untrainable positions (and on rows with none).
    """
    num_rows, _ = _check_tokens(values, trainable)
    _check_rows("rewards", rewards, num_rows, integer=False)
    _check_gamma(gamma)
    lam_rows, lam_checks = _lam_rows(lam, num_rows, values)
    _raise_if_any(
        [
            _nan_check("values", values, trainable),
            _nan_check("rewards", rewards),
            *lam_checks,
            *_step_checks(step_rewards, values),
        ]
    )
    return _segment_gae(values, trainable, rewards, gamma, lam_rows, step_rewards)


def _segment_gae(values, trainable, rewards, gamma, lam_rows, step_rewards=None):
    reward_tok = rewards.to(values.dtype)[:, None].expand_as(values)
    lam_tok = lam_rows[:, None].expand_as(values)
    steps = None if step_rewards is None else step_rewards.to(values.dtype)
    return gae_scan(values, trainable, None, reward_tok, gamma, lam_tok, steps)


def tokens_after(
    trainable: torch.Tensor,
    rollout_id: torch.Tensor,
    segment_index: torch.Tensor,
    *,
    parent_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """``N_{>s} = sum_{j > s} n_j``: trainable tokens in later segments of the same rollout;
    on a tree (``parent_index``), in the later segments of s's path (module docstring,
    "Segment trees").

    Args:
        trainable: (S, T) bool.
        rollout_id, segment_index: (S,) integer; rows in any order.
        parent_index: (S,) integer or None (chains).

    Returns:
        (S,) int64.
    """
    if trainable.dim() != 2:
        raise ValueError(f"trainable must be (S, T), got shape {tuple(trainable.shape)}")
    _check_mask(trainable, trainable.shape)
    num_rows = trainable.shape[0]
    _check_rows("rollout_id", rollout_id, num_rows, integer=True)
    _check_rows("segment_index", segment_index, num_rows, integer=True)
    order = rollout_order(rollout_id, segment_index)
    checks = [_duplicate_check(rollout_id, segment_index, order)]
    keys, order, tree_checks = _path_keys(rollout_id, segment_index, parent_index, order)
    _raise_if_any(checks + tree_checks)
    return _tokens_after(trainable, keys, order)


def _tokens_after(trainable, rollout_id, order):
    counts = trainable.sum(dim=1)[order]
    prefix = torch.cumsum(counts, dim=0)
    # in (rollout, segment) order: later tokens = rollout's inclusive prefix at its last row - own
    after_sorted = prefix[last_in_run(rollout_id[order])] - prefix
    out = torch.empty_like(after_sorted)
    out[order] = after_sorted
    return out


def _check_segmented(
    values,
    trainable,
    rewards,
    rollout_id,
    segment_index,
    gamma,
    lam,
    step_rewards=None,
    parent_index=None,
):
    """Validated (S,) lambdas, the rows' sequence keys (rollout ids, or the tree's chains)
    and the order that sorts rows by (key, segment_index)."""
    num_rows, _ = _check_tokens(values, trainable)
    _check_rows("rewards", rewards, num_rows, integer=False)
    _check_rows("rollout_id", rollout_id, num_rows, integer=True)
    _check_rows("segment_index", segment_index, num_rows, integer=True)
    _check_gamma(gamma)
    lam_rows, lam_checks = _lam_rows(lam, num_rows, values)
    order = rollout_order(rollout_id, segment_index)
    duplicates = _duplicate_check(rollout_id, segment_index, order)
    keys, order, tree_checks = _path_keys(rollout_id, segment_index, parent_index, order)
    _raise_if_any(
        [
            _nan_check("values", values, trainable),
            _nan_check("rewards", rewards),
            *lam_checks,
            duplicates,
            *_step_checks(step_rewards, values),
            *tree_checks,
        ]
    )
    return lam_rows, keys, order


def cross_segment_gae(
    values: torch.Tensor,
    trainable: torch.Tensor,
    rewards: torch.Tensor,
    rollout_id: torch.Tensor,
    segment_index: torch.Tensor,
    gamma: float,
    lam: Lam,
    *,
    step_rewards: torch.Tensor | None = None,
    parent_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """The paper's cross-segment correction: ``A_hat_{s,i} = (gamma lam_s)^{N_{>s}} A_loc_{s,i}``.

    CompactionRL Eq. 15. With zero values and terminal reward R, token i
    (1-based among trainable tokens) of segment s gets
    ``R (gamma lam)^{N_{>s} + n_s - i}``: its trainable-token distance to the
    end of the rollout, as the stitched estimator would give it. On a tree
    (``parent_index``) ``N_{>s}`` counts the later segments of s's path and the distance
    is to the end of that path (module docstring, "Segment trees").

    Args:
        values: (S, T) float; trainable: (S, T) bool; rewards: (S,) float.
        rollout_id, segment_index: (S,) integer, unique pairs, rows in any order.
        gamma: in [0, 1]; lam: float or (S,) tensor in [0, 1].
        parent_index: (S,) integer or None (every rollout a chain).

    Returns:
        (S, T), 0 at untrainable positions.
    """
    lam_rows, keys, order = _check_segmented(
        values, trainable, rewards, rollout_id, segment_index, gamma, lam, step_rewards,
        parent_index,
    )  # fmt: skip
    local = _segment_gae(values, trainable, rewards, gamma, lam_rows, step_rewards)
    after = _tokens_after(trainable, keys, order).to(values.dtype)
    return torch.pow(gamma * lam_rows, after)[:, None] * local


def stitched_gae(
    values: torch.Tensor,
    trainable: torch.Tensor,
    rewards: torch.Tensor,
    rollout_id: torch.Tensor,
    segment_index: torch.Tensor,
    gamma: float,
    lam: Lam,
    *,
    step_rewards: torch.Tensor | None = None,
    parent_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact GAE over each rollout's trainable tokens concatenated in segment order; on a
    tree (``parent_index``), over each path's (module docstring, "Segment trees").

    For the rollout's trainable tokens ``x_1 .. x_N`` (all segments, time order)::

        delta_k = gamma V(x_{k+1}) - V(x_k)  (k < N),   delta_N = R - V(x_N)
        A_k     = delta_k + gamma lam_{seg(k)} A_{k+1}

    Step rewards (``step_rewards``) add to ``delta_k`` at their own tokens.
    At a segment boundary ``V(x_{k+1})`` is the value of the next segment's first
    trainable token (under its rebuilt context). ``R`` is the reward of the
    rollout's last segment (highest ``segment_index``); segment rewards are not
    used otherwise. With per-segment ``lam`` each token uses its own segment's. On a
    tree, ``x_1 .. x_N`` are the trainable tokens of one chain of the tree (a path from
    its first segment to its leaf, :func:`segment_chains`) and ``R`` is its leaf's reward.

    Implementation: rows are sorted by (rollout_id, segment_index) (by (chain,
    segment_index) on a tree) and flattened into one (1, S*T) sequence; the scan runs
    over it with the chain cut between rollouts (chains).

    Returns:
        (S, T), 0 at untrainable positions.
    """
    lam_rows, keys, order = _check_segmented(
        values, trainable, rewards, rollout_id, segment_index, gamma, lam, step_rewards,
        parent_index,
    )  # fmt: skip
    num_rows, width = values.shape
    rid_sorted = keys[order]
    final_reward = rewards.to(values.dtype)[order][last_in_run(rid_sorted)]  # (S,) sorted

    def flat(x_rows: torch.Tensor) -> torch.Tensor:  # (S,) sorted -> (1, S*T)
        return x_rows[:, None].expand(num_rows, width).reshape(1, -1)

    stitched = gae_scan(
        values[order].reshape(1, -1),
        trainable[order].reshape(1, -1),
        flat(rid_sorted),
        flat(final_reward),
        gamma,
        flat(lam_rows[order]),
        None if step_rewards is None else step_rewards.to(values.dtype)[order].reshape(1, -1),
    ).reshape(num_rows, width)
    out = torch.empty_like(stitched)
    out[order] = stitched
    return out


def group_broadcast(
    rewards: torch.Tensor,
    trainable: torch.Tensor,
    rollout_id: torch.Tensor,
    group_id: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-normalised terminal reward on every trainable token (GRPO / SUPO style).

    ``A_{s,t} = (R_tau - mean_G) / (std_G + eps)`` for every trainable token of
    every segment of rollout ``tau`` in group ``G``. Statistics are over rollouts
    (each rollout once, however many segments it has); ``std_G`` is the sample
    standard deviation (Bessel-corrected, as ``torch.std``), taken as 0 for a
    group of one rollout, whose advantage is then 0. No critic. On a segment tree every
    path's leaf carries the rollout's ``R`` (module docstring, "Segment trees"), so every
    segment of the rollout gets the same advantage: the tree needs no input here.

    Args:
        rewards: (S,) float, the rollout's terminal reward on each of its rows
            (all rows of a rollout must agree).
        trainable: (S, T) bool.
        rollout_id, group_id: (S,) integer; a rollout's rows share its group.

    Returns:
        (S, T), rewards' dtype, 0 at untrainable positions.
    """
    if trainable.dim() != 2:
        raise ValueError(f"trainable must be (S, T), got shape {tuple(trainable.shape)}")
    num_rows = trainable.shape[0]
    _check_mask(trainable, trainable.shape)
    _check_rows("rewards", rewards, num_rows, integer=False)
    _check_rows("rollout_id", rollout_id, num_rows, integer=True)
    _check_rows("group_id", group_id, num_rows, integer=True)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    first = first_in_group(rollout_id)
    one = first.to(rewards.dtype)  # one representative row per rollout
    # A sum with a single non-zero term is exact: the representative's own value.
    rollout_reward = per_group_sum(torch.where(first, rewards, 0.0), rollout_id)
    rollout_group = per_group_sum(torch.where(first, group_id, 0), rollout_id)
    _raise_if_any(
        [
            _nan_check("rewards", rewards),
            (
                (rollout_reward != rewards).any(),
                "rewards: rows of the same rollout carry different rewards",
            ),
            (
                (rollout_group != group_id).any(),
                "group_id: rows of the same rollout carry different group ids",
            ),
        ]
    )
    count = per_group_sum(one, group_id)
    mean = per_group_sum(one * rewards, group_id) / count
    centred = rewards - mean
    var = per_group_sum(one * centred**2, group_id) / (count - 1).clamp(min=1)
    std = torch.where(count > 1, var.sqrt(), torch.zeros_like(var))
    adv = centred / (std + eps)
    return torch.where(
        trainable, adv[:, None], torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    )


def bootstrapped_rewards(
    rewards: torch.Tensor,
    rollout_id: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """Terminal rewards with the environment's time-limit truncations bootstrapped.

    ``R + gamma V_end`` on every row of a rollout that has a row in ``truncated``
    (the rollout's last segment, where its end is recorded), ``R`` on the others.
    ``V_end`` is that row's ``final_values`` entry: the critic's value of the state
    the episode was cut in. Every estimator puts the terminal reward where it puts
    ``R`` (local: each segment's last trainable token; stitched: the rollout's
    last), so the cut is treated as "the return goes on from here".

    Args:
        rewards: (S,) float; rollout_id: (S,) integer; truncated: (S,) bool;
        final_values: (S,) float (read only where ``truncated``); gamma in [0, 1].

    Returns:
        (S,) float, rewards' dtype.
    """
    num_rows = rewards.shape[0]
    _check_rows("rewards", rewards, num_rows, integer=False)
    _check_rows("rollout_id", rollout_id, num_rows, integer=True)
    _check_rows("final_values", final_values, num_rows, integer=False)
    if tuple(truncated.shape) != (num_rows,) or truncated.dtype != torch.bool:
        raise ValueError(f"truncated must be a ({num_rows},) bool tensor")
    _check_gamma(gamma)
    tail = torch.where(truncated, gamma * final_values.to(rewards.dtype), 0.0)
    _raise_if_any([_nan_check("final_values", tail)])
    return rewards + per_group_sum(tail, rollout_id)


def adaptive_lambda(
    trainable: torch.Tensor,
    rollout_id: torch.Tensor,
    scope: AdaptiveScope,
    alpha: float = 1.5,
) -> torch.Tensor:
    """Length-adaptive lambda ``lam = 1 - 1 / (alpha * l)``, clamped to ``[0, 1)``.

    ``l`` counts trainable tokens only (never observation or prompt tokens):
    ``n_s`` for ``scope="segment"``, ``sum_j n_j`` over the segment's rollout
    for ``scope="rollout"``. ``l = 0`` gives 0.

    Args:
        trainable: (S, T) bool; rollout_id: (S,) integer.

    Returns:
        (S,) float32 lambdas.
    """
    if trainable.dim() != 2:
        raise ValueError(f"trainable must be (S, T), got shape {tuple(trainable.shape)}")
    _check_mask(trainable, trainable.shape)
    _check_rows("rollout_id", rollout_id, trainable.shape[0], integer=True)
    if scope not in ADAPTIVE_SCOPES:
        raise ValueError(f"scope must be one of {ADAPTIVE_SCOPES}, got {scope!r}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    length = trainable.sum(dim=1).to(torch.float32)
    if scope == "rollout":
        length = per_group_sum(length, rollout_id)
    lam = 1.0 - 1.0 / (alpha * length)  # l = 0 -> -inf -> clamped to 0
    return lam.clamp(min=0.0, max=1.0 - torch.finfo(torch.float32).eps)


def critic_returns(
    advantages: torch.Tensor, values: torch.Tensor, trainable: torch.Tensor
) -> torch.Tensor:
    """Critic targets ``G = A + V`` on trainable tokens, 0 elsewhere. All (S, T)."""
    _check_tokens(values, trainable)
    if advantages.shape != values.shape:
        raise ValueError(
            f"advantages must have shape {tuple(values.shape)}, got {tuple(advantages.shape)}"
        )
    return torch.where(trainable, advantages + values, torch.zeros_like(values))

"""Segment trees: the paths along which the estimators read a rollout whose segments form a tree.

A rollout's segments form a tree when a context strategy opens child windows
(``folding``, ``cxsim.strategies.folding``): ``parent_index`` (S,) names each row's
parent segment (-1 for the rollout's first), and a segment that opened a child window
has two children, the child and its own continuation after the child returned. A linear
rollout is the chain in which each segment's parent is the previous one.

- **The path of a segment.** From segment s the path goes down to s's latest child (the
  child with the highest ``segment_index``), then to that one's latest child, and so on
  to a leaf: ``path(s) = (s, c(s), c(c(s)), ...)``, ``c(s)`` the latest child of s. On a
  chain it is every later segment. It ends at the last segment, in time, of the subtree
  under s: for the rollout's first segment, the rollout's last segment (where the
  episode ended); for a child window that returned, its own last segment (the summary it
  returned to its parent).
- **Chains.** Since each segment has at most one predecessor on any path (its parent, when
  it is the parent's latest child), the paths cut the tree into disjoint chains
  (:func:`segment_chains`); cross-segment and stitched GAE run on those chains as on
  rollouts (``cxsim.advantages``, "Segment trees": where the reward goes, what ``N_>s``
  counts).

Rows may come in any order, as in ``cxsim.advantages``; pointer doubling finds each chain's
first segment in a log-depth loop, with no host synchronisation but the one that raises
what the checks found.
"""

from __future__ import annotations

import torch

from cxsim.advantage_checks import Checks, _check_rows, _duplicate_check, _raise_if_any
from cxsim.scans import per_group_sum, rollout_order


def segment_chains(
    rollout_id: torch.Tensor, segment_index: torch.Tensor, parent_index: torch.Tensor
) -> torch.Tensor:
    """(S,) long: the chain of each row when a rollout's segments form a tree (module
    docstring, "Segment trees"): rows on one path from a chain's first segment to its leaf
    share an id. A chain that starts at a rollout's first segment (parent -1) keeps the
    rollout's id, so a linear rollout is one chain with its own id; every other chain gets
    ``max(rollout_id) + 1 + `` the row of its first segment.

    Raises ValueError when a parent is not among the rollout's rows or not earlier
    (``-1 <= parent < segment_index``), or when a rollout has no first segment or two.
    """
    num_rows = rollout_id.shape[0]
    _check_rows("rollout_id", rollout_id, num_rows, integer=True)
    _check_rows("segment_index", segment_index, num_rows, integer=True)
    _check_rows("parent_index", parent_index, num_rows, integer=True)
    order = rollout_order(rollout_id, segment_index)
    chains, checks = _segment_chains(rollout_id, segment_index, parent_index, order)
    _raise_if_any([_duplicate_check(rollout_id, segment_index, order), *checks])
    return chains


def _segment_chains(rollout_id, segment_index, parent_index, order) -> tuple[torch.Tensor, Checks]:
    num_rows = rollout_id.shape[0]
    rid, seg, parent = rollout_id.long(), segment_index.long(), parent_index.long()
    rows = torch.arange(num_rows, device=rid.device)
    # one integer key per (rollout, segment), sorted like ``order``: the parent's row by search
    width = seg.max() + 2
    offset = rid - rid.min()
    keys_sorted = (offset * width + seg + 1)[order]
    position = torch.searchsorted(keys_sorted, offset * width + parent + 1).clamp(max=num_rows - 1)
    root = parent == -1
    found = keys_sorted[position] == offset * width + parent + 1
    parent_row = torch.where(root | ~found, rows, order[position])
    # the latest child of each row: the highest segment_index among the rows naming it
    target = torch.where(root | ~found, num_rows, parent_row)
    latest = torch.full((num_rows + 1,), -1, dtype=torch.long, device=rid.device)
    latest = latest.scatter_reduce(0, target, seg, reduce="amax")[:num_rows]
    follows = ~root & found & (latest[parent_row] == seg)  # on its parent's path
    head = torch.where(follows, parent_row, rows)
    for _ in range(max(1, (num_rows - 1).bit_length())):  # pointer doubling to the chain's first
        head = head[head]
    chains = torch.where(root[head], rid, rid.max() + 1 + head)
    roots = per_group_sum(root.to(torch.float32), rid)
    checks: Checks = [
        (
            (~root & ~found).any() | (parent < -1).any() | (parent >= seg).any(),
            "parent_index: every segment's parent must be -1 or an earlier segment "
            "(parent < segment_index) of the same rollout, present in the batch",
        ),
        (
            (roots != 1).any(),
            "parent_index: every rollout needs exactly one segment with parent -1",
        ),
    ]
    return chains, checks


def _path_keys(rollout_id, segment_index, parent_index, order):
    """The rows' sequence keys and their order: rollouts (chains) without ``parent_index``,
    else the tree's paths (:func:`segment_chains`)."""
    if parent_index is None:
        return rollout_id, order, []
    _check_rows("parent_index", parent_index, rollout_id.shape[0], integer=True)
    chains, checks = _segment_chains(rollout_id, segment_index, parent_index, order)
    return chains, rollout_order(chains, segment_index), checks

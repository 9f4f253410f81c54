"""Compacted batches for the conformance check: the canonical form, random cases, pinned cases.

A :class:`Batch` is cxsim's own layout in float64: one row per segment, holding
that segment's response tokens only (trainable tokens and the observation
tokens inside the response), right-padded. Layouts (``layouts.py``) translate it
into what a user's function expects. ``S`` segments, ``T`` padded width.

Random cases are hypothesis strategies, so a failure shrinks to a small
example: segment structures are drawn as run lengths, and values and losses
come from a drawn seed with a drawn scale that shrinks to 0 (all-zero values
make the advantages plain powers of ``gamma * lam``). Pinned cases are the
small hand-built examples in which the known pitfalls show their textbook
numbers (docs/conformance.md).

A rejected summary attempt (a summary that failed and is kept as an untrained
branch) is a row whose response tokens are all untrainable: its mask is 0, so
a correct function never lets it into the advantages.

A tree batch (``parent_index``, the ``trees`` cases) is what ``folding`` records: each
segment names the segment it continues from, and estimators that look across segments
follow each segment's path (``cxsim.advantages``, "Segment trees"); the layouts that hand
an estimator its parents (``Layout.trees``) are checked on them too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from hypothesis import strategies as st

REDUCTION_MODES: tuple[str, ...] = (
    "token-mean",
    "segment-mean",
    "rollout-mean",
    "seq-mean-token-sum",
)


@dataclass(frozen=True)
class Batch:
    """A compacted batch in canonical form (all float tensors float64)."""

    values: torch.Tensor
    """(S, T) critic values ``V(tokens_<t)``; only trainable positions matter."""
    trainable: torch.Tensor
    """(S, T) bool: tokens the policy generated (the response mask)."""
    response: torch.Tensor
    """(S, T) bool: the segment's response tokens, trainable and observation; False is padding."""
    rewards: torch.Tensor
    """(S,) the rollout's terminal reward, on every one of its segments."""
    rollout_id: torch.Tensor
    """(S,) int64."""
    segment_index: torch.Tensor
    """(S,) int64, position of the segment in its rollout (unique per rollout)."""
    group_id: torch.Tensor
    """(S,) int64: rollouts of one task share it (group advantages)."""
    loss: torch.Tensor
    """(S, T) per-token loss for reductions; only trainable positions matter."""
    micro_batches: tuple[int, ...]
    """Sizes of the contiguous row chunks a reduction is split into (sum = S)."""
    gamma: float
    """Discount."""
    lam: float | None
    """Fixed GAE lambda, or None for the length-adaptive ``1 - 1/(alpha l)``."""
    alpha: float
    """Adaptive-lambda alpha (used when ``lam`` is None)."""
    scope: str
    """Adaptive-lambda length: ``segment`` (n_s) or ``rollout`` (sum over the rollout)."""
    parent_index: torch.Tensor | None = None
    """(S,) int64: each segment's parent segment (-1: the rollout's first) when the rollout's
    segments form a tree; None: every rollout is the chain of its segments."""

    @property
    def num_rows(self) -> int:
        return self.values.shape[0]

    @property
    def rejected(self) -> torch.Tensor:
        """(S,) bool: rows with response tokens but no trainable one (rejected summary attempts)."""
        return self.response.any(dim=1) & ~self.trainable.any(dim=1)


def select_rows(batch: Batch, keep: torch.Tensor) -> Batch:
    """The batch restricted to the rows where ``keep`` (S,) is True, in their order.

    Micro-batch sizes shrink with their rows (empty micro-batches vanish); the
    padded width is cut to the longest row kept.
    """
    rows = keep.nonzero().flatten()
    sizes, start = [], 0
    for size in batch.micro_batches:
        kept = int(keep[start : start + size].sum())
        if kept:
            sizes.append(kept)
        start += size
    width = max(int(batch.response[rows].sum(dim=1).max()), 1) if len(rows) else 1
    return replace(
        batch,
        values=batch.values[rows, :width],
        trainable=batch.trainable[rows, :width],
        response=batch.response[rows, :width],
        rewards=batch.rewards[rows],
        rollout_id=batch.rollout_id[rows],
        segment_index=batch.segment_index[rows],
        group_id=batch.group_id[rows],
        loss=batch.loss[rows, :width],
        micro_batches=tuple(sizes),
        parent_index=None if batch.parent_index is None else batch.parent_index[rows],
    )


@dataclass(frozen=True)
class Segment:
    """One segment's response as alternating runs: trainable, observation, trainable, ..."""

    runs: tuple[int, ...]
    """Run lengths, each >= 1, starting with a trainable run; an even count ends on observations."""
    rejected: bool = False
    """A rejected summary attempt: ``runs`` is one run of generated tokens, none of them trainable."""


@dataclass(frozen=True)
class Case:
    """A named family of batches: a hypothesis strategy, or one pinned batch."""

    name: str
    what: str
    """One line: which edge case the batches cover."""
    strategy: st.SearchStrategy[Batch]
    pinned: bool = False
    lam_kind: str | None = None
    """"fixed" or "adaptive" lambda; None where the quantity has no lambda."""
    scope: str | None = None
    """The adaptive-lambda scope the case exercises ("segment" or "rollout"); None when the
    scope cannot change the result (fixed lambda, one segment per rollout, no lambda)."""
    rejected: bool = False
    """Its batches hold rejected summary attempts."""
    tree: bool = False
    """Its batches hold segment trees (a segment whose parent is not the one before it)."""
    example: Batch | None = None
    """A pinned case's batch."""


# --------------------------------------------------------------------------- building


def build_batch(
    rollouts: Sequence[Sequence[Segment]],
    *,
    gamma: float,
    lam: float | None,
    alpha: float = 1.5,
    scope: str = "segment",
    rewards: Sequence[float] | None = None,
    groups: Sequence[int] | None = None,
    values: Sequence[Sequence[float]] | None = None,
    value_scale: float = 0.0,
    loss_scale: float = 1.0,
    seed: int = 0,
    row_order: Sequence[int] | None = None,
    micro_batches: Sequence[int] | None = None,
    losses: Sequence[Sequence[float]] | None = None,
    parents: Sequence[Sequence[int]] | None = None,
) -> Batch:
    """A canonical :class:`Batch` from segment structures (rows in rollout, segment order).

    ``values``/``losses`` give each row's response tokens explicitly; otherwise they are
    drawn from ``seed`` and multiplied by ``value_scale`` / ``loss_scale``.
    ``row_order`` permutes the rows (a permutation of range(S)). ``parents``: each
    rollout's parent of each segment (a tree batch); None: chains.
    """
    segs = [(r, k, seg) for r, rollout in enumerate(rollouts) for k, seg in enumerate(rollout)]
    lengths = [sum(seg.runs) for _, _, seg in segs]
    num_rows, width = len(segs), max(lengths)
    gen = torch.Generator().manual_seed(seed)
    trainable = torch.zeros(num_rows, width, dtype=torch.bool)
    response = torch.zeros(num_rows, width, dtype=torch.bool)
    for row, (_, _, seg) in enumerate(segs):
        pos = 0
        for j, run in enumerate(seg.runs):
            trainable[row, pos : pos + run] = j % 2 == 0 and not seg.rejected
            pos += run
        response[row, :pos] = True
    drawn_values = torch.rand(num_rows, width, generator=gen, dtype=torch.float64) * 2 - 1
    drawn_loss = torch.rand(num_rows, width, generator=gen, dtype=torch.float64) * 2 - 1
    # + 0.0 turns the -0.0 of a zero scale into 0.0 for printing
    val = _explicit(values, lengths, width) if values else drawn_values * value_scale + 0.0
    loss = _explicit(losses, lengths, width) if losses else drawn_loss * loss_scale
    reward_per_rollout = list(rewards) if rewards is not None else [1.0] * len(rollouts)
    group_per_rollout = list(groups) if groups is not None else list(range(len(rollouts)))
    order = list(row_order) if row_order is not None else list(range(num_rows))
    if sorted(order) != list(range(num_rows)):
        raise ValueError(f"row_order must be a permutation of range({num_rows}), got {order}")
    pick = torch.tensor(order)
    sizes = tuple(micro_batches) if micro_batches else (num_rows,)
    if sum(sizes) != num_rows or min(sizes) < 1:
        raise ValueError(f"micro_batches must be positive sizes summing to {num_rows}, got {sizes}")
    return Batch(
        values=val[pick],
        trainable=trainable[pick],
        response=response[pick],
        rewards=torch.tensor([reward_per_rollout[r] for r, _, _ in segs], dtype=torch.float64)[
            pick
        ],
        rollout_id=torch.tensor([r for r, _, _ in segs])[pick],
        segment_index=torch.tensor([k for _, k, _ in segs])[pick],
        group_id=torch.tensor([group_per_rollout[r] for r, _, _ in segs])[pick],
        loss=loss[pick],
        micro_batches=sizes,
        gamma=float(gamma),
        lam=None if lam is None else float(lam),
        alpha=float(alpha),
        scope=scope,
        parent_index=None
        if parents is None
        else torch.tensor([p for rollout in parents for p in rollout])[pick],
    )


def _explicit(rows: Sequence[Sequence[float]], lengths: list[int], width: int) -> torch.Tensor:
    out = torch.zeros(len(lengths), width, dtype=torch.float64)
    for row, (given, length) in enumerate(zip(rows, lengths, strict=True)):
        if len(given) != length:
            raise ValueError(f"row {row}: {len(given)} numbers for {length} response tokens")
        out[row, :length] = torch.tensor(list(given), dtype=torch.float64)
    return out


# --------------------------------------------------------------------------- strategies


def _segment(
    trainable: st.SearchStrategy[int],
    observation: st.SearchStrategy[int],
    max_runs: int,
    ends_on_observation: bool | None,
) -> st.SearchStrategy[Segment]:
    @st.composite
    def build(draw) -> Segment:
        pairs = draw(st.integers(0, max_runs - 1))
        runs = [draw(trainable)]
        for _ in range(pairs):
            runs += [draw(observation), draw(trainable)]
        end_obs = draw(st.booleans()) if ends_on_observation is None else ends_on_observation
        if end_obs:
            runs.append(draw(observation))
        return Segment(tuple(runs))

    return build()


def _batch(
    rollouts: st.SearchStrategy[list[list[Segment]]],
    lam_kind: str,
    alphas: Sequence[float] = (1.5, 1.0, 0.75, 2.0),
    micro: bool = True,
    scope: str | None = None,
    min_group: int = 1,
    tree: bool = False,
) -> st.SearchStrategy[Batch]:
    """Batches over drawn rollouts; ``lam_kind`` "fixed" or "adaptive".

    ``scope`` fixes the adaptive-lambda scope (drawn when None); groups hold
    ``min_group`` to ``min_group + 2`` consecutive rollouts (the last one may hold fewer).
    ``tree``: each segment after a rollout's first continues one drawn among the earlier
    ones (a drawn step back, which shrinks to 1: towards the chain).
    """

    @st.composite
    def build(draw) -> Batch:
        structure = draw(rollouts)
        num_rows = sum(len(r) for r in structure)
        gamma = draw(st.sampled_from((1.0, 0.99, 0.9)))
        lam = draw(st.sampled_from((0.9, 1.0, 0.8, 0.95))) if lam_kind == "fixed" else None
        alpha = draw(st.sampled_from(tuple(alphas)))
        lam_scope = scope or draw(st.sampled_from(("segment", "rollout")))
        rewards = [draw(st.sampled_from((1.0, 0.0, -0.5, 2.0))) for _ in structure]
        group_size = draw(st.integers(min_group, min_group + 2))
        groups = [r // group_size for r in range(len(structure))]
        parents = None
        if tree:
            parents = [
                [-1] + [k - draw(st.integers(1, k)) for k in range(1, len(r))] for r in structure
            ]
        order = draw(st.permutations(range(num_rows)))
        # rows in rollout order shrink first: permutations shrink towards the identity
        sizes: list[int] = []
        if micro:
            left = num_rows
            while left > 0:
                size = draw(st.integers(1, left))
                sizes.append(size)
                left -= size
        return build_batch(
            structure,
            gamma=gamma,
            lam=lam,
            alpha=alpha,
            scope=lam_scope,
            rewards=rewards,
            groups=groups,
            value_scale=draw(st.sampled_from((0.0, 1.0))),
            loss_scale=1.0,
            seed=draw(st.integers(0, 2**16)),
            row_order=order,
            micro_batches=sizes or None,
            parents=parents,
        )

    return build()


def _rollouts(
    segment: st.SearchStrategy[Segment], max_rollouts: int, max_segments: int, min_rollouts: int = 1
) -> st.SearchStrategy[list[list[Segment]]]:
    return st.lists(
        st.lists(segment, min_size=1, max_size=max_segments),
        min_size=min_rollouts,
        max_size=max(max_rollouts, min_rollouts + 2),
    )


def _long_rollouts(min_rollouts: int = 1) -> st.SearchStrategy[list[list[Segment]]]:
    """One long segment followed by 1-2 long ones: exponents in the thousands."""

    @st.composite
    def build(draw) -> list[list[Segment]]:
        rollouts = []
        for _ in range(min_rollouts):
            first = Segment((draw(st.integers(600, 1200)),))
            count = draw(st.integers(1, 2))
            later = [Segment((draw(st.integers(500, 1500)),)) for _ in range(count)]
            rollouts.append([first, *later])
        return rollouts

    return build()


def _mixed_lengths(min_rollouts: int = 1) -> st.SearchStrategy[list[list[Segment]]]:
    """A rollout whose segments range from 1-3 tokens to 50-200 tokens."""
    short = _segment(st.integers(1, 3), st.integers(1, 3), 1, None)
    long = _segment(st.integers(50, 200), st.integers(1, 20), 2, None)
    return st.lists(
        st.lists(st.one_of(short, long), min_size=2, max_size=4),
        min_size=min_rollouts,
        max_size=max(2, min_rollouts),
    )


def _with_rejected(
    accepted: st.SearchStrategy[Segment], min_rollouts: int = 1
) -> st.SearchStrategy[list[list[Segment]]]:
    """Rollouts of 1-3 accepted segments with a rejected summary attempt of 1-4 tokens
    anywhere among them (last too: a rollout that ended on a failed summary)."""

    @st.composite
    def build(draw) -> list[list[Segment]]:
        rollouts = []
        for _ in range(draw(st.integers(min_rollouts, max(2, min_rollouts)))):
            segments = draw(st.lists(accepted, min_size=1, max_size=3))
            attempt = Segment((draw(st.integers(1, 4)),), rejected=True)
            segments.insert(draw(st.integers(0, len(segments))), attempt)
            rollouts.append(segments)
        return rollouts

    return build()


def random_cases(
    lam_kinds: Sequence[str] = ("fixed", "adaptive"), min_group: int = 1
) -> list[Case]:
    """The random edge-case families, each under each lambda kind.

    Kinds: "fixed", "adaptive" (one case per scope: ``NAME/adaptive-segment`` and
    ``NAME/adaptive-rollout``), or "none" for quantities without a lambda (names
    then carry no kind). ``min_group`` > 1 draws at least that many rollouts per
    batch, in groups of ``min_group`` to ``min_group + 2`` (for implementations that
    declare a smallest group; docs/conformance.md).
    """
    plain = _segment(st.integers(1, 6), st.integers(1, 4), 1, False)
    with_obs = _segment(st.integers(1, 6), st.integers(1, 4), 3, False)
    ends_obs = _segment(st.integers(1, 6), st.integers(1, 4), 2, True)
    one_token = _segment(st.just(1), st.integers(1, 3), 1, None)
    n = min_group
    families: list[tuple[str, str, Callable[..., st.SearchStrategy[Batch]]]] = [
        (
            "segments",
            "several rollouts of 1-4 plain segments",
            lambda k, **kw: _batch(_rollouts(plain, 3, 4, n), k, min_group=n, **kw),
        ),
        (
            "observations",
            "observation tokens inside responses",
            lambda k, **kw: _batch(_rollouts(with_obs, 3, 3, n), k, min_group=n, **kw),
        ),
        (
            "ends-on-observation",
            "every segment ends on observation tokens",
            lambda k, **kw: _batch(_rollouts(ends_obs, 2, 3, n), k, min_group=n, **kw),
        ),
        (
            "one-token",
            "one-token segments, alpha below and above 1",
            lambda k, **kw: _batch(
                _rollouts(one_token, 2, 4, n), k, alphas=(1.5, 0.5, 0.9), min_group=n, **kw
            ),
        ),
        (
            "mixed-lengths",
            "segments of 1-3 and of 50-200 tokens in one rollout",
            lambda k, **kw: _batch(_mixed_lengths(n), k, min_group=n, **kw),
        ),
        (
            "long",
            "a 600-1200-token segment followed by 500-3000 more",
            lambda k, **kw: _batch(_long_rollouts(n), k, min_group=n, **kw),
        ),
        (
            "rejected-summaries",
            "rejected summary attempts (untrained rows) among a rollout's segments",
            lambda k, **kw: _batch(_with_rejected(with_obs, n), k, min_group=n, **kw),
        ),
    ]
    cases = []
    for name, what, make in families:
        rejected = name == "rejected-summaries"
        for kind in lam_kinds:
            if kind == "none":
                cases.append(Case(name, what, make("fixed"), rejected=rejected))
            elif kind == "fixed":
                cases.append(
                    Case(
                        f"{name}/fixed",
                        f"{what}, fixed lambda",
                        make(kind),
                        lam_kind=kind,
                        rejected=rejected,
                    )
                )
            else:
                cases += [
                    Case(
                        f"{name}/adaptive-{scope}",
                        f"{what}, adaptive lambda over the {scope}",
                        make(kind, scope=scope),
                        lam_kind=kind,
                        scope=scope,
                        rejected=rejected,
                    )
                    for scope in ("segment", "rollout")
                ]
    return cases


def tree_cases(lam_kinds: Sequence[str] = ("fixed", "adaptive")) -> list[Case]:
    """Random segment trees (``trees/...``): rollouts of 1-5 segments with observation
    tokens, each segment's parent drawn among the earlier ones, under each lambda kind."""
    with_obs = _segment(st.integers(1, 6), st.integers(1, 4), 2, None)
    what = "segment trees: each segment continues a drawn earlier one (folding)"
    cases = []
    for kind in lam_kinds:
        if kind == "fixed":
            strategy = _batch(_rollouts(with_obs, 3, 5), kind, tree=True)
            cases.append(
                Case("trees/fixed", f"{what}, fixed lambda", strategy, lam_kind=kind, tree=True)
            )
        else:
            cases += [
                Case(
                    f"trees/adaptive-{scope}",
                    f"{what}, adaptive lambda over the {scope}",
                    _batch(_rollouts(with_obs, 3, 5), kind, scope=scope, tree=True),
                    lam_kind=kind,
                    scope=scope,
                    tree=True,
                )
                for scope in ("segment", "rollout")
            ]
    return cases


# --------------------------------------------------------------------------- pinned cases


def pinned_cases() -> list[Case]:
    """Hand-built batches in which each known pitfall shows the numbers docs/conformance.md quotes."""
    examples = [
        (
            "pinned/observations-5",
            "a 5-token row (3 trainable, 2 observation tokens), gamma 1, lambda 0.8: "
            "token 2 gets 0.44",
            build_batch(
                [[Segment((3, 2))]],
                gamma=1.0,
                lam=0.8,
                values=[[0.5, 0.4, 0.2, 0.0, 0.8]],
            ),
        ),
        (
            "pinned/4+4",
            "a segment of 4 trainable and 4 observation tokens, alpha 1.5: lambda 1 - 1/6",
            build_batch([[Segment((2, 2, 2, 2))]], gamma=1.0, lam=None, alpha=1.5),
        ),
        (
            "pinned/1000+2000",
            "a 1000-token segment followed by 2000 more, alpha 1.5, gamma 1: "
            "its first token gets (1 - 1/1500)^2999 = 0.135",
            build_batch([[Segment((1000,)), Segment((2000,))]], gamma=1.0, lam=None, alpha=1.5),
        ),
        (
            "pinned/ends-on-observation",
            "a segment ending on an observation token: the reward sits on its last trainable token",
            build_batch([[Segment((2, 1))]], gamma=1.0, lam=0.9),
        ),
        (
            "pinned/one-token-alpha-0.5",
            "three one-token segments, alpha 0.5: lambda clamps to 0, so only the last gets R",
            build_batch(
                [[Segment((1,)), Segment((1,)), Segment((1,))]], gamma=1.0, lam=None, alpha=0.5
            ),
        ),
        (
            "pinned/two-micro-batches",
            "two micro-batches: 1 token of loss 1, then 3 tokens of loss 0: token-mean 0.25",
            build_batch(
                [[Segment((1,))], [Segment((3,))]],
                gamma=1.0,
                lam=0.9,
                losses=[[1.0], [0.0, 0.0, 0.0]],
                micro_batches=(1, 1),
            ),
        ),
        (
            "pinned/rejected-summary",
            "segments of 2, 1 and 1 trainable tokens with a rejected 3-token summary attempt "
            "after the first, gamma 1, lambda 0.5: the first segment gets (0.125, 0.25)",
            build_batch(
                [[Segment((2,)), Segment((3,), rejected=True), Segment((1,)), Segment((1,))]],
                gamma=1.0,
                lam=0.5,
            ),
        ),
        (
            "pinned/traces",
            "a group of two rollouts, one of 3 segments with reward 1 and one of 1 segment with "
            "reward 0: every token of the first gets +0.7071, of the second -0.7071",
            build_batch(
                [[Segment((2,)), Segment((1,)), Segment((1,))], [Segment((2,))]],
                gamma=1.0,
                lam=0.9,
                rewards=[1.0, 0.0],
                groups=[0, 0],
            ),
        ),
        (
            "pinned/three-chains",
            "a rollout of 3 chains with reward 1 and one of 1 chain with reward 0.5: "
            "each chain of the first gets 1/3, the second 0.5",
            build_batch(
                [[Segment((2,)), Segment((1,)), Segment((1,))], [Segment((1,))]],
                gamma=1.0,
                lam=0.9,
                rewards=[1.0, 0.5],
            ),
        ),
        (
            "pinned/tree",
            "a root of 2 trainable tokens, a child window of 3 and the root's continuation of 1 "
            "(both children of the root), gamma 1, lambda 0.5: the root's path goes on through "
            "the continuation, so the root gets (0.25, 0.5) and the child (0.25, 0.5, 1)",
            build_batch(
                [[Segment((2,)), Segment((3,)), Segment((1,))]],
                gamma=1.0,
                lam=0.5,
                parents=[[-1, 0, 0]],
            ),
        ),
        (
            "pinned/rollout-denominators",
            "rollout 0: segments of loss (1) and (0, 0, 0) split over two micro-batches; "
            "rollout 1: loss (2, 4): rollout-mean (1/4 + 3) / 2 = 1.625",
            build_batch(
                [[Segment((1,)), Segment((3,))], [Segment((2,))]],
                gamma=1.0,
                lam=0.9,
                losses=[[1.0], [0.0, 0.0, 0.0], [2.0, 4.0]],
                micro_batches=(1, 2),
            ),
        ),
    ]
    return [_pinned(name, what, batch) for name, what, batch in examples]


def _pinned(name: str, what: str, batch: Batch) -> Case:
    """A pinned case, with the lambda kind and scope its batch exercises."""
    several = bool((batch.rollout_id.bincount() > 1).any())
    kind = "fixed" if batch.lam is not None else "adaptive"
    return Case(
        name,
        what,
        st.just(batch),
        pinned=True,
        lam_kind=kind,
        scope=batch.scope if kind == "adaptive" and several else None,
        rejected=bool(batch.rejected.any()),
        tree=batch.parent_index is not None,
        example=batch,
    )

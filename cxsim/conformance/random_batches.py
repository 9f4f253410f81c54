"""Random conformance cases: hypothesis strategies over compacted batches.

Each random case family draws rollouts of segment structures as run lengths
(:class:`~cxsim.conformance.batches.Segment`) and builds them with
:func:`~cxsim.conformance.batches.build_batch`, so a failure shrinks to a small
example: values and losses come from a drawn seed with a drawn scale that
shrinks to 0, row orders shrink towards the identity, a tree's drawn step
back to a parent shrinks to 1 (towards the chain), and each response's step reward
(at its last token, where the trainer puts it) shrinks to 0. ``random_cases`` gives the
edge-case families under each lambda kind, ``tree_cases`` the segment trees
(``trees/...``) that ``folding`` records (docs/conformance.md, "The cases").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis import strategies as st

from cxsim.conformance.batches import Batch, Case, Segment, build_batch

STEP_REWARDS = st.sampled_from((0.0, 0.5, -1.0, 0.25))
"""Each response's step reward (0 first: it shrinks away where a failure does not need it)."""


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
        steps = [
            [draw(STEP_REWARDS) for _ in ([] if seg.rejected else seg.runs[::2])]
            for rollout in structure
            for seg in rollout
        ]
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
            step_rewards=steps,
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


def _families(n: int) -> list[tuple[str, str, Callable[..., st.SearchStrategy[Batch]]]]:
    """(name, what, strategy maker) of each random family, drawn with groups of ``n`` or more."""
    plain = _segment(st.integers(1, 6), st.integers(1, 4), 1, False)
    with_obs = _segment(st.integers(1, 6), st.integers(1, 4), 3, False)
    ends_obs = _segment(st.integers(1, 6), st.integers(1, 4), 2, True)
    one_token = _segment(st.just(1), st.integers(1, 3), 1, None)
    return [
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
    families = _families(min_group)
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

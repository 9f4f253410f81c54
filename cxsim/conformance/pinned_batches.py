"""The pinned conformance cases: small hand-built batches in which each known pitfall shows
the textbook numbers docs/conformance.md quotes (a 5-token row with observation tokens,
adaptive lambda on short and long segments (with a step reward), micro-batch denominators, a rejected summary
attempt, group and chain broadcasts, a folding tree). Each is one :class:`Case` whose
strategy is the batch itself, built with :func:`cxsim.conformance.batches.build_batch`.
"""

from __future__ import annotations

from hypothesis import strategies as st

from cxsim.conformance.batches import Batch, Case, Segment, build_batch


def pinned_cases() -> list[Case]:
    """Hand-built batches in which each known pitfall shows the numbers docs/conformance.md quotes."""
    examples = _estimator_examples() + _rule_examples()
    return [_pinned(name, what, batch) for name, what, batch in examples]


def _estimator_examples() -> list[tuple[str, str, Batch]]:
    """The pitfalls of GAE and adaptive lambda (docs/conformance.md, "The properties")."""
    return [
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
            "a segment of 4 trainable and 4 observation tokens, alpha 1.5: lambda 1 - 1/6; "
            "the first response earned a step reward 0.5 (at its last token, the second)",
            build_batch(
                [[Segment((2, 2, 2, 2))]],
                gamma=1.0,
                lam=None,
                alpha=1.5,
                step_rewards=[[0.5, 0.0]],
            ),
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
    ]


def _rule_examples() -> list[tuple[str, str, Batch]]:
    """Reductions, rejected attempts, the credit rules and a segment tree."""
    return [
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
            "pinned/sessions",
            "session A: one row of 2 tokens, loss (1, 3); session B cut into 3 rows of 1, 3 "
            "(+2 observation) and 2 tokens, loss (7), (1, 1, 1), (0, 4), its rows split over "
            "two micro-batches: session-equal weights (2, 2/3, 2/3, 2/3), loss 8/3",
            build_batch(
                [[Segment((2,))], [Segment((1,)), Segment((3, 2)), Segment((2,))]],
                gamma=1.0,
                lam=0.9,
                losses=[[1.0, 3.0], [7.0], [1.0, 1.0, 1.0, 0.0, 0.0], [0.0, 4.0]],
                micro_batches=(2, 2),
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

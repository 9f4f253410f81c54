"""Tests for cxsim.losses: per-token PPO losses and aggregate()."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cxsim.losses import (
    LOSS_MODES,
    aggregate,
    entropy_from_logits,
    masked_mean,
    policy_loss,
    rollout_token_counts,
    value_loss,
)

F64 = torch.float64
PROPERTY = settings(max_examples=40, deadline=None)


def t64(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def close(a, b) -> None:
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- policy loss


def test_policy_loss_hand_computed():
    # ratios e^.5 (above 1 + eps) and .5 (below 1 - eps), each with A = +1 and -1
    logp = t64([[0.5, 0.5, math.log(0.5), math.log(0.5)]])
    old = torch.zeros_like(logp)
    adv = t64([[1.0, -1.0, 1.0, -1.0]])
    loss, stats = policy_loss(logp, old, adv, clip_eps=0.2)
    e = math.exp(0.5)
    close(loss, t64([[-1.2, e, -0.5, 0.8]]))
    close(stats["clipped"], t64([[1.0, 0.0, 0.0, 1.0]]))
    close(stats["ratio"], t64([[e, e, 0.5, 0.5]]))
    k3 = [(r - 1) - math.log(r) for r in (e, e, 0.5, 0.5)]
    close(stats["approx_kl"], t64([k3]))


def test_policy_loss_gradient_is_zero_where_clipped():
    logp = t64([[0.5, 0.5, 0.0]]).requires_grad_()
    adv = t64([[1.0, -1.0, 2.0]])
    loss, stats = policy_loss(logp, torch.zeros_like(logp), adv, clip_eps=0.2)
    loss.sum().backward()
    # d/dlogp of -A * rho = -A * rho
    close(logp.grad, t64([[0.0, math.exp(0.5), -2.0]]))
    assert not stats["ratio"].requires_grad and not stats["approx_kl"].requires_grad


@PROPERTY
@given(
    st.lists(
        st.tuples(st.floats(-3, 3), st.floats(-3, 3), st.floats(-5, 5)), min_size=1, max_size=20
    ),
    st.floats(0.01, 0.5),
)
def test_policy_loss_matches_loop(rows, eps):
    logp, old, adv = (t64([[r[k] for r in rows]]) for k in range(3))
    loss, stats = policy_loss(logp, old, adv, eps)
    for j, (lp, lo, a) in enumerate(rows):
        rho = math.exp(lp - lo)
        expected = -min(rho * a, min(max(rho, 1 - eps), 1 + eps) * a)
        assert loss[0, j].item() == pytest.approx(expected, rel=1e-12, abs=1e-12)
        assert stats["approx_kl"][0, j].item() >= -1e-12
    assert (stats["approx_kl"][logp == old] == 0).all()


# --------------------------------------------------------------------------- value loss, entropy


def test_value_loss_hand_computed():
    v, old, ret = t64([[1.0, 3.0, 0.0]]), t64([[0.0, 0.0, 0.0]]), t64([[3.0, 3.0, 1.0]])
    close(value_loss(v, old, ret, None), t64([[2.0, 0.0, 0.5]]))
    # clipped at .5: V_clip = (.5, .5, 0); max((V-G)^2, (V_clip-G)^2) = (6.25, 6.25, 1)
    close(value_loss(v, old, ret, 0.5), t64([[3.125, 3.125, 0.5]]))


def test_entropy_from_logits():
    logits = torch.randn(3, 4, 7, dtype=F64)
    expected = torch.distributions.Categorical(logits=logits).entropy()
    close(entropy_from_logits(logits), expected)
    uniform = torch.zeros(1, 2, 5, dtype=F64)
    close(entropy_from_logits(uniform), torch.full((1, 2), math.log(5), dtype=F64))
    peaked = torch.tensor([[[1e4, 0.0, 0.0]]], dtype=F64)
    assert entropy_from_logits(peaked).abs().item() < 1e-12


# --------------------------------------------------------------------------- aggregate


NAN = float("nan")
# unequal lengths: 3, 1 and 0 masked tokens; junk (even NaN) under the mask
LOSS = t64([[1.0, 2.0, 3.0, NAN], [10.0, NAN, 7.0, 7.0], [5.0, 5.0, 5.0, 5.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)


def test_aggregate_modes_hand_computed():
    close(aggregate(LOSS, MASK, "token-mean"), t64(16.0 / 4))
    close(aggregate(LOSS, MASK, "segment-mean"), t64((2.0 + 10.0) / 2))
    close(aggregate(LOSS, MASK, "seq-mean-token-sum"), t64((6.0 + 10.0) / 2))
    # rows 0 and 1 are one rollout, row 2 another without tokens (no vote)
    close(aggregate(LOSS, MASK, "rollout-mean", rollout_id=torch.tensor([4, 4, 9])), t64(4.0))
    # rows 0 and 2 one rollout, row 1 another
    two = aggregate(LOSS, MASK, "rollout-mean", rollout_id=torch.tensor([4, 9, 4]))
    close(two, t64((2.0 + 10.0) / 2))


def test_aggregate_empty_mask_is_zero_and_grad_flows():
    loss = torch.ones(2, 3, dtype=F64, requires_grad=True)
    for mode in LOSS_MODES:
        out = aggregate(loss, torch.zeros(2, 3, dtype=torch.bool), mode, torch.tensor([0, 1]))
        assert out.item() == 0.0
    out = aggregate(loss * 2, MASK[:2, :3], "token-mean")
    out.backward()
    close(loss.grad, t64([[0.5, 0.5, 0.5], [0.5, 0, 0]]))


def test_token_mean_with_a_global_denominator_over_micro_batches():
    whole = aggregate(LOSS, MASK, "token-mean")
    total = MASK.sum()
    parts = [
        aggregate(LOSS[rows], MASK[rows], "token-mean", denominator=total) for rows in ([0], [1, 2])
    ]
    close(sum(parts), whole)
    # the per-micro-batch mean of means is what the global count avoids
    local = [aggregate(LOSS[rows], MASK[rows], "token-mean") for rows in ([0], [1, 2])]
    assert abs(sum(local) / 2 - whole.item()) > 1.0


@pytest.mark.parametrize(
    ("mode", "count"),
    [("segment-mean", 2), ("seq-mean-token-sum", 2), ("rollout-mean", 2)],
)
def test_other_modes_with_a_global_denominator(mode, count):
    rid = torch.tensor([4, 9, 5])
    whole = aggregate(LOSS, MASK, mode, rid)
    parts = [
        aggregate(LOSS[rows], MASK[rows], mode, rid[rows], denominator=count)
        for rows in ([0], [1, 2])
    ]
    close(sum(parts), whole)


def test_rollout_mean_over_micro_batches_that_split_a_rollout():
    """Rows 0 and 1 are one rollout (row 2, without tokens, casts no vote: R' = 1);
    micro-batches [0] and [1, 2] cut it in two. With the rollout's token count from the
    whole batch the parts add up to the whole; without it each part would divide by its
    own share of the rollout's tokens (6/3 + 10/1 = 12 instead of 16/4)."""
    rid = torch.tensor([4, 4, 5])
    whole = aggregate(LOSS, MASK, "rollout-mean", rid)
    counts = rollout_token_counts(MASK, rid)
    assert counts.tolist() == [4.0, 4.0, 0.0]
    parts = [
        aggregate(LOSS[r], MASK[r], "rollout-mean", rid[r], denominator=1, rollout_tokens=counts[r])
        for r in ([0], [1, 2])
    ]
    close(sum(parts), whole)
    naive = [
        aggregate(LOSS[r], MASK[r], "rollout-mean", rid[r], denominator=1) for r in ([0], [1, 2])
    ]
    close(sum(naive), t64(12.0))
    with pytest.raises(ValueError, match="rollout_tokens must have shape"):
        aggregate(LOSS, MASK, "rollout-mean", rid, rollout_tokens=counts[:2])


@st.composite
def loss_batches(draw):
    rows = draw(st.integers(1, 6))
    width = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(rows, width, generator=gen, dtype=F64)
    lengths = torch.randint(0, width + 1, (rows, 1), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths) & (torch.rand(rows, width, generator=gen) < 0.8)
    rid = torch.randint(0, 3, (rows,), generator=gen) * 7 - 5
    return loss, mask, rid


def ref_aggregate(loss, mask, mode, rid):
    cells = lambda rows: [  # noqa: E731
        loss[s, t].item() for s in rows for t in range(loss.shape[1]) if mask[s, t]
    ]
    everything = cells(range(loss.shape[0]))
    if mode in ("token-mean", "partition-preserving", "summary-loss"):  # no summary rows here
        return sum(everything) / len(everything) if everything else 0.0
    if mode == "session-equal":  # each rollout one vote, shared by its rows' token means
        groups = {}
        for s in range(loss.shape[0]):
            if cells([s]):
                groups.setdefault(int(rid[s]), []).append(sum(cells([s])) / len(cells([s])))
        votes = [sum(means) / len(means) for means in groups.values()]
        return sum(votes) / len(votes) if votes else 0.0
    if mode in ("rollout-mean", "thread-mean"):
        groups = {}
        for s in range(loss.shape[0]):
            groups.setdefault(int(rid[s]), []).append(s)
        units = [cells(rows) for rows in groups.values()]
    else:
        units = [cells([s]) for s in range(loss.shape[0])]
    units = [u for u in units if u]
    if not units:
        return 0.0
    if mode == "seq-mean-token-sum":
        return sum(sum(u) for u in units) / len(units)
    return sum(sum(u) / len(u) for u in units) / len(units)


@PROPERTY
@given(loss_batches(), st.sampled_from(tuple(LOSS_MODES)))
def test_aggregate_matches_loop(batch, mode):
    loss, mask, rid = batch
    out = aggregate(loss, mask, mode, rid)
    assert out.item() == pytest.approx(ref_aggregate(loss, mask, mode, rid), rel=1e-9, abs=1e-12)


def test_masked_mean():
    close(masked_mean(LOSS, MASK), t64(4.0))
    close(masked_mean(LOSS, MASK, dim=1), t64([2.0, 10.0, 0.0]))


def test_aggregate_validation():
    with pytest.raises(ValueError, match="rollout_id"):
        aggregate(LOSS, MASK, "rollout-mean")
    with pytest.raises(ValueError, match="mode"):
        aggregate(LOSS, MASK, "sequence-mean")
    with pytest.raises(ValueError, match="mask"):
        aggregate(LOSS, MASK[:, :2], "token-mean")
    with pytest.raises(ValueError, match="mask"):
        aggregate(LOSS, MASK.double(), "token-mean")
    with pytest.raises(ValueError, match="clip_eps"):
        policy_loss(LOSS, LOSS, LOSS, 0.0)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(LOSS, LOSS, LOSS[:, :2], 0.2)
    with pytest.raises(ValueError, match="returns"):
        value_loss(LOSS, LOSS, LOSS[:2], None)


def test_every_mode_is_differentiable():
    loss = torch.randn(4, 5, dtype=F64, requires_grad=True)
    mask = torch.rand(4, 5) < 0.7
    rid = torch.tensor([2, 0, 2, 1])
    for mode in LOSS_MODES:
        torch.autograd.gradcheck(lambda x, m=mode: aggregate(x, mask, m, rid), (loss,))

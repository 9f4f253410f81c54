"""Tests for cxsim.advantages: hand-computed cases, loop references, invariances."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cxsim.advantages import (
    adaptive_lambda,
    critic_returns,
    cross_segment_gae,
    group_broadcast,
    segment_gae,
    stitched_gae,
    tokens_after,
)
from cxsim.scans import per_group_sum
from cxsim.whitening import whiten

F64 = torch.float64
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def t64(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def mask(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


def ids(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.long)


# --------------------------------------------------------------------------- loop references


def plain_gae(values: list[float], reward: float, gamma: float, lams: list[float]) -> list[float]:
    """Textbook GAE over one sequence, terminal reward at its end, bootstrap 0 after it."""
    adv = [0.0] * len(values)
    running = 0.0
    for k in reversed(range(len(values))):
        next_value = values[k + 1] if k + 1 < len(values) else 0.0
        r = reward if k == len(values) - 1 else 0.0
        running = r + gamma * next_value - values[k] + gamma * lams[k] * running
        adv[k] = running
    return adv


def trainable_positions(m: torch.Tensor, row: int) -> list[int]:
    return [t for t in range(m.shape[1]) if m[row, t]]


def ref_segment_gae(v, m, r, gamma, lam_rows):
    out = torch.zeros_like(v)
    for s in range(v.shape[0]):
        pos = trainable_positions(m, s)
        adv = plain_gae([float(v[s, t]) for t in pos], float(r[s]), gamma, [lam_rows[s]] * len(pos))
        for t, a in zip(pos, adv, strict=True):
            out[s, t] = a
    return out


def rollout_rows(rid, seg) -> dict[int, list[int]]:
    """rollout id -> its rows in segment order."""
    rows: dict[int, list[int]] = {}
    for s in range(len(rid)):
        rows.setdefault(int(rid[s]), []).append(s)
    return {k: sorted(rs, key=lambda s: int(seg[s])) for k, rs in rows.items()}


def ref_tokens_after(m, rid, seg):
    n = m.sum(dim=1).tolist()
    return ids(
        [
            sum(n[j] for j in range(len(n)) if rid[j] == rid[s] and seg[j] > seg[s])
            for s in range(len(n))
        ]
    )


def ref_cross(v, m, r, rid, seg, gamma, lam_rows):
    local = ref_segment_gae(v, m, r, gamma, lam_rows)
    after = ref_tokens_after(m, rid, seg)
    for s in range(v.shape[0]):
        local[s] *= (gamma * lam_rows[s]) ** int(after[s])
    return local


def ref_stitched(v, m, r, rid, seg, gamma, lam_rows):
    out = torch.zeros_like(v)
    for rows in rollout_rows(rid, seg).values():
        where = [(s, t) for s in rows for t in trainable_positions(m, s)]
        adv = plain_gae(
            [float(v[s, t]) for s, t in where],
            float(r[rows[-1]]),
            gamma,
            [lam_rows[s] for s, _ in where],
        )
        for (s, t), a in zip(where, adv, strict=True):
            out[s, t] = a
    return out


def ref_group(rewards, m, rid, gid, eps):
    per_rollout = {int(rid[s]): (float(rewards[s]), int(gid[s])) for s in range(len(rid))}
    out = torch.zeros(m.shape, dtype=rewards.dtype)
    for s in range(len(rid)):
        reward, group = per_rollout[int(rid[s])]
        members = [rw for rw, g in per_rollout.values() if g == group]
        std = statistics.stdev(members) if len(members) > 1 else 0.0
        value = (reward - statistics.mean(members)) / (std + eps)
        out[s] = torch.where(m[s], torch.tensor(value, dtype=rewards.dtype), 0.0)
    return out


# --------------------------------------------------------------------------- random batches


@st.composite
def batches(draw, max_rollouts: int = 4, max_segments: int = 4, max_width: int = 12):
    """A random padded batch: shuffled rows, gaps in segment_index, any rollout ids."""
    num_rollouts = draw(st.integers(1, max_rollouts))
    width = draw(st.integers(1, max_width))
    seed = draw(st.integers(0, 2**31 - 1))
    p_trainable = draw(st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0]))
    gen = torch.Generator().manual_seed(seed)
    rid_values = torch.randperm(1000, generator=gen)[:num_rollouts] - 500
    rid, seg = [], []
    for k in range(num_rollouts):
        count = int(torch.randint(1, max_segments + 1, (1,), generator=gen))
        indices = sorted(torch.randperm(2 * max_segments, generator=gen)[:count].tolist())
        rid += [int(rid_values[k])] * count
        seg += indices
    rows = len(rid)
    lengths = torch.randint(1, width + 1, (rows, 1), generator=gen)
    trainable = torch.rand(rows, width, generator=gen) < p_trainable
    trainable &= torch.arange(width)[None, :] < lengths
    trainable[:, 0] = False
    order = torch.randperm(rows, generator=gen)
    per_segment_lam = draw(st.booleans())
    lam_rows = (
        torch.rand(rows, generator=gen, dtype=F64)
        if per_segment_lam
        else torch.full((rows,), draw(st.floats(0.0, 1.0)), dtype=F64)
    )
    return {
        "values": torch.randn(rows, width, generator=gen, dtype=F64),
        "trainable": trainable[order],
        "rewards": torch.randn(rows, generator=gen, dtype=F64),
        "rollout_id": ids(rid)[order],
        "segment_index": ids(seg)[order],
        "gamma": draw(st.sampled_from([1.0, 0.99, 0.5, 0.0])),
        "lam_rows": lam_rows,
        "lam": lam_rows if per_segment_lam else float(lam_rows[0]),
    }


def call(fn, b, **override):
    b = {**b, **override}
    return fn(
        b["values"],
        b["trainable"],
        b["rewards"],
        b["rollout_id"],
        b["segment_index"],
        b["gamma"],
        b["lam"],
    )


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- hand-computed


def test_segment_gae_hand_computed():
    v = t64([[9.0, 1.0, 7.0, 2.0, 3.0]])  # 9 and 7 sit on untrainable positions
    m = mask([[0, 1, 0, 1, 1]])
    r = t64([1.0])
    # gamma=1, lam=.5: delta = (2-1, 3-2, 1-3) = (1, 1, -2); A = (1, 0, -2)
    close(segment_gae(v, m, r, 1.0, 0.5), t64([[0.0, 1.0, 0.0, 0.0, -2.0]]))
    # gamma=.5, lam=1: delta = (0, -.5, -2); A = (-.75, -1.5, -2)
    close(segment_gae(v, m, r, 0.5, 1.0), t64([[0.0, -0.75, 0.0, -1.5, -2.0]]))


def test_segmented_estimators_hand_computed():
    # rollout 7: segment 0 has trainable values (1, 2), segment 1 has (4); R = 1 on both rows
    v = t64([[0.0, 1.0, 2.0], [0.0, 4.0, 0.0]])
    m = mask([[0, 1, 1], [0, 1, 0]])
    r, rid, seg = t64([1.0, 1.0]), ids([7, 7]), ids([0, 1])
    close(tokens_after(m, rid, seg), ids([1, 0]))
    # local: seg 0 delta = (1, 1-2) -> A = (0.5, -1); seg 1 delta = 1-4 -> A = -3
    close(segment_gae(v, m, r, 1.0, 0.5), t64([[0, 0.5, -1], [0, -3, 0]]))
    # cross: seg 0 scaled by 0.5**1
    close(cross_segment_gae(v, m, r, rid, seg, 1.0, 0.5), t64([[0, 0.25, -0.5], [0, -3, 0]]))
    # stitched: delta = (1, 4-2, 1-4) = (1, 2, -3); A = (1.25, 0.5, -3)
    close(stitched_gae(v, m, r, rid, seg, 1.0, 0.5), t64([[0, 1.25, 0.5], [0, -3, 0]]))
    # per-segment lam: a token uses its own segment's lam, also at the boundary
    # lam = (1, .5): A = (1 + (2 - 3), 2 - 3, -3) = (0, -1, -3)
    lam = t64([1.0, 0.5])
    close(stitched_gae(v, m, r, rid, seg, 1.0, lam), t64([[0, 0.0, -1.0], [0, -3, 0]]))


def test_stitched_uses_the_last_segments_reward():
    m = mask([[0, 1], [0, 1]])
    v = torch.zeros(2, 2, dtype=F64)
    out = stitched_gae(v, m, t64([5.0, 2.0]), ids([0, 0]), ids([1, 0]), 1.0, 1.0)
    close(out, t64([[0, 5.0], [0, 5.0]]))  # row 0 is the later segment


def test_group_broadcast_counts_each_rollout_once():
    # group 0: rollout 1 (R=1) has three segments, rollout 2 (R=0) has one
    m = mask([[0, 1], [0, 1], [1, 1], [0, 1]])
    rewards = t64([1.0, 1.0, 1.0, 0.0])
    rid, gid = ids([1, 1, 1, 2]), ids([0, 0, 0, 0])
    a = (1.0 - 0.5) / (math.sqrt(0.5) + 1e-6)  # mean .5 and stdev sqrt(.5) over 2 rollouts
    close(group_broadcast(rewards, m, rid, gid), t64([[0, a], [0, a], [a, a], [0, -a]]))


def test_group_broadcast_single_rollout_group_is_zero():
    out = group_broadcast(t64([3.0]), mask([[0, 1]]), ids([0]), ids([4]))
    close(out, t64([[0.0, 0.0]]))


def test_adaptive_lambda_counts_only_trainable_tokens():
    # row 0: 3 trainable out of 8 real tokens; row 1: 1 trainable; row 2: none
    m = mask([[0, 1, 0, 0, 1, 0, 0, 1], [0, 1, 0, 0, 0, 0, 0, 0], [0] * 8])
    rid = ids([0, 0, 1])
    seg_lam = adaptive_lambda(m, rid, "segment")
    expected = torch.tensor([1 - 1 / 4.5, 1 - 1 / 1.5, 0.0])
    torch.testing.assert_close(seg_lam, expected)
    roll_lam = adaptive_lambda(m, rid, "rollout")
    torch.testing.assert_close(roll_lam, torch.tensor([1 - 1 / 6.0, 1 - 1 / 6.0, 0.0]))
    assert adaptive_lambda(m, rid, "segment", alpha=0.5)[1] == 0.0  # 1 - 2 clamps to 0
    huge = torch.ones(1, 2**25, dtype=torch.bool)
    assert adaptive_lambda(huge, ids([0]), "segment")[0] < 1.0


def test_critic_returns_and_whiten():
    a = t64([[0.0, 1.0, 3.0], [5.0, 2.0, 9.0]])
    v = t64([[7.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    m = mask([[0, 1, 1], [0, 1, 0]])
    close(critic_returns(a, v, m), t64([[0, 2.0, 4.0], [0, 3.0, 0]]))
    w = whiten(a, m)
    picked = w[m]
    close(picked.mean(), torch.tensor(0.0, dtype=F64))
    torch.testing.assert_close(picked.std(), torch.tensor(1.0, dtype=F64), rtol=1e-6, atol=0)
    assert (w[~m] == 0).all()
    close(whiten(a, torch.zeros_like(m)), torch.zeros_like(a))


# --------------------------------------------------------------------------- loop references


@PROPERTY
@given(batches())
def test_segment_gae_matches_loop(b):
    out = segment_gae(b["values"], b["trainable"], b["rewards"], b["gamma"], b["lam"])
    close(
        out,
        ref_segment_gae(
            b["values"], b["trainable"], b["rewards"], b["gamma"], b["lam_rows"].tolist()
        ),
    )


@PROPERTY
@given(batches())
def test_tokens_after_matches_loop(b):
    out = tokens_after(b["trainable"], b["rollout_id"], b["segment_index"])
    assert torch.equal(out, ref_tokens_after(b["trainable"], b["rollout_id"], b["segment_index"]))


@PROPERTY
@given(batches())
def test_cross_segment_gae_matches_loop(b):
    expected = ref_cross(
        b["values"],
        b["trainable"],
        b["rewards"],
        b["rollout_id"],
        b["segment_index"],
        b["gamma"],
        b["lam_rows"].tolist(),
    )
    close(call(cross_segment_gae, b), expected)


@PROPERTY
@given(batches())
def test_stitched_gae_matches_loop(b):
    expected = ref_stitched(
        b["values"],
        b["trainable"],
        b["rewards"],
        b["rollout_id"],
        b["segment_index"],
        b["gamma"],
        b["lam_rows"].tolist(),
    )
    close(call(stitched_gae, b), expected)


@PROPERTY
@given(batches(), st.integers(1, 3))
def test_group_broadcast_matches_loop(b, num_groups):
    rid = b["rollout_id"]
    gen = torch.Generator().manual_seed(int(rid.abs().sum()))
    rollout_reward = {int(k): float(torch.randn(1, generator=gen)) for k in rid}
    rewards = t64([rollout_reward[int(k)] for k in rid])
    gid = ids([abs(int(k)) % num_groups for k in rid])
    out = group_broadcast(rewards, b["trainable"], rid, gid)
    close(out, ref_group(rewards, b["trainable"], rid, gid, 1e-6))


@PROPERTY
@given(batches(), st.sampled_from(["segment", "rollout"]), st.floats(0.1, 4.0))
def test_adaptive_lambda_matches_loop(b, scope, alpha):
    m, rid = b["trainable"], b["rollout_id"]
    n = m.sum(dim=1).tolist()
    lengths = (
        n
        if scope == "segment"
        else [sum(n[j] for j in range(len(n)) if rid[j] == rid[s]) for s in range(len(n))]
    )
    expected = [max(0.0, 1 - 1 / (alpha * ln)) if ln else 0.0 for ln in lengths]
    torch.testing.assert_close(
        adaptive_lambda(m, rid, scope, alpha), torch.tensor(expected, dtype=torch.float32)
    )


# --------------------------------------------------------------------------- invariances


@PROPERTY
@given(batches())
def test_cross_equals_stitched_when_values_are_zero(b):
    b = {**b, "values": torch.zeros_like(b["values"]), "lam": b["lam_rows"][0].item()}
    b["rewards"] = per_group_sum(b["rewards"], b["rollout_id"])  # one reward per rollout
    close(call(cross_segment_gae, b), call(stitched_gae, b))


@PROPERTY
@given(batches(max_segments=1))
def test_one_segment_per_rollout_is_standard_gae(b):
    expected = ref_segment_gae(
        b["values"], b["trainable"], b["rewards"], b["gamma"], b["lam_rows"].tolist()
    )
    local = segment_gae(b["values"], b["trainable"], b["rewards"], b["gamma"], b["lam"])
    close(local, expected)
    close(call(cross_segment_gae, b), expected)
    close(call(stitched_gae, b), expected)


@PROPERTY
@given(batches())
def test_untrainable_values_never_matter(b):
    junk = torch.where(b["trainable"], b["values"], torch.full_like(b["values"], float("nan")))
    junk[~b["trainable"] & (torch.rand_like(b["values"]) < 0.5)] = float("inf")
    for fn in (cross_segment_gae, stitched_gae):
        close(call(fn, b, values=junk), call(fn, b))
    close(
        segment_gae(junk, b["trainable"], b["rewards"], b["gamma"], b["lam"]),
        segment_gae(b["values"], b["trainable"], b["rewards"], b["gamma"], b["lam"]),
    )


@PROPERTY
@given(batches())
def test_terminal_reward_exponent(b):
    """Zero values, reward 1: token i (1-based among n_s) of segment s gets q_s**(N_{>s}+n_s-i)."""
    m = b["trainable"]
    b = {**b, "values": torch.zeros_like(b["values"]), "rewards": torch.ones_like(b["rewards"])}
    n = m.sum(dim=1, keepdim=True)
    i = torch.cumsum(m, dim=1)
    after = tokens_after(m, b["rollout_id"], b["segment_index"])[:, None]
    q = (b["gamma"] * b["lam_rows"])[:, None]
    expected = torch.where(m, q ** (after + n - i).to(F64), 0.0)
    close(call(cross_segment_gae, b), expected)
    if isinstance(b["lam"], float):
        close(call(stitched_gae, b), expected)


@PROPERTY
@given(batches())
def test_stitched_is_plain_gae_on_the_concatenation(b):
    out = call(stitched_gae, b)
    m, lam = b["trainable"], b["lam_rows"].tolist()
    for rows in rollout_rows(b["rollout_id"], b["segment_index"]).values():
        # concatenate the rollout's rows in segment order into one segment and run local GAE
        values = torch.cat([b["values"][s] for s in rows])[None]
        trainable = torch.cat([m[s] for s in rows])[None]
        lam_tok = [lam[s] for s in rows for _ in range(m.shape[1])]
        if len(set(lam_tok)) > 1:
            continue  # segment_gae takes one lambda per row
        reward = b["rewards"][rows[-1]].reshape(1)
        plain = segment_gae(values, trainable, reward, b["gamma"], lam_tok[0] if lam_tok else 0.0)
        close(torch.cat([out[s] for s in rows])[None], plain)


@PROPERTY
@given(batches(), st.integers(0, 2**31 - 1))
def test_row_order_does_not_matter(b, seed):
    perm = torch.randperm(len(b["rewards"]), generator=torch.Generator().manual_seed(seed))
    shuffled = {k: (v[perm] if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
    for fn in (cross_segment_gae, stitched_gae):
        close(call(fn, shuffled), call(fn, b)[perm])
    close(
        tokens_after(shuffled["trainable"], shuffled["rollout_id"], shuffled["segment_index"]),
        tokens_after(b["trainable"], b["rollout_id"], b["segment_index"])[perm],
    )


def test_splitting_a_segment_changes_nothing_for_stitched():
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(1, 10, generator=gen, dtype=F64)
    m = torch.rand(1, 10, generator=gen) < 0.6
    m[0, 0] = False
    whole = stitched_gae(v, m, t64([1.0]), ids([0]), ids([0]), 0.99, 0.9)
    halves_v = torch.stack([v[0, :5], v[0, 5:]])
    halves_m = torch.stack([m[0, :5], m[0, 5:]])
    split = stitched_gae(halves_v, halves_m, t64([1.0, 1.0]), ids([0, 0]), ids([0, 1]), 0.99, 0.9)
    close(split.reshape(1, 10), whole)


def test_empty_segment_gets_zero_and_is_skipped():
    v = t64([[0.0, 1.0, 2.0], [0.0, 8.0, 8.0], [0.0, 4.0, 0.0]])
    m = mask([[0, 1, 1], [0, 0, 0], [0, 1, 0]])  # middle segment: untrained summary
    r, rid, seg = t64([1.0, 1.0, 1.0]), ids([0, 0, 0]), ids([0, 1, 2])
    close(stitched_gae(v, m, r, rid, seg, 1.0, 0.5), t64([[0, 1.25, 0.5], [0, 0, 0], [0, -3, 0]]))
    close(tokens_after(m, rid, seg), ids([1, 1, 0]))
    assert (cross_segment_gae(v, m, r, rid, seg, 1.0, 0.5)[1] == 0).all()


def test_long_sequences_stay_accurate_in_float32():
    gen = torch.Generator().manual_seed(1)
    width = 4096
    v = torch.randn(4, width, generator=gen, dtype=F64)
    m = torch.rand(4, width, generator=gen) < 0.5
    m[:, 0] = False
    r, rid, seg = t64([1.0, 0.0, 1.0, 1.0]), ids([0, 0, 1, 1]), ids([0, 1, 0, 1])
    for fn in (cross_segment_gae, stitched_gae):
        exact = fn(v, m, r, rid, seg, 1.0, 0.99)
        single = fn(v.float(), m, r.float(), rid, seg, 1.0, 0.99)
        assert single.dtype == torch.float32
        assert torch.isfinite(single).all()
        torch.testing.assert_close(single.double(), exact, rtol=0, atol=1e-4)
    expected = ref_stitched(v, m, r, rid, seg, 1.0, [0.99] * 4)
    close(stitched_gae(v, m, r, rid, seg, 1.0, 0.99), expected)


# --------------------------------------------------------------------------- validation


def _valid():
    return {
        "values": torch.zeros(2, 3, dtype=F64),
        "trainable": mask([[0, 1, 1], [0, 1, 0]]),
        "rewards": t64([1.0, 1.0]),
        "rollout_id": ids([0, 0]),
        "segment_index": ids([0, 1]),
        "gamma": 1.0,
        "lam": 0.9,
    }


nan_at_trainable = torch.zeros(2, 3, dtype=F64)
nan_at_trainable[0, 1] = float("nan")
inf_at_trainable = torch.zeros(2, 3, dtype=F64)
inf_at_trainable[1, 1] = float("inf")


@pytest.mark.parametrize(
    ("override", "argument"),
    [
        ({"values": torch.zeros(2, 4, dtype=F64)}, "trainable"),
        ({"values": torch.zeros(2, 3, dtype=torch.long)}, "values"),
        ({"trainable": torch.ones(2, 3)}, "trainable"),
        ({"rewards": t64([1.0, 1.0, 1.0])}, "rewards"),
        ({"rewards": t64([1.0, float("nan")])}, "rewards"),
        ({"values": nan_at_trainable}, "values"),
        ({"values": inf_at_trainable}, "values"),
        ({"rewards": t64([1.0, float("-inf")])}, "rewards"),
        ({"rollout_id": ids([0])}, "rollout_id"),
        ({"rollout_id": t64([0.0, 0.0])}, "rollout_id"),
        ({"segment_index": ids([0, 1, 2])}, "segment_index"),
        ({"segment_index": ids([1, 1])}, "segment_index"),
        ({"gamma": 1.5}, "gamma"),
        ({"gamma": -0.1}, "gamma"),
        ({"lam": 1.01}, "lam"),
        ({"lam": t64([0.5, -0.1])}, "lam"),
        ({"lam": t64([0.5, float("nan")])}, "lam"),
        ({"lam": t64([0.5, 0.5, 0.5])}, "lam"),
    ],
)
@pytest.mark.parametrize("fn", [cross_segment_gae, stitched_gae])
def test_bad_input_raises_naming_the_argument(fn, override, argument):
    with pytest.raises(ValueError, match=argument):
        call(fn, _valid(), **override)


def test_other_validation():
    b = _valid()
    with pytest.raises(ValueError, match="gamma"):
        segment_gae(b["values"], b["trainable"], b["rewards"], 2.0, 0.5)
    with pytest.raises(ValueError, match="segment_index"):
        tokens_after(b["trainable"], ids([3, 3]), ids([0, 0]))
    with pytest.raises(ValueError, match="scope"):
        adaptive_lambda(b["trainable"], ids([0, 0]), "episode")
    with pytest.raises(ValueError, match="rewards"):
        group_broadcast(t64([1.0, 0.0]), b["trainable"], ids([0, 0]), ids([0, 0]))
    with pytest.raises(ValueError, match="group_id"):
        group_broadcast(t64([1.0, 1.0]), b["trainable"], ids([0, 0]), ids([0, 1]))
    with pytest.raises(ValueError, match="mask"):
        whiten(b["values"], b["trainable"][:, :2])
    with pytest.raises(ValueError, match="advantages"):
        critic_returns(b["values"][:, :2], b["values"], b["trainable"])


def test_nan_under_a_mask_is_legal():
    b = _valid()
    values = b["values"].clone()
    values[1, 2] = float("nan")  # padding
    assert torch.isfinite(call(stitched_gae, b, values=values)).all()


# --------------------------------------------------------------------------- dtypes, devices, bench


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtypes_are_kept(dtype):
    b = _valid()
    b["values"] = b["values"].to(dtype)
    b["rewards"] = b["rewards"].to(dtype)
    b["lam"] = torch.tensor([0.9, 0.8], dtype=torch.float64)  # a lam of another dtype is cast
    for fn in (cross_segment_gae, stitched_gae):
        assert call(fn, b).dtype == dtype
    assert segment_gae(b["values"], b["trainable"], b["rewards"], 1.0, 0.9).dtype == dtype


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    gen = torch.Generator().manual_seed(3)
    v = torch.randn(8, 64, generator=gen, dtype=F64)
    m = torch.rand(8, 64, generator=gen) < 0.5
    r, rid, seg = torch.ones(8, dtype=F64), torch.arange(8) // 2, torch.arange(8) % 2
    lam = torch.rand(8, generator=gen, dtype=F64)
    for fn in (cross_segment_gae, stitched_gae):
        cpu = fn(v, m, r, rid, seg, 0.99, lam)
        gpu = fn(v.cuda(), m.cuda(), r.cuda(), rid.cuda(), seg.cuda(), 0.99, lam.cuda())
        assert gpu.is_cuda
        close(gpu.cpu(), cpu)


def test_bench_smoke(capsys):
    from cxsim.experiments.bench_advantages import main

    main(["--segments", "8", "--tokens", "64", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "cross_segment_gae" in out and "stitched_gae" in out
    assert out.count("ratio (loop/ours)") == 2


def test_truncation_bootstrap_on_and_off_by_hand():
    """Two one-segment rollouts of 2 trainable tokens, V = 0, gamma = 1, lambda = 1; rollout 0
    was cut by the env's time limit with V_end = 0.5, rollout 1 terminated; R = 0 for both."""
    from cxsim.advantages import bootstrapped_rewards

    values = torch.zeros(2, 3)
    trainable = torch.tensor([[False, True, True], [False, True, True]])
    rewards, rid = torch.zeros(2), torch.tensor([0, 1])
    truncated = torch.tensor([True, False])
    final = torch.tensor([0.5, 7.0])  # read only where truncated
    off = segment_gae(values, trainable, rewards, 1.0, 1.0)
    assert (off == 0).all()  # the method: the cut is a failure, nothing comes after it
    boot = bootstrapped_rewards(rewards, rid, truncated, final, gamma=1.0)
    assert boot.tolist() == [0.5, 0.0]
    on = segment_gae(values, trainable, boot, 1.0, 1.0)
    assert on.tolist() == [[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]
    # gamma 0.5: R + gamma V_end = 0.25 at the last token, 0.125 one token earlier
    half = segment_gae(
        values, trainable, bootstrapped_rewards(rewards, rid, truncated, final, 0.5), 0.5, 1.0
    )
    assert half[0].tolist() == [0.0, 0.125, 0.25]

"""Tests for cxsim.scans: the reverse linear scan and the grouping primitives."""

from __future__ import annotations

import torch

from cxsim.scans import first_in_group, per_group_sum, reverse_linear_scan, rollout_order


def test_per_group_sum_is_exact_for_small_groups():
    x = torch.full((1000,), 0.1, dtype=torch.float32)
    group = torch.arange(1000) // 2
    out = per_group_sum(x, group)
    assert (out == torch.tensor(0.1, dtype=torch.float32) * 2).all()


def test_per_group_sum_with_unsorted_ids_and_gradients():
    x = torch.tensor([1.0, 2.0, 4.0, 8.0], requires_grad=True)
    group = torch.tensor([7, -3, 7, 5])
    out = per_group_sum(x, group)
    assert out.tolist() == [5.0, 2.0, 5.0, 8.0]
    out.sum().backward()
    assert x.grad.tolist() == [2.0, 1.0, 2.0, 1.0]  # rows of a group of two count twice


def test_reverse_linear_scan_matches_the_loop():
    gen = torch.Generator().manual_seed(0)
    coef = torch.rand(37, generator=gen, dtype=torch.float64)
    coef[[5, 20]] = 0.0  # chains end there
    delta = torch.randn(37, generator=gen, dtype=torch.float64)
    expected, running = torch.zeros_like(delta), 0.0
    for t in reversed(range(37)):
        running = delta[t] + coef[t] * running
        expected[t] = running
    torch.testing.assert_close(reverse_linear_scan(coef, delta, span=37), expected)


def test_first_in_group_and_rollout_order():
    group = torch.tensor([3, 1, 3, 1, 2])
    assert first_in_group(group).tolist() == [True, True, False, False, True]
    rollout = torch.tensor([1, 0, 1, 0])
    segment = torch.tensor([1, 1, 0, 0])
    assert rollout_order(rollout, segment).tolist() == [3, 1, 2, 0]

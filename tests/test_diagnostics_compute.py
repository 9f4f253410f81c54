"""Compute accounting: totals, per iteration and per success."""

import pytest

from cxsim.diagnostics import ComputeMeter


def _record(success: bool, generated: int) -> dict:
    return {
        "success": success,
        "tokens_generated": generated,
        "tokens_prefilled": 2 * generated,
        "tokens_summarised": generated // 10,
    }


def test_per_success_and_per_iteration_with_known_counts():
    meter = ComputeMeter()
    for _ in range(2):  # two iterations of four rollouts, one success each
        meter.add_records([_record(i == 0, 100) for i in range(4)])
        meter.add(actor_forward_tokens=400, critic_forward_tokens=800, iterations=1)
    stats = meter.as_dict()
    assert stats["compute/iterations"] == 2
    assert stats["compute/rollouts"] == 8
    assert stats["compute/successes"] == 2
    assert stats["compute/tokens_generated"] == 800
    assert stats["compute/tokens_generated_per_success"] == 400
    assert stats["compute/tokens_generated_per_iter"] == 400
    assert stats["compute/tokens_prefilled_per_success"] == 800
    assert stats["compute/tokens_summarised_per_success"] == 40
    assert stats["compute/critic_forward_tokens_per_iter"] == 800
    assert stats["compute/critic_backward_tokens"] == 0
    assert "compute/actor_flops" not in stats


def test_rates_left_out_without_successes_and_flops_with_parameter_counts():
    meter = ComputeMeter(actor_params=10, critic_params=20)
    meter.add_records([_record(False, 5)])
    meter.add(actor_backward_tokens=3, critic_forward_tokens=4, critic_backward_tokens=1)
    stats = meter.as_dict()
    assert not any(key.endswith(("_per_success", "_per_iter")) for key in stats)
    assert stats["compute/actor_flops"] == 10 * (2 * (5 + 10) + 4 * 3)
    assert stats["compute/critic_flops"] == 20 * (2 * 4 + 4 * 1)


def test_timed_phases_add_to_wall_clock():
    meter = ComputeMeter()
    with meter.timed("rollout"):
        sum(range(1000))
    with meter.timed("update"):
        pass
    meter.add(wall_clock_s=1.0, iterations=1)
    stats = meter.as_dict()
    assert stats["compute/wall_clock_s"] == pytest.approx(
        1.0 + stats["compute/wall_rollout_s"] + stats["compute/wall_update_s"]
    )
    assert stats["compute/wall_rollout_s"] > 0


def test_unknown_counter_is_named():
    with pytest.raises(ValueError, match="tokens_generatd"):
        ComputeMeter().add(tokens_generatd=1)


def test_merged_ranks_sum_work_and_keep_the_slowest_clock():
    """Two data-parallel ranks, each metering its shard of one iteration: the merged meter
    counts every rollout and token once, and the wall-clock of the slower rank."""
    ranks = [ComputeMeter(actor_params=10), ComputeMeter(actor_params=10)]
    for rank, meter in enumerate(ranks):
        meter.add_records([_record(rank == 0, 100), _record(False, 100)])
        meter.add(actor_forward_tokens=50, wall_clock_s=2.0 + rank, iterations=1)
        meter.phases["rollout"] = 1.0 + rank
    stats = ComputeMeter.merged(ranks).as_dict()
    assert stats["compute/iterations"] == 1
    assert stats["compute/rollouts"] == 4 and stats["compute/successes"] == 1
    assert stats["compute/tokens_generated"] == 400
    assert stats["compute/tokens_generated_per_success"] == 400
    assert stats["compute/actor_forward_tokens_per_iter"] == 100
    assert stats["compute/wall_clock_s"] == 3.0 and stats["compute/wall_rollout_s"] == 2.0
    assert stats["compute/actor_flops"] == 10 * (2 * (400 + 800 + 100))
    with pytest.raises(ValueError, match="at least one"):
        ComputeMeter.merged([])

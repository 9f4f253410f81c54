"""Does the critic track: its explained variance at the deepest window half of the rollouts
reach, over the iterations whose outcomes vary, beside the outcome ceilings."""

from __future__ import annotations

import math

import pytest

from cxsim.diagnostics.tracking import critic_tracking, informative_mean, last_window


def iteration(success: float, warmup: bool = False, **figures: float) -> dict[str, float]:
    return {"warmup": float(warmup), "charts/success_rate": success} | {
        k.replace("__", "/"): v for k, v in figures.items()
    }


def counts(*per_segment: float) -> dict[str, float]:
    return {f"critic__count_seg{k}": n for k, n in enumerate(per_segment)}


def test_the_mean_keeps_actor_iterations_whose_outcomes_vary():
    history = [
        iteration(0.5, warmup=True, x=9.0),  # the value-only warm-up: left out
        iteration(0.5, x=1.0),
        iteration(0.95, x=9.0),  # all but certain success: left out
        iteration(0.05, x=9.0),
        iteration(0.9, x=3.0),  # the band's ends count
        iteration(0.3, x=math.nan),  # undefined that iteration: left out
        iteration(0.3),  # not logged: left out
    ]
    assert informative_mean(history, "x") == 2.0
    assert math.isnan(informative_mean(history[:1], "x"))


def test_the_last_window_is_the_deepest_that_half_of_the_rollouts_reach():
    # windows at even indices: 32 rollouts reach window 1 (seg 2), 16 window 2, 3 window 3
    assert last_window([iteration(0.5, **counts(32, 32, 32, 30, 16, 10, 3))]) == 4
    assert last_window([iteration(0.5, **counts(32, 32, 15))]) == 0
    assert last_window([iteration(0.5)]) is None  # no critic


def test_tracking_reads_that_window_against_the_ceilings():
    def logged(success: float, ev: float, ceiling: float, **more: float) -> dict[str, float]:
        return iteration(success, **counts(32, 32, 30), critic__mc_ev_seg2=ev,
                         critic__ece_seg2=0.1, critic__ev_ceiling=ceiling, **more)  # fmt: skip

    history = [
        logged(0.5, 0.9, 0.9, warmup=True),
        logged(
            0.5,
            0.2,
            0.6,
            critic__ev_ceiling_online=0.4,
            critic__ev_ceiling_stated=0.25,
            critic__ev_ceiling_stated_online=0.125,
        ),
        logged(
            0.8,
            0.4,
            0.8,
            critic__ev_ceiling_online=0.6,
            critic__ev_ceiling_stated=0.75,
            critic__ev_ceiling_stated_online=0.5,
        ),
        logged(1.0, -1.0, 0.0),
        # no explained variance that iteration (its window reached by too few): not counted
        iteration(0.5, **counts(32, 32, 30), critic__ev_ceiling=0.1),
    ]
    out = critic_tracking(history)
    assert out["window"] == 1 and out["iterations"] == 2
    assert out["ev"] == pytest.approx(0.3) and out["ece"] == pytest.approx(0.1)
    assert out["ceiling"] == pytest.approx(0.7) and out["ceiling_online"] == pytest.approx(0.5)
    # each iteration's min(0.5, 0.8 x ceiling), averaged: (0.48 + 0.5) / 2, not min(0.5, 0.56)
    assert out["target"] == pytest.approx(0.49)
    # against what a reader of the summary can know: (0.2 + 0.5) / 2
    assert out["ceiling_stated"] == pytest.approx(0.5)
    assert out["target_stated"] == pytest.approx(0.35)
    # and learned from the earlier batches, as a critic must: (0.1 + 0.4) / 2
    assert out["ceiling_stated_online"] == pytest.approx(0.3125)
    assert out["target_stated_online"] == pytest.approx(0.25)
    low = [logged(0.5, 0.1, 0.25)]
    assert critic_tracking(low)["target"] == pytest.approx(0.2)  # 0.8 x 0.25
    assert math.isnan(critic_tracking(low)["ceiling_online"])  # a run made before the tag
    assert math.isnan(critic_tracking(low)["target_stated"])
    assert critic_tracking([iteration(0.5)]) == {}

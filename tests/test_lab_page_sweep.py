"""The lab page's sentence on the compaction sweep prints a fall only where there is one."""

from cxsim.lab.lab_page import _k_sentence


def sweep(cross: list[float], stitched: list[float]) -> dict:
    cosines = [0.9] * len(cross)
    return {
        "cross": {"slope_exec0": cross, "grad_cos": cosines},
        "stitched": {"slope_exec0": stitched, "grad_cos": cosines},
    }


def test_a_sweep_with_one_point_past_the_first_states_that_point_alone():
    text = _k_sentence(sweep([1.0, 0.58], [1.0, 0.99]), [1, 2])
    assert text.startswith("is 0.58 at K = 2 (stitched 0.99)")
    assert "falls" not in text and "K = 1" not in text


def test_equal_values_stay_and_a_fall_falls():
    same = _k_sentence(sweep([1.0, 0.581, 0.7, 0.579], [1.0] * 4), [1, 2, 3, 5])
    assert same.startswith("stays at 0.58 from K = 2 to K = 5 (stitched 1.00, 1.00)")
    fall = _k_sentence(sweep([1.0, 0.7, 0.5, 0.4], [1.0] * 4), [1, 2, 3, 5])
    assert fall.startswith("falls from 0.70 at K = 2 to 0.40 at K = 5")
    rise = _k_sentence(sweep([1.0, 0.4, 0.5, 0.7], [1.0] * 4), [1, 2, 3, 5])
    assert rise.startswith("rises from 0.40 at K = 2 to 0.70 at K = 5")

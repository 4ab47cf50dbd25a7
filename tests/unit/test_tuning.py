"""The decision rule of ``ncclprep tune`` (module_utils/ncclprep/tuning.py) on samples shaped like the
local cluster's: all_reduce busbw at the largest size spread 0.43-0.62 GB/s (median 0.51) over ten
healthy validate runs in a row (the CI table of stop 36), smaller sizes alike."""

from __future__ import annotations

import pytest
from ansible.module_utils.ncclprep.tuning import MIN_RUNS, bootstrap_ratio, decide, schedule

SMALL, LARGE = 65536, 4194304
# busbw (GB/s) of five runs a side at two sizes
BASE = {SMALL: [0.101, 0.097, 0.105, 0.099, 0.103], LARGE: [0.49, 0.51, 0.47, 0.52, 0.50]}


def test_the_schedule_alternates_and_rotates_and_refuses_too_few_runs():
    order = schedule(["base", "mtu1500"], 5)
    assert [v for _, v in order] == ["base", "mtu1500", "mtu1500", "base"] * 2 + ["base", "mtu1500"]
    three = [v for _, v in schedule(["a", "b", "c"], 6)]
    assert three[:9] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(three.count(v) == 6 for v in "abc")
    with pytest.raises(ValueError, match=f"runs=4: valid: at least {MIN_RUNS}"):
        schedule(["a", "b"], 4)
    with pytest.raises(ValueError, match="two or more distinct"):
        schedule(["a", "a"], 5)


def test_a_real_win_is_kept_with_its_interval_above_one():
    variant = {SMALL: [0.104, 0.100, 0.106, 0.102, 0.105], LARGE: [0.60, 0.62, 0.58, 0.61, 0.59]}
    got = decide(BASE, variant)
    assert got["keep"] and got["verdict"] == "keep" and got["target"] == LARGE
    assert got["sizes"][LARGE]["ratio"] == pytest.approx(0.60 / 0.50)
    low, high = got["interval"]
    assert 1 < low <= 1.2 <= high
    assert got["why"].startswith("+20.0 % at 4194304 (higher is better), interval ")


def test_a_win_inside_the_noise_is_no_significant_difference():
    """A median 8 % higher, but the runs spread as widely as the cluster's own (0.43-0.62)."""
    base = {LARGE: [0.43, 0.62, 0.51, 0.45, 0.58]}
    variant = {LARGE: [0.44, 0.63, 0.55, 0.47, 0.60]}
    got = decide(base, variant)
    assert not got["keep"] and got["verdict"] == "no significant difference"
    assert got["sizes"][LARGE]["ratio"] == pytest.approx(0.55 / 0.51)
    assert got["interval"][0] < 1 and "reaches 1: the defaults stay" in got["why"]
    # a significant gain below 5 % is not kept either
    small = {LARGE: [x * 1.03 for x in BASE[LARGE]]}
    got = decide({LARGE: BASE[LARGE]}, small)
    assert not got["keep"] and "+3.0 % at 4194304 is below the 5 % a change must win" in got["why"]


def test_a_win_at_one_size_that_loses_at_another_is_not_kept():
    variant = {SMALL: [0.095, 0.091, 0.098, 0.093, 0.096], LARGE: [0.60, 0.62, 0.58, 0.61, 0.59]}
    got = decide(BASE, variant)
    assert not got["keep"] and got["verdict"] == f"worse at {SMALL}"
    assert got["why"] == f"more than 2 % worse at {SMALL} (-5.9 %): the defaults stay"


def test_a_time_is_better_lower_and_bad_input_is_refused():
    base = {0: [0.210, 0.205, 0.215, 0.208, 0.212]}  # the training job's step time, seconds
    faster = {0: [0.180, 0.178, 0.183, 0.181, 0.179]}
    got = decide(base, faster, higher_is_better=False)
    assert got["keep"] and got["sizes"][0]["ratio"] == pytest.approx(0.21 / 0.18)
    assert bootstrap_ratio(base[0], faster[0], False) == bootstrap_ratio(base[0], faster[0], False)  # repeatable
    with pytest.raises(ValueError, match="the same sizes"):
        decide(BASE, {LARGE: BASE[LARGE]})
    with pytest.raises(ValueError, match=f"fewer than {MIN_RUNS} runs a side"):
        decide({1: [1.0] * 4}, {1: [1.0] * 4})
    with pytest.raises(ValueError, match="target=7: valid: a measured size"):
        decide(BASE, BASE, target=7)
    with pytest.raises(ValueError, match="valid: positive figures"):
        decide({1: [0.0] * 5}, {1: [1.0] * 5})

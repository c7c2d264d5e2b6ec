"""fabreg.run.repeat_ranges: a repeat skips the sizes no verdict reads where they cost more
than a launch, and keeps one launch where they do not or where nothing says what they cost."""

from __future__ import annotations

import pytest

from fabreg.run.repeat_ranges import launch_seconds, repeat_ranges, size_seconds

KB, MB = 1 << 10, 1 << 20
CURVE = [1 << k for k in range(23)]  # 1 B .. 4 MiB


def bandwidth_costs(seconds_per_mib: float) -> dict[int, float]:
    """What each size of a bandwidth curve takes: its time grows with the size."""
    return {s: s / MB * seconds_per_mib for s in CURVE[1:]}


def test_what_each_size_took_is_the_time_since_the_row_before_it():
    costs = size_seconds({1: 10.0, 2: 10.5, 4: 12.0, 8: 11.0})
    assert costs == {2: 0.5, 4: 1.5, 8: 0.0}  # a row out of order costs nothing, not less
    assert size_seconds({}) == {} and size_seconds({8: 1.0}) == {}


def test_a_launch_costs_what_its_run_took_beyond_its_sizes():
    assert launch_seconds(5.0, {2: 0.5, 4: 1.5}) == pytest.approx(3.0)
    assert launch_seconds(1.0, {2: 0.5, 4: 1.5}) == 0.0


def test_expensive_sizes_between_asserted_ones_get_a_launch_of_their_own():
    # osu_bw's asserted sizes: 128-512 KiB cost 0.875 s and 2 MiB 2 s, a launch 0.5 s
    ranges = repeat_ranges([64 * KB, MB, 4 * MB], CURVE, bandwidth_costs(1.0), 0.5)
    assert ranges == [(64 * KB, 64 * KB), (MB, MB), (4 * MB, 4 * MB)]


def test_cheap_sizes_between_asserted_ones_stay_in_one_launch():
    # a latency curve: every size costs less than the launch it would save
    assert repeat_ranges([8, KB], CURVE, {s: 0.01 for s in CURVE}, 0.5) == [(8, KB)]
    # where only one gap is worth a launch, the split is there alone
    ranges = repeat_ranges([64 * KB, MB, 4 * MB], CURVE, bandwidth_costs(1.0), 1.0)
    assert ranges == [(64 * KB, MB), (4 * MB, 4 * MB)]


def test_a_gap_whose_cost_is_unknown_keeps_one_launch():
    costs = bandwidth_costs(1.0)
    del costs[2 * MB]  # its row came in a burst with the row before it, or never
    assert repeat_ranges([MB, 4 * MB], CURVE, costs, 0.1) == [(MB, 4 * MB)]


def test_one_size_and_adjacent_sizes_take_one_launch():
    assert repeat_ranges([MB], CURVE, bandwidth_costs(1.0), 0.0) == [(MB, MB)]
    assert repeat_ranges([2 * MB, MB], CURVE, bandwidth_costs(1.0), 0.0) == [(MB, 2 * MB)]
    assert repeat_ranges([], CURVE, {}, 0.0) == []

"""fabreg.run.iteration_budget: when OSU's own iteration counts fit a curve's time, and
what count fits when they do not."""

from __future__ import annotations

import pytest

from fabreg.run import iteration_budget as ib

KB = 1024


@pytest.mark.parametrize(("cost_us", "kind", "target_s", "iterations", "warmup"), [
    # a collective of a few us per size: OSU's counts take well under a second
    ({1: 2.0, KB: 3.0, 64 * KB: 20.0, 1024 * KB: 300.0}, "collective", 30, None, None),
    # 10 ms per operation at each of 14 small sizes: 1,100 x 14 x 10 ms = 154 s
    ({1 << k: 10_000.0 for k in range(14)}, "collective", 30, 194, 19),
    # osu_latency's 10,000 iterations: 30 us at 11 sizes is 3.3 s
    ({1 << k: 30.0 for k in range(11)}, "latency", 1.0, 2754, 275),
    # a tenth of 57 rounds up to 6 warm-ups: 63 x 31.85 us overruns 2 ms, so 56 + 6 it is
    # (the overshoot CI caught in test_measure's pilot)
    ({1: 31.85}, "latency", 0.002, 56, 6),
    # even MIN_ITERATIONS overrun the target: the count stops at it
    ({1: 5e6}, "collective", 1.0, ib.MIN_ITERATIONS, ib.MIN_WARMUP),
])
def test_iterations_within(cost_us, kind, target_s, iterations, warmup):
    got = ib.iterations_within(cost_us, kind, target_s)
    assert (got.iterations, got.warmup) == (iterations, warmup)
    assert got.default_s == pytest.approx(ib.default_seconds(cost_us, kind))
    if iterations is None:
        assert got.options() == [] and got.estimated_s == got.default_s <= target_s
    else:
        assert got.options() == ["-i", str(iterations), "-x", str(warmup)]
        assert got.default_s > target_s
        assert got.estimated_s <= target_s or iterations == ib.MIN_ITERATIONS


def test_osu_defaults_small_and_large():
    # 1,100 iterations at 8 KiB, 110 above it (OSU's LARGE_MESSAGE_SIZE is inclusive)
    assert ib.default_seconds({8192: 1000.0, 16384: 1000.0}, "collective") == pytest.approx(
        1.1 + 0.11)


def test_every_osu_benchmark_that_reports_a_time_can_be_costed():
    # a table of times per operation gets a pilot; a bandwidth table cannot be costed
    from fabreg.testlib.osu import BENCHMARKS
    for name, (_, unit, _) in BENCHMARKS.items():
        kind = ib.kind_of(name)
        assert (kind in ib.OSU_DEFAULTS) if unit == "us" else kind is None, name


@pytest.mark.parametrize("bad", [{"kind": "bandwidth"}, {"target_s": 0}, {"target_s": -1}])
def test_bad_input_is_refused(bad):
    args = {"cost_us": {1: 1.0}, "kind": "collective", "target_s": 1.0, **bad}
    with pytest.raises(ValueError):
        ib.iterations_within(**args)


def test_iteration_costs_come_from_the_time_between_rows():
    # 6 iterations per size; the 2nd row came 0.6 s after the 1st (0.1 s an iteration, far
    # more than the table's 50 us: validation, barriers); the 3rd in the same burst
    costs = ib.iteration_costs({1: 50.0, 2: 60.0, 4: 70.0}, {1: 10.0, 2: 10.6, 4: 10.6}, 6)
    assert costs == pytest.approx({1: 50.0, 2: 100_000.0, 4: 70.0})
    # no row times at all: the table's own times
    assert ib.iteration_costs({1: 5.0, 2: 6.0}, {}, 6) == {1: 5.0, 2: 6.0}

"""Bus bandwidth: nccl-tests' factors, and OSU's message size turned into bytes moved."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fabreg.errors import FabregError
from fabreg.run import busbw


@pytest.mark.parametrize("benchmark,ranks,factor", [
    ("osu_allreduce", 2, Fraction(1)), ("osu_allreduce", 4, Fraction(3, 2)),
    ("osu_allreduce", 8, Fraction(7, 4)),
    ("osu_allgather", 2, Fraction(1, 2)), ("osu_allgather", 4, Fraction(3, 4)),
    ("osu_alltoall", 8, Fraction(7, 8)),
    ("osu_bcast", 16, Fraction(1)), ("osu_reduce", 3, Fraction(1)),
])
def test_nccl_tests_factors(benchmark, ranks, factor):
    assert busbw.factor(benchmark, ranks) == factor


def test_bus_bandwidth_in_mb_per_second():
    # 1 MiB allreduce over 4 ranks in 100 us: algbw 10485.76 MB/s, busbw x 3/2
    assert busbw.bus_bandwidth("osu_allreduce", 1 << 20, 100.0, 4) == pytest.approx(15728.64)
    # allgather: OSU's size is one rank's block, nccl-tests' size the whole buffer (x ranks)
    assert busbw.bus_bandwidth("osu_allgather", 1000, 10.0, 4) == pytest.approx(300.0)
    assert busbw.bus_bandwidth("osu_alltoall", 1000, 10.0, 2) == pytest.approx(100.0)
    assert busbw.bus_bandwidth("osu_bcast", 1000, 10.0, 64) == pytest.approx(100.0)


def test_same_link_traffic_compares_across_rank_counts():
    # A ring allreduce moving 2(n-1)/n * S per rank at link speed L takes 2(n-1)/n * S / L.
    link = 12500.0  # MB/s
    for ranks in (2, 4, 16, 128):
        size = 4 << 20
        t = 2 * (ranks - 1) / ranks * size / link
        assert busbw.bus_bandwidth("osu_allreduce", size, t, ranks) == pytest.approx(link)


def test_undefined_cases_are_errors():
    assert busbw.collective("osu_latency") is None
    with pytest.raises(FabregError, match="no bus bandwidth is defined for 'osu_latency'"):
        busbw.bus_bandwidth("osu_latency", 8, 1.0, 2)
    with pytest.raises(FabregError, match="at least 2 ranks"):
        busbw.factor("osu_allreduce", 1)
    with pytest.raises(FabregError, match="latency must be positive"):
        busbw.bus_bandwidth("osu_bcast", 8, 0.0, 2)

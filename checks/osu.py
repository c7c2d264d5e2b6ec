"""OSU Micro-Benchmarks: point-to-point latency/bandwidth and the collectives AI training uses.

One class per benchmark, so each has its own perflog file with a stable header.
What is measured, and at which sizes, lives in ``fabreg.testlib.osu.BENCHMARKS``;
thresholds live in ``checks/references/<system>.yaml``.
"""

import reframe as rfm

from fabreg.testlib.osu import OsuCollective, OsuPointToPoint


@rfm.simple_test
class OsuLatency(OsuPointToPoint):
    benchmark = "osu_latency"
    tags = {"osu", "pt2pt", "quick"}


@rfm.simple_test
class OsuBandwidth(OsuPointToPoint):
    benchmark = "osu_bw"
    tags = {"osu", "pt2pt", "quick"}


@rfm.simple_test
class OsuBiBandwidth(OsuPointToPoint):
    benchmark = "osu_bibw"
    tags = {"osu", "pt2pt"}


@rfm.simple_test
class OsuAllreduce(OsuCollective):
    benchmark = "osu_allreduce"
    tags = {"osu", "collective", "quick"}


@rfm.simple_test
class OsuBcast(OsuCollective):
    benchmark = "osu_bcast"
    tags = {"osu", "collective"}


@rfm.simple_test
class OsuAlltoall(OsuCollective):
    benchmark = "osu_alltoall"
    tags = {"osu", "collective"}


@rfm.simple_test
class OsuReduce(OsuCollective):
    benchmark = "osu_reduce"
    tags = {"osu", "collective"}


@rfm.simple_test
class OsuAllgather(OsuCollective):
    benchmark = "osu_allgather"
    tags = {"osu", "collective"}

"""OSU Micro-Benchmarks: point-to-point latency/bandwidth and the collectives AI training uses.

One class per benchmark, so each has its own perflog file with a stable header.
What is measured, and at which sizes, lives in ``fabreg.testlib.osu.BENCHMARKS``;
thresholds live in ``checks/references/<system>.yaml``.
"""

import reframe as rfm

from fabreg.testlib.osu import OsuCheck


@rfm.simple_test
class OsuLatency(OsuCheck):
    benchmark = "osu_latency"
    tags = {"osu", "pt2pt", "quick"}


@rfm.simple_test
class OsuBandwidth(OsuCheck):
    benchmark = "osu_bw"
    tags = {"osu", "pt2pt", "quick"}


@rfm.simple_test
class OsuBiBandwidth(OsuCheck):
    benchmark = "osu_bibw"
    tags = {"osu", "pt2pt"}


@rfm.simple_test
class OsuAllreduce(OsuCheck):
    benchmark = "osu_allreduce"
    tags = {"osu", "collective", "quick"}


@rfm.simple_test
class OsuBcast(OsuCheck):
    benchmark = "osu_bcast"
    tags = {"osu", "collective"}


@rfm.simple_test
class OsuAlltoall(OsuCheck):
    benchmark = "osu_alltoall"
    tags = {"osu", "collective"}


@rfm.simple_test
class OsuReduce(OsuCheck):
    benchmark = "osu_reduce"
    tags = {"osu", "collective"}


@rfm.simple_test
class OsuAllgather(OsuCheck):
    benchmark = "osu_allgather"
    tags = {"osu", "collective"}

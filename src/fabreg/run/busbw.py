"""Bus bandwidth of collectives, the nccl-tests way, so results compare across node counts.

nccl-tests (doc/PERFORMANCE.md) defines, for a collective over ``n`` ranks that
moves ``S`` bytes in time ``t``: algorithm bandwidth ``algbw = S / t`` and bus
bandwidth ``busbw = algbw * factor(n)``, the per-rank link traffic that a
perfect implementation needs, comparable to link speed whatever ``n`` is:

============  ==============  ==========================================
collective    factor(n)       ``S`` in terms of OSU's message size ``m``
============  ==============  ==========================================
allreduce     2 (n - 1) / n   ``m`` (the buffer being reduced)
allgather     (n - 1) / n     ``m * n`` (OSU's ``m`` is one rank's block)
alltoall      (n - 1) / n     ``m * n`` (OSU's ``m`` goes to each peer)
bcast         1               ``m``
reduce        1               ``m``
============  ==============  ==========================================

OSU reports the average latency in microseconds; bytes per microsecond are
MB/s with MB = 10^6 bytes, the unit OSU's bandwidth tests print.
"""

from __future__ import annotations

from fractions import Fraction

from fabreg.errors import FabregError

#: Collectives with a defined bus bandwidth: (factor(n), bytes moved per OSU message size).
_RULES = {
    "allreduce": (lambda n: Fraction(2 * (n - 1), n), lambda m, n: m),
    "allgather": (lambda n: Fraction(n - 1, n), lambda m, n: m * n),
    "alltoall": (lambda n: Fraction(n - 1, n), lambda m, n: m * n),
    "bcast": (lambda n: Fraction(1), lambda m, n: m),
    "reduce": (lambda n: Fraction(1), lambda m, n: m),
}

UNIT = "MB/s"


def collective(benchmark: str) -> str | None:
    """``osu_allreduce`` -> ``allreduce``; None for benchmarks without a bus bandwidth."""
    name = benchmark.removeprefix("osu_")
    return name if name in _RULES else None


def factor(benchmark: str, ranks: int) -> Fraction:
    """nccl-tests' bus bandwidth factor of ``benchmark`` over ``ranks`` ranks."""
    name = collective(benchmark)
    if name is None:
        raise FabregError(f"no bus bandwidth is defined for {benchmark!r}")
    if ranks < 2:
        raise FabregError(f"bus bandwidth needs at least 2 ranks, not {ranks}")
    return _RULES[name][0](ranks)


def bus_bandwidth(benchmark: str, message_bytes: int, latency_us: float, ranks: int) -> float:
    """Bus bandwidth in MB/s of one OSU collective row (message size, average latency)."""
    scale = factor(benchmark, ranks)
    if latency_us <= 0:
        raise FabregError(f"{benchmark}: latency must be positive, got {latency_us}")
    moved = _RULES[str(collective(benchmark))][1](message_bytes, ranks)
    return float(moved * scale) / latency_us

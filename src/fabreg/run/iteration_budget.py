"""Iterations bounded by time: an OSU curve that would run for minutes runs for seconds.

OSU's iteration counts are fixed (a collective: 1,000 timed and 100 warm-up iterations per
size up to 8 KiB, 100 and 10 above; ``osu_latency``: 10,000/100 and 1,000/10). Where an
operation takes microseconds that is a second per curve; where it takes milliseconds (four
MPI ranks that busy-poll on two cores, a 4-node collective over the emulated TCP fabric) it
is several minutes, past the job's repeat budget: a whole-curve run of a 4-node MPICH
allreduce took 400 s and left no time to measure it a second time.

So the measurement driver first runs a *pilot*: the curve with a handful of iterations.
:func:`iteration_costs` turns it into each size's cost of one iteration: the time between
the size's table row and the one before it, divided by the pilot's iterations (that covers
what the table's average leaves out: barriers, data validation, buffer set-up; on a
4-rank shared-memory allreduce it was 4x the table's time), and never less than the table's
own time per operation (rows that reach the driver in one burst). :func:`iterations_within`
then says whether OSU's own counts fit the time the curve may take, and if not, how many
iterations do (the same count at every size, with a tenth of it, at least 2, as warm-up).
Only tables whose value is a time per operation can be costed this way (latency and the
collectives), and a count the user set is never changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fabreg.run import busbw

#: OSU's threshold between its small- and large-message iteration counts (bytes).
LARGE_MESSAGE = 8192
#: Timed and warm-up iterations per size, below and above LARGE_MESSAGE, per kind of
#: benchmark (OSU 7.x ``osu_util.h``; the suite's probes use the same).
OSU_DEFAULTS: dict[str, tuple[int, int, int, int]] = {
    "latency": (10000, 100, 1000, 10),
    "collective": (1000, 100, 100, 10),
}
#: Iterations of the pilot run, and its warm-up.
PILOT_ITERATIONS = 5
PILOT_WARMUP = 1
#: Fewer timed iterations than this make an average that one scheduling hiccup decides.
MIN_ITERATIONS = 10
#: Warm-up iterations as a fraction of the timed ones (OSU's own ratio), and at least.
WARMUP_FRACTION = 0.1
MIN_WARMUP = 2


def kind_of(benchmark: str) -> str | None:
    """Whose iteration defaults an OSU benchmark has; None: its table cannot be costed."""
    if benchmark == "osu_latency":
        return "latency"
    return "collective" if busbw.collective(benchmark) else None


@dataclass(frozen=True)
class IterationBudget:
    """What the pilot found: OSU's counts fit (``iterations`` None), or the count that does."""

    #: Seconds the curve would take with OSU's own iteration counts.
    default_s: float
    #: Seconds it is expected to take with the count chosen.
    estimated_s: float
    #: Timed and warm-up iterations per size to use instead; None keeps OSU's.
    iterations: int | None = None
    warmup: int | None = None

    def options(self) -> list[str]:
        """The benchmark options that set the count (none when OSU's own fit)."""
        if self.iterations is None:
            return []
        return ["-i", str(self.iterations), "-x", str(self.warmup)]

    def as_dict(self) -> dict[str, float | int | None]:
        return {"default_s": round(self.default_s, 6), "estimated_s": round(self.estimated_s, 6),
                "iterations": self.iterations, "warmup": self.warmup}


def iteration_costs(latency_us: Mapping[int, float], printed_at: Mapping[int, float],
                    iterations: int) -> dict[int, float]:
    """Microseconds one iteration of each size costs, from a pilot of ``iterations``
    iterations (timed and warm-up) per size.

    ``latency_us``: the pilot's table (size -> time per operation); ``printed_at``: size ->
    when its row was printed (seconds, any clock). The first size has no row before it: its
    table time stands, as for any size whose row came in a burst with the one before it.
    """
    out: dict[int, float] = {}
    previous: float | None = None
    for size in sorted(latency_us):
        at = printed_at.get(size)
        gap = (at - previous) * 1e6 / iterations if at is not None and previous is not None \
            else 0.0
        out[size] = max(latency_us[size], gap)
        previous = at if at is not None else previous
    return out


def default_seconds(cost_us: Mapping[int, float], kind: str) -> float:
    """Seconds a curve with these per-iteration costs (us) takes with OSU's own counts."""
    small, small_skip, large, large_skip = OSU_DEFAULTS[kind]
    return sum(t * ((small + small_skip) if size <= LARGE_MESSAGE else (large + large_skip))
               for size, t in cost_us.items()) / 1e6


def iterations_within(cost_us: Mapping[int, float], kind: str,
                      target_s: float) -> IterationBudget:
    """OSU's counts if the curve fits ``target_s`` with them, else the count that fits.

    ``cost_us``: size -> microseconds per iteration (:func:`iteration_costs`). The count never
    drops below MIN_ITERATIONS (a curve too slow even for that takes longer than the
    target) and never exceeds OSU's own small-message count.
    """
    if kind not in OSU_DEFAULTS:
        raise ValueError(f"no iteration defaults for {kind!r} (known: {', '.join(OSU_DEFAULTS)})")
    if not target_s > 0:
        raise ValueError(f"the curve's time must be positive, not {target_s:g} s")
    default = default_seconds(cost_us, kind)
    if default <= target_s:
        return IterationBudget(default, default)
    per_iteration = sum(cost_us.values()) / 1e6  # one iteration of every size
    fit = math.floor(target_s / ((1 + WARMUP_FRACTION) * per_iteration))
    # the warm-up is rounded (and at least MIN_WARMUP), so the estimate can overshoot by an
    # iteration or two: step down until timed plus warm-up iterations fit
    while fit > MIN_ITERATIONS and (fit + warmup_for(fit)) * per_iteration > target_s:
        fit -= 1
    iterations = min(OSU_DEFAULTS[kind][0], max(MIN_ITERATIONS, fit))
    warmup = warmup_for(iterations)
    return IterationBudget(default, (iterations + warmup) * per_iteration, iterations, warmup)


def warmup_for(iterations: int) -> int:
    """Warm-up iterations that go with ``iterations`` timed ones (OSU's tenth, at least 2)."""
    return max(MIN_WARMUP, round(WARMUP_FRACTION * iterations))

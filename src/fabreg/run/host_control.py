"""A host control measured in the job: is this host itself slower than its baseline?

A virtual host has states that last minutes and that nothing in the guest shows: no other
process, no steal time, yet a healthy shared-memory allreduce takes 1.4x-3x its usual time,
in every run of a job and in every confirmation run (docs/references.md, session 7), while
the round trip of a cache line between two of the VM's cores is ~330 ns instead of ~70 ns.
No confirmation schedule tells that apart from a regression; a control measured in the same
job, with no MPI, no fabric and no benchmark in it, does. Each in-job driver measures it at
the end of the job (once; after a failing value's last confirmation run, three times a few
seconds apart, judged by each figure's best: a slow state lasts, a slow sample does not), and
logs it in the ``host_control`` column; ``fabreg references calibrate`` turns the healthy
runs' controls into the host baseline's ``host_control`` rows, and a confirmed failure
measured while the control lay beyond its own failure limit is ``inconclusive``, with both
figures (``fabreg.testlib.measurement``).

Two figures, each the best of several short batches (interference only slows them down):

- ``round_trip``: two processes pinned to two of the job's CPUs hand a byte of shared memory
  back and forth; microseconds per round trip (the interpreter's own loop is part of it,
  and the same in the baseline);
- ``copy_bandwidth``: ``memmove`` of a 1 MiB buffer, the size of the shared-memory messages
  that moved most; GB/s (10^9 B/s).

A software regression of the fabric or of an MPI's shared-memory path does not move either
figure, so it still fails; a host whose cores or memory really got slower is reported as
such, not as a fabric regression.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabreg.run.confirm import wait_for_quiet
from fabreg.run.references import Reference
from fabreg.schema import HOST_CONTROL_FIGURES

#: Round trips per batch, and batches: short batches, so that some of them fall between
#: other work's time slices on a busy host.
ROUND_TRIPS = 2000
TRIP_BATCHES = 50
COPY_BYTES = 1 << 20
COPIES = 64
COPY_BATCHES = 7
#: Seconds the control of a job whose values still fail may wait for a quiet host.
QUIET_WAIT_S = 10.0
#: A control that will judge failing values is measured this many times, CONTROL_GAP_S
#: apart, and each figure's best is kept: the slow host states it stands for last minutes,
#: so every sample shows them, while one slow sample must not excuse a fault (seen: a link
#: capped at half speed, its -53 % confirmed, called inconclusive by one round trip 2 %
#: past its limit; session 12).
FAILING_SAMPLES = 3
CONTROL_GAP_S = 3.0
#: Seconds after which a round-trip batch is abandoned (the partner never answered).
_DEADLINE_S = 5.0


@dataclass(frozen=True)
class HostControl:
    """One measurement of the control; a figure is None where it could not be measured."""

    round_trip: float | None
    copy_bandwidth: float | None
    #: Why a figure is missing (one CPU only, the partner process died), else empty.
    problem: str = ""

    def figures(self) -> dict[str, float]:
        return {name: value for name in HOST_CONTROL_FIGURES
                if (value := getattr(self, name)) is not None}

    def as_dict(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {k: round(v, 4) for k, v in self.figures().items()}
        if self.problem:
            out["problem"] = self.problem
        return out


def _spin_until(buf: mmap.mmap, want: int, deadline: float) -> bool:
    """Wait for ``buf[0] == want``; False when ``deadline`` (monotonic) passes first.

    The callers read the clock once per trip for ``deadline``, inside the timed loop, and
    that is kept on purpose: it paces the spin. A spin that reads no clock (the deadline
    taken only after a long wait) hammers the shared cache line while the partner writes
    it, and measured 0.26 us per round trip against 0.20 us, interleaved on the same host
    (session 10); the baseline and the figures in docs/references.md are this version's.
    """
    n = 0
    while buf[0] != want:
        n += 1
        if not n & 0xFFFF and time.monotonic() > deadline:
            return False
    return True


def core_round_trip(cpus: tuple[int, int], trips: int = ROUND_TRIPS,
                    batches: int = TRIP_BATCHES) -> float:
    """Best microseconds per round trip of a shared byte between processes on ``cpus``."""
    buf = mmap.mmap(-1, mmap.PAGESIZE)
    pid = os.fork()
    if pid == 0:  # the partner: answer every odd value with the next even one
        code = 1
        try:
            os.sched_setaffinity(0, {cpus[1]})
            expected = 1
            for _ in range(batches * trips):
                if not _spin_until(buf, expected, time.monotonic() + _DEADLINE_S):
                    break
                buf[0] = (expected + 1) & 0xFF
                expected = (expected + 2) & 0xFF
            else:
                code = 0
        finally:
            os._exit(code)
    try:
        own = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpus[0]})
        best = float("inf")
        value = 0
        try:
            for _ in range(batches):
                start = time.perf_counter()
                for _ in range(trips):
                    value = (value + 1) & 0xFF
                    buf[0] = value
                    value = (value + 1) & 0xFF
                    if not _spin_until(buf, value, time.monotonic() + _DEADLINE_S):
                        raise RuntimeError("the partner process did not answer")
                best = min(best, (time.perf_counter() - start) / trips)
        finally:
            os.sched_setaffinity(0, own)
    finally:
        os.waitpid(pid, 0)
        buf.close()
    return best * 1e6


def copy_bandwidth(size: int = COPY_BYTES, copies: int = COPIES,
                   batches: int = COPY_BATCHES) -> float:
    """Best GB/s of ``memmove`` between two ``size``-byte buffers."""
    src = ctypes.create_string_buffer(b"\x5a" * size, size)
    dst = ctypes.create_string_buffer(size)
    ctypes.memmove(dst, src, size)  # first touch
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(copies):
            ctypes.memmove(dst, src, size)
        best = min(best, (time.perf_counter() - start) / copies)
    return size / best / 1e9


def measure_host() -> HostControl:
    """The control on this host, with the two lowest CPUs the process may use."""
    cpus = sorted(os.sched_getaffinity(0))
    problem = ""
    trip = None
    if len(cpus) < 2:
        problem = "one CPU only: no core-to-core round trip"
    else:
        try:
            trip = core_round_trip((cpus[0], cpus[1]))
        except (OSError, RuntimeError) as err:
            problem = f"core-to-core round trip: {err}"
    return HostControl(trip, copy_bandwidth(), problem)


def best_of(controls: Sequence[HostControl]) -> HostControl:
    """Each figure's best over ``controls`` (interference only slows a control down)."""
    trips = [c.round_trip for c in controls if c.round_trip is not None]
    copies = [c.copy_bandwidth for c in controls if c.copy_bandwidth is not None]
    return HostControl(min(trips) if trips else None, max(copies) if copies else None,
                       "; ".join(sorted({c.problem for c in controls if c.problem})))


def after_job(token: str, contended_share: float, failing: bool,
              samples: int = FAILING_SAMPLES, gap_s: float = CONTROL_GAP_S) -> dict[str, Any]:
    """The control at the end of a job, as its result file says it (``host_control``).

    While values still fail, the control will judge them: it first waits (up to
    :data:`QUIET_WAIT_S`) for a second in which other work leaves the host alone, and a
    control measured on a host that did not quieten is ``contended`` (it judges nothing);
    it is then measured ``samples`` times, ``gap_s`` apart, and judged by each figure's best.
    Otherwise it is measured once, at once: it only feeds the host's baseline.
    """
    if not failing:
        return measure_host().as_dict()
    share = wait_for_quiet(token, contended_share, time.monotonic() + QUIET_WAIT_S)
    controls = []
    for k in range(max(1, samples)):
        if k:
            time.sleep(gap_s)
        controls.append(measure_host())
    out: dict[str, Any] = best_of(controls).as_dict()
    out["samples"] = len(controls)
    out["other_share"] = round(share, 4)
    out["contended"] = share > contended_share
    return out


_WORDS = {"round_trip": "core-to-core round trip", "copy_bandwidth": "1 MiB memory copy"}


def slow_host(control: Mapping[str, Any], baseline: Mapping[str, Reference]) -> str:
    """Why this host ran slower than its baseline while the job measured, or ``""``.

    ``control``: the job's ``host_control``; ``baseline``: figure -> its reference row in the
    host's baseline. A contended control, or a figure without a row, says nothing.
    """
    if control.get("contended"):
        return ""
    slow = []
    for name, ref in baseline.items():
        value = control.get(name)
        if isinstance(value, (int, float)) and ref.verdict(float(value)) == "fail":
            slow.append(f"{_WORDS.get(name, name)} {value:g} {ref.unit} against its baseline "
                        f"{ref.value:g} (limit {ref.failure_limit:.3g})")
    return "the host itself ran slow: " + ", ".join(slow) if slow else ""

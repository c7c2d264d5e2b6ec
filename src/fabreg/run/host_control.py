"""A host control measured in the job: is this host itself slower than its baseline?

A virtual host has states that last minutes and that nothing in the guest shows: no other
process, no steal time, yet a healthy shared-memory allreduce takes 1.4x-3x its usual time,
in every run of a job and in every confirmation run (docs/references.md, session 7), while
the round trip of a cache line between two of the VM's cores is ~330 ns instead of ~70 ns.
No confirmation schedule tells that apart from a regression; a control measured in the same
job, with no MPI, no fabric and no benchmark in it, does. Each in-job driver measures it at
the end of the job (once; after a failing value's last confirmation run, three times a few
seconds apart, judged by each figure's best: a slow state lasts, a slow sample does not), the
figures on its values' path only (below), and logs it in the ``host_control`` column;
``fabreg references calibrate`` turns the healthy runs' controls into the host baseline's
``host_control`` rows, and a confirmed failure
measured while a figure on its path lay beyond its own failure limit, by enough to explain
it, is ``inconclusive``, with both figures (``fabreg.testlib.measurement``).

Five figures, each the best of several short batches (interference only slows them down):

- ``round_trip``: two processes pinned to two of the job's CPUs hand a byte of shared memory
  back and forth; microseconds per round trip (the interpreter's own loop is part of it,
  and the same in the baseline);
- ``copy_bandwidth``: ``memmove`` of a 1 MiB buffer, the size of the shared-memory messages
  that moved most; GB/s (10^9 B/s);
- ``tcp_loopback``: a TCP stream between two processes over the node's loopback: the kernel's
  TCP path (socket copies, segmentation, the receive side's softirq) without any link; GB/s;
- ``handoff_bandwidth``: a 128 KiB buffer handed from a process on one of the two CPUs to one
  on the other, each copying it (in, then out): what a shared-memory message costs; GB/s;
- ``shared_compute``: the interpreter's arithmetic loop on one CPU while a process on the
  other computes too; milliseconds.

The last two are where the 2-vCPU VM's placements show (ci/bench/host_control_bench.py).
The hypervisor moves the two vCPUs between three placements for seconds to minutes:
two cores that share a cache (the usual one: handoff ~14 GB/s), two threads of one core
(handoff ~38 GB/s, but ``shared_compute`` 1.8x slower: a shared-memory allreduce or a matrix
multiply slows down by a third or more), and two cores that share none (handoff ~4 GB/s, a
128 KiB MPICH allgather 2.8x slower, TCP loopback 2.6x slower). The round trip reads 0.30
us against 0.19 in both unusual placements and cannot tell them apart; the 1 MiB copy, on
one CPU, sees none of them.

A value is judged only by the figures on its own software path
(:data:`fabreg.schema.FIGURES_ON_PATH`): a TCP value by the loopback stream, a shared-memory
value by the copy, the handoff and the shared compute, an RDMA value by the copy (the NIC
moves its data; host memory is what the host adds), a value of no transport by all five.
The round trip alone once excused a link
capped at half speed, confirmed at -53 %, 7 times in 10: after minutes of sustained load the
VM's two vCPUs shared a core differently and the round trip doubled, while nothing on the TCP
path changed (docs/references.md, session 14). It judges no shared-memory value either: it
reads 0.30 us instead of 0.19 in both unusual placements and in a tenth of the usual one's
controls, so it cannot say which placement a job ran in.

A figure beyond its own failure limit makes a failure ``inconclusive`` only when it can
explain it (:meth:`SlowHost.explains`): the value, scaled by how much slower the figure ran
than its baseline, would no longer fail. A host 1.3x slower cannot explain a -53 % link; a
software regression of the fabric or of an MPI's shared-memory path moves no figure. Either
way the failure stands, and a host that really ran slow enough is reported as such.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fabreg.run.confirm import CONTROL_GAP_S, ConfirmationPlan, wait_for_quiet
from fabreg.run.references import Assessment, Reference
from fabreg.schema import HOST_CONTROL_FIGURES, lower_is_better

#: Round trips per batch, and batches: short batches, so that some of them fall between
#: other work's time slices on a busy host.
ROUND_TRIPS = 2000
TRIP_BATCHES = 50
COPY_BYTES = 1 << 20
COPIES = 64
COPY_BATCHES = 7
#: The loopback stream: batches of TCP_CHUNKS sends of TCP_CHUNK bytes (32 MiB a batch, 5-6 ms
#: on this VM; 25 of them read 6.1-7.3 GB/s in 10 tries, 9 read 5.2-7.2).
TCP_CHUNK = 1 << 20
TCP_CHUNKS = 32
TCP_BATCHES = 25
#: The handoff: a HANDOFF_BYTES buffer handed over HANDOFFS times a batch (a 128 KiB MPICH
#: allgather slowed 2.8x with it in the VM's worst placement).
HANDOFF_BYTES = 128 << 10
HANDOFFS = 100
HANDOFF_BATCHES = 7
#: The shared compute: COMPUTE_STEPS steps of the loop a batch (4 ms on this VM).
COMPUTE_STEPS = 100_000
COMPUTE_BATCHES = 5
#: Seconds the control of a job whose values still fail may wait for a quiet host (at most:
#: a plan that lets its confirmation wait less, ``quiet_wait_s``, bounds this wait too).
QUIET_WAIT_S = 10.0
#: A control that will judge failing values is measured this many times, CONTROL_GAP_S
#: apart, and each figure's best is kept: the slow host states it stands for last minutes,
#: so every sample shows them, while one slow sample must not excuse a fault (seen: a link
#: capped at half speed, its -53 % confirmed, called inconclusive by one round trip 2 %
#: past its limit; session 12).
#: (CONTROL_GAP_S: ``fabreg.run.confirm``, where a check's plan may give another gap.)
FAILING_SAMPLES = 3
#: Seconds after which a round-trip batch is abandoned (the partner never answered).
_DEADLINE_S = 5.0


@dataclass(frozen=True)
class HostControl:
    """One measurement of the control; a figure is None where it could not be measured."""

    round_trip: float | None
    copy_bandwidth: float | None
    tcp_loopback: float | None = None
    handoff_bandwidth: float | None = None
    shared_compute: float | None = None
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


@contextmanager
def _pinned_pair(cpus: tuple[int, int], partner: Callable[[], bool]) -> Iterator[None]:
    """Run ``partner`` in a child process pinned to ``cpus[1]`` (it exits 0 when it returns
    True) while this process, pinned to ``cpus[0]``, runs the body; then give this process
    its CPUs back and reap the child."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.sched_setaffinity(0, {cpus[1]})
            code = 0 if partner() else 1
        finally:
            os._exit(code)
    try:
        own = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpus[0]})
        try:
            yield
        finally:
            os.sched_setaffinity(0, own)
    finally:
        os.waitpid(pid, 0)


def core_round_trip(cpus: tuple[int, int], trips: int = ROUND_TRIPS,
                    batches: int = TRIP_BATCHES) -> float:
    """Best microseconds per round trip of a shared byte between processes on ``cpus``."""
    buf = mmap.mmap(-1, mmap.PAGESIZE)

    def answer() -> bool:  # the partner: answer every odd value with the next even one
        expected = 1
        for _ in range(batches * trips):
            if not _spin_until(buf, expected, time.monotonic() + _DEADLINE_S):
                return False
            buf[0] = (expected + 1) & 0xFF
            expected = (expected + 2) & 0xFF
        return True

    best = float("inf")
    value = 0
    try:
        with _pinned_pair(cpus, answer):
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


def handoff_bandwidth(cpus: tuple[int, int], size: int = HANDOFF_BYTES,
                      handoffs: int = HANDOFFS, batches: int = HANDOFF_BATCHES) -> float:
    """Best GB/s of a ``size``-byte buffer handed from a process on ``cpus[0]`` to one on
    ``cpus[1]``: the first copies it into shared memory, the second out of it, then answers."""
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, page + size)
    shared = ctypes.c_char.from_buffer(buf, page)
    address = ctypes.addressof(shared)

    def receive() -> bool:  # the receiver: copy every buffer out, then answer
        private = ctypes.create_string_buffer(size)
        for _ in range(batches * handoffs):
            if not _spin_until(buf, 1, time.monotonic() + _DEADLINE_S):
                return False
            ctypes.memmove(private, address, size)
            buf[0] = 2
        return True

    data = ctypes.create_string_buffer(b"\x5a" * size, size)
    best = float("inf")
    try:
        with _pinned_pair(cpus, receive):
            for _ in range(batches):
                start = time.perf_counter()
                for _ in range(handoffs):
                    ctypes.memmove(address, data, size)
                    buf[0] = 1
                    if not _spin_until(buf, 2, time.monotonic() + _DEADLINE_S):
                        raise RuntimeError("the receiving process did not answer")
                best = min(best, (time.perf_counter() - start) / handoffs)
    finally:
        del shared
        buf.close()
    return size / best / 1e9


def compute_seconds(steps: int) -> float:
    """Seconds the interpreter takes for ``steps`` steps of an arithmetic loop."""
    start = time.perf_counter()
    total = 0
    for i in range(steps):
        total += i * i
    return time.perf_counter() - start


def shared_compute(cpus: tuple[int, int], steps: int = COMPUTE_STEPS,
                   batches: int = COMPUTE_BATCHES) -> float:
    """Best milliseconds of :func:`compute_seconds` on ``cpus[0]`` while a process on ``cpus[1]``
    computes too (two threads of one core share its units; two cores do not)."""
    buf = mmap.mmap(-1, mmap.PAGESIZE)

    def neighbour() -> bool:  # say it started (1), compute until told to stop (2) or a deadline
        if buf[0] == 0:
            buf[0] = 1
        deadline = time.monotonic() + _DEADLINE_S
        while buf[0] == 1 and time.monotonic() < deadline:
            compute_seconds(1000)
        return True

    try:
        with _pinned_pair(cpus, neighbour):
            try:
                if not _spin_until(buf, 1, time.monotonic() + _DEADLINE_S):
                    raise RuntimeError("the computing neighbour did not start")
                best = min(compute_seconds(steps) for _ in range(batches))
            finally:
                buf[0] = 2
    finally:
        buf.close()
    return best * 1e3


def tcp_loopback(chunk: int = TCP_CHUNK, chunks: int = TCP_CHUNKS,
                 batches: int = TCP_BATCHES) -> float:
    """Best GB/s of a TCP stream from a child process to this one over 127.0.0.1.

    Each batch starts when this process asks for it (one byte) and ends when its last byte
    has arrived, so a batch costs one round trip more than its data: 32 MiB make that noise.
    """
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(_DEADLINE_S)
        port = server.getsockname()[1]
        pid = os.fork()
        if pid == 0:  # the sender: a batch for every byte asked
            code = 1
            try:
                with socket.create_connection(("127.0.0.1", port), _DEADLINE_S) as out:
                    data = b"\x5a" * chunk
                    for _ in range(batches):
                        if not out.recv(1):
                            break
                        for _ in range(chunks):
                            out.sendall(data)
                    else:
                        code = 0
            finally:
                os._exit(code)
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(_DEADLINE_S)
                buf = memoryview(bytearray(chunk))
                best = float("inf")
                for _ in range(batches):
                    start = time.perf_counter()
                    conn.sendall(b"g")
                    left = chunk * chunks
                    while left:
                        got = conn.recv_into(buf, min(left, chunk))
                        if not got:
                            raise RuntimeError("the sending process closed the stream")
                        left -= got
                    best = min(best, time.perf_counter() - start)
        finally:
            os.waitpid(pid, 0)
    return chunk * chunks / best / 1e9


def measure_host(figures: Collection[str] | None = None) -> HostControl:
    """The control on this host, with the two lowest CPUs the process may use: the
    ``figures`` named (None: all five). A job measures those on its values' path, the only
    ones that judge them or that a calibration reads of it (:data:`fabreg.schema.
    FIGURES_ON_PATH`): a TCP job's control is the loopback stream alone."""
    wanted = set(HOST_CONTROL_FIGURES if figures is None else figures)
    cpus = sorted(os.sched_getaffinity(0))
    problems = []
    two: dict[str, float] = {}
    on_two = [(name, measure) for name, measure in (("round_trip", core_round_trip),
                                                    ("handoff_bandwidth", handoff_bandwidth),
                                                    ("shared_compute", shared_compute))
              if name in wanted]
    if on_two and len(cpus) < 2:
        problems.append("one CPU only: no core-to-core round trip, handoff or shared compute")
    elif on_two:
        pair = (cpus[0], cpus[1])
        for name, measure in on_two:
            try:
                two[name] = measure(pair)
            except (OSError, RuntimeError) as err:
                problems.append(f"{_WORDS[name]}: {err}")
    stream = None
    if "tcp_loopback" in wanted:
        try:
            stream = tcp_loopback()
        except (OSError, RuntimeError) as err:
            problems.append(f"TCP loopback stream: {err}")
    return HostControl(round_trip=two.get("round_trip"),
                       copy_bandwidth=copy_bandwidth() if "copy_bandwidth" in wanted else None,
                       tcp_loopback=stream, handoff_bandwidth=two.get("handoff_bandwidth"),
                       shared_compute=two.get("shared_compute"), problem="; ".join(problems))


def best_of(controls: Sequence[HostControl]) -> HostControl:
    """Each figure's best over ``controls`` (interference only slows a control down)."""
    best: dict[str, float | None] = {}
    for name, unit in HOST_CONTROL_FIGURES.items():
        values = [v for c in controls if (v := getattr(c, name)) is not None]
        best[name] = (None if not values else min(values) if lower_is_better(name, unit)
                      else max(values))
    return HostControl(**best,
                       problem="; ".join(sorted({c.problem for c in controls if c.problem})))


def after_job(token: str, contended_share: float, failing: bool,
              samples: int = FAILING_SAMPLES, gap_s: float = CONTROL_GAP_S,
              quiet_wait_s: float = QUIET_WAIT_S,
              figures: Collection[str] | None = None) -> dict[str, Any]:
    """The control at the end of a job, as its result file says it (``host_control``): the
    ``figures`` on the job's path (None: all; :func:`measure_host`).

    While values still fail, the control will judge them: it first waits (up to
    ``quiet_wait_s``, at most :data:`QUIET_WAIT_S`) for a second in which other work leaves
    the host alone, and a control measured on a host that did not quieten is ``contended``
    (it judges nothing);
    it is then measured ``samples`` times, ``gap_s`` apart, and judged by each figure's best.
    Otherwise it is measured once, at once: it only feeds the host's baseline.
    """
    if not failing:
        return measure_host(figures).as_dict()
    waited = min(QUIET_WAIT_S, quiet_wait_s)
    share = wait_for_quiet(token, contended_share, time.monotonic() + waited)
    controls = []
    for k in range(max(1, samples)):
        if k:
            time.sleep(gap_s)
        controls.append(measure_host(figures))
    out: dict[str, Any] = best_of(controls).as_dict()
    out["samples"] = len(controls)
    out["other_share"] = round(share, 4)
    out["contended"] = share > contended_share
    return out


def after_plan(token: str, plan: ConfirmationPlan, failing: bool) -> dict[str, Any]:
    """:func:`after_job` as a driver's plan asks for it: its contended share, control gap,
    quiet wait and the figures on its path."""
    return after_job(token, plan.contended_share, failing, gap_s=plan.control_gap_s,
                     quiet_wait_s=plan.quiet_wait_s, figures=plan.control_figures)


_WORDS = {"round_trip": "core-to-core round trip", "copy_bandwidth": "1 MiB memory copy",
          "tcp_loopback": "TCP loopback stream",
          "handoff_bandwidth": "128 KiB core-to-core handoff",
          "shared_compute": "compute beside a computing neighbour"}


@dataclass(frozen=True)
class SlowHost:
    """Control figures that lay beyond their own failure limits, and how much slower."""

    #: The largest factor by which one of them ran slower than its baseline (> 1).
    factor: float
    #: What ran slow, with the figures and their baselines.
    text: str

    def explains(self, assessment: Assessment) -> bool:
        """Could the host's slowness alone have failed this value? It could when the value,
        scaled back by :attr:`factor` (raised for a bandwidth, lowered for a latency), would
        no longer fail its band."""
        ref = assessment.ref
        if ref is None:
            return False
        value = assessment.value
        corrected = value / self.factor if ref.lower_is_better else value * self.factor
        return ref.verdict(corrected) != "fail"

    def reason(self, assessment: Assessment) -> str:
        """Why a failure is ``inconclusive``, or why it still stands."""
        if self.explains(assessment):
            return (f"the host itself ran slow: {self.text}; {self.factor:.2f}x slower is "
                    "enough to explain the value")
        ref = assessment.ref
        against = f" against {ref.value:g} ({assessment.deviation:+.0%})" if ref else ""
        return (f"the host control ran slow too ({self.text}), but {self.factor:.2f}x slower "
                f"cannot explain {assessment.value:g} {assessment.unit}{against}")


def slow_host(control: Mapping[str, Any], baseline: Mapping[str, Reference],
              figures: Sequence[str] | None = None) -> SlowHost | None:
    """What of the host ran slower than its baseline while the job measured, or None.

    ``control``: the job's ``host_control``; ``baseline``: figure -> its reference row in the
    host's baseline; ``figures``: those on the judged value's path (None: all). A contended
    control, or a figure without a row, says nothing.
    """
    if control.get("contended"):
        return None
    slow, factor = [], 1.0
    for name, ref in baseline.items():
        if figures is not None and name not in figures:
            continue
        value = control.get(name)
        if isinstance(value, (int, float)) and value > 0 and ref.verdict(float(value)) == "fail":
            slow.append(f"{_WORDS.get(name, name)} {value:g} {ref.unit} against its baseline "
                        f"{ref.value:g} (limit {ref.failure_limit:.3g})")
            factor = max(factor, value / ref.value if ref.lower_is_better
                         else ref.value / value)
    return SlowHost(factor, ", ".join(slow)) if slow else None

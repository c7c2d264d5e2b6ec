"""How much CPU time other work took on this host while a benchmark measured.

Interference only ever makes a fabric look worse, so a failing value measured while other
work competed for the CPUs cannot be called a regression. The job's own processes carry a
marker in their environment (``FABREG_MEASURE_TOKEN``, inherited by launchers, proxies and
ranks, on every node that ``srun`` reaches); everything else that used a CPU meanwhile is
*other work*: ``/proc/stat``'s busy time minus the marked processes' CPU time and minus the
kernel's own threads (``ksoftirqd``, ``kworker``: children of ``kthreadd``), which carry the
benchmark's network traffic when the stack is loaded, e.g. behind a rate limit.

The suite's own machinery is not other work either, and is logged apart (``harness_cpu_s``):
the ReFrame process that launched the job (``FABREG_HARNESS``: its boot, PID and start time,
so another process that reuses the PID, or one on another host, is not taken for it) and the
scheduler's daemons answering the job and ReFrame's polling (``slurmctld``, ``slurmd``,
``slurmstepd``, ``munged``). On a real cluster ReFrame runs on the login node and the daemons
take a few milliseconds; on one host running ReFrame and several emulated nodes they took
5-10 % of the CPU and made every sweep of a capped link look contended.

A job on several Slurm nodes is metered on each of them (``JobMeter``): one sampler per node
through ``srun --overlap`` beside the job's own steps; the job's figure is its worst node's,
with every node's share kept. On the emulated cluster all nodes share the host's CPUs and PID
space, so each node's figure covers the whole host, and a node's sampler sees the in-job driver
too (``FABREG_MEASURE_DRIVER``: its boot, PID and start time): the driver's environment lacks
the marker (it sets it for what it launches), and the launches it reaps between two samples
reach only its own CPU time, so it is counted as the job's own there.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fabreg.run import procfs
from fabreg.schema import CONTENDED_SHARE

#: The environment variable that marks the job's own processes.
TOKEN_VARIABLE = "FABREG_MEASURE_TOKEN"

#: The environment variable that names the ReFrame process that launched the job.
HARNESS_VARIABLE = "FABREG_HARNESS"

#: The environment variable that names the in-job driver whose meter started the node samplers.
DRIVER_VARIABLE = "FABREG_MEASURE_DRIVER"

#: The scheduler's daemons: they answer the job's own ``srun`` and ReFrame's polling.
SCHEDULER_DAEMONS = frozenset({"slurmctld", "slurmd", "slurmstepd", "munged"})

#: The scheduler's daemon that starts a job step's tasks on a node and waits for them.
STEP_DAEMON = "slurmstepd"

#: The kernel's thread parent: its children are the kernel's own threads.
KTHREADD = 2


@dataclass(frozen=True)
class Interference:
    """Other work's CPU time over a measurement window."""

    #: Seconds of wall time the window lasted.
    seconds: float
    #: CPUs of the host.
    host_cpus: int
    #: CPU-seconds used by everything on the host, by the job's own processes and by the
    #: kernel's threads.
    busy_cpu_s: float
    own_cpu_s: float
    kernel_cpu_s: float = 0.0
    #: CPU-seconds of the suite's own machinery: ReFrame and the scheduler's daemons.
    harness_cpu_s: float = 0.0
    #: CPU-seconds a hypervisor took from this VM (inside ``busy_cpu_s``, and counted as other
    #: work: the job's ranks lost those CPUs as they would to another process).
    steal_cpu_s: float = 0.0
    #: The other processes that took the most CPU time, ``(command name, CPU-seconds)``,
    #: largest first: who interfered (processes shorter than one sample are not seen).
    top_other: tuple[tuple[str, float], ...] = ()

    @property
    def other_cpu_s(self) -> float:
        return max(0.0, self.busy_cpu_s - self.own_cpu_s - self.kernel_cpu_s
                   - self.harness_cpu_s)

    @property
    def share(self) -> float:
        """Other work's fraction of the host's CPU capacity over the window."""
        capacity = self.seconds * self.host_cpus
        return self.other_cpu_s / capacity if capacity > 0 else 0.0

    def contended(self, threshold: float = CONTENDED_SHARE) -> bool:
        return self.share > threshold

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: round(v, 3) for k, v in asdict(self).items()
                               if k != "top_other"}
        out["other_share"] = round(self.share, 4)
        if self.top_other:
            out["top_other"] = ", ".join(f"{name} {cpu_s:.2f}s" for name, cpu_s in self.top_other)
        return out


def contention_text(figure: dict[str, Any]) -> str:
    """One line for a metered figure (``as_dict``): how much other work took, and who."""
    text = f"other work took {float(figure.get('other_share', 0)):.0%} of the host's CPU"
    if figure.get("top_other"):
        text += f" (most: {figure['top_other']})"
    return text


def boot_id(proc: Path = procfs.PROC) -> str:
    """This kernel's boot: processes on one host (and its emulated nodes) share it."""
    try:
        return (proc / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


def process_identity() -> str:
    """This process as another one can tell it: its boot, PID and start time (the value of
    ``FABREG_HARNESS`` for ReFrame's process, of ``FABREG_MEASURE_DRIVER`` for a driver's)."""
    me = procfs.read_stat(os.getpid())
    return f"{boot_id()}:{os.getpid()}:{me.start if me else 0}"


def _identified(variable: str) -> tuple[int, int] | None:
    """The (PID, start) of the process the environment ``variable`` names
    (:func:`process_identity`) when it runs on this host; None otherwise."""
    boot, _, rest = os.environ.get(variable, "").partition(":")
    pid, _, start = rest.partition(":")
    if not boot or boot != boot_id() or not pid.isdigit() or not start.isdigit():
        return None
    return int(pid), int(start)


def _children_cpu_s() -> float:
    """CPU seconds of this process's reaped children and their reaped descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _descends_from(stat: procfs.ProcStat, ancestor: int) -> bool:
    """Is the process below ``ancestor`` in the parent tree (checked once per process)?"""
    seen = 0
    while stat is not None and stat.ppid > 1 and seen < 64:
        if stat.ppid == ancestor:
            return True
        stat = procfs.read_stat(stat.ppid)
        seen += 1
    return False


def _marked(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return marker in fh.read().split(b"\0")
    except OSError:
        return False


@dataclass
class _OwnProcess:
    """A marked process's CPU ticks over the window: its own and its waited-for children's."""

    first: int
    last: int
    first_children: int
    last_children: int
    #: The parent when last seen, and the sample that last saw it.
    parent: tuple[int, int] | None
    seen: int

    @property
    def used(self) -> int:
        return self.last - self.first + self.last_children - self.first_children


class InterferenceMeter:
    """Samples the host while the job's marked processes run; ``stop()`` gives the figure.

    The marked processes' CPU time is read every ``interval`` seconds. What a process uses
    between the last sample and its exit, or in a life shorter than one interval (MPI ranks
    busy-polling to the end of a short run), would be missed; the kernel adds it to the
    parent that waits for it (``cutime``/``cstime``). So each marked process counts its own
    time plus its waited-for children's, and a process that vanished while its marked parent
    lived on counts through that parent only. A child reparented before it exits is still
    missed: the figure errs towards *contended*, never towards a false regression.

    ``job_script``: the process that runs the job's commands one after the other, counted as
    the job's own though its environment lacks the marker (a shell's ``/proc/<pid>/environ``
    is what it started with, not what it exported). It outlives every command and waits for
    each, so the last fraction of a second of a command that ends just before the meter
    stops, and of all it waited for, reaches the figure through it. Without it, a job of two
    MPICH ranks that busy-poll for a second lost a quarter of its own time and read as 20-30 %
    other work on a quiet host (session 11).

    On the job's other nodes the marked processes (Open MPI's ``orted`` and its ranks) are
    started and waited for by a job step's ``slurmstepd``, which is not marked: what a step
    daemon's children used counts as the job's own once a marked process was seen as its
    child (a step daemon runs the tasks of one step only). Without it a 4-node allreduce on
    the emulated cluster lost a third of its own time and read as 21-25 % other work
    (session 15). A process first seen between fork and exec still carries its parent's
    environment; it is checked again when exec changes its name.

    ``driver``: the (PID, start) of the in-job driver, for a node's sampler on the driver's
    host (the emulated cluster), counted as the job's own as the job script is: it reaps the
    launches, and one that lives and ends between two samples (an Open MPI matrix multiply of
    0.2-0.9 s) reaches the figure through it alone. Without it the remote node of a 2-node
    matrix multiply read 10-33 % other work on a quiet host in 9 of 16 jobs (0 of 16 with
    it; session 44).
    """

    def __init__(self, token: str, interval: float = 0.25, own_pid: int | None = None,
                 job_script: int | None = None,
                 driver: tuple[int, int] | None = None) -> None:
        self.job_script = job_script
        self.driver = driver
        self.marker = f"{TOKEN_VARIABLE}={token}".encode()
        self.interval = interval
        self.own_pid = os.getpid() if own_pid is None else own_pid
        self._own: dict[tuple[int, int], _OwnProcess] = {}  # (pid, start) -> its ticks
        self._samples = 0
        #: (pid, start) -> (own/reaped/harness/other, its name when checked)
        self._checked: dict[tuple[int, int], tuple[str, str]] = {}
        self._kernel: dict[tuple[int, int], list[int]] = {}  # kthread -> [first, last] ticks
        self._other: dict[tuple[int, int], list[Any]] = {}  # other -> [comm, first, last]
        self._harness: dict[tuple[int, int], list[int]] = {}  # -> [first, last] ticks
        self._harness_key = _identified(HARNESS_VARIABLE)
        #: Every job step daemon's waited-for children's ticks (its own are the harness's),
        #: and the daemons seen as a marked process's parent: their children are the job's.
        self._daemons: dict[tuple[int, int], _OwnProcess] = {}
        self._waiters: set[tuple[int, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._hz = os.sysconf("SC_CLK_TCK")
        self._since_boot = 0  # clock ticks since boot when the window opened

    def start(self) -> InterferenceMeter:
        self._t0 = time.monotonic()
        self._since_boot = int(procfs.uptime() * self._hz)
        self._cpu0 = procfs.cpu_times()
        self._self0 = procfs.read_stat(self.own_pid)
        self._children0 = _children_cpu_s()
        self._sample()  # the kernel threads' CPU time so far
        self._thread.start()
        return self

    def _sample(self) -> None:
        self._samples += 1
        stats = [stat for pid in procfs.pids()
                 if pid != self.own_pid and (stat := procfs.read_stat(pid)) is not None]
        keys = {stat.pid: (stat.pid, stat.start) for stat in stats}
        step_daemons = {stat.pid for stat in stats if stat.comm == STEP_DAEMON}
        for stat in stats:
            pid = stat.pid
            key = (pid, stat.start)
            if stat.ppid == KTHREADD or pid == KTHREADD:
                self._kernel.setdefault(key, [stat.cpu_ticks, 0])[1] = stat.cpu_ticks
                continue
            kind, comm = self._checked.get(key, ("", ""))
            # A process caught between fork and exec still has its parent's environment (a
            # step daemon's child that is about to become a marked orted): it is checked
            # again once exec has changed its name.
            if not kind or (kind == "other" and stat.comm != comm):
                # Our own descendants are counted whole when reaped (their CPU time joins
                # ours), even the last fraction of a second before they exit, which sampling
                # would miss; the job's processes elsewhere (under srun) are sampled.
                kind = ("reaped" if _descends_from(stat, self.own_pid) else
                        "own" if pid == self.job_script or key == self.driver
                        or _marked(pid, self.marker) else
                        "harness" if key == self._harness_key else "other")
                self._checked[key] = (kind, stat.comm)
            if kind == "reaped":
                continue
            # A process born inside the window counts from zero, one seen first at start
            # from what it had used by then; its name is the latest (exec changes it).
            born = stat.start >= self._since_boot
            first = 0 if born else stat.cpu_ticks
            if kind == "own":
                own = self._own.get(key)
                if own is None:
                    # checked again after exec: from its birth on, it is ours
                    if key in self._other:
                        first = self._other.pop(key)[1]
                    elif key in self._harness:
                        first = self._harness.pop(key)[0]
                    own = self._own[key] = _OwnProcess(
                        first, 0, 0 if born else stat.children_ticks, 0, None, 0)
                own.last, own.last_children = stat.cpu_ticks, stat.children_ticks
                own.parent, own.seen = keys.get(stat.ppid), self._samples
                if stat.ppid in step_daemons:
                    self._waiters.add(keys[stat.ppid])
                continue
            if stat.comm == STEP_DAEMON:
                waiter = self._daemons.get(key)
                if waiter is None:
                    waiter = self._daemons[key] = _OwnProcess(
                        0, 0, 0 if born else stat.children_ticks, 0, None, 0)
                waiter.last_children, waiter.seen = stat.children_ticks, self._samples
            if kind == "harness" or stat.comm in SCHEDULER_DAEMONS:
                self._harness.setdefault(key, [first, 0])[1] = stat.cpu_ticks
                self._other.pop(key, None)
            else:
                entry = self._other.setdefault(key, [stat.comm, first, 0])
                entry[0], entry[2] = stat.comm, stat.cpu_ticks

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def stop(self) -> Interference:
        self._stop.set()
        self._thread.join()
        self._sample()
        cpu1 = procfs.cpu_times()
        me0, me1 = self._self0, procfs.read_stat(self.own_pid)
        mine = (me1.cpu_ticks - me0.cpu_ticks) if me0 and me1 else 0
        own_ticks = self._own_ticks() + mine
        kernel_ticks = sum(last - first for first, last in self._kernel.values())
        reaped = _children_cpu_s() - self._children0 if self.own_pid == os.getpid() else 0.0
        return Interference(seconds=time.monotonic() - self._t0, host_cpus=os.cpu_count() or 1,
                            busy_cpu_s=(cpu1.busy - self._cpu0.busy) / self._hz,
                            own_cpu_s=own_ticks / self._hz + reaped,
                            kernel_cpu_s=kernel_ticks / self._hz,
                            harness_cpu_s=sum(max(0, last - first) for first, last
                                              in self._harness.values()) / self._hz,
                            steal_cpu_s=(cpu1.steal - self._cpu0.steal) / self._hz,
                            top_other=self._top_other())

    def _own_ticks(self) -> int:
        """The marked processes' ticks. One that vanished was waited for by its parent, whose
        children's ticks then hold it, and so on up (a launcher and its ranks ending in the
        same interval reach the driver that waits for the launcher): it is counted there when
        a marked ancestor was seen after it, else by itself."""
        total = sum(self._daemons[key].used for key in self._waiters if key in self._daemons)
        for own in self._own.values():
            if own.seen < self._samples and self._counted_above(own):
                continue
            total += own.used
        return total

    def _counted_above(self, own: _OwnProcess) -> bool:
        ancestor, hops = own.parent, 0
        while hops < 64:
            above = (self._own.get(ancestor) or
                     (self._daemons.get(ancestor) if ancestor in self._waiters else None))
            if above is None:
                return False
            if above.seen > own.seen:
                return True
            ancestor, hops = above.parent, hops + 1
        return False

    def _top_other(self, count: int = 3) -> tuple[tuple[str, float], ...]:
        """The other command names that used the most CPU time in the window."""
        by_name: dict[str, int] = {}
        for comm, first, last in self._other.values():
            if last > first:
                by_name[comm] = by_name.get(comm, 0) + last - first
        top = sorted(by_name.items(), key=lambda item: -item[1])[:count]
        return tuple((name, ticks / self._hz) for name, ticks in top)

def exclusive_allocation() -> str:
    """``yes``/``no`` from Slurm for this job's nodes, ``local`` outside a Slurm job."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return "local"
    try:
        text = subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                              text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(r"\bOverSubscribe=(\S+)", text)
    if not m:
        return "unknown"
    return "yes" if m.group(1) in ("NO", "EXCLUSIVE", "USER", "MCS") else "no"


#: How often a sampler looks for its stop file: the job's last command waits for the
#: sampler, so each look it sleeps through is time the job holds its nodes (a `stat` call
#: 50 times a second costs nothing a meter would see). Sampling keeps its own interval.
STOP_POLL_S = 0.02


def _wait_for(stop: Path) -> None:
    while not stop.exists():
        time.sleep(STOP_POLL_S)


def sample_until(out: Path, stop: Path, token: str, interval: float = 0.25) -> JobInterference:
    """Meter every node of the job until ``stop`` exists (the job's last command creates
    it); write the job's figure. The job script that started this sampler in the background
    is the job's own (``InterferenceMeter``'s ``job_script``)."""
    meter = JobMeter(token, out.parent, interval, job_script=os.getppid()).start()
    _wait_for(stop)
    figure = meter.stop()
    out.write_text(json.dumps({**figure.as_dict(), "exclusive": exclusive_allocation()}) + "\n")
    return figure


def sample_node(workdir: Path, stop: Path, token: str, interval: float = 0.25) -> None:
    """One node's sampler (``--node``): meter this node until ``stop`` exists."""
    meter = InterferenceMeter(token, interval, driver=_identified(DRIVER_VARIABLE)).start()
    _wait_for(stop)
    figure = meter.stop().as_dict()
    node_figure_path(workdir, socket.gethostname()).write_text(json.dumps(figure) + "\n")


def slurm_node_count() -> int:
    """Nodes of the Slurm job this runs in (1 outside one)."""
    for name in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        try:
            return max(1, int(os.environ.get(name, "")))
        except ValueError:
            continue
    return 1


def node_figure_path(workdir: Path, host: str) -> Path:
    return workdir / f"interference-{host}.json"


@dataclass
class JobInterference:
    """Other work's CPU time on each node of the job; the job's figure is its worst node's."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Why some node could not be metered (its figure is then missing), or empty.
    problem: str = ""

    @property
    def share(self) -> float:
        return max((float(f["other_share"]) for f in self.nodes.values()), default=0.0)

    def contended(self, threshold: float = CONTENDED_SHARE) -> bool:
        return self.share > threshold

    def job_summary(self, threshold: float = CONTENDED_SHARE) -> dict[str, Any]:
        """What an in-job driver's result says of the job's conditions: other work's CPU
        time (``interference``), whether it was ``contended``, and ``exclusive``."""
        return {"interference": self.as_dict(), "contended": self.contended(threshold),
                "exclusive": exclusive_allocation()}

    def as_dict(self) -> dict[str, Any]:
        if not self.nodes:
            return {"other_share": 0.0, "nodes": {}, "problem": self.problem}
        worst = max(self.nodes, key=lambda h: float(self.nodes[h]["other_share"]))
        out: dict[str, Any] = dict(self.nodes[worst])
        if len(self.nodes) > 1:
            out["worst_node"] = worst
            out["nodes"] = {h: f["other_share"] for h, f in sorted(self.nodes.items())}
        if self.problem:
            out["problem"] = self.problem
        return out


class JobMeter:
    """Meters every node of the job while it measures.

    Always this node, in process; in a Slurm job on several nodes also one sampler per node
    (``srun --overlap``, one task per node), which writes ``interference-<host>.json`` into
    ``workdir`` (shared by the nodes, as ReFrame's stage directory is) when ``stop`` creates
    the stop file. The samplers carry the job's token, so they count as the job's own work,
    and this process's identity (``FABREG_MEASURE_DRIVER``), so a sampler on its host counts
    it as the job's own too.
    """

    def __init__(self, token: str, workdir: Path, interval: float = 0.25,
                 job_script: int | None = None) -> None:
        self.token, self.workdir, self.interval = token, workdir, interval
        self.stop_file = workdir / f".interference-{token[:12]}.stop"
        self._local = InterferenceMeter(token, interval, job_script=job_script)
        self._samplers: subprocess.Popen[bytes] | None = None
        self.nodes = slurm_node_count()

    def start(self) -> JobMeter:
        self._local.start()
        if self.nodes > 1 and shutil.which("srun"):
            self.stop_file.unlink(missing_ok=True)
            env = dict(os.environ, **{TOKEN_VARIABLE: self.token,
                                      DRIVER_VARIABLE: process_identity()})
            self._samplers = subprocess.Popen(
                ["srun", "--overlap", f"--nodes={self.nodes}", f"--ntasks={self.nodes}",
                 "--ntasks-per-node=1", sys.executable, "-m", "fabreg.run.interference",
                 "--node", str(self.workdir), str(self.stop_file)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def stop(self) -> JobInterference:
        here = self._local.stop()
        figures = {socket.gethostname(): here.as_dict()}
        problem = ""
        if self._samplers is not None:
            self.stop_file.touch()
            try:
                _, err = self._samplers.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self._samplers.kill()
                _, err = self._samplers.communicate()
            for path in self.workdir.glob("interference-*.json"):
                host = path.stem.removeprefix("interference-")
                if host != socket.gethostname():
                    figures[host] = json.loads(path.read_text())
            if len(figures) < self.nodes:
                last = (err or b"").decode(errors="replace").strip().splitlines()
                problem = (f"{len(figures)} of {self.nodes} nodes metered"
                           + (f" (srun: {last[-1]})" if last else ""))
            self.stop_file.unlink(missing_ok=True)
        elif self.nodes > 1:
            problem = f"1 of {self.nodes} nodes metered (no srun)"
        return JobInterference(figures, problem)


def main(argv: list[str] | None = None) -> int:
    """``python -m fabreg.run.interference OUT STOPFILE``: meter a job's whole run.

    Started in the background by the job's first command with ``FABREG_MEASURE_TOKEN`` set
    for the whole job; the token marks every process of the job as its own.
    """
    args = sys.argv[1:] if argv is None else argv
    token = os.environ.get(TOKEN_VARIABLE)
    node = args[:1] == ["--node"]
    if node:
        args = args[1:]
    if len(args) != 2 or not token:
        print(f"usage: {TOKEN_VARIABLE}=... python -m fabreg.run.interference "
              "[--node WORKDIR | OUT] STOPFILE", file=sys.stderr)
        return 2
    if node:
        sample_node(Path(args[0]), Path(args[1]), token)
    else:
        sample_until(Path(args[0]), Path(args[1]), token)
    return 0


if __name__ == "__main__":
    sys.exit(main())

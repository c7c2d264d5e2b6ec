"""The one reader of ``/proc``: a process's state and identity, and the host's CPU time.

A PID alone is not an identity (PIDs are reused), so callers compare start times; a
zombie has exited and only waits to be reaped, so it counts as gone everywhere.
The command name (field 2 of ``/proc/<pid>/stat``) may contain spaces and parentheses:
fields are split after its last closing parenthesis.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` that fabreg uses."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgid: int
    #: CPU time in clock ticks spent in user and in kernel mode.
    utime: int
    stime: int
    #: Start time in clock ticks since boot: with the PID, the process's identity.
    start: int
    #: CPU time in clock ticks of the children it has waited for (and theirs, recursively).
    children_ticks: int = 0

    @property
    def zombie(self) -> bool:
        return self.state == "Z"

    @property
    def cpu_ticks(self) -> int:
        return self.utime + self.stime


def parse_stat(text: str) -> ProcStat:
    """``/proc/<pid>/stat`` text -> ProcStat; ValueError if it is not one."""
    try:
        head, tail = text.split(" (", 1)
        comm, rest = tail.rsplit(") ", 1)
        fields = rest.split()
        return ProcStat(pid=int(head), comm=comm, state=fields[0], ppid=int(fields[1]),
                        pgid=int(fields[2]), utime=int(fields[11]), stime=int(fields[12]),
                        start=int(fields[19]),
                        children_ticks=int(fields[13]) + int(fields[14]))
    except (ValueError, IndexError):
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}") from None


def read_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """The process's stat, or None if it does not exist (or vanished while read)."""
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError):
        return None


def start_time(pid: int, proc: Path = PROC) -> int | None:
    """Start time of a live process in clock ticks since boot; None if gone or a zombie."""
    stat = read_stat(pid, proc)
    return None if stat is None or stat.zombie else stat.start


def alive(pid: int, proc: Path = PROC) -> bool:
    """Does ``pid`` exist and still run (a zombie does not)?"""
    return start_time(pid, proc) is not None


def cmdline(pid: int, proc: Path = PROC) -> list[str] | None:
    """The process's argv, or None if it is gone (a kernel thread's is empty)."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def pids(proc: Path = PROC) -> list[int]:
    """Every PID visible in this PID namespace."""
    return [int(p.name) for p in proc.iterdir() if p.name.isdigit()]


@dataclass(frozen=True)
class CpuTimes:
    """All CPUs' time since boot from the first line of ``/proc/stat``, in clock ticks."""

    idle: int
    total: int
    #: Interrupt handling (irq + softirq): mostly the network stack working for whoever
    #: sends, the benchmark included, and charged to no process.
    interrupts: int = 0
    #: Time a hypervisor ran something else on this VM's CPUs (inside ``busy``).
    steal: int = 0

    @property
    def busy(self) -> int:
        """Time processes ran (user, nice, system) or a hypervisor stole (steal)."""
        return self.total - self.idle - self.interrupts


def parse_cpu_times(text: str) -> CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat``: idle counts idle + iowait; guest time is
    already inside user time, so only the first eight fields are summed."""
    first = text.split("\n", 1)[0].split()
    if not first or first[0] != "cpu":
        raise ValueError(f"not a /proc/stat text: {text[:40]!r}")
    fields = [int(x) for x in first[1:9]] + [0] * (9 - len(first))
    return CpuTimes(idle=fields[3] + fields[4], total=sum(fields),
                    interrupts=fields[5] + fields[6], steal=fields[7])


def uptime(proc: Path = PROC) -> float:
    """Seconds since boot: the clock that processes' start times count on."""
    return float((proc / "uptime").read_text().split()[0])


def cpu_times(proc: Path = PROC) -> CpuTimes:
    return parse_cpu_times((proc / "stat").read_text())

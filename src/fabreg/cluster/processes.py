"""Daemons the cluster starts, recorded so that exactly those can be stopped.

A PID alone is not an identity (PIDs are reused), so each record keeps the
process start time from /proc; a process is ours only if both match.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from fabreg.run.procfs import start_time


@dataclass(frozen=True)
class Daemon:
    """One process started by the cluster."""

    name: str
    pid: int
    started: int
    argv: tuple[str, ...]
    log: str

    def alive(self) -> bool:
        return start_time(self.pid) == self.started

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Daemon:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),  # type: ignore[arg-type]
            started=int(data["started"]),  # type: ignore[arg-type]
            argv=tuple(data["argv"]),  # type: ignore[arg-type]
            log=str(data["log"]),
        )


def spawn(name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Daemon:
    """Start ``argv`` in the foreground mode of the daemon, detached from our session.

    Daemons run with their "don't fork" flag, so the PID we get is the daemon itself.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    started = None
    for _ in range(50):
        started = start_time(proc.pid)
        if started is not None:
            break
        time.sleep(0.01)
    return Daemon(name=name, pid=proc.pid, started=started or -1, argv=tuple(argv), log=str(log))


def reap(daemon: Daemon) -> None:
    """Collect the exit status of a child daemon that died (no zombie left behind)."""
    try:
        os.waitpid(daemon.pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop(daemon: Daemon, timeout: float = 10.0) -> bool:
    """SIGTERM ``daemon`` (SIGKILL after ``timeout``) if it is still the process we started.

    Returns True if the process was ours and is gone now.
    """
    if not daemon.alive():
        reap(daemon)
        return False
    return terminate(daemon.pid, daemon.started, timeout)


def terminate(pid: int, started: int | None, timeout: float = 10.0) -> bool:
    """Stop one process identified by PID and start time; True once it is gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if start_time(pid) != started:
            return True
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if start_time(pid) != started:
                return True
            time.sleep(0.05)
    return start_time(pid) != started


def kill(pid: int, started: int | None) -> bool:
    """SIGKILL one process identified by PID and start time (a crash, not a shutdown)."""
    if start_time(pid) != started:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    for _ in range(100):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if start_time(pid) != started:
            break
        time.sleep(0.02)
    return True

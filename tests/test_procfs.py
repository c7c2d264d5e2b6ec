"""fabreg.run.procfs on this machine's real /proc and on stat lines that trip naive splitting."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fabreg.run import procfs


def test_own_process_is_read():
    stat = procfs.read_stat(os.getpid())
    assert stat is not None and stat.pid == os.getpid() and stat.ppid == os.getppid()
    assert stat.pgid == os.getpgid(0) and not stat.zombie and stat.start > 0
    assert procfs.alive(os.getpid())
    assert "python" in " ".join(procfs.cmdline(os.getpid()) or [])


def test_a_command_name_with_spaces_and_parentheses():
    line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 1 0 98765 0 0"
    stat = procfs.parse_stat(line)
    assert (stat.comm, stat.state, stat.ppid, stat.pgid) == ("a) b (c)", "S", 1, 4242)
    assert (stat.utime, stat.stime, stat.start, stat.cpu_ticks) == (7, 3, 98765, 10)


def test_garbage_is_not_a_stat_line():
    with pytest.raises(ValueError):
        procfs.parse_stat("not a stat line")


def test_a_zombie_counts_as_gone_but_is_still_read():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 10
    while (stat := procfs.read_stat(child.pid)) is not None and not stat.zombie:
        assert time.time() < deadline, "child never exited"
        time.sleep(0.02)
    assert stat is not None and stat.zombie
    assert not procfs.alive(child.pid) and procfs.start_time(child.pid) is None
    child.wait()
    assert procfs.read_stat(child.pid) is None and procfs.cmdline(child.pid) is None


def test_cpu_times_grow_with_busy_work():
    before = procfs.cpu_times()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    after = procfs.cpu_times()
    assert after.busy - before.busy >= 10  # 0.2 s at >= 100 ticks/s, on some CPU
    assert after.total > before.total and 0 <= after.idle <= after.total


def test_proc_stat_first_line_is_required():
    with pytest.raises(ValueError):
        procfs.parse_cpu_times("intr 1 2 3\n")
    times = procfs.parse_cpu_times("cpu  1 2 3 4 5 6 7 8 9 10\n")
    assert times == procfs.CpuTimes(idle=9, total=36, interrupts=13, steal=8)
    assert times.busy == 1 + 2 + 3 + 8  # user, nice, system, steal

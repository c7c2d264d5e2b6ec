"""Fabric counters around a check's job: snapshots inside the job, deltas in the perflog.

The snapshots are taken by ``fabreg counters read`` as the job's first and last
commands, so they read the node that runs the benchmark (not the ReFrame host).
The perflog column ``fabric_counters`` holds ``key=delta,...`` or
``unavailable: <reasons>`` (see fabreg.run.counters).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import reframe as rfm
from reframe.core.builtins import run_before, variable

from fabreg.errors import FabregError
from fabreg.run.counters import CounterReading, deltas

BEFORE = "fabric-counters-before.json"
AFTER = "fabric-counters-after.json"


def snapshot_command(output: str, interfaces: list[str]) -> str:
    """Shell command that writes a counter snapshot to ``output`` (never fails the job)."""
    argv = [sys.executable, "-m", "fabreg.cli", "counters", "read", "-o", output]
    for iface in interfaces:
        argv += ["-i", iface]
    return " ".join(shlex.quote(a) for a in argv) + " || true"


class FabricCounters(rfm.RegressionTestPlugin):
    """Mixin: read fabric counters before and after the job, log the deltas."""

    #: Counter deltas over the job, or why there are none (perflog column).
    #:
    #: :type: ``str``
    #: :default: ``"unavailable: not read"``
    fabric_counters = variable(str, value="unavailable: not read", loggable=True)

    @run_before("run")
    def snapshot_counters_around_job(self) -> None:
        interfaces = list(self.current_partition.extras.get("tcp_interfaces") or [])
        self.prerun_cmds = [snapshot_command(BEFORE, interfaces), *self.prerun_cmds]
        self.postrun_cmds = [*self.postrun_cmds, snapshot_command(AFTER, interfaces)]
        self.keep_files = [*self.keep_files, BEFORE, AFTER]

    @run_before("performance")
    def counter_deltas(self) -> None:
        readings = []
        for name in (BEFORE, AFTER):
            path = Path(self.stagedir, name)
            try:
                readings.append(CounterReading.from_json(path.read_text(), source=name))
            except (OSError, FabregError) as err:
                self.fabric_counters = f"unavailable: snapshot {name} not usable ({err})"
                return
        self.fabric_counters = deltas(*readings).perflog_text()

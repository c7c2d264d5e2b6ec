"""Fabric counters around a check's job: snapshots inside the job, deltas in the perflog.

The snapshots are taken by ``fabreg counters read`` as the job's first and last
commands, so they read the node that runs the benchmark (not the ReFrame host); a job
handed to an in-job driver leaves them to the driver, which takes them in its own process
(``fabreg.run.launch.driver_main``). The perflog column ``fabric_counters`` holds
``key=delta,...`` or ``unavailable: <reasons>`` (see fabreg.run.counters).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import reframe as rfm
from reframe.core.builtins import run_before, variable

from fabreg.errors import FabregError
from fabreg.run.counters import AFTER, BEFORE, SNAPSHOTS_VARIABLE, CounterReading, deltas


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

    #: Whether the job's in-job driver takes the snapshots (:meth:`leave_counters_to_driver`).
    #:
    #: :type: ``bool``
    #: :default: ``False``
    counters_in_driver = variable(bool, value=False, loggable=False)

    def counter_interfaces(self) -> list[str]:
        return list(self.current_partition.extras.get("tcp_interfaces") or [])

    @run_before("run")
    def snapshot_counters_around_job(self) -> None:
        self.keep_files = [*self.keep_files, BEFORE, AFTER]
        if self.counters_in_driver:
            return
        interfaces = self.counter_interfaces()
        self.prerun_cmds = [snapshot_command(BEFORE, interfaces), *self.prerun_cmds]
        self.postrun_cmds = [*self.postrun_cmds, snapshot_command(AFTER, interfaces)]

    def leave_counters_to_driver(self) -> None:
        """The job's in-job driver takes the snapshots in its own process instead of the job
        script: an interpreter started for each costs 0.1 s, twice a job. Called before or
        after :meth:`snapshot_counters_around_job`, the job script takes none."""
        interfaces = self.counter_interfaces()
        before, after = (snapshot_command(name, interfaces) for name in (BEFORE, AFTER))
        self.prerun_cmds = [c for c in self.prerun_cmds if c != before]
        self.postrun_cmds = [c for c in self.postrun_cmds if c != after]
        self.env_vars[SNAPSHOTS_VARIABLE] = shlex.quote(",".join(interfaces))
        self.counters_in_driver = True

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

"""FabregCheck: the plumbing every fabreg check shares, written once.

Every check family (OSU and the workload probes through ``MpiCheck``, perftest and
ucx_perftest through ``ClientServerCheck``) derives from it, so each gets the same:

- the scheduler's reason when the scheduler ended the job (``SchedulerEndingMixin``);
- references, warning band, deviation and reference keys (``ReferencesMixin``);
- fabric counter deltas over the job (``FabricCounters``);
- one way to read the job's output (``output_text``, ``job_output``);
- one way to drop a combination that cannot exist (``impossible``, ``keep_partitions_with``);
- ``FabregError`` from the run layer shown as a ReFrame error (``reframe_errors``).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import reframe as rfm
import reframe.core.runtime as rt
from reframe.core.exceptions import ReframeError, ReframeFatalError

from fabreg.errors import FabregError
from fabreg.testlib import reframe_warnings
from fabreg.testlib.counters import FabricCounters
from fabreg.testlib.jobs import SchedulerEndingMixin
from fabreg.testlib.references import ReferencesMixin

# Before ReFrame instantiates a single case of the checks that import this module.
reframe_warnings.install()

#: This ReFrame run (the checks' hooks run in its process): the notes its jobs leave each
#: other (a hang after the results, a tail step, a lasting failure) are the run's own.
RUN_ID = uuid.uuid4().hex[:12]


def stage_json(stagedir: str, name: str) -> dict[str, Any] | None:
    """The JSON object a job left in its stage directory (a driver's result, the meter's
    figure), or None when the job did not write it (a dry run, a job killed first)."""
    try:
        return dict(json.loads(Path(stagedir, name).read_text()))
    except (OSError, ValueError, TypeError):
        return None


@contextlib.contextmanager
def reframe_errors() -> Iterator[None]:
    """Turn a run-layer ``FabregError`` into a ``ReframeError`` with the same one line."""
    try:
        yield
    except FabregError as err:
        raise ReframeError(str(err)) from None


def partitions() -> list[Any]:
    """The current system's partitions; empty outside a ReFrame session (unit tests)."""
    try:
        return list(rt.runtime().system.partitions)
    except ReframeFatalError:  # "no runtime context is configured"
        return []


def max_nodes(partition: Any) -> int:
    """How many nodes a partition offers to one job (``extras['max_nodes']``, default 1)."""
    value = partition.extras.get("max_nodes", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ReframeError(f"partition {partition.fullname}: extras['max_nodes'] must be a "
                           f"positive integer, got {value!r}")
    return value


def node_counts(parts: list[Any] | None = None) -> list[int]:
    """1, 2, 4, ... up to the largest ``max_nodes`` of the partitions, plus that maximum.

    Outside a ReFrame session (no configuration loaded) this is ``[1, 2]``.
    """
    parts = partitions() if parts is None else parts
    top = max((max_nodes(p) for p in parts), default=2)
    counts = [1]
    while counts[-1] * 2 <= top:
        counts.append(counts[-1] * 2)
    return counts + ([top] if counts[-1] != top else [])


def runs_on_reframe_host(partition: Any) -> bool:
    """Does this partition run its jobs on the ReFrame host itself (the ``local`` scheduler)?"""
    return partition.scheduler.registered_name == "local"


class FabregCheck(rfm.RunOnlyRegressionTest, SchedulerEndingMixin, ReferencesMixin,
                  FabricCounters):
    """Base of every fabreg check: see the module docstring for what it brings."""

    valid_systems = ["*"]

    def impossible(self) -> None:
        """Drop this test case everywhere: a combination that cannot exist, not a skip."""
        self.valid_systems = []

    def keep_partitions_with(self, nodes: int) -> None:
        """Keep only the partitions that give one job ``nodes`` nodes (no-op in unit tests)."""
        try:
            allowed = rt.valid_sysenv_comb(self.valid_systems, self.valid_prog_environs)
        except ReframeFatalError:
            return
        self.valid_systems = [p.fullname for p in allowed if max_nodes(p) >= nodes]

    def is_local(self) -> bool:
        """Does this partition run jobs on the ReFrame host itself (no Slurm)?"""
        return runs_on_reframe_host(self.current_partition)

    def launcher_argv(self) -> list[str]:
        """The job's launcher command (``mpirun -np 4 ...``) before ReFrame runs the job, for
        in-job drivers and extra launches: ReFrame hands the test's task counts to the job only
        when it runs it, and the command needs them now."""
        self.job.num_tasks = self.num_tasks
        self.job.num_tasks_per_node = self.num_tasks_per_node
        return shlex.split(self.job.launcher.run_command(self.job))

    def output_text(self, name: str | None = None) -> str:
        """A file of the job's stage directory, the job's stdout by default."""
        path = Path(self.stagedir, name or str(self.stdout.evaluate()))
        return path.read_text(errors="replace")

    def job_output(self) -> str:
        """The job's stdout and stderr together (where MPIs and UCX print their logs)."""
        return self.output_text() + self.output_text(str(self.stderr.evaluate()))

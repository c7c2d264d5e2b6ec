"""BuildsApartMixin: a build never runs beside a measured job on the host that runs both.

ReFrame compiles on the host it runs on (``build_locally``) and counts those builds
apart from the partition's jobs (``max_local_jobs``, not the partition's ``max_jobs``).
On a cluster that is right: the login node builds while compute nodes measure. Where the
jobs run on the ReFrame host too (a ``local`` scheduler's partition, the ``local``
system) it is interference the suite causes itself: ucx_perftest's TCP ``tag_lat`` ran
while another check's probes compiled (``cc1`` in ``top_other``, 33-41 % of the CPUs) in
every healthy session, so it was judged ``inconclusive``, left out of the host baseline,
and stayed ``missing``.

On such a partition the build is counted as one of the partition's jobs instead
(``build_locally = False``), so its ``max_jobs`` (1 on ``local``) runs builds and
measured jobs one at a time. The build still runs on the same host through the same
``local`` scheduler: ReFrame creates the build job before any hook sees the partition, and
polls it with the partition's scheduler, which only a ``local`` partition can do for a
local build job. The emulated cluster's nodes share the host's CPUs too, but its
scheduler is Slurm's, so its builds still run beside its jobs (docs/cluster.md).
"""

from __future__ import annotations

import reframe as rfm
from reframe.core.builtins import run_after

from fabreg.testlib.base import runs_on_reframe_host


class BuildsApartMixin(rfm.RegressionTestPlugin):
    """Count the build as one of the partition's jobs where they share the ReFrame host."""

    @run_after("setup")
    def build_apart_from_measured_jobs(self) -> None:
        if runs_on_reframe_host(self.current_partition):
            self.build_locally = False

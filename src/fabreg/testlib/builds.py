"""BuildsApartMixin: a build never runs beside a measured job on the CPUs they share.

ReFrame compiles on the host it runs on (``build_locally``) and counts those builds
apart from the partition's jobs (``max_local_jobs``, not the partition's ``max_jobs``).
On a cluster that is right: the login node builds while compute nodes measure. Where the
jobs run on those same CPUs it is interference the suite causes itself: on the ``local``
system, ucx_perftest's TCP ``tag_lat`` ran while another check's probes compiled (``cc1``
in ``top_other``, 33-41 % of the CPUs) in every healthy session, so it was judged
``inconclusive``, left out of the host baseline, and stayed ``missing``.

On such a partition the build goes through the partition instead, so the partition's
``max_jobs`` (1 on both single-host systems) holds builds and measured jobs alike: one
at a time. Which partitions share their CPUs with the builds: a ``local`` scheduler's
(the jobs run on the ReFrame host), and any partition that says so with
``extras['builds_share_cpus']`` (the emulated cluster, whose nodes are namespaces of the
ReFrame host).
"""

from __future__ import annotations

from typing import Any

import reframe as rfm
from reframe.core.builtins import run_after
from reframe.core.exceptions import ReframeError

#: The partition extra that says the partition's jobs run on the CPUs the builds use.
SHARES_CPUS_EXTRA = "builds_share_cpus"


def builds_share_cpus(partition: Any) -> bool:
    """Do this partition's jobs run on the CPUs where ReFrame builds (its own host)?"""
    declared = partition.extras.get(SHARES_CPUS_EXTRA)
    if declared is not None and not isinstance(declared, bool):
        raise ReframeError(f"partition {partition.fullname}: extras[{SHARES_CPUS_EXTRA!r}] "
                           f"must be true or false, got {declared!r}")
    if declared is not None:
        return declared
    return bool(partition.scheduler.registered_name == "local")


class BuildsApartMixin(rfm.RegressionTestPlugin):
    """Build through the partition where its jobs share the build host's CPUs."""

    @run_after("setup")
    def build_apart_from_measured_jobs(self) -> None:
        if builds_share_cpus(self.current_partition):
            self.build_locally = False

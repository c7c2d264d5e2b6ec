"""perftest (``ib_write_bw``, ``ib_read_lat``, ...) as ReFrame checks: raw RDMA below MPI.

Server and client run in one job (same node, or the first two nodes of a Slurm
allocation) over a full message-size sweep (``-a``). Bandwidth tests add queue
pair and post-list sweeps; all tests run with polling and with event-driven
completion. A host without an RDMA device is skipped up front (sysfs), and a
node that reports none at run time is skipped with perftest's own words.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import run_after, run_before, sanity_function, variable
from reframe.core.exceptions import SanityError

from fabreg.metrics import perfvar_name
from fabreg.run.client_server import Figure
from fabreg.run.counters import SYSFS_INFINIBAND, rdma_devices
from fabreg.run.parsers.perftest import (
    PerftestTable,
    failure_reason,
    no_device_reason,
    parse_perftest,
)
from fabreg.schema import figures_on_path, lower_is_better
from fabreg.testlib.client_server import ClientServerCheck
from fabreg.testlib.references import ReferenceKeys

KB, MB = 1 << 10, 1 << 20
#: ``-a`` runs every power of two from 2 B to 8 MiB.
SWEEP = [1 << k for k in range(1, 24)]
TABLE = "perftest_table.tsv"


def no_rdma_device_reason(ib_root: Path = SYSFS_INFINIBAND) -> str | None:
    if rdma_devices(ib_root):
        return None
    return (f"no RDMA device: {ib_root} lists none on this host "
            "(perftest needs an InfiniBand/RoCE device and its driver)")


class PerftestCheck(ClientServerCheck):
    """One perftest benchmark over the full size sweep."""

    #: perftest program, e.g. ``ib_write_bw`` (perflog column).
    #:
    #: :type: ``str``
    #: :default: required (set by the subclass)
    benchmark = variable(str, loggable=True)
    #: Sizes that become performance variables.
    #:
    #: :type: ``list``
    #: :default: ``[]``
    perf_sizes = variable(list, value=[], loggable=False)
    #: Iterations per size (``-n``), logged.
    #:
    #: :type: ``int``
    #: :default: ``1000``
    iterations = variable(int, value=1000, loggable=True)
    #: Skip on a local partition whose host lists no RDMA device (set False to let
    #: perftest itself say so at run time).
    #:
    #: :type: ``bool``
    #: :default: ``True``
    detect_devices = variable(typ.Bool, value=True, loggable=False)

    time_limit = "10m"

    # Subclasses define the parameter ``completion`` (``polling``/``event``), and
    # bandwidth tests ``qps`` and ``post_list``.

    @property
    def is_bandwidth(self) -> bool:
        return self.benchmark.endswith("_bw")

    def host_control_figures(self) -> tuple[str, ...]:
        """perftest's verbs run over an RDMA queue pair: UCX rc's path."""
        return figures_on_path("ucx_rc")

    @run_after("init")
    def drop_event_completion_on_write(self) -> None:
        """perftest has no event-driven completion for RDMA write, in any release: ``-e``
        with ``ib_write_*`` exits with "Events feature not available on WRITE verb"
        before it opens a device, so that case cannot exist (it failed every run)."""
        if self.completion == "event" and self.benchmark.startswith("ib_write_"):
            self.impossible()

    @run_after("setup")
    def whole_post_lists(self) -> None:
        """perftest refuses ``-n`` that is not a multiple of ``-l`` ("Number of iterations
        must be a multiple of post list size", before it opens a device): round up, and log
        the count that ran."""
        post_list = int(getattr(self, "post_list", 1)) if self.is_bandwidth else 1
        if post_list > 1 and self.iterations % post_list:
            self.iterations += post_list - self.iterations % post_list

    @run_after("setup")
    def skip_without_device(self) -> None:
        if not self.is_local():
            return  # the nodes decide; a node without a device makes the test skip at sanity
        self.skip_if(shutil.which(self.benchmark) is None,
                     f"{self.benchmark} is not installed (Debian/Ubuntu: apt-get install perftest)")
        declared = self.current_partition.extras.get("rdma_devices")
        if self.detect_devices and not declared:
            reason = no_rdma_device_reason()
            self.skip_if(bool(reason), reason or "")

    def options(self) -> list[str]:
        opts = ["-a", "-F", "-n", str(self.iterations)]
        devices = self.current_partition.extras.get("rdma_devices") or []
        if devices:
            dev, _, port = str(devices[0]).partition(":")
            opts += ["-d", dev] + (["-i", port] if port else [])
        if self.completion == "event":
            opts.append("-e")
        if self.is_bandwidth:
            opts += ["-q", str(self.qps), "-l", str(self.post_list)]
        return opts

    def reference_keys(self) -> ReferenceKeys:
        """Every figure at a chosen size needs a reference; the message rate may have one."""
        return {name: ({"benchmark": self.benchmark, "metric": metric, "size": size,
                        "nodes": self.nodes}, metric != "msgrate")
                for name, (metric, size, _, _) in self.wanted().items()}

    @run_before("run")
    def write_script(self) -> None:
        server = [self.benchmark, *self.options(), "-p", "{port}"]
        self.run_client_and_server(server, [*server, "{server_host}"])
        self.keep_files = [*self.keep_files, TABLE]

    def table(self) -> PerftestTable:
        return parse_perftest(self.output_text())

    @sanity_function
    def full_sweep(self) -> bool:
        text = self.output_text()
        if reason := no_device_reason(text):
            self.skip(reason)
        if reason := failure_reason(text):
            raise SanityError(reason)
        table = self.table()
        missing = [s for s in SWEEP if s not in table.rows]
        if missing:
            raise SanityError(f"{self.benchmark}: no result for sizes {missing}")
        lines = ["bytes\t" + "\t".join(table.columns[1:])]
        lines += [f"{size}\t" + "\t".join(str(row[c]) for c in table.columns[1:])
                  for size, row in sorted(table.rows.items())]
        Path(self.stagedir, TABLE).write_text("\n".join(lines) + "\n")
        return True

    def wanted(self) -> dict[str, tuple[str, int, str, str]]:
        """perf variable -> (metric, size, table key, unit)."""
        out = {}
        if self.is_bandwidth:
            for size in self.perf_sizes or [64 * KB, 1 * MB, 8 * MB]:
                out[perfvar_name("bandwidth", size)] = ("bandwidth", size, "bw_average", "MB/s")
            out[perfvar_name("msgrate", 8)] = ("msgrate", 8, "msg_rate", "Mpps")
        else:
            for size in self.perf_sizes or [8, 4 * KB]:
                out[perfvar_name("latency", size)] = ("latency", size, "t_typical", "us")
            out[perfvar_name("latency_p99", 8)] = ("latency_p99", 8, "t_p99", "us")
        return out

    def figures(self) -> dict[str, Figure]:
        return {name: Figure("perftest", key, lower_is_better(metric), size)
                for name, (metric, size, key, _) in self.wanted().items()}

    @run_before("performance")
    def set_perf_variables(self) -> None:
        self.perf_variables = {
            name: sn.make_performance_function(self.best_of, unit, name)
            for name, (_, _, _, unit) in self.wanted().items()
        }

"""ucx_perftest as a ReFrame check: server and client in one job, one UCX transport.

The client's ``Final:`` row gives p50 and average of latency (ping-pong tests)
or send overhead (streaming tests), bandwidth and message rate. A transport the
host lacks (``rc``/``ud`` without RDMA devices) is skipped up front from
``ucx_info -d`` on a local partition, and from ucx_perftest's own error on a
remote one; both say which transports exist instead.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.backends import getlauncher
from reframe.core.builtins import run_after, run_before, sanity_function, variable
from reframe.core.exceptions import SanityError

from fabreg import gpu
from fabreg.metrics import perfvar_name
from fabreg.parsers.ucx_info import offers, transports
from fabreg.parsers.ucx_perftest import UcxPerftestError, UcxPerftestResult, parse_ucx_perftest
from fabreg.testlib import client_server
from fabreg.testlib.counters import FabricCounters
from fabreg.testlib.workloads import apply_references, free_port


def ucx_transports_here() -> dict[str, list[str]] | None:
    """``ucx_info -d`` of this host, or None when ucx_info is missing or fails."""
    exe = shutil.which("ucx_info")
    if exe is None:
        return None
    proc = subprocess.run([exe, "-d"], capture_output=True, text=True, timeout=120)
    return transports(proc.stdout) if proc.returncode == 0 else None


class UcxPerftestCheck(FabricCounters, rfm.RunOnlyRegressionTest):
    """One ucx_perftest test over one UCX transport (``UCX_TLS``)."""

    # Subclasses define the parameters ``ucx_test`` (``-t``), ``ucx_transport``
    # (``UCX_TLS``) and ``buffer`` (``host``/``cuda``, ``-m``).
    message_size = variable(int, loggable=True)
    iterations = variable(int, value=2000, loggable=True)
    #: "latency" for ping-pong tests, "overhead" for streaming ones (the perf variable names).
    time_metric = variable(str, value="latency", loggable=False)
    benchmark = variable(str, value="ucx_perftest", loggable=True)
    num_nodes = variable(int, value=1, loggable=True)

    valid_systems = ["*"]
    valid_prog_environs = ["builtin"]
    num_tasks = 1
    time_limit = "5m"
    executable = f"bash {client_server.SCRIPT}"

    @run_after("setup")
    def skip_what_cannot_run(self) -> None:
        self.skip_if(shutil.which("ucx_perftest") is None and self.is_local(),
                     "ucx_perftest is not installed (Debian/Ubuntu: apt-get install ucx-utils)")
        reason = gpu.device_buffer_problem(self.buffer)
        self.skip_if(bool(reason), reason or "")
        if self.is_local():
            tls = ucx_transports_here()
            if tls is not None and not offers(tls, self.ucx_transport):
                self.skip(f"UCX transport {self.ucx_transport!r} is not available on this host "
                          f"(ucx_info -d lists: {', '.join(sorted(tls))})")

    def is_local(self) -> bool:
        return self.current_partition.scheduler.registered_name == "local"

    @run_after("setup")
    def set_references(self) -> None:
        apply_references(self, f"ucx_perftest_{self.ucx_test}", {
            name: (name.rsplit("_", 1)[0], self.message_size) for name in self.perf_names()
        }, transport=self.ucx_transport, nodes=self.num_nodes)

    @run_before("run")
    def write_script(self) -> None:
        port = free_port()
        common = ["-p", str(port)]
        client = ["ucx_perftest", "{server_host}", *common, "-t", self.ucx_test,
                  "-s", str(self.message_size), "-n", str(self.iterations)]
        if self.buffer != "host":
            client += ["-m", f"{self.buffer},{self.buffer}"]
        text = client_server.script(["ucx_perftest", *common], client, nodes=self.num_nodes)
        Path(self.stagedir, client_server.SCRIPT).write_text(text)
        self.env_vars["UCX_TLS"] = self.ucx_transport
        self.job.launcher = getlauncher("local")()
        self.keep_files = [*self.keep_files, client_server.SERVER_OUT]

    def result(self) -> UcxPerftestResult:
        return parse_ucx_perftest(Path(self.stagedir, str(self.stdout.evaluate())).read_text())

    @sanity_function
    def final_row_present(self) -> bool:
        try:
            result = self.result()
        except UcxPerftestError as err:
            if err.transport_unavailable:
                self.skip(err.reason)
            server = Path(self.stagedir, client_server.SERVER_OUT)
            tail = server.read_text().strip().splitlines()[-1:] if server.is_file() else []
            raise SanityError(err.reason + (f" (server: {tail[0]})" if tail else "")) from None
        if result.iterations != self.iterations:
            raise SanityError(f"ran {result.iterations} iterations, asked {self.iterations}")
        return True

    def perf_names(self) -> list[str]:
        t = self.time_metric
        return [perfvar_name(m, self.message_size)
                for m in (t, f"{t}_avg", "bandwidth", "msgrate")]

    @run_before("performance")
    def set_perf_variables(self) -> None:
        fields = ("p50_usec", "average_usec", "bandwidth_average_mbs", "msgrate_average")
        units = ("us", "us", "MB/s", "msg/s")
        self.perf_variables = {
            name: sn.make_performance_function(
                lambda f=field: float(getattr(self.result(), f)), unit)
            for name, field, unit in zip(self.perf_names(), fields, units)
        }

"""ucx_perftest as a ReFrame check: server and client in one job, one transport.

Transports are fabreg's names (``tcp``, ``shm``, ``ucx_rc``, ``ucx_ud``, ``ucx_dc``);
``fabreg.run.transport`` maps them to ``UCX_TLS`` and says whether UCX offers them
here. The client runs at ``UCX_LOG_LEVEL=info``, so its output names the lanes
UCX chose; the check fails unless they are the transport asked for. The
client's ``Final:`` row gives p50 and average of latency (ping-pong tests) or
send overhead (streaming tests), bandwidth and message rate. A transport the
host lacks is skipped up front on a local partition (``ucx_info -d``), from the
partition's ``extras['transports']`` where declared, and from ucx_perftest's
own error otherwise.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.backends import getlauncher
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import ReframeError, SanityError

from fabreg.errors import FabregError
from fabreg.metrics import perfvar_name
from fabreg.run import gpu
from fabreg.run import transport as tx
from fabreg.run.parsers.transport_log import ucx_lanes
from fabreg.run.parsers.ucx_perftest import UcxPerftestError, UcxPerftestResult, parse_ucx_perftest
from fabreg.testlib import client_server
from fabreg.testlib.counters import FabricCounters
from fabreg.testlib.mpi import node_counts
from fabreg.testlib.references import ReferenceKeys, ReferencesMixin
from fabreg.testlib.workloads import free_port, restrict_to_nodes

#: fabreg transports UCX can carry (everything but Open MPI's own tcp_ob1).
UCX_TRANSPORTS = [t for t in tx.TRANSPORTS if t != "tcp_ob1"]


class UcxPerftestCheck(FabricCounters, ReferencesMixin, rfm.RunOnlyRegressionTest):
    """One ucx_perftest test over one transport, host or device memory."""

    # Subclasses define the parameters ``ucx_test`` (``-t``), ``transport`` and
    # ``buffer`` (``host``/``cuda``, ``-m``).

    #: Server and client on one node (loopback / shared memory) or on two nodes.
    nodes = parameter([n for n in node_counts() if n <= 2])

    message_size = variable(int, loggable=True)
    iterations = variable(int, value=2000, loggable=True)
    #: "latency" for ping-pong tests, "overhead" for streaming ones (the perf variable names).
    time_metric = variable(str, value="latency", loggable=False)
    benchmark = variable(str, value="ucx_perftest", loggable=True)
    #: The UCX_TLS the run used, and the lanes UCX reported (perflog columns).
    ucx_tls = variable(str, value="", loggable=True)
    transport_used = variable(str, value="", loggable=True)

    valid_systems = ["*"]
    valid_prog_environs = ["builtin"]
    time_limit = "5m"
    executable = f"bash {client_server.SCRIPT}"

    @run_after("init")
    def place(self) -> None:
        """One task per node; shared memory exists only within one node."""
        if self.transport == "shm" and self.nodes > 1:
            self.valid_systems = []
            return
        restrict_to_nodes(self, self.nodes)
        self.num_tasks, self.num_tasks_per_node = self.nodes, 1

    def is_local(self) -> bool:
        return self.current_partition.scheduler.registered_name == "local"

    @run_after("setup")
    def skip_what_cannot_run(self) -> None:
        self.skip_if(shutil.which("ucx_perftest") is None and self.is_local(),
                     "ucx_perftest is not installed (Debian/Ubuntu: apt-get install ucx-utils)")
        reason = gpu.device_buffer_problem(self.buffer)
        self.skip_if(bool(reason), reason or "")
        part = self.current_partition
        try:
            net = tx.NetConfig.from_extras(part.extras, f"partition {part.fullname}")
        except FabregError as err:
            raise ReframeError(str(err)) from None
        declared = part.extras.get("transports")
        inventory = tx.detect(declared=declared)
        if declared is not None:
            problem = tx.availability_problem("", self.transport, inventory, net)
            self.skip_if(self.transport not in declared, problem or "")
        elif self.is_local():
            problem = tx.ucx_problem(self.transport, inventory, net)
            self.skip_if(bool(problem), f"{self.transport} is unavailable to UCX on "
                                        f"{part.fullname}: {problem}")
        self.ucx_tls = tx.ucx_tls(self.transport, ucx=inventory.ucx)
        devices = net.devices_for(self.transport)
        if devices:
            self.env_vars["UCX_NET_DEVICES"] = ",".join(devices)

    @run_before("run")
    def write_script(self) -> None:
        port = str(free_port())
        client = ["ucx_perftest", "{server_host}", "-p", port, "-t", self.ucx_test,
                  "-s", str(self.message_size), "-n", str(self.iterations)]
        if self.buffer != "host":
            client += ["-m", f"{self.buffer},{self.buffer}"]
        # Only the client reports its lanes (its output is the job's stdout).
        client = ["env", "UCX_LOG_LEVEL=info", *client]
        text = client_server.script(["ucx_perftest", "-p", port], client, nodes=self.nodes)
        Path(self.stagedir, client_server.SCRIPT).write_text(text)
        self.env_vars["UCX_TLS"] = self.ucx_tls
        self.job.launcher = getlauncher("local")()
        self.keep_files = [*self.keep_files, client_server.SERVER_OUT]

    def output(self) -> str:
        return Path(self.stagedir, str(self.stdout.evaluate())).read_text()

    def result(self) -> UcxPerftestResult:
        return parse_ucx_perftest(self.output())

    @sanity_function
    def final_row_and_transport(self) -> bool:
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
        rma = self.ucx_test.startswith(("ucp_put", "ucp_get"))
        lanes = ucx_lanes(self.output(), ("rma", "rma_am") if rma else ("tag", "am"))
        used = {c for c in (tx.ucx_class(lane.transport) for lane in lanes) if c}
        self.transport_used = "+".join(sorted(used)) or "none"
        if used != {self.transport}:
            shown = ", ".join(map(str, lanes)) or "no ep_cfg line at UCX_LOG_LEVEL=info"
            raise SanityError(f"transport verification failed: asked {self.transport} "
                              f"(UCX_TLS={self.ucx_tls}), UCX used {shown}")
        return True

    def perf_names(self) -> list[str]:
        t = self.time_metric
        return [perfvar_name(m, self.message_size)
                for m in (t, f"{t}_avg", "bandwidth", "msgrate")]

    def reference_keys(self) -> ReferenceKeys:
        common = {"benchmark": f"ucx_perftest_{self.ucx_test}", "transport": self.transport,
                  "nodes": self.nodes, "size": self.message_size}
        metrics = [self.time_metric, f"{self.time_metric}_avg", "bandwidth", "msgrate"]
        # The headline figure (p50 latency, or bandwidth for streaming tests) is required.
        headline = 0 if self.time_metric == "latency" else 2
        return {name: ({**common, "metric": metric}, i == headline)
                for i, (name, metric) in enumerate(zip(self.perf_names(), metrics))}

    @run_before("performance")
    def set_perf_variables(self) -> None:
        fields = ("p50_usec", "average_usec", "bandwidth_average_mbs", "msgrate_average")
        units = ("us", "us", "MB/s", "msg/s")
        self.perf_variables = {
            name: sn.make_performance_function(
                lambda f=field: float(getattr(self.result(), f)), unit)
            for name, field, unit in zip(self.perf_names(), fields, units)
        }

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

import reframe.utility.sanity as sn
from reframe.core.builtins import run_after, run_before, sanity_function, variable
from reframe.core.exceptions import SanityError

from fabreg.metrics import perfvar_name
from fabreg.run import gpu
from fabreg.run import transport as tx
from fabreg.run.client_server import Figure
from fabreg.run.parsers.transport_log import ucx_lanes
from fabreg.run.parsers.ucx_perftest import UcxPerftestError, UcxPerftestResult, parse_ucx_perftest
from fabreg.testlib.base import reframe_errors
from fabreg.testlib.client_server import ClientServerCheck
from fabreg.testlib.references import ReferenceKeys

#: fabreg transports UCX can carry (everything but Open MPI's own tcp_ob1).
UCX_TRANSPORTS = [t for t in tx.TRANSPORTS if t != "tcp_ob1"]

#: (test, transport, metric) logged but never judged, with why: a figure whose healthy runs
#: spread over orders of magnitude measures no property of the transport, and no band
#: around it can be both quiet and sensitive (ci/bench/ucx_figure_stability_bench.py).
UNJUDGED: dict[tuple[str, str, str], str] = {
    ("ucp_put_bw", "tcp", "overhead"): (
        "the p50 send overhead of a put emulated over TCP active messages is either ~0.04 us "
        "(the put was buffered) or the wire time (~50-140 us): 0.04-142 us over 20 healthy "
        "back-to-back runs; bandwidth, message rate and the average overhead judge the run"),
}


class UcxPerftestCheck(ClientServerCheck):
    """One ucx_perftest test over one transport, host or device memory."""

    # Subclasses define the parameters ``ucx_test`` (``-t``), ``transport`` and
    # ``buffer`` (``host``/``cuda``, ``-m``).

    #: Message size in bytes (``-s``), logged.
    #:
    #: :type: ``int``
    #: :default: required (set by the subclass)
    message_size = variable(int, loggable=True)
    #: Iterations (``-n``), logged.
    #:
    #: :type: ``int``
    #: :default: ``2000``
    iterations = variable(int, value=2000, loggable=True)
    #: "latency" for ping-pong tests, "overhead" for streaming ones (the perf variable names).
    #:
    #: :type: ``str``
    #: :default: ``"latency"``
    time_metric = variable(str, value="latency", loggable=False)
    #: Benchmark name in the perflog.
    #:
    #: :type: ``str``
    #: :default: ``"ucx_perftest"``
    benchmark = variable(str, value="ucx_perftest", loggable=True)
    #: The UCX_TLS the run used, and the lanes UCX reported (perflog columns).
    #:
    #: :type: ``str``
    #: :default: ``""``
    ucx_tls = variable(str, value="", loggable=True)
    #: The lanes UCX reported, as fabreg transports (perflog column).
    #:
    #: :type: ``str``
    #: :default: ``""``
    transport_used = variable(str, value="", loggable=True)

    time_limit = "5m"

    @run_after("init")
    def no_shared_memory_across_nodes(self) -> None:
        if self.transport == "shm" and self.nodes > 1:
            self.impossible()

    @run_after("setup")
    def skip_what_cannot_run(self) -> None:
        self.skip_if(shutil.which("ucx_perftest") is None and self.is_local(),
                     "ucx_perftest is not installed (Debian/Ubuntu: apt-get install ucx-utils)")
        reason = gpu.device_buffer_problem(self.buffer)
        self.skip_if(bool(reason), reason or "")
        part = self.current_partition
        with reframe_errors():
            net = tx.NetConfig.from_extras(part.extras, f"partition {part.fullname}")
        declared = part.extras.get("transports")
        inventory = tx.detect(declared=declared)
        if declared is not None:
            problem = tx.availability_problem("", self.transport, inventory, net)
            self.skip_if(self.transport not in declared, problem or "")
        elif self.is_local():
            problem = tx.ucx_problem(self.transport, inventory, net)
            self.skip_if(bool(problem), f"{self.transport} is unavailable to UCX on "
                                        f"{part.fullname}: {problem}")
        self.ucx_tls = tx.ucx_tls(self.transport, ucx=inventory.ucx, buffer=self.buffer)
        devices = net.devices_for(self.transport)
        if devices:
            self.env_vars["UCX_NET_DEVICES"] = ",".join(devices)

    @run_before("run")
    def write_script(self) -> None:
        client = ["ucx_perftest", "{server_host}", "-p", "{port}", "-t", self.ucx_test,
                  "-s", str(self.message_size), "-n", str(self.iterations)]
        if self.buffer != "host":
            client += ["-m", f"{self.buffer},{self.buffer}"]
        # The client reports its lanes at info level (the first run's is the job's stdout).
        self.run_client_and_server(["ucx_perftest", "-p", "{port}"],
                                   ["env", "UCX_LOG_LEVEL=info", *client])
        self.env_vars["UCX_TLS"] = self.ucx_tls

    def result(self) -> UcxPerftestResult:
        return parse_ucx_perftest(self.output_text())

    @sanity_function
    def final_row_and_transport(self) -> bool:
        try:
            result = self.result()
        except UcxPerftestError as err:
            if err.transport_unavailable:
                self.skip(err.reason)
            tail = self.server_tail()
            raise SanityError(err.reason + (f" (server: {tail})" if tail else "")) from None
        if result.iterations != self.iterations:
            raise SanityError(f"ran {result.iterations} iterations, asked {self.iterations}")
        rma = self.ucx_test.startswith(("ucp_put", "ucp_get"))
        lanes = ucx_lanes(self.output_text(), ("rma", "rma_am") if rma else ("tag", "am"))
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
                for i, (name, metric) in enumerate(zip(self.perf_names(), metrics))
                if (self.ucx_test, self.transport, metric) not in UNJUDGED}

    def figures(self) -> dict[str, Figure]:
        # ucx_perftest prints MiB/s as "MB/s": logged in decimal MB/s, like OSU and perftest.
        fields = ("p50_usec", "average_usec", "bandwidth_average_decimal_mbs", "msgrate_average")
        lower = (True, True, False, False)
        return {name: Figure("ucx_perftest", field, low)
                for name, field, low in zip(self.perf_names(), fields, lower)}

    @run_before("performance")
    def set_perf_variables(self) -> None:
        units = ("us", "us", "MB/s", "msg/s")
        self.perf_variables = {name: sn.make_performance_function(self.best_of, unit, name)
                               for name, unit in zip(self.perf_names(), units)}

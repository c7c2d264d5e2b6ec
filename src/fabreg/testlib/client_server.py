"""ClientServerCheck: a benchmark server and its client in one job (perftest, ucx_perftest).

The job runs ``fabreg.run.client_server``: on one node both sides run there, on two nodes
(a Slurm allocation) the server runs on the first and the client on the second, each
through ``srun``. The first client's output is the job's stdout; the server's is kept in
``server.out``.

A one-shot value is what made healthy runs fail on a busy host, so the pair runs
``repeats`` times (each on a port of its own) and every figure is judged by its best value
(the lowest latency, the highest bandwidth), which interference cannot fake; a figure whose
best still fails is measured again, spread in time and on a quiet host, before it is
reported (:class:`~fabreg.testlib.measurement.ConfirmedValues`). The spread of the
measurements and the CPU time other work took are logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reframe.core.builtins import parameter, run_after

from fabreg.run import client_server
from fabreg.run.client_server import Figure
from fabreg.testlib.base import FabregCheck, node_counts
from fabreg.testlib.measurement import ConfirmedValues


class ClientServerCheck(ConfirmedValues, FabregCheck):
    """Base of the checks that run one server and one client, one task per node."""

    #: Nodes: server and client on one node (loopback), or one on each of two nodes.
    #: (``int`` parameter; the values of 1 and 2 the partitions offer)
    #:
    #: :type: parameter
    #: :default: values ``[n for n in node_counts() if n <= 2]``
    nodes = parameter([n for n in node_counts() if n <= 2])

    valid_prog_environs = ["builtin"]

    @run_after("init")
    def one_task_per_node(self) -> None:
        self.keep_partitions_with(self.nodes)
        self.num_tasks, self.num_tasks_per_node = self.nodes, 1

    def figures(self) -> dict[str, Figure]:
        """Perf variable -> how the driver reads it from a client's output."""
        raise NotImplementedError

    def run_client_and_server(self, server: list[str], client: list[str]) -> None:
        """Run ``server`` and ``client`` (``{port}``, ``{server_host}`` filled in by the job)
        through the driver, which repeats and confirms."""
        figures = self.figures()
        client_server.Plan(
            server=server, client=client, nodes=self.nodes, figures=figures,
            fail_limits=self.failure_limits(figures), warn_limits=self.warning_limits(figures),
            **self.confirmation_settings(),
        ).save(Path(self.stagedir, client_server.PLAN))
        runs = self.repeats + self.confirm_runs
        self.hand_to_driver("fabreg.run.client_server", client_server.PLAN, [
            client_server.RESULT, client_server.SERVER_OUT,
            *(client_server.repeat_output(i) for i in range(1, runs + 1))])

    def measured(self) -> dict[str, Any] | None:
        return self.driver_result(client_server.RESULT)

    def best_of(self, name: str) -> float:
        """The best of the job's measurements of ``name`` (the first run's without them)."""
        result = self.measured()
        if result and name in result["best"]:
            return float(result["best"][name])
        return client_server.READERS[(f := self.figures()[name]).reader](self.output_text(), f)

    def server_tail(self) -> str:
        """The server's last output line, to name why a client found nobody to talk to."""
        path = Path(self.stagedir, client_server.SERVER_OUT)
        lines = path.read_text(errors="replace").strip().splitlines() if path.is_file() else []
        return lines[-1] if lines else ""

"""ClientServerCheck: a benchmark server and its client in one job (perftest, ucx_perftest).

The job runs a script from ``fabreg.run.client_server``: on one node both sides run
there, on two nodes (a Slurm allocation) the server runs on the first and the client on
the second, each through ``srun``. The client's output is the job's stdout; the
server's is kept in ``server.out``. The job is metered (``MeteredJob``): a failure measured
while other work took the CPUs is ``inconclusive``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from reframe.core.backends import getlauncher
from reframe.core.builtins import parameter, run_after

from fabreg.run import client_server
from fabreg.testlib.base import FabregCheck, free_port, node_counts
from fabreg.testlib.metering import MeteredJob


class ClientServerCheck(MeteredJob, FabregCheck):
    """Base of the checks that run one server and one client, one task per node."""

    #: Nodes: server and client on one node (loopback), or one on each of two nodes.
    #: (``int`` parameter; the values of 1 and 2 the partitions offer)
    #:
    #: :type: parameter
    #: :default: values ``[n for n in node_counts() if n <= 2]``
    nodes = parameter([n for n in node_counts() if n <= 2])

    valid_prog_environs = ["builtin"]
    executable = f"bash {client_server.SCRIPT}"

    @run_after("init")
    def one_task_per_node(self) -> None:
        self.keep_partitions_with(self.nodes)
        self.num_tasks, self.num_tasks_per_node = self.nodes, 1

    def port(self) -> str:
        """A free TCP port for the server (on the ReFrame host; fine for one-node jobs and
        for the emulated cluster, whose nodes share nothing but their addresses)."""
        return str(free_port())

    def run_client_and_server(self, server: Sequence[str], client: Sequence[str]) -> None:
        """Run ``server`` and ``client`` (argv; ``{server_host}`` in the client) in the job."""
        text = client_server.script(server, client, nodes=self.nodes)
        Path(self.stagedir, client_server.SCRIPT).write_text(text)
        self.job.launcher = getlauncher("local")()
        self.keep_files = [*self.keep_files, client_server.SERVER_OUT]

    def server_tail(self) -> str:
        """The server's last output line, to name why a client found nobody to talk to."""
        path = Path(self.stagedir, client_server.SERVER_OUT)
        lines = path.read_text(errors="replace").strip().splitlines() if path.is_file() else []
        return lines[-1] if lines else ""

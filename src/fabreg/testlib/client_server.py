"""ClientServerCheck: a benchmark server and its client in one job (perftest, ucx_perftest).

The job runs a script from ``fabreg.run.client_server``: on one node both sides run
there, on two nodes (a Slurm allocation) the server runs on the first and the client on
the second, each through ``srun``. The client's output is the job's stdout; the
server's is kept in ``server.out``.

A one-shot value is what made healthy runs fail on a busy host, so the pair runs
``repeats`` times (each with its own port) and every figure is judged by its best value
(the lowest latency, the highest bandwidth), which interference cannot fake: a value fails
only when every one of its measurements failed, which is its confirmation. The spread of
the measurements is logged. The job is metered (``MeteredJob``): a failure measured while
other work took the CPUs is ``inconclusive``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from reframe.core.backends import getlauncher
from reframe.core.builtins import parameter, run_after, variable

from fabreg.run import client_server
from fabreg.run.measure import best, spread
from fabreg.testlib.base import FabregCheck, free_port, node_counts
from fabreg.testlib.metering import MeteredJob

Parsed = TypeVar("Parsed")
#: port -> (server argv, client argv; ``{server_host}`` in the client).
PairForPort = Callable[[str], tuple[Sequence[str], Sequence[str]]]


class ClientServerCheck(MeteredJob, FabregCheck):
    """Base of the checks that run one server and one client, one task per node."""

    #: Nodes: server and client on one node (loopback), or one on each of two nodes.
    #: (``int`` parameter; the values of 1 and 2 the partitions offer)
    #:
    #: :type: parameter
    #: :default: values ``[n for n in node_counts() if n <= 2]``
    nodes = parameter([n for n in node_counts() if n <= 2])

    #: Runs of the server/client pair; each figure is judged by its best value.
    #:
    #: :type: ``int``
    #: :default: ``3``
    repeats = variable(int, value=3, loggable=False)
    #: Perf variable -> relative distance of its worst measurement from its best (perflog).
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    spread = variable(dict, value={}, loggable=True)

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

    def run_client_and_server(self, pair: PairForPort) -> None:
        """Run the pair ``pair(port)`` gives, ``repeats`` times, each on a port of its own."""
        ports: list[str] = []
        while len(ports) < max(1, self.repeats):
            if (port := self.port()) not in ports:
                ports.append(port)
        first, *more = [pair(port) for port in ports]
        text = client_server.script(*first, nodes=self.nodes, repeats=more)
        Path(self.stagedir, client_server.SCRIPT).write_text(text)
        self.job.launcher = getlauncher("local")()
        self.keep_files = [*self.keep_files, client_server.SERVER_OUT, *(
            client_server.repeat_output(i) for i in range(1, self.repeats + 1))]

    def repeated(self, parse: Callable[[str], Parsed]) -> list[Parsed]:
        """The first run (the job's stdout: sanity has read it) and every later run whose
        output parses; a repeat cut short adds nothing rather than failing the test."""
        out = [parse(self.output_text())]
        for i in range(2, self.repeats + 1):
            path = Path(self.stagedir, client_server.repeat_output(i))
            if path.is_file():
                try:
                    out.append(parse(path.read_text(errors="replace")))
                except Exception:  # noqa: BLE001 - any unreadable repeat is only left out
                    continue
        return out

    def best_value(self, name: str, values: list[float], lower_is_better: bool) -> float:
        """The best of ``values`` for perf variable ``name``; logs their spread."""
        self.spread = {**self.spread, name: round(spread(values, lower_is_better), 4)}
        return best(values, lower_is_better)

    def server_tail(self) -> str:
        """The server's last output line, to name why a client found nobody to talk to."""
        path = Path(self.stagedir, client_server.SERVER_OUT)
        lines = path.read_text(errors="replace").strip().splitlines() if path.is_file() else []
        return lines[-1] if lines else ""

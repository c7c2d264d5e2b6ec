"""Distributed matrix multiply: how much of an application's time is communication.

C = A*B over the ranks (broadcast B, scatter rows of A, compute, gather C), in a
blocking and a non-blocking variant, for several sizes and rank counts. The
answer is checked against the known result; the figures are the time of each
phase and the communication fraction.
"""

import reframe as rfm
import reframe.utility.typecheck as typ
from reframe.core.builtins import parameter, run_after, sanity_function, variable
from reframe.core.exceptions import SanityError

from fabreg.run.parsers.probes import MatmulResult, parse_matmul
from fabreg.testlib.workloads import ProbeCheck, RepeatedProbe

#: The judged figures -> their unit.
UNITS = {"total": "s", "distribute": "s", "compute": "s", "gather": "s",
         "comm_fraction": "fraction", "gflops": "GFLOP/s"}
#: The host control that judges the figures the CPU's arithmetic sets, beside (``total``,
#: ``gflops``) or instead of (``compute``) the transport's path: a TCP job's ``compute``
#: once ran 1.66x slow while its path's control, the loopback stream, read normal.
CPU_CONTROL = "shared_compute"
#: The figures of the arithmetic alone.
ARITHMETIC = {"compute"}
#: The figures of the whole multiply, communication and arithmetic.
WHOLE = {"total", "gflops"}


@rfm.simple_test
class Matmul(RepeatedProbe, ProbeCheck):
    """fabreg_matmul: phase times, communication fraction, GFLOP/s; C must be right."""

    mode = parameter(["blocking", "nonblocking"])
    matrix_size = parameter([512, 1024])
    ranks = parameter([2, 4])
    #: Make one rank send a wrong element (to see the check fail).
    corrupt = variable(typ.Bool, value=False, loggable=False)

    benchmark = "fabreg_matmul"
    tags = {"workload", "matmul"}

    @run_after("init")
    def set_ranks(self) -> None:
        if self.ranks < self.nodes or self.ranks % self.nodes:
            self.impossible()  # the same number of ranks on every node
        self.descr = (f"C = A*B, n={self.matrix_size}, {self.ranks} ranks on {self.nodes} "
                      f"node(s), {self.mode}")

    def placement(self) -> tuple[int, int]:
        return self.nodes, self.ranks // self.nodes

    @run_after("setup")
    def set_options(self) -> None:
        self.executable_opts = ["-n", str(self.matrix_size), "-m", self.mode]
        if self.corrupt:
            self.executable_opts.append("--corrupt")

    def host_control_figures(self) -> tuple[str, ...]:
        path = super().host_control_figures()
        return path if CPU_CONTROL in path else (*path, CPU_CONTROL)

    def off_path_figures(self) -> tuple[str, ...]:
        """A figure the arithmetic sets fails with the CPU: it tells nothing of the path by
        itself, neither the compute phase nor the whole multiply it is most of (two healthy
        sessions on the 2-vCPU VM failed 4 and 7 cases that joined a ``total`` failure)."""
        return tuple(sorted(ARITHMETIC | WHOLE))

    def figures_judging(self, variable: str) -> tuple[str, ...]:
        """``compute`` by the CPU's control, ``total`` and ``gflops`` by it and the path's,
        the communication phases by the path's."""
        if variable in ARITHMETIC:
            return (CPU_CONTROL,)
        return self.host_control_figures() if variable in WHOLE else \
            super().host_control_figures()

    def reference_benchmark(self) -> str:
        """One row per mode and rank count: 4 ranks compute half the rows 2 ranks do, and
        one row for all four (``fabreg_matmul``, 0.0105..0.0391 s for Open MPI's 512
        ``compute``) once judged each by a band drawn from the others'."""
        return f"{self.benchmark}_{self.mode}_{self.ranks}ranks"

    def references_wanted(self) -> dict[str, tuple[str, int | None, bool]]:
        return {name: (name, self.matrix_size, name == "gflops") for name in UNITS}

    def unjudged_reason(self) -> str:
        """More ranks than the CPUs they share: each rank's arithmetic, and its waits, are
        the OS scheduler's time slices (the 4-rank ``compute`` of one 2-CPU host's healthy
        jobs spread 9.4-18.0 ms, a doubling inside it). The answer is still checked."""
        return self.time_slices_reason("multiply's phases", yielding_too=True)

    def figure_units(self) -> dict[str, str]:
        return UNITS

    def result(self) -> MatmulResult:
        return parse_matmul(self.output_text())

    @sanity_function
    def answer_is_right(self) -> bool:
        result = self.result()
        if not result.verified:
            raise SanityError(f"C differs from the known answer A*B (n={result.n}, "
                              f"{result.ranks} ranks, {result.mode})")
        if result.ranks != self.ranks or result.n != self.matrix_size:
            raise SanityError(f"probe ran n={result.n} on {result.ranks} ranks, asked "
                              f"n={self.matrix_size} on {self.ranks}")
        return True

"""Allreduce / alltoall tail latency, quiet and under background traffic.

The probe alternates blocks of measured iterations with its background pairs
asleep (quiet) and streaming bursts of large messages on the same nodes and
links (loaded), so both samples see the same machine. The tail (p99/p50) must be
higher under load: if it is not, the background traffic did not reach the
measured ranks and the comparison means nothing. The probe runs ``repeats``
times in the job; the tail must be higher in most runs (one run can be swamped
by whatever else the machine does), and the figures are the medians. The collective algorithm is a
parameter, so algorithms compare under the same load (fabreg.run.collectives says
how each MPI is told).
"""

import shlex
import statistics

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import SanityError
from reframe.core.logging import getlogger

from fabreg.run import collectives
from fabreg.run.parsers.probes import TailLatencyResult, parse_tail_latency
from fabreg.testlib.workloads import ProbeCheck, launcher_argv

#: (collective, algorithm) pairs compared; "default" is the MPI's own choice.
CASES = [
    ("allreduce", "default"),
    ("allreduce", "ring"),
    ("allreduce", "recursive_doubling"),
    ("allreduce", "rabenseifner"),
    ("alltoall", "default"),
    ("alltoall", "pairwise"),
]


@rfm.simple_test
class TailLatency(ProbeCheck):
    """p50 / p99 / max per-iteration latency and p99/p50, quiet and loaded."""

    case = parameter(CASES, fmt=lambda c: f"{c[0]}:{c[1]}")
    collective = variable(str, value="", loggable=True)
    algorithm = variable(str, value="", loggable=True)
    message_size = variable(int, value=64 << 10, loggable=True)
    #: Iterations per phase, split into this many quiet/loaded block pairs.
    iterations = variable(int, value=1000, loggable=True)
    blocks = variable(int, value=20, loggable=True)
    warmup = variable(int, value=50, loggable=False)
    measured_ranks = variable(int, value=2, loggable=True)
    background_pairs = variable(int, value=1, loggable=True)
    #: Each burst: ``background_window`` messages of ``background_size`` bytes each way.
    #: Many short bursts disturb more measured iterations than few long ones, so the
    #: loaded tail stands out in every run (docs/workloads.md, "Choosing the background").
    background_size = variable(int, value=512 << 10, loggable=True)
    background_window = variable(int, value=2, loggable=True)
    #: Share of the loaded phase the background spends streaming (bursts), percent.
    background_duty = variable(int, value=25, loggable=True)
    #: Probe runs per test case (odd: a majority must show the higher tail).
    repeats = variable(int, value=3, loggable=True)

    #: Why the background's effect could not be judged (a busy host), or empty (perflog).
    #:
    #: :type: ``str``
    #: :default: ``""``
    tail_verdict = variable(str, value="", loggable=True)

    benchmark = "fabreg_tail_latency"
    tags = {"workload", "tail_latency"}

    @run_after("init")
    def set_case(self) -> None:
        self.collective, self.algorithm = self.case
        # Across nodes every node holds one measured and one background rank and each
        # background pair spans two nodes (the probe's -I), so the node count is even.
        if self.nodes > 1 and self.nodes % 2:
            self.impossible()
        self.descr = (f"{self.collective} tail latency ({self.algorithm} algorithm) under "
                      f"background traffic, {self.nodes} node(s)")

    def placement(self) -> tuple[int, int]:
        if self.nodes == 1:
            return 1, self.measured_ranks + 2 * self.background_pairs
        return self.nodes, 2

    @run_after("setup")
    def select_algorithm(self) -> None:
        reason = collectives.unsupported_reason(self.mpi, self.collective, self.algorithm)
        self.skip_if(bool(reason), reason or "")
        choice = collectives.select(self.mpi, self.collective, self.algorithm)
        self.launch_options = [*self.launch_options, *choice.options]
        self.env_vars.update(choice.env)

    @run_after("setup")
    def set_options(self) -> None:
        if self.nodes > 1:
            self.measured_ranks, self.background_pairs = self.nodes, self.nodes // 2
        self.executable_opts = [
            "-o", self.collective, "-s", str(self.message_size), "-i", str(self.iterations),
            "-k", str(self.blocks), "-x", str(self.warmup), "-b", str(self.background_pairs),
            "-B", str(self.background_size), "-W", str(self.background_window),
            "-D", str(self.background_duty),
        ] + (["-I"] if self.nodes > 1 else [])

    def reference_benchmark(self) -> str:
        return f"{self.benchmark}_{self.collective}"

    def references_wanted(self) -> dict[str, tuple[str, int | None, bool]]:
        return {name: (name, self.message_size, name == "p50") for name in (
            "p50", "p99", "p99_over_p50", "loaded_p50", "loaded_p99", "loaded_p99_over_p50")}

    @run_before("run")
    def earlier_repeats(self) -> None:
        argv = [*launcher_argv(self, self.num_tasks), self.probe_path(), *self.executable_opts]
        cmd = " ".join(shlex.quote(a) for a in argv)
        self.prerun_cmds += [f"{cmd} > {name}" for name in self.repeat_files()[:-1]]
        self.keep_files = [*self.keep_files, *self.repeat_files()[:-1]]

    def repeat_files(self) -> list[str]:
        """Output of each run; the last is the job's own stdout."""
        return [f"tail_run{i}.out" for i in range(1, self.repeats)] + [
            str(self.stdout.evaluate())]

    def results(self) -> list[TailLatencyResult]:
        return [parse_tail_latency(self.output_text(name)) for name in self.repeat_files()]

    @sanity_function
    def tail_grows_under_load(self) -> bool:
        results = self.results()
        for r in results:
            if r.loaded is None or r.background_rounds < 1:
                raise SanityError("the background pairs completed no round of traffic")
        higher = [r for r in results if r.loaded and r.loaded.p99_over_p50 >
                  r.quiet.p99_over_p50]
        if 2 * len(higher) <= len(results):
            pairs = ", ".join(f"{r.quiet.p99_over_p50:.2f} -> "
                              f"{r.loaded.p99_over_p50 if r.loaded else 0:.2f}" for r in results)
            problem = (f"p99/p50 not higher under background traffic in most runs (quiet -> "
                       f"loaded: {pairs}; {self.background_pairs} pair(s) of "
                       f"{self.background_size} B bursts)")
            if self.contended():
                # A busy host raises the quiet tail too: nothing can be said, not a failure.
                self.tail_verdict = f"inconclusive: {problem}; {self.contention_note()}"
                getlogger().warning(f"{self.display_name}: {self.tail_verdict}")
                return True
            raise SanityError(problem)
        return True

    @run_before("performance")
    def set_perf_variables(self) -> None:
        def figure(which: str, name: str) -> float:
            values = []
            for result in self.results():
                stats = result.quiet if which == "quiet" else result.loaded
                values.append(float(getattr(stats, name)) if stats else 0.0)
            return statistics.median(values)

        self.perf_variables = {
            "p50": sn.make_performance_function(figure, "us", "quiet", "p50_us"),
            "p99": sn.make_performance_function(figure, "us", "quiet", "p99_us"),
            "max": sn.make_performance_function(figure, "us", "quiet", "max_us"),
            "p99_over_p50": sn.make_performance_function(figure, "ratio", "quiet",
                                                         "p99_over_p50"),
            "loaded_p50": sn.make_performance_function(figure, "us", "loaded", "p50_us"),
            "loaded_p99": sn.make_performance_function(figure, "us", "loaded", "p99_us"),
            "loaded_p99_over_p50": sn.make_performance_function(figure, "ratio", "loaded",
                                                                "p99_over_p50"),
        }

"""Many transmitter -> receiver streams at once: rate, loss and corruption per stream.

Placements: one pair and two pairs at once within a node, pairs across nodes
(on partitions with several nodes), and fan-in (two transmitters to one
receiver). Every stream must lose nothing and corrupt nothing; under fan-in each
stream must get a fair share (see docs/workloads.md). The rates of ``Streams`` are the best
of ``repeats`` runs in the job, a failing one confirmed (``RepeatedProbe``), and no run may
lose or corrupt a message; ``StreamsFanIn`` runs one stream alone before each fan-in run,
and its share is the ratio of the two best rates.
"""

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import SanityError

from fabreg.run.parsers.probes import StreamsResult, parse_streams
from fabreg.testlib.workloads import ProbeCheck, RepeatedProbe, launcher_argv

KB = 1 << 10

#: The judged figures of every layout -> their unit.
UNITS = {"rate_min": "Gbit/s", "rate_total": "Gbit/s", "loss_rate": "fraction"}
#: The fan-in's single-stream rate (its baseline launch's ``rate_min``): in the driver's
#: result, not a perf variable.
SINGLE_RATE = "single_rate"

#: layout -> the probe's placement (-p), ranks on one node (None: one rank per node, across)
LAYOUTS = {
    "pair": ("pairs", 2),
    "pairs": ("pairs", 4),
    "cross": ("cross", None),
    "fanin": ("fanin", 3),
}


class StreamsBase(RepeatedProbe, ProbeCheck):
    """fabreg_streams: per-stream Gbit/s, received, missed, corrupted, loss rate, each
    figure the best of the job's runs (``RepeatedProbe``)."""

    #: Message size, blocks in flight per stream, messages per stream.
    message_size = variable(int, value=64 * KB, loggable=True)
    window = variable(int, value=32, loggable=True)
    count = variable(int, value=2000, loggable=True)

    benchmark = "fabreg_streams"

    @run_after("init")
    def drop_impossible_placements(self) -> None:
        across = LAYOUTS[self.layout][1] is None
        # Across nodes: one rank per node, rank i -> i + n/2, so an even node count.
        if across != (self.nodes > 1) or (across and self.nodes % 2):
            self.impossible()
        self.descr = f"fabreg_streams, layout {self.layout}, {self.nodes} node(s)"

    def placement(self) -> tuple[int, int]:
        per_node = LAYOUTS[self.layout][1]
        return (self.nodes, 1) if per_node is None else (1, per_node)

    def probe_options(self, placement: str) -> list[str]:
        return ["-p", placement, "-s", str(self.message_size), "-w", str(self.window),
                "-n", str(self.count)]

    @run_after("setup")
    def set_options(self) -> None:
        self.executable_opts = self.probe_options(LAYOUTS[self.layout][0])

    def reference_benchmark(self) -> str:
        return f"{self.benchmark}_{self.layout}"

    def references_wanted(self) -> dict[str, tuple[str, int | None, bool]]:
        return {"rate_min": ("rate_min", self.message_size, True),
                "rate_total": ("rate_total", self.message_size, False)}

    def result(self) -> StreamsResult:
        return parse_streams(self.output_text())

    def problems(self, result: StreamsResult) -> list[str]:
        return [f"stream {s.stream} ({s.tx}->{s.rx}): received {s.received}/{self.count}, "
                f"missed {s.missed}, corrupted {s.corrupted}, duplicate {s.duplicate}"
                for s in result.streams
                if s.missed or s.corrupted or s.duplicate or s.received != self.count]

    def figure_units(self) -> dict[str, str]:
        return UNITS

    def run_results(self) -> list[StreamsResult]:
        """Every run of the probe in the job: each must lose and corrupt nothing."""
        return [parse_streams(text) for text in self.run_outputs()]

    def problem_in_every_run(self, results: list[StreamsResult]) -> str:
        """A problem that fails the check only when every run shows it (a busy host can
        cause it in one run, a fault causes it in all); none by default."""
        return ""

    @sanity_function
    def no_loss_no_corruption(self) -> bool:
        results = self.run_results()
        for run, result in enumerate(results, start=1):
            problems = self.problems(result)
            if problems:
                where = f"run {run} of {len(results)}: " if len(results) > 1 else ""
                raise SanityError(where + "; ".join(problems))
        problem = self.problem_in_every_run(results)
        if problem:
            raise SanityError(problem)
        return True


@rfm.simple_test
class Streams(StreamsBase):
    """One pair, two pairs at once on one node; pairs across nodes."""

    layout = parameter(["pair", "pairs", "cross"])
    tags = {"workload", "streams"}

    def problems(self, result: StreamsResult) -> list[str]:
        problems = super().problems(result)
        if self.layout == "cross":
            problems += [f"stream {s.stream} stayed on node {s.tx_host}"
                         for s in result.streams if not s.crosses_nodes]
        return problems


@rfm.simple_test
class StreamsFanIn(StreamsBase):
    """Two transmitters into one receiver: no loss, and each stream gets a fair share.

    Before each fan-in run, one stream runs alone between two of the job's ranks (the
    driver's baseline launch); ``fanin_share`` is the best slowest-stream rate of the
    fan-in runs over (the best single-stream rate / k): 1.0 is an exactly fair split of
    one stream's worth, below 1 a stream is starved. Each side is a best of its own runs,
    so other work slowing either launch cannot fake a fair or a starved share.
    """

    layout = variable(str, value="fanin", loggable=True)
    fanin = variable(int, value=2, loggable=True)
    #: Slowest stream / fastest stream must be at least this in at least one run.
    #:
    #: :type: ``float``
    #: :default: ``0.5``
    min_fairness = variable(float, value=0.5, loggable=False)

    tags = {"workload", "streams"}

    def placement(self) -> tuple[int, int]:
        return 1, self.fanin + 1

    @run_after("setup")
    def add_fanin_option(self) -> None:
        self.executable_opts += ["-k", str(self.fanin)]

    @run_after("setup")
    def skip_shares_the_scheduler_decides(self) -> None:
        """With more ranks than the node has CPUs and an MPI whose idle ranks keep spinning,
        each stream's share is the OS scheduler's, not the fabric's: MVAPICH2's InfiniBand
        device on a 2-CPU node gave slowest/fastest 0.43-0.83 where Open MPI gave 0.90-0.99;
        MPICH's streams were even (0.8-0.9), but the three ranks held two CPUs between them,
        so its ``fanin_share`` read 0.44-0.82 over 16 healthy jobs, and one failed."""
        self.skip_if_time_slices("streams' shares")

    def baseline_launch(self) -> tuple[list[str], dict[str, str]]:
        command = [*launcher_argv(self, 2), self.probe_path(), *self.probe_options("pairs")]
        return command, {"rate_min": SINGLE_RATE}

    def references_wanted(self) -> dict[str, tuple[str, int | None, bool]]:
        return {**super().references_wanted(),
                "fanin_share": ("fanin_share", self.message_size, True)}

    def problem_in_every_run(self, results: list[StreamsResult]) -> str:
        fairest = max(results, key=lambda r: r.fairness)
        if fairest.fairness >= self.min_fairness:
            return ""
        rates = ", ".join(f"{s.rate_gbps:.2f}" for s in fairest.streams)
        return (f"unfair fan-in in every one of {len(results)} run(s): the fairest had stream "
                f"rates {rates} Gbit/s (slowest/fastest {fairest.fairness:.2f} < "
                f"{self.min_fairness})")

    @run_before("performance")
    def set_perf_variables(self) -> None:
        super().set_perf_variables()
        self.perf_variables["fanin_share"] = sn.make_performance_function(
            self._fanin_share, "x fair share")

    def _fanin_share(self) -> float:
        single = self.best_of(SINGLE_RATE)
        streams = len(self.result().streams)
        return self.best_of("rate_min") / (single / streams) if single else 0.0

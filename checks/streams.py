"""Many transmitter -> receiver streams at once: rate, loss and corruption per stream.

Placements: one pair and two pairs at once within a node, pairs across nodes
(on partitions with several nodes), and fan-in (two transmitters to one
receiver). Every stream must lose nothing and corrupt nothing; under fan-in each
stream must get a fair share (see docs/workloads.md). The rates of ``Streams`` are the best
of ``repeats`` runs in the job, a failing one confirmed (``RepeatedProbe``), and no run may
lose or corrupt a message; ``StreamsFanIn`` measures its single-stream rate and the fan-in
once each (the share is a ratio of the two), metered for interference.
"""

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import SanityError

from fabreg.run.parsers.probes import StreamsResult, parse_streams
from fabreg.testlib.metering import MeteredJob
from fabreg.testlib.workloads import ProbeCheck, RepeatedProbe, launcher_argv

KB = 1 << 10

#: The judged figures of every layout -> their unit.
UNITS = {"rate_min": "Gbit/s", "rate_total": "Gbit/s", "loss_rate": "fraction"}

#: layout -> the probe's placement (-p), ranks on one node (None: one rank per node, across)
LAYOUTS = {
    "pair": ("pairs", 2),
    "pairs": ("pairs", 4),
    "cross": ("cross", None),
    "fanin": ("fanin", 3),
}


class StreamsBase(ProbeCheck):
    """fabreg_streams: per-stream Gbit/s, received, missed, corrupted, loss rate."""

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

    def run_results(self) -> list[StreamsResult]:
        """Every run of the probe in the job (one by default)."""
        return [self.result()]

    @sanity_function
    def no_loss_no_corruption(self) -> bool:
        results = self.run_results()
        for run, result in enumerate(results, start=1):
            problems = self.problems(result)
            if problems:
                where = f"run {run} of {len(results)}: " if len(results) > 1 else ""
                raise SanityError(where + "; ".join(problems))
        return True


@rfm.simple_test
class Streams(RepeatedProbe, StreamsBase):
    """One pair, two pairs at once on one node; pairs across nodes."""

    layout = parameter(["pair", "pairs", "cross"])
    tags = {"workload", "streams"}

    def figure_units(self) -> dict[str, str]:
        return UNITS

    def run_results(self) -> list[StreamsResult]:
        return [parse_streams(text) for text in self.run_outputs()]

    def problems(self, result: StreamsResult) -> list[str]:
        problems = super().problems(result)
        if self.layout == "cross":
            problems += [f"stream {s.stream} stayed on node {s.tx_host}"
                         for s in result.streams if not s.crosses_nodes]
        return problems


@rfm.simple_test
class StreamsFanIn(MeteredJob, StreamsBase):
    """Two transmitters into one receiver: no loss, and each stream gets a fair share.

    The single-stream rate is measured first in the same job; ``fanin_share`` is
    the slowest stream's rate over (single-stream rate / 2): 1.0 is an exactly
    fair split of one stream's worth, below 1 a stream is starved.
    """

    layout = variable(str, value="fanin", loggable=True)
    fanin = variable(int, value=2, loggable=True)
    #: Slowest stream / fastest stream must be at least this.
    min_fairness = variable(float, value=0.5, loggable=False)

    tags = {"workload", "streams"}

    def placement(self) -> tuple[int, int]:
        return 1, self.fanin + 1

    @run_after("setup")
    def add_fanin_option(self) -> None:
        self.executable_opts += ["-k", str(self.fanin)]

    @run_before("run")
    def single_stream_baseline(self) -> None:
        argv = launcher_argv(self, 2)
        self.prerun_cmds += [" ".join([*argv, self.probe_path(), *self.probe_options("pairs"),
                                       "> baseline.out"])]
        self.keep_files = [*self.keep_files, "baseline.out"]

    def references_wanted(self) -> dict[str, tuple[str, int | None, bool]]:
        return {**super().references_wanted(),
                "fanin_share": ("fanin_share", self.message_size, True)}

    def problems(self, result: StreamsResult) -> list[str]:
        problems = super().problems(result)
        if result.fairness < self.min_fairness:
            rates = ", ".join(f"{s.rate_gbps:.2f}" for s in result.streams)
            problems.append(f"unfair fan-in: stream rates {rates} Gbit/s (slowest/fastest "
                            f"{result.fairness:.2f} < {self.min_fairness})")
        return problems

    @run_before("performance")
    def set_perf_variables(self) -> None:
        result = self.result()
        figures = result.figures() if result.streams else {}
        self.perf_variables = {
            name: sn.make_performance_function(lambda name=name: figures[name], unit)
            for name, unit in UNITS.items()
        }
        self.perf_variables["fanin_share"] = sn.make_performance_function(
            self._fanin_share, "x fair share")

    def _fanin_share(self) -> float:
        single = parse_streams(self.output_text("baseline.out")).min_rate_gbps
        streams = self.result().streams
        return min(s.rate_gbps for s in streams) / (single / len(streams)) if single else 0.0

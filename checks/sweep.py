"""Sweep: every node of a partition (or of a node list or reservation) in rounds of concurrent
pairs, to name a bad node or a bad link (docs/isolation.md).

One job, one rank per node, runs ``fabreg_sweep``: up to 32 nodes every pair in n-1 rounds of
disjoint pairs (round robin; ``-S pattern=shifts`` for ring shifts), above that recursive
halving (log2 n rounds). Each pair's bandwidth and latency is
judged against the other pairs of the same run (``fabreg.isolation``): no reference is needed.
A node slow in most of its pairs, or a slow pair of two otherwise healthy nodes, fails the
check naming it, once a second sweep in the same job (run only when the first names a
suspect) names it again; one named once is logged as ``flaky``. Each pair is logged as its own
per-link series (``pair_table``, from the first sweep), which ``fabreg isolate``, ``trends``
and the report read.
"""

import json
import math
import shlex
import sys
from pathlib import Path
from statistics import median

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.backends import getlauncher
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import PerformanceError, SanityError
from reframe.core.logging import getlogger

from fabreg import isolation, schema
from fabreg.run import sweep_suspects
from fabreg.run.parsers.probes import ProbeOutputError, SweepResult, parse_sweep
from fabreg.run.siteconfig import pinned_node_count
from fabreg.testlib.base import max_nodes, partitions, reframe_errors, stage_json
from fabreg.testlib.metering import MeteredJob
from fabreg.testlib.workloads import ProbeCheck

MB = 1 << 20
#: The confirming sweep's output (stage and output directory).
CONFIRMATION = "sweep-confirmation.out"
#: The first sweep's launch (``fabreg.run.launch --result``): whether it hung after its table.
LAUNCH = "sweep-launch.json"
#: Up to this many nodes the sweep measures every pair (n - 1 rounds).
ALL_PAIRS_UP_TO = 32


@rfm.simple_test
class Sweep(MeteredJob, ProbeCheck):
    """fabreg_sweep over all nodes: per-pair bandwidth and latency, suspects named."""

    benchmark = "fabreg_sweep"
    tags = {"sweep"}
    #: One transport per MPI: the fabric's RDMA path where there is one, else TCP (another
    #: transport over the same fabric would name the same suspects twice).
    transport = parameter(["ucx_rc", "tcp"])
    time_limit = "10m"

    #: Rounds: ``pairs`` (round robin: every pair both ways), ``shifts`` (ring shifts: every
    #: ordered pair), ``xor`` (recursive halving, log2 n rounds) or ``auto`` (pairs up to
    #: ALL_PAIRS_UP_TO nodes, else xor).
    pattern = variable(str, value="auto", loggable=True)
    #: At most this many rounds of the pattern (0: all).
    max_rounds = variable(int, value=0, loggable=True)
    #: Bandwidth message size, messages per measurement, messages in flight, repeats (best).
    message_size = variable(int, value=MB, loggable=True)
    count = variable(int, value=16, loggable=True)
    window = variable(int, value=4, loggable=True)
    repeats = variable(int, value=5, loggable=True)
    #: Ping-pongs per pair for the latency (median).
    iterations = variable(int, value=200, loggable=True)
    #: The pairs' figures, JSON (``fabreg.schema.PAIR_TABLE``): read into per-link series.
    pair_table = variable(str, value="", loggable=True)
    #: The suspects this run named, one line each (empty: none).
    suspects_named = variable(str, value="", loggable=True)
    #: Seconds the sweep may go on after printing its complete table before it is ended as
    #: hung, its pairs kept (``fabreg.run.launch``; 3 s once a launch of the run hung so).
    #:
    #: :type: ``float``
    #: :default: ``20.0``
    hang_grace = variable(float, value=20.0, loggable=False)

    @run_after("init")
    def sweep_whole_partitions(self) -> None:
        """One case per partition: its node count; never fewer than 2 nodes."""
        if self.nodes < 2:
            self.impossible()
            return
        parts = partitions()
        if parts:
            self.valid_systems = [p.fullname for p in parts if p.fullname in self.valid_systems
                                  and max_nodes(p) == self.nodes]
        self.descr = f"fabreg_sweep over {self.nodes} nodes"

    def sweep_nodes(self) -> int:
        with reframe_errors():
            try:
                pinned = pinned_node_count()
            except ValueError as err:
                self.skip(f"FABREG_NODELIST: {err}")
        return self.nodes if pinned is None else min(pinned, self.nodes)

    def placement(self) -> tuple[int, int]:
        nodes = self.sweep_nodes()
        self.skip_if(nodes < 2, f"a sweep needs at least 2 nodes; the run is pinned to {nodes}")
        return nodes, 1

    @run_after("setup")
    def set_options(self) -> None:
        if self.pattern == "auto":
            self.pattern = "pairs" if self.sweep_nodes() <= ALL_PAIRS_UP_TO else "xor"
        self.skip_if(self.pattern not in ("pairs", "shifts", "xor"),
                     f"pattern must be pairs, shifts, xor or auto, not {self.pattern!r}")
        self.executable_opts = ["-p", self.pattern, "-s", str(self.message_size),
                                "-n", str(self.count), "-w", str(self.window),
                                "-r", str(self.repeats), "-i", str(self.iterations),
                                "-R", str(self.max_rounds)]

    def graced_launch(self, sweep: list[str], output: str | None) -> list[str]:
        """``sweep`` run through ``fabreg.run.launch``: ended ``hang_grace`` s after its
        complete results if it has not exited (MPICH 4.0 with UCX over TCP hangs in
        ``MPI_Finalize``: a 4-node sweep waited out its 10-min limit with its table
        printed)."""
        return [sys.executable, "-m", "fabreg.run.launch", "--until", f"# end {self.benchmark}",
                "--grace", f"{self.hang_grace:g}", "--hang-note", self.hang_note(),
                *(["--output", output] if output else ["--result", LAUNCH]), "--", *sweep]

    @run_before("run", always_last=True)
    def launch_graced_and_confirm_suspects(self) -> None:
        """The sweep through the graced launcher; after it, while the job is still metered,
        the same sweep again, only when the first named a suspect
        (``fabreg.run.sweep_suspects``)."""
        sweep = [*self.launcher_argv(), self.executable, *self.executable_opts]
        first = shlex.quote(str(self.stdout.evaluate()))
        self.postrun_cmds = [
            f"if {shlex.quote(sys.executable)} -m fabreg.run.sweep_suspects {first}; then "
            f"{shlex.join(self.graced_launch(sweep, CONFIRMATION))}; fi", *self.postrun_cmds]
        self.job.launcher = getlauncher("local")()
        # ReFrame joins the command unquoted: '# end ...' would start a shell comment
        self.executable, *self.executable_opts = map(shlex.quote,
                                                     self.graced_launch(sweep, None))
        self.keep_files = [*self.keep_files, CONFIRMATION, LAUNCH]

    @run_before("performance")
    def warn_of_a_hang(self) -> None:
        """Say so when the sweep was ended after its table (``fabreg.run.launch``)."""
        if (stage_json(self.stagedir, LAUNCH) or {}).get("hung_after_results"):
            getlogger().warning(
                f"{self.display_name}: the sweep printed its complete results and then hung; "
                f"ended after at most {self.hang_grace:g} s, its pairs are judged")

    def result(self) -> SweepResult:
        with reframe_errors():
            return parse_sweep(self.output_text())

    def confirmation(self) -> list[isolation.Suspect] | None:
        """The confirming sweep's suspects; None when it did not run or printed no sweep."""
        path = Path(self.stagedir, CONFIRMATION)
        try:
            return isolation.suspects_of(sweep_suspects.localise_sweep(
                parse_sweep(path.read_text(errors="replace"))))
        except (OSError, ValueError, ProbeOutputError):
            return None

    @sanity_function
    def every_node_and_pair_measured(self) -> bool:
        result = self.result()
        if len(result.nodes) != self.num_nodes:
            raise SanityError(f"the sweep ran on {len(result.nodes)} host(s) "
                              f"({', '.join(result.nodes)}), expected {self.num_nodes}")
        bad = [f"{p.node_a}->{p.node_b}" for p in result.pairs
               if not (math.isfinite(p.bandwidth_mbs) and p.bandwidth_mbs > 0
                       and math.isfinite(p.latency_us) and p.latency_us > 0)]
        if bad:
            raise SanityError(f"pairs without a measurement: {', '.join(bad)}")
        return True

    def localisations(self) -> list[isolation.Localisation]:
        return sweep_suspects.localise_sweep(self.result())

    @run_before("performance")
    def log_pairs(self) -> None:
        if self.is_dry_run():  # nothing ran: no table to log
            return
        result = self.result()
        self.pair_table = json.dumps({
            "fields": list(schema.PAIR_TABLE_FIELDS),
            "rows": [[r.round, r.pattern, r.node_a, r.node_b, _finite(r.bandwidth_mbs),
                      _finite(r.latency_us), _finite(r.latency_p50_us)] for r in result.rows],
        }, separators=(",", ":"))
        found = isolation.suspects_of(self.localisations())
        again = self.confirmation() if found else []
        if again is None:
            named, once = [], found
            why = isolation.NO_CONFIRMING_SWEEP
        else:
            named, once = sweep_suspects.confirmed(found, again)
            why = isolation.NOT_NAMED_AGAIN
        self.suspects_named = isolation.suspects_named(named, once, why)
        self.perf_variables = {
            "pair_bandwidth": sn.make_performance_function(
                lambda: median(p.bandwidth_mbs for p in self.result().pairs), "MB/s"),
            "pair_latency": sn.make_performance_function(
                lambda: median(p.latency_us for p in self.result().pairs), "us"),
            "suspects": sn.make_performance_function(lambda: len(named), "count"),
        }

    @run_after("performance")
    def name_the_suspects(self) -> None:
        """Fail naming the confirmed suspects; measured while other work took the CPUs: say
        so instead. Suspects only the first sweep named are logged as flaky and pass."""
        if not isolation.read_suspects_named(self.suspects_named).fails():
            return
        if self.contended():
            self.suspects_named = isolation.inconclusive_suspects_named(
                self.suspects_named, self.contention_note())
            return
        raise PerformanceError(f"suspects: {self.suspects_named}")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None

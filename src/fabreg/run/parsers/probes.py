"""Parse the result blocks of fabreg's own workload probes (src/probes/fabreg_*.c).

Every probe prints one block on rank 0 (format in docs/workloads.md)::

    # fabreg_<probe> v1 key=value ...        parameters of the run
    # col1 col2 ...                          column names
    value value ...                          rows (whitespace-separated)
    # end fabreg_<probe> status=ok key=value summary figures

A block without its ``# end`` line was cut short (crash, abort, time limit) and
is reported as incomplete rather than read as a partial result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabreg.errors import FabregError
from fabreg.run.parsers.transport_log import benchmark_lines

_KV = re.compile(r"(\w+)=(\S+)")


class ProbeOutputError(FabregError):
    """A probe's output has no complete result block."""


def _number(text: str) -> float | int | str:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


@dataclass
class ProbeBlock:
    """One result block: run parameters, table rows, and the closing summary."""

    probe: str
    params: dict[str, float | int | str] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, float | int | str]] = field(default_factory=list)
    summary: dict[str, float | int | str] = field(default_factory=dict)
    complete: bool = False

    @property
    def status(self) -> str | None:
        value = self.summary.get("status")
        return None if value is None else str(value)


def parse_block(text: str, probe: str) -> ProbeBlock:
    """The first ``fabreg_<probe>`` block in ``text``; raises ProbeOutputError if absent or cut."""
    name = probe if probe.startswith("fabreg_") else f"fabreg_{probe}"
    start = re.compile(rf"^# {re.escape(name)} v\d+\b(?P<rest>.*)$")
    end = re.compile(rf"^# end {re.escape(name)}\b(?P<rest>.*)$")
    block: ProbeBlock | None = None
    for raw in benchmark_lines(text):
        line = raw.strip()
        if block is None:
            if m := start.match(line):
                block = ProbeBlock(probe=name)
                block.params = {k: _number(v) for k, v in _KV.findall(m["rest"])}
            continue
        if m := end.match(line):
            block.summary = {k: _number(v) for k, v in _KV.findall(m["rest"])}
            block.complete = True
            break
        if line.startswith("["):  # MPI/UCX log lines ("[host:pid] ...") between rows
            continue
        if line.startswith("#"):
            if not block.columns:
                block.columns = line.lstrip("#").split()
            continue
        tokens = line.split()
        if block.columns and len(tokens) == len(block.columns):
            block.rows.append({c: _number(t) for c, t in zip(block.columns, tokens)})
    if block is None:
        raise ProbeOutputError(f"no '# {name}' result block in the output")
    if not block.complete:
        raise ProbeOutputError(f"the {name} result block is cut short (no '# end {name}' line)")
    return block


# --- streams -------------------------------------------------------------------

@dataclass(frozen=True)
class Stream:
    """One transmitter -> receiver stream as its receiver saw it."""

    stream: int
    tx: int
    rx: int
    tx_host: str
    rx_host: str
    sent: int
    received: int
    missed: int
    corrupted: int
    duplicate: int
    rate_gbps: float
    loss_rate: float

    @property
    def crosses_nodes(self) -> bool:
        return self.tx_host != self.rx_host


@dataclass(frozen=True)
class StreamsResult:
    placement: str
    size: int
    count: int
    streams: list[Stream]

    @property
    def total_missed(self) -> int:
        return sum(s.missed for s in self.streams)

    @property
    def total_corrupted(self) -> int:
        return sum(s.corrupted for s in self.streams)

    @property
    def min_rate_gbps(self) -> float:
        return min(s.rate_gbps for s in self.streams)

    @property
    def aggregate_rate_gbps(self) -> float:
        return sum(s.rate_gbps for s in self.streams)

    @property
    def fairness(self) -> float:
        """Slowest stream over fastest (1.0 = perfectly even sharing)."""
        fastest = max(s.rate_gbps for s in self.streams)
        return self.min_rate_gbps / fastest if fastest > 0 else 0.0

    @property
    def max_loss_rate(self) -> float:
        return max(s.loss_rate for s in self.streams)

    def figures(self) -> dict[str, float]:
        """The judged figures: slowest stream and all streams (Gbit/s), worst loss rate."""
        return {"rate_min": self.min_rate_gbps, "rate_total": self.aggregate_rate_gbps,
                "loss_rate": self.max_loss_rate}


def parse_streams(text: str) -> StreamsResult:
    block = parse_block(text, "streams")
    streams = [
        Stream(
            stream=int(r["stream"]), tx=int(r["tx"]), rx=int(r["rx"]),
            tx_host=str(r["tx_host"]), rx_host=str(r["rx_host"]),
            sent=int(r["sent"]), received=int(r["received"]), missed=int(r["missed"]),
            corrupted=int(r["corrupted"]), duplicate=int(r["duplicate"]),
            rate_gbps=float(r["rate_gbps"]), loss_rate=float(r["loss_rate"]),
        )
        for r in block.rows
    ]
    expected = int(block.params.get("streams", len(streams)))
    if len(streams) != expected:
        raise ProbeOutputError(
            f"fabreg_streams announced {expected} streams but reported {len(streams)}")
    return StreamsResult(
        placement=str(block.params["placement"]), size=int(block.params["size"]),
        count=int(block.params["count"]), streams=streams,
    )


# --- tail latency ----------------------------------------------------------------

@dataclass(frozen=True)
class LatencyStats:
    """Per-iteration latency distribution of one phase, in microseconds."""

    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float
    mean_us: float
    min_us: float
    p99_over_p50: float


@dataclass(frozen=True)
class TailLatencyResult:
    """One run: the quiet phase, and the loaded phase when background pairs ran."""

    op: str
    size: int
    iterations: int
    blocks: int
    measured_ranks: int
    background_pairs: int
    #: Bytes per background message (0 when the probe did not say: older output).
    background_size: int
    background_rounds: int
    quiet: LatencyStats
    loaded: LatencyStats | None


def _stats(row: dict[str, float | int | str]) -> LatencyStats:
    return LatencyStats(
        p50_us=float(row["p50_us"]), p90_us=float(row["p90_us"]), p99_us=float(row["p99_us"]),
        max_us=float(row["max_us"]), mean_us=float(row["mean_us"]), min_us=float(row["min_us"]),
        p99_over_p50=float(row["p99_over_p50"]),
    )


def parse_tail_latency(text: str) -> TailLatencyResult:
    block = parse_block(text, "tail_latency")
    phases = {str(r["phase"]): r for r in block.rows}
    p = block.params
    if "quiet" not in phases:
        raise ProbeOutputError("fabreg_tail_latency printed no quiet row")
    if int(p["background_pairs"]) > 0 and "loaded" not in phases:
        raise ProbeOutputError("fabreg_tail_latency ran background pairs but printed no "
                               "loaded row")
    return TailLatencyResult(
        op=str(p["op"]), size=int(p["size"]), iterations=int(p["iterations"]),
        blocks=int(p["blocks"]), measured_ranks=int(p["measured_ranks"]),
        background_pairs=int(p["background_pairs"]),
        background_size=int(p.get("background_size", 0)),
        background_rounds=int(block.summary.get("background_rounds", 0)),
        quiet=_stats(phases["quiet"]),
        loaded=_stats(phases["loaded"]) if "loaded" in phases else None,
    )


# --- matmul ------------------------------------------------------------------------

#: Phases whose time counts as distributing the inputs (blocking: bcast + scatter).
MATMUL_DISTRIBUTE = ("bcast", "scatter", "distribute")

@dataclass(frozen=True)
class MatmulResult:
    """Phase breakdown of a distributed C = A*B, times in seconds: of its one run, or each
    phase's fastest of its ``runs`` (``fabreg_matmul --seconds``)."""

    n: int
    ranks: int
    mode: str
    phases: dict[str, float]
    total_s: float
    comm_s: float
    compute_s: float
    comm_fraction: float
    gflops: float
    verified: bool
    #: Multiplies the launch made (1 in the output of probes older than ``--seconds``).
    runs: int = 1

    @property
    def phase_sum_s(self) -> float:
        return sum(self.phases.values())

    def figures(self) -> dict[str, float]:
        """The judged figures: phase times (s), communication fraction, GFLOP/s."""
        return {
            "total": self.total_s,
            "distribute": sum(t for p, t in self.phases.items() if p in MATMUL_DISTRIBUTE),
            "compute": self.phases.get("compute", 0.0),
            "gather": self.phases.get("gather", 0.0),
            "comm_fraction": self.comm_fraction,
            "gflops": self.gflops,
        }


def parse_matmul(text: str) -> MatmulResult:
    block = parse_block(text, "matmul")
    phases = {str(r["phase"]): float(r["seconds"]) for r in block.rows}
    if "compute" not in phases:
        raise ProbeOutputError("fabreg_matmul block has no compute phase")
    s, p = block.summary, block.params
    return MatmulResult(
        n=int(p["n"]), ranks=int(p["ranks"]), mode=str(p["mode"]), phases=phases,
        total_s=float(s["total_s"]), comm_s=float(s["comm_s"]),
        compute_s=float(s["compute_s"]), comm_fraction=float(s["comm_fraction"]),
        gflops=float(s["gflops"]), verified=s.get("verify") == "pass",
        runs=int(p.get("runs", 1)),
    )


# --- sweep -------------------------------------------------------------------------

#: Rows of a sweep that measure one host alone (no network path): the controls.
SWEEP_CONTROLS = ("loopback", "memory")


@dataclass(frozen=True)
class SweepRow:
    """One row of fabreg_sweep: a directed pair of one round, or a control of one host."""

    round: int
    pattern: str  # "shift" | "xor" | "loopback" | "memory"
    node_a: str
    node_b: str
    rank_a: int
    rank_b: int
    bandwidth_mbs: float
    latency_us: float  # the best round trip's half: the path's own latency
    latency_p50_us: float  # the median one's, shown as evidence (nan for controls)

    @property
    def is_control(self) -> bool:
        return self.pattern in SWEEP_CONTROLS


@dataclass(frozen=True)
class SweepResult:
    pattern: str
    ranks: int
    rounds: int
    size: int
    seconds: float
    rows: list[SweepRow]

    @property
    def pairs(self) -> list[SweepRow]:
        return [r for r in self.rows if not r.is_control]

    @property
    def controls(self) -> list[SweepRow]:
        return [r for r in self.rows if r.is_control]

    @property
    def nodes(self) -> list[str]:
        return sorted({r.node_a for r in self.rows} | {r.node_b for r in self.rows})


def parse_sweep(text: str) -> SweepResult:
    block = parse_block(text, "sweep")
    rows = [SweepRow(round=int(r["round"]), pattern=str(r["pattern"]), node_a=str(r["node_a"]),
                     node_b=str(r["node_b"]), rank_a=int(r["rank_a"]), rank_b=int(r["rank_b"]),
                     bandwidth_mbs=float(r["bw_mbs"]), latency_us=float(r["lat_us"]),
                     latency_p50_us=float(r.get("lat_p50_us", "nan")))
            for r in block.rows]
    result = SweepResult(pattern=str(block.params["pattern"]), ranks=int(block.params["ranks"]),
                         rounds=int(block.params["rounds"]), size=int(block.params["size"]),
                         seconds=float(block.summary.get("seconds", 0.0)), rows=rows)
    expected = int(block.summary.get("pairs", len(result.pairs)))
    if len(result.pairs) != expected:
        raise ProbeOutputError(f"fabreg_sweep announced {expected} pairs but reported "
                               f"{len(result.pairs)}")
    return result

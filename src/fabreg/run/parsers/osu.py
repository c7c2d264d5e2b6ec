"""Parse OSU Micro-Benchmarks 7.x output (real OSU and fabreg's probes alike).

OSU exits 0 on a bad option and prints only its header, so a caller must judge
a run by the rows it printed, never by exit status: ``OsuResult.missing_sizes``
and ``OsuResult.validation_failures`` carry what the sanity check needs.
Lines that are not part of the table (MPI/UCX/Slurm chatter) are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabreg.run.failure_line import first_line
from fabreg.run.parsers.transport_log import benchmark_lines

_TITLE = re.compile(r"^# OSU MPI(?:-\w+)? (?P<title>.+?) Test v(?P<version>\S+)\s*$")
_DATATYPE = re.compile(r"^# Datatype: (?P<dtype>\S+?)\.?\s*$")
_COLUMNS = re.compile(r"^# Size\s+(?P<rest>.+)$")
_ROW = re.compile(r"^(?P<size>\d+)\s+(?P<rest>[-+0-9.eE]+(?:\s+\S+)*)\s*$")
_COLUMN_SPLIT = re.compile(r"\s{2,}")

# Titles as OSU 7.x prints them, keyed by binary name.
TITLES: dict[str, str] = {
    "osu_latency": "Latency",
    "osu_bw": "Bandwidth",
    "osu_bibw": "Bi-Directional Bandwidth",
    "osu_allreduce": "Allreduce Latency",
    "osu_bcast": "Broadcast Latency",
    "osu_alltoall": "All-to-All Personalized Exchange Latency",
    "osu_reduce": "Reduce Latency",
    "osu_allgather": "Allgather Latency",
    "osu_mbw_mr": "Multiple Bandwidth / Message Rate",
    "osu_multi_lat": "Multi Latency",
}


@dataclass
class OsuResult:
    """One OSU run: its header and its table, indexed by message size in bytes."""

    title: str | None = None
    version: str | None = None
    datatype: str | None = None
    columns: list[str] = field(default_factory=list)
    rows: dict[int, dict[str, float | str]] = field(default_factory=dict)
    preamble: list[str] = field(default_factory=list)

    @property
    def sizes(self) -> list[int]:
        return sorted(self.rows)

    @property
    def has_validation(self) -> bool:
        return "Validation" in self.columns

    @property
    def validation_failures(self) -> list[int]:
        """Sizes whose validation column says anything but Pass."""
        if not self.has_validation:
            return []
        return [s for s, row in sorted(self.rows.items()) if row.get("Validation") != "Pass"]

    def value(self, size: int, column: str | None = None) -> float:
        """The figure at ``size``: the first numeric column unless ``column`` is named."""
        row = self.rows[size]
        name = column or self.columns[0]
        return float(row[name])

    def missing_sizes(self, wanted: list[int]) -> list[int]:
        return [s for s in wanted if s not in self.rows]


def _split_columns(rest: str) -> list[str]:
    return [c.strip() for c in _COLUMN_SPLIT.split(rest.strip()) if c.strip()]


def _row_values(columns: list[str], rest: str) -> dict[str, float | str] | None:
    tokens = rest.split()
    if len(tokens) != len(columns):
        return None
    out: dict[str, float | str] = {}
    for name, token in zip(columns, tokens):
        if name == "Validation":
            out[name] = token
            continue
        try:
            out[name] = float(token)
        except ValueError:
            return None
    return out


def parse_osu(text: str) -> OsuResult:
    """Read the first OSU table in ``text``; unknown lines are kept in ``preamble``."""
    result = OsuResult()
    for line in benchmark_lines(text):
        if m := _TITLE.match(line):
            if result.title is None:
                result.title, result.version = m["title"], m["version"]
            continue
        if m := _DATATYPE.match(line):
            result.datatype = m["dtype"]
            continue
        if m := _COLUMNS.match(line):
            result.columns = _split_columns(m["rest"])
            continue
        if result.columns and (m := _ROW.match(line)):
            values = _row_values(result.columns, m["rest"])
            if values is not None:
                result.rows[int(m["size"])] = values
                continue
        if result.title is None and line:
            result.preamble.append(line)
    return result


#: Bytes per element of the datatypes OSU's ``-T`` selects and its ``# Datatype:`` line names.
DATATYPE_BYTES: dict[str, int] = {
    "MPI_CHAR": 1, "MPI_SIGNED_CHAR": 1, "MPI_UNSIGNED_CHAR": 1, "MPI_BYTE": 1,
    "MPI_SHORT": 2, "MPI_UNSIGNED_SHORT": 2, "MPI_INT": 4, "MPI_UNSIGNED": 4,
    "MPI_FLOAT": 4, "MPI_LONG": 8, "MPI_UNSIGNED_LONG": 8, "MPI_LONG_LONG": 8,
    "MPI_DOUBLE": 8, "MPI_LONG_DOUBLE": 16,
}
#: Reductions OSU ran on MPI_FLOAT before it printed a datatype line (5.x to 7.0).
_FLOAT_REDUCTIONS = ("osu_allreduce", "osu_reduce", "osu_reduce_scatter", "osu_iallreduce",
                     "osu_ireduce")


def element_bytes(result: OsuResult, benchmark: str) -> int:
    """The smallest message the run can have: one element of its datatype."""
    if result.datatype:
        return DATATYPE_BYTES.get(result.datatype.upper(), 1)
    return 4 if benchmark in _FLOAT_REDUCTIONS else 1


def expected_sizes(result: OsuResult, benchmark: str, low: int, high: int) -> list[int]:
    """The sizes a run of ``-m low:high`` must print: none below one element (OSU 7.5's
    collectives default to MPI_INT, so their tables start at 4 B)."""
    return powers_of_two(max(low, element_bytes(result, benchmark)), high)


def header_matches(result: OsuResult, benchmark: str) -> bool:
    """Did the output come from ``benchmark`` (e.g. ``osu_latency``)?"""
    return result.title == TITLES.get(benchmark)


def table_problem(result: OsuResult, benchmark: str, sizes: list[int]) -> str | None:
    """Why a run of ``benchmark`` asked for ``sizes`` is not a complete, valid table, or None."""
    expected = TITLES.get(benchmark, benchmark)
    if result.title is None:
        return f"{benchmark} printed no OSU header (expected '# OSU MPI {expected} Test')"
    if not header_matches(result, benchmark):
        return f"header says {result.title!r}, expected {expected!r} for {benchmark}"
    missing = result.missing_sizes(sizes)
    if missing:
        shown = ", ".join(map(str, missing[:6])) + (" ..." if len(missing) > 6 else "")
        return f"{benchmark}: no data row for {len(missing)} requested size(s): {shown}"
    failed = result.validation_failures
    if failed:
        return f"{benchmark}: validation failed at size(s) {', '.join(map(str, failed))}"
    return None


#: How MPIs and their launchers say a rank died: the first such line explains a cut table.
_ABORTS = re.compile(r"Assertion failed in file|internal ABORT|BAD TERMINATION|MPI_ABORT was "
                     r"invoked|Fatal error in|aborting job|Segmentation fault|"
                     r"noticed that process rank \d+ .* exited on signal")


def abort_line(text: str) -> str | None:
    """The first line of ``text`` in which an MPI or its launcher says a rank died, if any."""
    return first_line(text, _ABORTS)


def powers_of_two(low: int, high: int) -> list[int]:
    """The sizes OSU runs for ``-m low:high``."""
    sizes, size = [], max(1, low)
    while size <= high:
        sizes.append(size)
        size *= 2
    return sizes

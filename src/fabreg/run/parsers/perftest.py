"""Parse linux-rdma perftest (``ib_write_bw``, ``ib_read_lat``, ...) result tables.

perftest prints a banner, then one table whose header line starts with
``#bytes``; with ``-a`` there is one row per message size. Bandwidth tests print
``#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]`` (newer
releases say ``MiB/sec``, ``--report_gbits`` says ``Gb/sec``); latency tests print
``#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec]
t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]``, or in duration
mode (``-D``) only ``#bytes #iterations t_avg[usec] tps average``. Columns are
read from the header, so extra columns (bidirectional, CPU utilisation) pass through.

perftest's ``MB/sec`` and ``MiB/sec`` are both 2^20 bytes per second (its
source divides by 0x100000) and ``Gb/sec`` is 10^9 bits per second:
``PerftestTable.bandwidth_mbs`` converts either to decimal MB/s (10^6 B/s), the
unit OSU and ucx_perftest report, so the figures compare.

On a host without an RDMA device perftest prints ``Did not detect devices``;
``no_device_reason`` turns that into a skip reason; ``failure_reason`` names
the other failures perftest reports (peer gone, QP not connected, port down).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADER_START = re.compile(r"^\s*#bytes\b")
_COLUMN = re.compile(r"#\w+|tps average|[^\s\[\]][^\[\]]*?\[[^\]]*\]|[^\s\[\]]+")
_UNIT = re.compile(r"^(?P<name>.*?)\s*\[(?P<unit>[^\]]*)\]$")
_ROW = re.compile(r"^\s*\d+\s+\d+(\s+[-+0-9.eE]+)+\s*$")
_TITLE = re.compile(r"^\s*(?P<title>\S.*\b(?:BW|Lat|Latency) Test)\s*$")

# Printed column name (unit stripped) -> fabreg metric key.
_KEYS = {
    "#bytes": "bytes",
    "#iterations": "iterations",
    "BW peak": "bw_peak",
    "BW average": "bw_average",
    "MsgRate": "msg_rate",
    "t_min": "t_min",
    "t_max": "t_max",
    "t_typical": "t_typical",
    "t_avg": "t_avg",
    "t_stdev": "t_stdev",
    "99% percentile": "t_p99",
    "99.9% percentile": "t_p99_9",
    "tps average": "tps_average",
}
#: Bytes per second of one unit of each bandwidth unit perftest prints.
_BYTES_PER_S = {"MB/sec": 1 << 20, "MiB/sec": 1 << 20, "Gb/sec": 1e9 / 8}

_NO_DEVICE_MARKERS = ("Did not detect devices", "Unable to find the Infiniband/RoCE device")
#: (marker perftest prints, what it means), most specific first.
_FAILURES = (
    (re.compile(r"Couldn't read remote address"),
     "the peer's connection data never arrived (ethernet_read_keys: Couldn't read remote "
     "address): the other side failed or exited before the exchange"),
    (re.compile(r"Failed to modify QP(?: \d+)? to (?P<state>\w+)"),
     "the queue pair could not be brought to {state} (Failed to modify QP to {state}): "
     "the two ends disagree on addressing (GID index, LID, MTU) or the link is down"),
    (re.compile(r"Port number (?P<port>\d+) state is (?P<pstate>\w+)"),
     "port {port} of the RDMA device is {pstate}, not Active"),
    (re.compile(r"Couldn't connect to (?P<peer>\S+)"),
     "no perftest server answered at {peer} (Couldn't connect to {peer})"),
    (re.compile(r"Completion with error at (?P<side>client|server)"),
     "a work request completed with an error at the {side} (Completion with error)"),
    (re.compile(r"Couldn't allocate MR"), "memory registration failed (Couldn't allocate MR)"),
    (re.compile(r"Failed to create QP"), "creating the queue pair failed (Failed to create QP)"),
    (re.compile(r"Couldn't get (?:context for the device|device attributes)"),
     "the RDMA device could not be opened (Couldn't get context for the device)"),
    (re.compile(r"Link layer on port \d+ is Unknown"), "the port's link layer is unknown"),
    (re.compile(r"Unable to (?:open file descriptor for socket connection|init the socket "
                r"connection)"),
     "the control connection to the peer could not be set up"),
    (re.compile(r"Conflicting arguments|invalid option|unrecognized option"),
     "perftest rejected its options"),
    (re.compile(r"(?P<what>Number of iterations must be a multiple of post list size|"
                r"Events feature not available on WRITE verb)"),
     "perftest rejected its options ({what})"),
)


def _key(name: str) -> str:
    if name in _KEYS:
        return _KEYS[name]
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


@dataclass
class PerftestTable:
    """One perftest table: rows by message size, values by metric key.

    Metric keys: ``iterations``, ``bw_peak``, ``bw_average``, ``msg_rate`` (bw
    tests), ``t_min``, ``t_max``, ``t_typical``, ``t_avg``, ``t_stdev``,
    ``t_p99``, ``t_p99_9`` (lat tests); ``units`` maps each key to its printed unit.
    """

    title: str | None = None
    columns: list[str] = field(default_factory=list)
    units: dict[str, str] = field(default_factory=dict)
    rows: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def sizes(self) -> list[int]:
        return sorted(self.rows)

    def value(self, size: int, key: str) -> float:
        return self.rows[size][key]

    @property
    def duration_mode(self) -> bool:
        """A latency table of a ``-D`` run: average and transactions per second only."""
        return "tps_average" in self.columns

    def bandwidth_mbs(self, size: int, key: str = "bw_average") -> float:
        """A bandwidth column in decimal MB/s (10^6 B/s), converted from the printed unit."""
        unit = self.units.get(key, "")
        if unit not in _BYTES_PER_S:
            raise ValueError(f"column {key!r} is in {unit or 'no unit'!r}, not a bandwidth")
        return self.rows[size][key] * _BYTES_PER_S[unit] / 1e6


def parse_perftest(text: str) -> PerftestTable:
    """The first result table in ``text`` (empty when there is none)."""
    table = PerftestTable()
    for line in text.splitlines():
        if table.title is None and (m := _TITLE.match(line)):
            table.title = m["title"].strip()
            continue
        if not table.columns and _HEADER_START.match(line):
            for printed in _COLUMN.findall(line.strip()):
                um = _UNIT.match(printed)
                name, unit = (um["name"], um["unit"]) if um else (printed, "")
                key = _key(name.strip())
                table.columns.append(key)
                if unit:
                    table.units[key] = unit
            continue
        if table.columns and _ROW.match(line):
            tokens = line.split()
            if len(tokens) != len(table.columns):
                continue
            values = dict(zip(table.columns, (float(t) for t in tokens)))
            size = int(values.pop("bytes"))
            table.rows[size] = values
    return table


def no_device_reason(text: str) -> str | None:
    """A skip reason when perftest found no RDMA device, else ``None``."""
    if any(marker in text for marker in _NO_DEVICE_MARKERS):
        return ("no RDMA device: perftest says 'Did not detect devices' "
                "(no InfiniBand/RoCE device, or its driver is not loaded)")
    return None


def failure_reason(text: str) -> str | None:
    """Why a run has no result table, or ``None`` when it has one."""
    if reason := no_device_reason(text):
        return reason
    if parse_perftest(text).rows:
        return None
    for pattern, meaning in _FAILURES:
        if m := pattern.search(text):
            return "perftest failed: " + meaning.format(**m.groupdict())
    return "perftest printed no result table"

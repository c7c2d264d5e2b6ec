"""Parse linux-rdma perftest (``ib_write_bw``, ``ib_read_lat``, ...) result tables.

perftest prints a banner, then one table whose header line starts with
``#bytes``; with ``-a`` there is one row per message size. Bandwidth tests print
``#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]`` (newer
releases say ``MiB/sec``, ``--report_gbits`` says ``Gb/sec``); latency tests print
``#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec]
t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]``. Columns are read
from the header, so extra columns (bidirectional, CPU utilisation) pass through.

On a host without an RDMA device perftest prints ``Did not detect devices``;
``no_device_reason`` turns that into a skip reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADER_START = re.compile(r"^\s*#bytes\b")
_COLUMN = re.compile(r"#\w+|[^\s\[\]][^\[\]]*?\[[^\]]*\]|[^\s\[\]]+")
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
}

_NO_DEVICE_MARKERS = ("Did not detect devices", "Unable to find the Infiniband/RoCE device")
_FAILURE_MARKERS = (
    "Couldn't connect to",
    "Unable to open file descriptor for socket connection",
    "Couldn't get device attributes",
    "Failed to create QP",
    "Couldn't allocate MR",
    "Unable to init the socket connection",
    "Conflicting arguments",
    "invalid option",
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
    for line in text.splitlines():
        if any(marker in line for marker in _FAILURE_MARKERS):
            return "perftest failed: " + line.strip()
    return "perftest printed no result table"

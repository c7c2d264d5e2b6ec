"""Parse the client side of UCX ``ucx_perftest`` (table formats of UCX 1.0 to 1.19).

The client prints a table header and, with default options, one ``Final:`` row:
iterations, then p50 / average / overall of latency (ping-pong tests such as
``tag_lat``) or of per-message overhead (streaming tests such as ``tag_bw``,
``ucp_put_bw``), then bandwidth (MB/s) and message rate (msg/s), each as
average and overall. Releases before the ``Stage`` column (UCX 1.5 and
older) print no ``Final:`` label: their header reads ``| # iterations | typical
| ...`` and the last unlabelled row is the final one (a run cut short leaves
fewer iterations than asked, which the check compares). A failed run prints
``UCX  ERROR`` lines instead; they are turned into one reason a check can
report (or skip on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabreg.errors import FabregError

# ``inf``: the Final row's average over the last report interval when no iteration completed
# in it (seen with server and client squeezed onto one core); the other columns are valid.
_NUMBER = r"(?:[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|inf|nan)"
_FINAL = re.compile(r"^Final:\s+(?P<values>(?:" + _NUMBER + r"\s*){8})$")
_UNLABELLED = re.compile(r"^(?P<values>(?:" + _NUMBER + r"\s*){8})$")
_OLD_HEADER = re.compile(r"^\|\s*# iterations\s*\|")
_KIND = re.compile(r"\|\s*(?P<kind>latency|overhead) \(usec\)\s*\|")
_UNAVAILABLE = re.compile(
    r"transport '(?P<tl>[^']+)' is not available, please use one or more of: (?P<avail>.+)$"
)
_NO_DEVICE = re.compile(r"no usable transports/devices \(asked (?P<asked>[^)]*)\)")
_ERROR = re.compile(r"UCX\s+ERROR\s+(?P<msg>.+)$")


class UcxPerftestError(FabregError):
    """ucx_perftest printed no result; the message says why."""

    def __init__(self, reason: str, transport_unavailable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transport_unavailable = transport_unavailable


@dataclass(frozen=True)
class UcxPerftestResult:
    """The ``Final:`` row of one run; times in microseconds.

    ``kind`` is ``latency`` for ping-pong tests and ``overhead`` for streaming
    tests (the time columns then mean send overhead, not one-way latency).
    """

    kind: str
    iterations: int
    p50_usec: float
    average_usec: float
    overall_usec: float
    #: Bandwidth as printed: ucx_perftest's "MB/s" divides by 1024*1024 (MiB/s).
    bandwidth_average_mbs: float
    bandwidth_overall_mbs: float
    msgrate_average: float
    msgrate_overall: float

    @property
    def bandwidth_average_decimal_mbs(self) -> float:
        """The average bandwidth in decimal MB/s (10^6 B/s), as OSU and perftest are logged."""
        return self.bandwidth_average_mbs * (1 << 20) / 1e6


def failure_reason(text: str) -> str | None:
    """Why a run produced no result row, or ``None`` if it produced one."""
    try:
        parse_ucx_perftest(text)
    except UcxPerftestError as err:
        return err.reason
    return None


def _error_reason(lines: list[str]) -> UcxPerftestError:
    for line in lines:
        if m := _UNAVAILABLE.search(line):
            avail = m["avail"].strip()
            return UcxPerftestError(
                f"UCX transport '{m['tl']}' is not available on this host "
                f"(available: {avail})",
                transport_unavailable=True,
            )
    for line in lines:
        if m := _NO_DEVICE.search(line):
            return UcxPerftestError(
                f"UCX found no usable transport/device (asked {m['asked']})",
                transport_unavailable=True,
            )
    for line in lines:
        if "Connection refused" in line:
            return UcxPerftestError(
                "connection refused: no ucx_perftest server listening on that address and port"
            )
    errors = [m["msg"].strip() for line in lines if (m := _ERROR.search(line))]
    if errors:
        return UcxPerftestError("ucx_perftest failed: " + errors[-1])
    return UcxPerftestError("ucx_perftest printed no 'Final:' result row")


def parse_ucx_perftest(text: str) -> UcxPerftestResult:
    """The ``Final:`` row of ``text``; raises UcxPerftestError with a reason otherwise."""
    lines = text.splitlines()
    kind = None
    old_table = False
    last_unlabelled: list[str] | None = None
    for line in lines:
        if kind is None and (m := _KIND.search(line)):
            kind = m["kind"]
        if _OLD_HEADER.match(line.strip()):
            old_table = True
        if m := _FINAL.match(line.strip()):
            return _result(kind, m["values"].split())
        if old_table and (m := _UNLABELLED.match(line.strip())):
            last_unlabelled = m["values"].split()
    if last_unlabelled is not None:
        return _result(kind, last_unlabelled)
    raise _error_reason(lines)


def _result(kind: str | None, values: list[str]) -> UcxPerftestResult:
    return UcxPerftestResult(
        kind=kind or "latency",
        iterations=int(float(values[0])),
        p50_usec=float(values[1]),
        average_usec=float(values[2]),
        overall_usec=float(values[3]),
        bandwidth_average_mbs=float(values[4]),
        bandwidth_overall_mbs=float(values[5]),
        msgrate_average=float(values[6]),
        msgrate_overall=float(values[7]),
    )

"""Prometheus exposition of the newest value of every series, plus regression gauges.

Written as a node_exporter textfile (atomically: temporary file + rename in the same
directory) or served over HTTP by ``fabreg serve-metrics``. Metric names:

- ``fabreg_latency_us``: latency variables (``latency_*``, time units), in us;
- ``fabreg_bandwidth_mbps`` / ``fabreg_busbw_mbps``: bandwidth / bus bandwidth, MB/s;
- ``fabreg_value``: any other variable, with ``perfvar`` and ``unit`` labels;
- ``fabreg_regression_open``: 1 where the series' last change is a regression;
- ``fabreg_open_regressions``: count of those per system and partition;
- ``fabreg_last_run_timestamp_seconds``: newest run per system and partition.
"""

from __future__ import annotations

import http.server
import math
import os
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from fabreg.metrics import split_perfvar
from fabreg.review.store import SeriesData
from fabreg.review.trends import SeriesVerdict

LABELS = ("test", "benchmark", "size", "nodes", "mpi", "transport", "environ", "system",
          "partition")

_HELP = {
    "fabreg_latency_us": ("gauge", "Newest latency of a fabreg series, microseconds."),
    "fabreg_bandwidth_mbps": ("gauge", "Newest bandwidth of a fabreg series, MB/s."),
    "fabreg_busbw_mbps": ("gauge", "Newest collective bus bandwidth of a fabreg series, MB/s."),
    "fabreg_value": ("gauge", "Newest value of any other fabreg performance variable."),
    "fabreg_regression_open": ("gauge", "1 when the series' most recent change is a "
                                        "regression (fabreg trends), else 0."),
    "fabreg_open_regressions": ("gauge", "Number of series with an open regression."),
    "fabreg_last_run_timestamp_seconds": ("gauge", "Unix time of the newest ingested run."),
}


def escape(value: str) -> str:
    """A label value as the exposition format wants it (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series_labels(series: SeriesData) -> dict[str, str]:
    params = series.key.param
    size = split_perfvar(series.key.perfvar)[1]
    return {
        "test": series.key.test,
        "benchmark": params.get("benchmark", ""),
        "size": "" if size is None else str(size),
        "nodes": params.get("nodes", params.get("num_nodes", "")),
        "mpi": params.get("mpi", series.key.environ),
        "transport": params.get("transport", ""),
        "environ": series.key.environ,
        "system": series.key.system,
        "partition": series.key.partition,
    }


def _fmt_labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def _fmt_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


_MICROSECONDS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "usec": 1.0, "ms": 1e3, "s": 1e6}
#: MB/s as OSU prints it (10^6 bytes per second).
_MEGABYTES_PER_SECOND = {"B/s": 1e-6, "KB/s": 1e-3, "MB/s": 1.0, "GB/s": 1e3, "MiB/s": 1.048576,
                         "GiB/s": 1073.741824, "Gbit/s": 125.0, "Mbit/s": 0.125}


def to_microseconds(value: float, unit: str) -> float | None:
    factor = _MICROSECONDS.get(unit.strip())
    return None if factor is None else value * factor


def to_megabytes_per_second(value: float, unit: str) -> float | None:
    factor = _MEGABYTES_PER_SECOND.get(unit.strip())
    return None if factor is None else value * factor


def _metric(series: SeriesData, value: float) -> tuple[str, float, dict[str, str]]:
    """(metric name, value in the metric's unit, extra labels) for a series' value."""
    what = split_perfvar(series.key.perfvar)[0].lower()
    if what.startswith("lat") or what in ("time",):
        us = to_microseconds(value, series.unit)
        if us is not None:
            return "fabreg_latency_us", us, {}
    if what in ("bandwidth", "bw", "busbw", "algbw"):
        mbps = to_megabytes_per_second(value, series.unit)
        if mbps is not None:
            name = "fabreg_busbw_mbps" if what == "busbw" else "fabreg_bandwidth_mbps"
            return name, mbps, {}
    return "fabreg_value", value, {"perfvar": series.key.perfvar, "unit": series.unit}


def render(all_series: list[SeriesData], verdicts: list[SeriesVerdict]) -> str:
    """The whole exposition text (textfile and HTTP share it)."""
    samples: dict[str, dict[str, str]] = defaultdict(dict)  # metric -> labels text -> line
    open_by_place: dict[tuple[str, str], int] = defaultdict(int)
    last_by_place: dict[tuple[str, str], float] = {}
    open_ids = {v.series.id for v in verdicts if v.open_regression}
    for series in all_series:
        if len(series) == 0:
            continue
        place = (series.key.system, series.key.partition)
        last_by_place[place] = max(last_by_place.get(place, 0.0), float(series.time[-1]))
        labels = series_labels(series)
        name, value, extra = _metric(series, float(series.value[-1]))
        if name != "fabreg_value" and labels["size"] == "":
            extra = {"perfvar": series.key.perfvar}
        full = {**labels, **extra}
        text = _fmt_labels(full)
        samples[name][text] = f"{name}{text} {_fmt_value(value)}"
        is_open = series.id in open_ids
        open_by_place[place] += int(is_open)
        reg_labels = _fmt_labels({**labels, "perfvar": series.key.perfvar})
        samples["fabreg_regression_open"][reg_labels] = \
            f"fabreg_regression_open{reg_labels} {int(is_open)}"
    for (system, partition), count in sorted(open_by_place.items()):
        text = _fmt_labels({"system": system, "partition": partition})
        samples["fabreg_open_regressions"][text] = f"fabreg_open_regressions{text} {count}"
    for (system, partition), stamp in sorted(last_by_place.items()):
        text = _fmt_labels({"system": system, "partition": partition})
        samples["fabreg_last_run_timestamp_seconds"][text] = \
            f"fabreg_last_run_timestamp_seconds{text} {_fmt_value(stamp)}"
    lines = []
    for name in _HELP:
        if name not in samples:
            continue
        mtype, helptext = _HELP[name]
        lines.append(f"# HELP {name} {helptext}")
        lines.append(f"# TYPE {name} {mtype}")
        lines.extend(samples[name][k] for k in sorted(samples[name]))
    return "\n".join(lines) + "\n"


def write_textfile(text: str, out: Path) -> None:
    """Atomic write: node_exporter never sees a half-written file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class MetricsServer(http.server.ThreadingHTTPServer):
    """Serves ``render()`` output at ``/metrics``, computed afresh per request."""

    daemon_threads = True

    def __init__(self, host: str, port: int, produce: Callable[[], str]) -> None:
        self.produce = produce
        self.lock = threading.Lock()
        super().__init__((host, port), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.split("?")[0] not in ("/metrics", "/"):
            self.send_error(404, "try /metrics")
            return
        try:
            with self.server.lock:
                body = self.server.produce().encode()
        except Exception as err:  # the store may be mid-write or gone: say so, keep serving
            self.send_error(503, f"cannot read the store: {err}")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet by default
        pass

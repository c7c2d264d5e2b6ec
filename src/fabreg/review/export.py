"""Prometheus metrics of the store, through prometheus-client: a custom collector.

One collector (:class:`StoreCollector`) turns the newest value of every series and the
trend verdicts into metric families; ``fabreg export prometheus`` writes them with
``prometheus_client.write_to_textfile`` (node_exporter textfile, atomic rename) and
``fabreg serve-metrics`` serves them with prometheus-client's HTTP server, computed per
scrape. Metric names:

- ``fabreg_latency_us``: latency variables (``latency_*``, time units), in us;
- ``fabreg_bandwidth_mbps`` / ``fabreg_busbw_mbps``: bandwidth / bus bandwidth, MB/s;
- ``fabreg_value``: any other variable (with a ``unit`` label);
- ``fabreg_regression_open`` / ``fabreg_regression_suspect``: 1 where the series' last change
  is an open regression / a suspect (fabreg trends), else 0;
- ``fabreg_open_regressions`` / ``fabreg_suspects``: their counts per system and partition;
- ``fabreg_last_run_timestamp_seconds``: newest run per system and partition;
- ``fabreg_store_up``: 1 when the store could be read for this scrape.

Labels are the series identity (``fabreg.review.store.SeriesKey``): ``test``, ``system``,
``partition``, ``environ``, ``perfvar`` and one label per series parameter (``transport``,
``mpi``, ``num_nodes``, ``buffer``, ``qps``, ``mode``, a site's own columns...), so no two
series share a label set; ``size`` (bytes, from the variable's suffix) is added for
dashboards. Why: a fixed label set made series that differ in another parameter overwrite
each other, which hid regressions.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from fabreg.errors import FabregError
from fabreg.metrics import split_perfvar
from fabreg.review.store import SeriesData
from fabreg.review.trends import SeriesVerdict

#: Labels every per-series sample carries, in this order; series parameters follow.
SERIES_LABELS: tuple[str, ...] = ("test", "system", "partition", "environ", "perfvar", "size")
#: Label names a parameter cannot take as they are: ours above, ``unit``, and the ones
#: Prometheus sets itself at scrape time (``job``, ``instance``) or gives a meaning
#: (``le``, ``quantile``). Such a parameter is exported as ``param_<name>``.
RESERVED_LABELS: frozenset[str] = frozenset(SERIES_LABELS) | {"unit", "job", "instance", "le",
                                                             "quantile"}
#: A parameter logged with an empty value; Prometheus drops empty labels, which would make
#: the series look like one without the parameter.
EMPTY_VALUE = "(empty)"

_HELP = {
    "fabreg_latency_us": "Newest latency of a fabreg series, microseconds.",
    "fabreg_bandwidth_mbps": "Newest bandwidth of a fabreg series, MB/s.",
    "fabreg_busbw_mbps": "Newest collective bus bandwidth of a fabreg series, MB/s.",
    "fabreg_value": "Newest value of any other fabreg performance variable.",
    "fabreg_regression_open": "1 when the series' most recent change is a regression "
                              "(fabreg trends), else 0.",
    "fabreg_regression_suspect": "1 when the series ends in a change not yet confirmed by "
                                 "enough runs (fabreg trends: suspect), else 0.",
}
_MICROSECONDS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "usec": 1.0, "ms": 1e3, "s": 1e6}
#: MB/s as OSU prints it (10^6 bytes per second).
_MEGABYTES_PER_SECOND = {"B/s": 1e-6, "KB/s": 1e-3, "MB/s": 1.0, "GB/s": 1e3, "MiB/s": 1.048576,
                         "GiB/s": 1073.741824, "Gbit/s": 125.0, "Mbit/s": 0.125}
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def to_microseconds(value: float, unit: str) -> float | None:
    factor = _MICROSECONDS.get(unit.strip())
    return None if factor is None else value * factor


def to_megabytes_per_second(value: float, unit: str) -> float | None:
    factor = _MEGABYTES_PER_SECOND.get(unit.strip())
    return None if factor is None else value * factor


def label_name(parameter: str) -> str:
    """A valid Prometheus label name for a parameter: ``[a-zA-Z_][a-zA-Z0-9_]*``, not
    starting with ``__`` (reserved by Prometheus), not one of ``RESERVED_LABELS``."""
    name = _INVALID.sub("_", parameter) or "_"
    if name[0].isdigit() or name.startswith("__") or name in RESERVED_LABELS:
        name = "param_" + name.lstrip("_")
    return name


def parameter_labels(all_series: Iterable[SeriesData]) -> dict[str, str]:
    """Parameter -> its label name, one-to-one. A parameter whose name is a valid label keeps
    it; one that cleans up to a name already taken (``num-nodes`` next to ``num_nodes``) gets
    ``_2``, ``_3``... in sorted order."""
    names = sorted({k for s in all_series for k, _ in s.key.params},
                   key=lambda k: (label_name(k) != k, k))
    out: dict[str, str] = {}
    taken: set[str] = set()
    for parameter in names:
        label = base = label_name(parameter)
        n = 1
        while label in taken:
            n += 1
            label = f"{base}_{n}"
        taken.add(label)
        out[parameter] = label
    return out


def _metric(series: SeriesData, value: float) -> tuple[str, float]:
    """(metric name, value in the metric's unit) for a series' newest value."""
    what = split_perfvar(series.key.perfvar)[0].lower()
    if what.startswith("lat") or what == "time":
        us = to_microseconds(value, series.unit)
        if us is not None:
            return "fabreg_latency_us", us
    if what in ("bandwidth", "bw", "busbw", "algbw"):
        mbps = to_megabytes_per_second(value, series.unit)
        if mbps is not None:
            return ("fabreg_busbw_mbps" if what == "busbw" else "fabreg_bandwidth_mbps"), mbps
    return "fabreg_value", value


def metric_families(all_series: list[SeriesData],
                    verdicts: list[SeriesVerdict]) -> list[Metric]:
    """The store's metric families (textfile and HTTP share them)."""
    present = [s for s in all_series if len(s)]
    params = parameter_labels(present)
    param_names = sorted(params, key=params.__getitem__)
    label_names = [*SERIES_LABELS, *(params[p] for p in param_names)]
    families: dict[str, GaugeMetricFamily] = {}
    for name, text in _HELP.items():
        extra = ["unit"] if name == "fabreg_value" else []
        families[name] = GaugeMetricFamily(name, text, labels=label_names + extra)
    by_id = {v.series.id: v for v in verdicts}
    open_by_place: dict[tuple[str, str], int] = defaultdict(int)
    suspect_by_place: dict[tuple[str, str], int] = defaultdict(int)
    last_by_place: dict[tuple[str, str], float] = {}
    for series in present:
        key = series.key
        place = (key.system, key.partition)
        last_by_place[place] = max(last_by_place.get(place, 0.0), float(series.time[-1]))
        size = split_perfvar(key.perfvar)[1]
        given = key.param
        values = [key.test, key.system, key.partition, key.environ, key.perfvar,
                  "" if size is None else str(size)]
        values += [("" if p not in given else given[p] or EMPTY_VALUE) for p in param_names]
        name, value = _metric(series, float(series.value[-1]))
        families[name].add_metric(values + ([series.unit] if name == "fabreg_value" else []),
                                  value)
        verdict = by_id.get(series.id)
        is_open = bool(verdict and verdict.open_regression)
        is_suspect = bool(verdict and verdict.suspect)
        open_by_place[place] += is_open
        suspect_by_place[place] += is_suspect
        families["fabreg_regression_open"].add_metric(values, int(is_open))
        families["fabreg_regression_suspect"].add_metric(values, int(is_suspect))
    out: list[Metric] = [f for f in families.values() if f.samples]
    for name, text, data in (
            ("fabreg_open_regressions", "Number of series with an open regression.",
             open_by_place),
            ("fabreg_suspects", "Number of series ending in a suspect change.",
             suspect_by_place),
            ("fabreg_last_run_timestamp_seconds", "Unix time of the newest ingested run.",
             last_by_place)):
        family = GaugeMetricFamily(name, text, labels=["system", "partition"])
        for (system, partition), value in sorted(data.items()):
            family.add_metric([system, partition], value)
        out.append(family)
    return out


def store_up(up: bool) -> GaugeMetricFamily:
    return GaugeMetricFamily("fabreg_store_up", "1 when fabreg could read its store for this "
                             "scrape, else 0 (the error is printed by serve-metrics).",
                             value=int(up))


class StoreCollector(Collector):
    """Metric families computed by ``load`` on every collection.

    ``load`` returns the series and their verdicts. When it fails (the store is missing,
    locked or mid-rewrite) the scrape still answers, with ``fabreg_store_up 0`` and the
    error on stderr, instead of a server error: Prometheus then shows the store as down.
    ``extra`` adds exposition text from elsewhere (``fabreg stress``'s latencies).
    """

    def __init__(self, load: Callable[[], tuple[list[SeriesData], list[SeriesVerdict]]],
                 extra: Callable[[], list[str]] | None = None, strict: bool = False) -> None:
        self.load = load
        self.extra = extra
        self.strict = strict  # raise instead of answering fabreg_store_up 0

    def collect(self) -> Iterator[Metric]:
        try:
            all_series, verdicts = self.load()
        except Exception as err:
            if self.strict:
                raise
            print(f"fabreg: warning: cannot read the store: {err}", file=sys.stderr, flush=True)
            yield store_up(False)
        else:
            yield from metric_families(all_series, verdicts)
            yield store_up(True)
        if self.extra is not None:
            lines = self.extra()
            if lines:
                yield from text_string_to_metric_families("\n".join(lines) + "\n")


def registry_for(collector: StoreCollector) -> CollectorRegistry:
    """A registry of the collector alone (no process or platform metrics of this Python)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def write_textfile(collector: StoreCollector, out: Path) -> None:
    """Write the node_exporter textfile atomically (temporary file + rename in its
    directory). The directory must exist: a typo in a path is an error, not a new tree."""
    if not out.parent.is_dir():
        raise FabregError(f"cannot write {out}: no directory {out.parent} (create it first)")
    if out.is_dir():
        raise FabregError(f"cannot write {out}: it is a directory")
    try:
        write_to_textfile(str(out), registry_for(collector))
    except OSError as err:
        raise FabregError(f"cannot write {out}: {err.strerror or err}") from None
    out.chmod(0o644)


def serve(collector: StoreCollector, host: str, port: int) -> tuple[object, object]:
    """Start prometheus-client's HTTP server (a daemon thread) on ``host:port``; return
    (server, thread). ``port`` 0 picks a free port (``server.server_address``)."""
    try:
        return start_http_server(port, addr=host, registry=registry_for(collector))
    except OSError as err:
        raise FabregError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    except OverflowError as err:
        raise FabregError(f"cannot listen on {host}:{port}: {err}") from None

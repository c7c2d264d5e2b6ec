"""``fabreg export prometheus`` and ``fabreg serve-metrics``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabreg.cli.since_option import since_time
from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review import export, isolation_metrics, standing, trends
from fabreg.review.gc_pause import collector_paused
from fabreg.review.progress import Progress
from fabreg.review.store import SeriesData, Store
from fabreg.review.sweeps import latest_sweeps, newest_values, summarised_links
from fabreg.run import stress

DEFAULT_PORT = 9105


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export the store (Prometheus textfile)")
    formats = p.add_subparsers(dest="export_format", metavar="FORMAT")
    prom = formats.add_parser(
        "prometheus", help="node_exporter textfile with the newest values and regressions")
    prom.add_argument("--out", required=True, metavar="FILE.prom",
                      help="the textfile; its directory must exist")
    add_db_argument(prom)
    prom.set_defaults(func=run_export)
    parquet = formats.add_parser(
        "parquet", help="Parquet files per system and month, for DuckDB, Spark or Trino",
        description="Write DIR/system=S/month=YYYY-MM/values.parquet: one row per value with "
                    "the columns of the store's long view (docs/trends.md). Needs pyarrow.")
    parquet.add_argument("--out", required=True, metavar="DIR",
                         help="directory to write (created if its parent exists)")
    parquet.add_argument("--since", metavar="TIME",
                         help="only the months from TIME on (ISO 8601; default: all): a "
                              "nightly export rewrites the current month")
    parquet.add_argument("-q", "--quiet", action="store_true", help="no progress")
    add_db_argument(parquet)
    parquet.set_defaults(func=run_parquet)
    p.set_defaults(func=lambda args: p.print_help() or 2)

    s = subparsers.add_parser("serve-metrics",
                              help=f"serve the same metrics over HTTP (port {DEFAULT_PORT})")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default %(default)s: this host only)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help="TCP port, 0 to 65535 (0: any free port; default %(default)s)")
    s.add_argument("--stress-dir", metavar="DIR",
                   help="also serve the latest latencies of `fabreg stress` from DIR "
                        "(default: its state directory, see docs/workloads.md)")
    add_db_argument(s)
    s.set_defaults(func=run_serve)


def load(db: str | None) -> tuple[list[SeriesData], list[trends.SeriesVerdict], str]:
    """The series (their newest values), their verdicts, and the newest sweeps' gauges
    (exposition text); the links of a sweep shown per node and round only where their trend
    is wrong (a 10,000-node sweep has 450,000 links)."""
    with Store(db_path(db), create=False) as store, collector_paused():
        now = standing.read(store)
        sweeps = latest_sweeps(newest_values(now.newest), attributes=store.run_attributes)
        summarised = summarised_links(sweeps)
        verdicts = [v for v in now.verdicts
                    if v.open_regression or v.suspect or not summarised(v.series)]
    return [v.series for v in verdicts], verdicts, isolation_metrics.render(sweeps)


def write_prometheus(db: str | None, out: Path) -> int:
    """Write the textfile from the store; the number of series exported."""
    series, verdicts, sweeps = load(db)  # a missing or broken store is an error here
    collector = export.StoreCollector(lambda: (series, verdicts),
                                      extra=lambda: sweeps.splitlines(), strict=True)
    export.write_textfile(collector, out)
    return sum(1 for s in series if len(s))


def run_export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    count = write_prometheus(args.db, out)
    print(f"wrote {out} ({count} series)")
    return 0


def run_parquet(args: argparse.Namespace) -> int:
    from fabreg.review import parquet_export

    since = since_time(args.since)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise FabregError(f"--out {out}: a file is in the way (the export is a directory)")
    if not out.parent.is_dir():
        raise FabregError(f"--out {out}: no directory {out.parent} (create it first)")
    with Store(db_path(args.db), create=False) as store:
        written = parquet_export.export(store, out, since,
                                        progress=Progress("parquet", 0, enabled=not args.quiet))
    rows = sum(n for _, n in written)
    print(f"wrote {len(written)} file(s) under {out}: {rows} value(s)")
    return 0


def _store_state(db: str | None) -> tuple:
    """Size and mtime of the store and its WAL: unchanged means the metrics are too."""
    path = db_path(db)
    state = []
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
            state.append((st.st_size, st.st_mtime_ns))
        except OSError:
            state.append(None)
    return tuple(state)


def run_serve(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise FabregError(f"--port {args.port}: a TCP port is 0 to 65535 (0: any free port)")
    cache: dict[str, object] = {"state": _store_state(args.db), "data": load(args.db)}
    stress_dir = Path(args.stress_dir) if args.stress_dir else stress.default_state_dir()

    def cached() -> tuple[list[SeriesData], list[trends.SeriesVerdict], str]:
        state = _store_state(args.db)
        if state != cache["state"]:
            cache["data"], cache["state"] = load(args.db), state
        return cache["data"]  # type: ignore[return-value]

    # Stress latencies change every window: read on every scrape, never cached.
    collector = export.StoreCollector(
        lambda: cached()[:2],
        extra=lambda: [*cached()[2].splitlines(), *stress.exposition(stress_dir)])
    server, thread = export.serve(collector, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"serving http://{host}:{port}/metrics (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return 0

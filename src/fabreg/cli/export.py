"""``fabreg export prometheus`` and ``fabreg serve-metrics``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review import export, isolation_metrics, trends
from fabreg.review.store import Store
from fabreg.review.sweeps import latest_sweeps
from fabreg.run import stress

DEFAULT_PORT = 9105


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export the store (Prometheus textfile)")
    formats = p.add_subparsers(dest="export_format", metavar="FORMAT")
    prom = formats.add_parser(
        "prometheus", help="node_exporter textfile with the newest values and regressions")
    prom.add_argument("--out", required=True, metavar="FILE.prom")
    add_db_argument(prom)
    prom.set_defaults(func=run_export)
    p.set_defaults(func=lambda args: p.print_help() or 2)

    s = subparsers.add_parser("serve-metrics",
                              help=f"serve the same metrics over HTTP (port {DEFAULT_PORT})")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default %(default)s: this host only)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT)
    s.add_argument("--stress-dir", metavar="DIR",
                   help="also serve the latest latencies of `fabreg stress` from DIR "
                        "(default: its state directory, see docs/workloads.md)")
    add_db_argument(s)
    s.set_defaults(func=run_serve)


def produce(db: str | None) -> str:
    with Store(db_path(db), create=False) as store:
        all_series = store.load()
        sweeps = latest_sweeps(all_series, attributes=store.run_attributes)
    verdicts = trends.analyse(all_series)
    return export.render(all_series, verdicts) + isolation_metrics.render(sweeps)


def run_export(args: argparse.Namespace) -> int:
    text = produce(args.db)
    out = Path(args.out)
    try:
        export.write_textfile(text, out)
    except OSError as err:
        raise FabregError(f"cannot write {out}: {err.strerror or err}") from None
    print(f"wrote {out} ({text.count(chr(10))} lines)")
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
    cache: dict[str, object] = {"state": _store_state(args.db), "text": produce(args.db)}

    stress_dir = Path(args.stress_dir) if args.stress_dir else stress.default_state_dir()

    def cached() -> str:
        state = _store_state(args.db)
        if state != cache["state"]:
            cache["text"], cache["state"] = produce(args.db), state
        # Stress latencies change every window: read on every request, never cached.
        live = stress.exposition(stress_dir)
        return str(cache["text"]) + "".join(line + "\n" for line in live)

    try:
        server = export.MetricsServer(args.host, args.port, cached)
    except OSError as err:
        raise FabregError(f"cannot listen on {args.host}:{args.port}: "
                          f"{err.strerror or err}") from None
    host, port = server.server_address[:2]
    print(f"serving http://{host}:{port}/metrics (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0

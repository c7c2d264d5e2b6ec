"""``fabreg ingest PATH...`` and ``fabreg sessions``: fill and inspect the store."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review import perflog
from fabreg.review.compare import list_sessions
from fabreg.review.progress import Progress
from fabreg.review.store import Store

MAX_PROBLEMS_SHOWN = 20


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ingest", help="read ReFrame perflogs and results DBs into the store",
        description="Read ReFrame filelog perflogs (*.log, *.log.h0, ...) and results "
                    "databases (results.db) under each PATH into the store. Ingesting the "
                    "same data again adds nothing. Exit 1 if lines had to be skipped.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="perflog file, results DB or dir")
    add_db_argument(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress, summary only")
    p.set_defaults(func=run_ingest)

    s = subparsers.add_parser("sessions", help="list the sessions in the store")
    add_db_argument(s)
    s.set_defaults(func=run_sessions)


def run_ingest(args: argparse.Namespace) -> int:
    try:
        logs, dbs = perflog.find_inputs(args.paths)
    except FileNotFoundError as err:
        raise FabregError(f"no such file or directory: {err}") from None
    store_path = db_path(args.db).resolve()
    dbs = [p for p in dbs if p.resolve() != store_path]  # never read the store itself
    # Perflogs first: they are the reference copy of each value (see Store.add).
    inputs = [(p, "log") for p in logs] + [(p, "db") for p in dbs]
    if not inputs:
        raise FabregError(f"no perflogs (*.log, *.log.hN) or results DB under "
                          f"{', '.join(args.paths)}")
    progress = Progress("ingest", len(inputs), enabled=not args.quiet)
    added = seen = lines = sessions = 0
    problems: list[perflog.Problem] = []
    with Store(db_path(args.db)) as store:
        for i, (path, what) in enumerate(inputs, start=1):
            if what == "db":
                sess, links, samples, probs = perflog.read_results_db(path)
                count = store.add(samples, sess, links, from_results_db=True)
            else:
                samples, probs, nlines = perflog.read_perflog_file(path)
                lines += nlines
                count = store.add(samples)
            added += count.added
            seen += count.seen
            sessions += count.sessions
            problems += probs
            progress(i, detail=f"{added} new values")
        nseries, nvalues = store.count()
    for problem in problems[:MAX_PROBLEMS_SHOWN]:
        print(f"fabreg: skipped {problem}", file=sys.stderr)
    if len(problems) > MAX_PROBLEMS_SHOWN:
        print(f"fabreg: ... and {len(problems) - MAX_PROBLEMS_SHOWN} more skipped lines",
              file=sys.stderr)
    print(f"ingested {len(inputs)} file(s) ({len(logs)} perflog, {len(dbs)} results DB): "
          f"{added} new value(s), {seen - added} already stored, {sessions} session(s) "
          f"updated, {len(problems)} problem(s); store {db_path(args.db)} holds "
          f"{nvalues} value(s) in {nseries} series")
    return 1 if problems else 0


def run_sessions(args: argparse.Namespace) -> int:
    with Store(db_path(args.db), create=False) as store:
        all_series = store.load()
        known = store.sessions()
    for info in list_sessions(all_series, known):
        when = datetime.fromtimestamp(info.start, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        extras = " ".join(f"{k}={v}" for k, v in sorted(info.extras.items()))
        print(f"{info.id}  {when}  {extras}".rstrip())
    return 0

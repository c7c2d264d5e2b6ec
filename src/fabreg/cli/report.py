"""``fabreg report --out DIR``: Markdown + self-contained HTML with plots of what moved."""

from __future__ import annotations

import argparse
from pathlib import Path

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.review import compare, trends
from fabreg.review.progress import Progress
from fabreg.review.store import Store
from fabreg.review.sweeps import latest_sweeps


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="write summary.md and a self-contained index.html with plots",
        description="One plot per series that moved (change points, reference band), "
                    "grouped by benchmark, MPI, transport and node count, plus latency- and "
                    "bandwidth-vs-size curves comparing two sessions.")
    p.add_argument("--out", required=True, metavar="DIR")
    add_db_argument(p)
    p.add_argument("--baseline", default=None, metavar="SELECTOR",
                   help="size curves: baseline runs (default latest~1; see fabreg compare)")
    p.add_argument("--candidate", default=None, metavar="SELECTOR",
                   help="size curves: candidate runs (default latest)")
    p.add_argument("--curve-threshold", type=float, default=10.0, metavar="PCT",
                   help="draw a size curve when some size differs by PCT %% between the two "
                        "sessions (0: every curve; default %(default)s)")
    p.add_argument("--alpha", type=float, default=trends.ALPHA)
    p.add_argument("--min-shift", type=float, default=trends.MIN_SHIFT_PCT, metavar="PCT")
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="processes drawing plots (default: one per CPU)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # matplotlib: import only when a report is wanted
    from fabreg.review import isolation_plot, report

    with Store(db_path(args.db), create=False) as store:
        all_series = store.load()
        known = store.sessions()
        sweeps = latest_sweeps(all_series, attributes=store.run_attributes)
    verdicts = trends.analyse(all_series, alpha=args.alpha, min_shift_pct=args.min_shift,
                              progress=Progress("trends", len(all_series),
                                                enabled=not args.quiet))
    sessions = compare.list_sessions(all_series, known)
    curves = None
    if args.baseline or args.candidate or len(sessions) >= 2:
        curves = (compare.resolve(args.baseline or "latest~1", sessions),
                  compare.resolve(args.candidate or "latest", sessions))
    md, page = report.build(all_series, verdicts, Path(args.out), curves,
                            progress=Progress("report", 0, enabled=not args.quiet),
                            curve_min_diff_pct=args.curve_threshold, jobs=args.jobs)
    moved = sum(1 for v in verdicts if v.changes)
    print(f"wrote {md} and {page}: {len(verdicts)} series, {moved} with changes")
    sweeps_page = isolation_plot.write(sweeps, Path(args.out))
    if sweeps_page:
        print(f"wrote {sweeps_page}: the newest sweeps' pair matrices and suspects")
    return 0

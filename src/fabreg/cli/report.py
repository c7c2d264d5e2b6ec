"""``fabreg report --out DIR``: Markdown + self-contained HTML with plots of what moved."""

from __future__ import annotations

import argparse
from pathlib import Path

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review import check_verdicts, compare, standing, trends
from fabreg.review.gc_pause import collector_paused
from fabreg.review.progress import Progress
from fabreg.review.store import Store
from fabreg.review.sweeps import latest_sweeps, newest_values, summarised_links


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="write summary.md and a self-contained index.html with plots",
        description="The verdicts first (open regressions, suspects, values the checks called "
                    "inconclusive or flaky), the changes, one plot per series that moved or "
                    "was flagged (change points, reference band), grouped by benchmark, MPI, "
                    "transport and node count, and latency- and bandwidth-vs-size curves "
                    "comparing two sessions.")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory to write (created if its parent exists)")
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


def output_dir(given: str) -> Path:
    """``--out``: a directory, or a new one in an existing directory."""
    out = Path(given)
    if out.exists() and not out.is_dir():
        raise FabregError(f"--out {out}: a file is in the way (the report is a directory: "
                          "summary.md, index.html, plots/)")
    if not out.exists() and not out.parent.is_dir():
        raise FabregError(f"--out {out}: no directory {out.parent} (create it first)")
    return out


def run(args: argparse.Namespace) -> int:
    # matplotlib: import only when a report is wanted
    from fabreg.review import isolation_plot, report

    out = output_dir(args.out)
    if args.jobs is not None and args.jobs < 1:
        raise FabregError(f"--jobs {args.jobs}: at least 1")
    with Store(db_path(args.db), create=False) as store, collector_paused():
        # what a report shows, read in proportion to it: every series' newest value and
        # verdict, the whole history of those it plots, the two sessions its curves compare
        now = standing.read(store, args.alpha, args.min_shift,
                            progress=Progress("trends", 0, enabled=not args.quiet))
        said = check_verdicts.newest(store)
        sweeps = latest_sweeps(newest_values(now.newest), attributes=store.run_attributes)
        # a sweep of thousands of nodes is shown per node and round (isolation.html): of its
        # links, only those slow in it are series of the report
        summarised = summarised_links(sweeps, but_slow=True)
        left, listed = [], []
        for v in now.verdicts:
            (left if summarised(v.series) else listed).append(v)
        shown = standing.whole(store, [v for v in listed if report.is_plotted(v, said)])
        spans = store.session_spans()
        sessions = compare.sessions_of(spans, store.sessions())
        curves, curve_series = None, []
        if args.baseline or args.candidate or len(sessions) >= 2:
            curves = (compare.resolve(args.baseline or "latest~1", sessions),
                      compare.resolve(args.candidate or "latest", sessions))
            (a, b), (c, d) = (compare.time_span(sel, spans) for sel in curves)
            # the report's own series only: a summarised sweep's links draw no curve
            curve_series = store.load([v.series.id for v in listed], since=min(a, c),
                                      until=max(b, d))
    by_id = {v.series.id: v for v in shown}
    verdicts = [by_id.get(v.series.id, v) for v in listed]
    sweeps_page = isolation_plot.write(sweeps, out)
    see_also = [(sweeps_page.name, "the newest sweeps: pair matrices, bad nodes and links")
                ] if sweeps_page else []
    try:
        md, page = report.build(curve_series, verdicts, out, curves,
                                progress=Progress("report", 0, enabled=not args.quiet),
                                curve_min_diff_pct=args.curve_threshold, jobs=args.jobs,
                                check_verdicts=said, see_also=see_also)
    except OSError as err:
        raise FabregError(f"cannot write the report under {out}: {err.strerror or err}") from None
    moved = sum(1 for v in verdicts if v.changes)
    print(f"wrote {md} and {page}: {len(verdicts)} series, {moved} with changes "
          f"(verdicts {now.source})")
    if sweeps_page:
        print(f"wrote {sweeps_page}: the newest sweeps' pair matrices and suspects")
    if left:
        print(f"{len(left)} links of sweeps shown per node and round are not report series "
              f"(not slow in the newest sweep); {sum(1 for v in left if v.changes)} of them "
              "with a trend change: `fabreg trends --match` lists them")
    return 0

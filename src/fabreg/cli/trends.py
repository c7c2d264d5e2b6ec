"""``fabreg trends``: change points and verdicts per series; exit 1 on an open regression."""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone

from fabreg.cli.since_option import since_time
from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review import sweeps, trend_state, trends
from fabreg.review.gc_pause import collector_paused
from fabreg.review.progress import Progress
from fabreg.review.store import Store


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "trends", help="detect changes per series (exit 1 if a regression is open)",
        description="Direction-aware change-point detection on every series of the store. "
                    "Exit status 1 when a series' most recent change is a regression.")
    add_db_argument(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--fail-on", choices=("regression", "suspect"), default="regression",
                   help="exit 1 on an open regression (default), or on a suspect too: a "
                        f"change at the end of a series with fewer than {trends.CONFIRM_RUNS} "
                        "runs at its new level")
    p.add_argument("--alpha", type=float, default=trends.ALPHA,
                   help="significance level of a change point (default %(default)s)")
    p.add_argument("--min-shift", type=float, default=trends.MIN_SHIFT_PCT, metavar="PCT",
                   help="ignore changes smaller than PCT %% (default %(default)s)")
    p.add_argument("--since", metavar="TIME",
                   help="only report changes whose first new run is at or after TIME (ISO 8601)")
    p.add_argument("--match", metavar="TEXT", help="only series whose name contains TEXT")
    p.add_argument("--all", action="store_true", help="text: list stable series too")
    p.add_argument("--incremental", action="store_true",
                   help="read each series from the start of its window only (the newest "
                        f"{trend_state.WINDOW} runs and the old level of each change in them), "
                        "keeping the changes before it in the store: a nightly run's cost "
                        "follows the new data, not the history; the first run reads all")
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="--incremental: processes judging the series (default: one per CPU "
                        f"from {trend_state.PARALLEL_FROM:,} series, else 1)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress")
    p.set_defaults(func=run)


def iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat().replace("+00:00", "Z")


def analyse_store(args: argparse.Namespace, quiet: bool = False) -> list[trends.SeriesVerdict]:
    if not 0 < args.alpha < 1:
        raise FabregError(f"--alpha must be between 0 and 1, not {args.alpha}")
    if args.min_shift < 0:
        raise FabregError(f"--min-shift must be >= 0, not {args.min_shift}")
    jobs = getattr(args, "jobs", None)
    if jobs is not None and jobs < 1:
        raise FabregError(f"--jobs {jobs}: at least 1")
    match = getattr(args, "match", None)
    progress = Progress("trends", 0, enabled=not quiet)
    with Store(db_path(args.db), create=False) as store, collector_paused():
        if getattr(args, "incremental", False):
            verdicts = trend_state.analyse(
                store, alpha=args.alpha, min_shift_pct=args.min_shift,
                keep=lambda s: not match or match in s.key.text(), progress=progress,
                jobs=jobs)
            if match and not verdicts:
                raise FabregError(f"--match {match!r} matches no series in the store")
            return verdicts
        all_series = store.load()
    # of the whole store, matched or not
    families = sweeps.link_families((s.id, s.key) for s in all_series)
    if match:
        all_series = [s for s in all_series if match in s.key.text()]
        if not all_series:
            raise FabregError(f"--match {match!r} matches no series in the store")
    return trends.analyse(all_series, alpha=args.alpha, min_shift_pct=args.min_shift,
                          progress=progress, families=families)


#: Exit status of ``trends`` on a store without a series (0: no open regression, 1: one is
#: open, 2: bad input).
EXIT_NO_DATA = 3


def run(args: argparse.Namespace) -> int:
    given = since_time(args.since)
    since = -math.inf if given is None else given
    verdicts = analyse_store(args, quiet=args.quiet or args.format == "json")
    if not verdicts:
        # A gate that passes on no data would stay green while nothing was measured.
        print(f"fabreg: error: the store {db_path(args.db)} holds no series: nothing to judge "
              "(did ingest find your perflogs? see its problem count)", file=sys.stderr)
        return EXIT_NO_DATA
    rows = []
    for v in verdicts:
        for c in v.changes:
            t = c.time
            if t >= since:
                rows.append((v, c, t))
    gating = (trends.REGRESSION, trends.SUSPECT) if args.fail_on == "suspect" else (
        trends.REGRESSION,)
    open_regressions = [v for v in verdicts if v.verdict in gating and v.deciding
                        and v.deciding.time >= since]
    if args.format == "json":
        print(json.dumps([{"series": v.series.key.as_json_object(), "time": iso(t),
                           "shift_pct": round(c.shift_pct, 3), "verdict": c.verdict}
                          for v, c, t in rows], indent=2))
        return 1 if open_regressions else 0
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    changes_of: dict[int, list[tuple[trends.Change, float]]] = {}  # by id(verdict)
    for v, c, t in rows:
        changes_of.setdefault(id(v), []).append((c, t))
    for v in verdicts:
        changes = changes_of.get(id(v), [])
        if not changes and not args.all:
            continue
        print(f"{v.verdict.upper():<14} {v.series.key.text()}  "
              f"[{v.runs} runs, noise {v.noise_pct:.1f} %]")
        for c, t in changes:
            print(f"    {iso(t)}  {c.verdict:<11} {c.shift_pct:+7.1f} % "
                  f"[{c.ci_low_pct:+.1f}, {c.ci_high_pct:+.1f}]  "
                  f"{c.before:.4g} -> {c.after:.4g} {v.series.unit}  "
                  f"(session {c.session})")
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"{len(verdicts)} series: {summary or 'none'}; "
          f"{sum(v.open_regression for v in verdicts)} open regression(s), "
          f"{sum(v.suspect for v in verdicts)} suspect(s) awaiting "
          f"{trends.CONFIRM_RUNS} runs that confirm the new level (a sweep's links: or "
          "their family's bar)")
    return 1 if open_regressions else 0

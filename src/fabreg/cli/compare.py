"""``fabreg compare BASELINE CANDIDATE``: per-series differences between two sets of runs."""

from __future__ import annotations

import argparse
import json

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review import compare
from fabreg.review.store import Store


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare", help="compare two sessions series by series (exit 1 on a regression)",
        description="Compare the runs picked by BASELINE and CANDIDATE. A selector is a "
                    "session id or prefix, latest / latest~N, a session extra key=value "
                    "(reframe --session-extras), or a time range START..END (ISO 8601).")
    p.add_argument("baseline", metavar="BASELINE")
    p.add_argument("candidate", metavar="CANDIDATE")
    add_db_argument(p)
    p.add_argument("--threshold", type=float, default=5.0, metavar="PCT",
                   help="smallest shift that counts, in %% (default %(default)s)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level when both sides have repeats (default %(default)s)")
    p.add_argument("--fail-on", choices=("regression", "suspect"), default="regression",
                   help="exit 1 on a regression (default), or on a suspect too: worse beyond "
                        "the noise in a single candidate run")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--all", action="store_true", help="text: list unchanged series too")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with Store(db_path(args.db), create=False) as store:
        all_series = store.load()
        known = store.sessions()
    sessions = compare.list_sessions(all_series, known)
    if not 0 < args.alpha < 1:
        raise FabregError(f"--alpha must be between 0 and 1, not {args.alpha}")
    if args.threshold < 0:
        raise FabregError(f"--threshold must be >= 0, not {args.threshold}")
    base = compare.resolve(args.baseline, sessions)
    cand = compare.resolve(args.candidate, sessions)
    for selection in (base, cand):
        compare.require_runs(selection, all_series)
    diffs = compare.compare(all_series, base, cand, args.threshold, args.alpha)
    failing = (compare.REGRESSION, compare.SUSPECT) if args.fail_on == "suspect" else (
        compare.REGRESSION,)
    status = 1 if any(d.verdict in failing for d in diffs) else 0
    if args.format == "json":
        print(json.dumps([{
            "series": d.series.key.as_json_object(), "verdict": d.verdict,
            "baseline": d.baseline, "candidate": d.candidate,
            "shift_pct": None if d.shift_pct is None else round(d.shift_pct, 3),
            "n_baseline": d.n_baseline, "n_candidate": d.n_candidate, "pvalue": d.pvalue,
            "noise": d.noise or None, "note": d.note or None,
        } for d in diffs], indent=2))
        return status
    print(f"baseline {base.text!r} vs candidate {cand.text!r}, threshold "
          f"{args.threshold:g} %, alpha {args.alpha:g}")
    print(f"{'verdict':<20} {'shift':>8} {'baseline':>11} {'candidate':>11} {'unit':<6} "
          f"{'n':>7} {'p':>7}  series")
    shown = 0
    for d in diffs:
        if d.verdict == compare.SAME and not args.all:
            continue
        shown += 1
        shift = "" if d.shift_pct is None else f"{d.shift_pct:+.1f}%"
        p = "" if d.pvalue is None else f"{d.pvalue:.3g}"
        b = "" if d.baseline is None else f"{d.baseline:.4g}"
        c = "" if d.candidate is None else f"{d.candidate:.4g}"
        note = f"  ({d.note})" if d.note else ""
        print(f"{d.verdict:<20} {shift:>8} {b:>11} {c:>11} {d.series.unit:<6} "
              f"{d.n_baseline:>3}/{d.n_candidate:<3} {p:>7}  {d.series.key.text()}{note}")
    counts: dict[str, int] = {}
    for d in diffs:
        counts[d.verdict] = counts.get(d.verdict, 0) + 1
    print(f"{len(diffs)} series compared: "
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    if any(d.noise == "history" for d in diffs):
        print("one run on a side: noise from each series' stored runs, p Bonferroni-corrected "
              "over those series; a single worse candidate run is a suspect until confirmed")
    return status

"""``fabreg references suggest``: a system's reference file from its stored runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabreg.cli.since_option import since_time
from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review import suggest
from fabreg.review.store import RunValue, Store
from fabreg.run.references import host_key, host_reference_file, partition_reference_file
from fabreg.schema import CONTENDED_SHARE, MEASUREMENT_METHOD


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "references", help="per-system reference files (checks/references/<system>.yaml)",
        description="Work with checks/references/<system>.yaml (docs/references.md).")
    p.set_defaults(func=lambda args: p.print_help() or 2)
    sub = p.add_subparsers(dest="references_command", metavar="ACTION")
    s = sub.add_parser(
        "suggest", help="suggest a system's reference file from its stored runs",
        description="Group the stored values of SYSTEM by the reference key each run logged "
                    "(perflog column ref_keys) and print a reference file: value = median, "
                    "warn/fail = the given floors or a multiple of the worse-side run-to-run "
                    "spread where that is wider. Run 'fabreg ingest' first.")
    _add_run_selection(s, suggest.DEFAULT_WARN, suggest.DEFAULT_FAIL, suggest.DEFAULT_MIN_RUNS)
    s.add_argument("--out", metavar="FILE", help="write the file here instead of stdout")
    s.add_argument("--force", action="store_true", help="let --out overwrite FILE")
    s.set_defaults(func=run_suggest)

    c = sub.add_parser(
        "calibrate", help="record this host's baseline from its stored runs",
        description="Write checks/references/SYSTEM/HOST.yaml from the runs this host made "
                    "(perflog column host_key), leaving out values measured under "
                    "interference: the baseline a system that keys its references by host "
                    "(local, minicluster) judges this host by. Run the checks a few times and "
                    "'fabreg ingest' first (docs/references.md, 'Baselines per host').")
    _add_run_selection(c, suggest.BASELINE_WARN, suggest.BASELINE_FAIL,
                       suggest.BASELINE_MIN_RUNS)
    c.add_argument("--host-key", metavar="KEY",
                   help="whose runs (default: this host's, $FABREG_HOST_KEY or CPU model "
                        "and count)")
    c.add_argument("--partition", metavar="NAME",
                   help="a site partition's baseline instead of a host's: the runs of that "
                        "partition (one node type), written to "
                        "references/SYSTEM/partition-NAME.yaml (partitions with "
                        "extras['references_by_partition'], as fabreg site init writes them)")
    c.add_argument("--checks", default="checks", metavar="DIR",
                   help="the checks directory holding references/ (default %(default)s)")
    c.add_argument("--force", action="store_true", help="replace an existing baseline")
    c.set_defaults(func=run_calibrate)


def _add_run_selection(p: argparse.ArgumentParser, warn: float, fail: float,
                       min_runs: int) -> None:
    """The options suggest and calibrate share: which runs, how many, the smallest bands."""
    add_db_argument(p)
    p.add_argument("--system", required=True, metavar="NAME",
                   help="the ReFrame system whose runs to use (e.g. local, minicluster)")
    p.add_argument("--since", metavar="TIME",
                   help="only runs at or after TIME (ISO 8601), e.g. after a fabric change")
    p.add_argument("--min-runs", type=int, default=min_runs, metavar="N",
                   help="keys with fewer values become a comment, not a row "
                        "(default %(default)s)")
    p.add_argument("--warn", type=float, default=warn, metavar="F",
                   help="smallest warning band, a fraction (default %(default)s)")
    p.add_argument("--fail", type=float, default=fail, metavar="F",
                   help="smallest failure band, a fraction (default %(default)s)")


def run_calibrate(args: argparse.Namespace) -> int:
    if args.partition and args.host_key:
        raise FabregError("--partition and --host-key: a baseline is a partition's or a "
                          "host's, not both")
    host = args.host_key or ("" if args.partition else host_key())
    checks = Path(args.checks)
    if not checks.is_dir():
        raise FabregError(f"{checks} is not a directory (give the checks directory: --checks)")
    out = (partition_reference_file(checks, args.system, args.partition) if args.partition
           else host_reference_file(checks, args.system, host))
    whose = f"partition {args.partition}" if args.partition else "this host"
    if out.exists() and not args.force:
        raise FabregError(f"{out} exists; use --force to replace the baseline of {whose}")
    args.out, args.force = str(out), True
    out.parent.mkdir(parents=True, exist_ok=True)
    left_out: list[int] = []
    older: list[int] = []
    slow_runs: list[int] = []
    slow_values: list[int] = []

    def select(values: list[RunValue]) -> list[RunValue]:
        if args.partition:
            mine = [rv for rv in values if rv.partition == args.partition]
        else:
            mine = [rv for rv in values if rv.attrs.get("host_key") == host]
        # A baseline says it rests on this generation (its `method`): runs of an older one
        # measured some values another way (docs/references.md).
        current = [rv for rv in mine if suggest.current_method(rv)]
        older.append(len(mine) - len(current))
        if mine and not current:
            raise FabregError(
                f"all {len(mine)} value(s) of system {args.system!r} on "
                f"{host or f'partition {args.partition}'} were measured by an older "
                f"generation of the suite's measurements (their runs log no method "
                f"{MEASUREMENT_METHOD}; docs/references.md): run the checks with this "
                "fabreg, ingest their perflogs and calibrate again")
        mine = current
        kept = [rv for rv in mine if not suggest.measured_under_interference(rv)]
        if mine and not kept:  # a busy host: nothing to calibrate from, and the user told why
            raise FabregError(
                f"all {len(mine)} value(s) of system {args.system!r} on "
                f"{host or f'partition {args.partition}'} were measured under interference "
                f"(other work took more than {CONTENDED_SHARE:.0%} of the host's CPU, or "
                "judged inconclusive): run the checks again while the host is quiet")
        left_out.append(len(mine) - len(kept))
        controls = suggest.control_rows(kept, args.warn, args.fail, args.min_runs)
        slow = {id(rv) for rv in suggest.slow_host_values(kept, controls)}
        slow_runs.append(len({rv.run_key for rv in kept if id(rv) in slow}))
        slow_values.append(len(slow))
        return [rv for rv in kept if id(rv) not in slow] + suggest.host_control_values(kept)

    code = run_suggest(args, select, host or f"partition {args.partition}")
    if older and older[0]:
        print(f"left out {older[0]} value(s) of runs of an older measurement generation "
              f"(not method {MEASUREMENT_METHOD}; docs/references.md)")
    if left_out and left_out[0]:
        print(f"left out {left_out[0]} value(s) measured under interference (other work took "
              f"more than {CONTENDED_SHARE:.0%} of the host's CPU, or judged inconclusive)")
    if slow_values and slow_values[0]:
        print(f"left out {slow_values[0]} value(s) of {slow_runs[0]} run(s) measured while the "
              "host itself ran slow (a host_control figure on their path beyond its failure "
              "limit in this baseline)")
    return code


def run_suggest(args: argparse.Namespace, select=None, host: str = "") -> int:
    """``suggest``, or with ``select`` and ``host`` the baseline ``calibrate`` writes."""
    if args.min_runs < 1:
        raise FabregError(f"--min-runs must be at least 1, not {args.min_runs}")
    for name in ("warn", "fail"):
        value = getattr(args, name)
        if not 0 <= value < float("inf"):
            raise FabregError(f"--{name} must be a fraction >= 0, not {value}")
    if args.warn > args.fail:
        raise FabregError(f"--warn ({args.warn:g}) must not exceed --fail ({args.fail:g})")
    since = since_time(args.since)
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not args.force:
        raise FabregError(f"{out} exists; use --force to overwrite it")
    with Store(db_path(args.db), create=False) as store:
        values = store.run_values(args.system, since)
        if select is not None:
            values = select(values)
        systems = store.systems() if not values else []
    if not values:
        known = ", ".join(systems) or "none"
        when = f" since {args.since}" if args.since else ""
        of = f" on host {host}" if host else ""
        raise FabregError(f"no runs of system {args.system!r}{of}{when} in the store "
                          f"{db_path(args.db)} (systems there: {known})")
    grouped = suggest.group_values(values)
    if not grouped.groups:
        raise FabregError(f"no run of system {args.system!r} logged reference keys "
                          "(perflog column ref_keys): run the checks with this fabreg "
                          "and ingest their perflogs")
    rows, skipped = suggest.suggest(grouped, args.warn, args.fail, args.min_runs,
                                    baseline=bool(host))
    text = suggest.render(args.system, grouped, rows, skipped, args.warn, args.fail,
                          args.min_runs, baseline=host)
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        out.write_text(text)
    except OSError as err:
        raise FabregError(f"cannot write {out}: {err.strerror or err}") from None
    few = sum(k.few_runs is not None for k in skipped)
    hint = (f" ({few} of them with fewer than {args.min_runs} runs, listed at the file's end: "
            "record more runs of them, ingest, and calibrate again with --force)" if few else "")
    print(f"wrote {out}: {len(rows)} reference row(s), {len(skipped)} key(s) without a row{hint}")
    if host and (why := suggest.short_span(grouped)):
        print(f"warning: {why}", file=sys.stderr)
    if why := suggest.blind_warning(rows):
        print(f"warning: {why}", file=sys.stderr)
    return 0

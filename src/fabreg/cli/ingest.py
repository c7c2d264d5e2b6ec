"""``fabreg ingest PATH...``: fill the store with what is new in the perflogs and results DBs.

Imports only what reading and storing need (no numpy, no plotting): appending one night
to a large store costs the new lines, not the start-up of the whole review side.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review import filemarks, perflog, run_report, site_format
from fabreg.review.gc_pause import collector_paused
from fabreg.review.progress import Progress
from fabreg.review.store import IngestCount, Store

#: Skipped lines printed per file unless --all-problems is given.
PROBLEMS_SHOWN_PER_FILE = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ingest", help="read ReFrame perflogs, results DBs and run reports into the store",
        description="Read ReFrame filelog perflogs (*.log, *.log.h0, ...; every layout since "
                    "ReFrame 2.x, headerless or with a header), results databases "
                    "(results.db) and JSON run reports (*.json) under each PATH into the "
                    "store. What an earlier "
                    "ingest read is not read again: only the lines appended since (a file "
                    "that was replaced, truncated or rewritten is read again from its "
                    "start; values the store holds are never duplicated). Exit 1 if lines "
                    "had to be skipped, 2 on a usage error.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="perflog file, results DB or dir")
    add_db_argument(p)
    p.add_argument("--all-problems", action="store_true",
                   help=f"list every skipped line (default: the first "
                        f"{PROBLEMS_SHOWN_PER_FILE} of each file and a count)")
    p.add_argument("--reread", action="store_true",
                   help="read every file from its start, ignoring what earlier ingests read")
    p.add_argument("--reframe-config", action="append", default=[], metavar="FILE",
                   type=Path, help="a site's ReFrame configuration (Python, YAML or JSON): "
                   "perflog lines written with its perflog handlers' format and datefmt are "
                   "read by them (for layouts no rule recognises); repeatable")
    p.add_argument("--run-only", action="append", default=[], metavar="COLUMN",
                   help="a column (or %%parameter) of the site's that describes one run, not "
                   "a series (a build id, a queue): kept per run, never splitting a series; "
                   "remembered by the store for later ingests; repeatable")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress, summary only")
    p.set_defaults(func=run_ingest)


class _Tally:
    """Counts over one ingest, and the skipped lines per file."""

    def __init__(self) -> None:
        self.added = self.seen = self.sessions = self.lines = self.unchanged = 0
        self.problems: dict[str, list[perflog.Problem]] = {}
        self.lines_of: dict[str, int] = {}
        self.partial: list[str] = []
        self.layouts: list[str] = []  # one line per file read from its start
        self.run_only: frozenset[str] = frozenset()  # the site's run-only columns

    def layout(self, path: Path, layouts: dict[str, int]) -> None:
        if layouts:
            said = "; ".join(f"{name}: {n} line(s)" for name, n in layouts.items())
            self.layouts.append(f"{path}: {said}")

    def count(self, path: Path, count: IngestCount, problems: list[perflog.Problem],
              lines: int = 0) -> None:
        self.added += count.added
        self.seen += count.seen
        self.sessions += count.sessions
        self.lines += lines
        self.lines_of[str(path)] = lines
        if problems:
            self.problems[str(path)] = problems


def _read_perflog(store: Store, path: Path, marks: filemarks.MarkIndex, reread: bool,
                  tally: _Tally, formats: list[site_format.SiteFormat]) -> None:
    try:
        new = filemarks.read_new_bytes(path, marks, reread)
    except OSError as err:
        tally.count(path, IngestCount(), [perflog.Problem(
            str(path), 0, f"cannot read: {err.strerror or err}")])
        return
    if new.partial:
        tally.partial.append(f"{path}:{new.first_line + new.lines}")
    if new.unchanged:
        tally.unchanged += 1
        return
    count, problems, lines = IngestCount(), [], 0
    layouts: dict[str, int] = {}
    header, first_line = new.header, new.first_line
    done = done_lines = 0
    for piece in _pieces(new.data):
        with collector_paused():  # a piece is hundreds of thousands of values and keys
            chunk = perflog.read_perflog_bytes(piece, str(path), header, first_line, formats)
            perflog.demote_run_only(chunk.samples, tally.run_only)
            # the file's mark with each piece: an ingest cut short (a year of sweeps in one
            # file takes many minutes) resumes after the last piece it stored
            done += len(piece)
            done_lines += piece.count(b"\n")
            added = store.add(chunk.samples, mark=new.mark(chunk.header, done, done_lines))
        count.added += added.added
        count.seen += added.seen
        count.sessions += added.sessions
        problems += chunk.problems
        lines += chunk.lines
        for name, n in chunk.layouts.items():
            layouts[name] = layouts.get(name, 0) + n
        header, first_line = chunk.header, first_line + chunk.lines
    if new.first_line == 1:
        tally.layout(path, layouts)
        if not layouts and len(problems) > 1:
            # No line of the file is in any layout: one line for the file, not one per line.
            problems = [perflog.Problem(str(path), 0, f"not a perflog: none of its "
                                        f"{len(problems)} line(s) is in a ReFrame layout "
                                        f"(line {problems[0].line}: {problems[0].reason})")]
    tally.count(path, count, problems, lines)


#: A perflog's new lines are parsed and stored this many bytes at a time (whole lines): a
#: year of 10,000-node sweeps in one file is parsed a night or two at a time, not all at
#: once (its values would need tens of GB of memory as objects).
PIECE_BYTES = 8 << 20


def _pieces(data: bytes, limit: int | None = None) -> Iterator[bytes]:
    """``data`` (complete lines) cut after a line end about every ``limit`` bytes (default
    ``PIECE_BYTES``); a line longer than that is a piece of its own. At least one piece,
    maybe empty. One at a time: a year of 10,000-node sweeps is a 3 GB perflog."""
    limit = PIECE_BYTES if limit is None else limit
    start = 0
    while len(data) - start > limit:
        cut = data.rfind(b"\n", start, start + limit) + 1
        if cut <= start:  # one line longer than the limit
            cut = data.index(b"\n", start + limit) + 1
        yield data[start:cut]
        start = cut
    yield data[start:]


def _changed_whole_file(path: Path, marks: filemarks.MarkIndex, reread: bool,
                        tally: _Tally) -> filemarks.FileMark | None:
    """The mark to store after reading a file that is read whole (a results DB, a run
    report), or None when it is unchanged since the last ingest or cannot be read (tallied)."""
    try:
        unchanged, mark = filemarks.results_db_unchanged(path, marks)
    except OSError as err:
        tally.count(path, IngestCount(), [perflog.Problem(
            str(path), 0, f"cannot read: {err.strerror or err}")])
        return None
    if unchanged and not reread:
        tally.unchanged += 1
        return None
    return mark


def _read_run_report(store: Store, path: Path, marks: filemarks.MarkIndex, reread: bool,
                     tally: _Tally, formats: list[site_format.SiteFormat]) -> None:
    mark = _changed_whole_file(path, marks, reread, tally)
    if mark is None:
        return
    report = run_report.read_run_report(path)
    perflog.demote_run_only(report.samples, tally.run_only)
    if report.undated and report.samples:
        prefixes = {run_report.job_prefix(s.run) for s in report.samples} - {None}
        run_report.drop_runs_stored_from_perflogs(report, store.runs_of_jobs(sorted(prefixes)))
    if report.layout:
        tally.layout(path, {report.layout: len(report.samples)})
    count = store.add(report.samples, report.sessions, report.links, from_results_db=True,
                      mark=mark if report.layout else None)
    tally.count(path, count, report.problems)


def _read_results_db(store: Store, path: Path, marks: filemarks.MarkIndex, reread: bool,
                     tally: _Tally, formats: list[site_format.SiteFormat]) -> None:
    mark = _changed_whole_file(path, marks, reread, tally)
    if mark is None:
        return
    skip = frozenset() if reread else store.session_ids()
    sessions, links, samples, problems = perflog.read_results_db(path, skip)
    perflog.demote_run_only(samples, tally.run_only)
    count = store.add(samples, sessions, links, from_results_db=True, mark=mark)
    tally.count(path, count, problems)


def run_ingest(args: argparse.Namespace) -> int:
    formats: list[site_format.SiteFormat] = []
    for config in args.reframe_config:
        try:
            formats += site_format.load_formats(config)
        except site_format.FormatError as err:
            raise FabregError(f"--reframe-config {err}") from None
    try:
        found = perflog.find_inputs(args.paths)
    except FileNotFoundError as err:
        raise FabregError(f"no such file or directory: {err}") from None
    store_path = db_path(args.db).resolve()
    logs, reports = found.perflogs, found.reports
    dbs = [p for p in found.dbs if p.resolve() != store_path]  # never read the store itself
    # Perflogs first: they are the reference copy of each value (see Store.add).
    inputs = ([(p, "log") for p in logs] + [(p, "db") for p in dbs]
              + [(p, "report") for p in reports])
    if not inputs:
        raise FabregError(f"no perflogs (*.log, *.log.hN), results DB or run reports "
                          f"(*.json) under {', '.join(args.paths)}")
    progress = Progress("ingest", len(inputs), enabled=not args.quiet)
    tally = _Tally()
    with Store(db_path(args.db)) as store:
        tally.run_only = store.run_only_columns(args.run_only)
        marks = filemarks.MarkIndex(store.file_marks())
        for i, (path, what) in enumerate(inputs, start=1):
            read = {"db": _read_results_db, "report": _read_run_report,
                    "log": _read_perflog}[what]
            read(store, path, marks, args.reread, tally, formats)
            progress(i, detail=f"{tally.added} new values")
        nseries, nvalues = store.count()
    if not args.quiet:
        for said in tally.layouts:
            print(f"fabreg: read {said}", file=sys.stderr)
    nproblems = _report_problems(tally, args.all_problems)
    for where in tally.partial:
        print(f"fabreg: note: {where} has no line end yet (still being written?): left for "
              "the next ingest", file=sys.stderr)
    print(f"ingested {len(inputs)} file(s) ({len(logs)} perflog, {len(dbs)} results DB, "
          f"{len(reports)} run report; "
          f"{tally.unchanged} unchanged since the last ingest): {tally.lines} new line(s), "
          f"{tally.added} new value(s), {tally.seen - tally.added} already stored, "
          f"{tally.sessions} session(s) updated, {nproblems} problem(s); store "
          f"{db_path(args.db)} holds {nvalues} value(s) in {nseries} series")
    return 1 if nproblems else 0


def _report_problems(tally: _Tally, show_all: bool) -> int:
    """Per file: how many lines were skipped, then which (a few, or all); return the total."""
    total = 0
    for path, problems in tally.problems.items():
        total += len(problems)
        lines = tally.lines_of.get(path, 0)
        of = f" of {lines} new line(s)" if lines else ""
        print(f"fabreg: {path}: skipped {len(problems)}{of}", file=sys.stderr)
        shown = problems if show_all else problems[:PROBLEMS_SHOWN_PER_FILE]
        for problem in shown:
            print(f"fabreg: skipped {problem}", file=sys.stderr)
        if len(problems) > len(shown):
            print(f"fabreg: ... {len(problems) - len(shown)} more in {path} "
                  "(--all-problems lists every one)", file=sys.stderr)
    return total


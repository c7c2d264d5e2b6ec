"""``fabreg nightly``: the whole nightly in one command, with one exit status for CI.

Runs the suite (or the checks of a tag) with ReFrame, keeping its JUnit report, ingests the
perflogs, gates on the trends, and writes the report and the Prometheus textfile. Every step
after ReFrame runs even when an earlier one found a problem (a failed night still gets its
report); the exit status then says what was worst (``EXIT_CODES``, docs/trends.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from fabreg.cli import main as fabreg_main
from fabreg.cli.trends import EXIT_NO_DATA
from fabreg.errors import FabregError

OK, REGRESSION, USAGE, NO_DATA, RUN_FAILED, TESTS_FAILED = 0, 1, 2, 3, 4, 5
#: Exit status -> meaning. When several apply, the first of RUN_FAILED, NO_DATA, REGRESSION,
#: TESTS_FAILED wins (``USAGE`` stops before anything runs).
EXIT_CODES: dict[int, str] = {
    OK: "the run passed and no regression is open",
    REGRESSION: "the trends gate failed: a regression is open (or a suspect, --fail-on suspect)",
    USAGE: "bad usage or input (nothing was run)",
    NO_DATA: "nothing to judge: the ingest failed or the store holds no series",
    RUN_FAILED: "ReFrame did not complete a run (no JUnit report, or no test ran)",
    TESTS_FAILED: "ReFrame ran, some tests failed (sanity or reference), no trend regression",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    codes = "; ".join(f"{k}: {v}" for k, v in EXIT_CODES.items())
    p = subparsers.add_parser(
        "nightly", help="run the suite, ingest, gate on trends, write report and metrics",
        description="reframe -C CONFIG -c CHECKS -r [--tag T] --report-junit FILE [REFRAME "
                    "OPTIONS], then fabreg ingest, fabreg trends (the gate), fabreg report "
                    f"and fabreg export prometheus. Exit status: {codes}.",
        epilog="Options after -- go to ReFrame as they are, e.g. "
               "fabreg nightly --tag quick -- --mode nightly -p openmpi")
    p.add_argument("-t", "--tag", action="append", default=[], metavar="TAG",
                   help="run only checks with this tag (repeatable; default: the whole suite)")
    p.add_argument("-C", "--config", action="append", metavar="FILE",
                   help="ReFrame configuration, repeatable as in ReFrame (a site's file after "
                        "reframe-config.py, docs/site.md; default reframe-config.py)")
    p.add_argument("-c", "--checks", default="checks", metavar="DIR",
                   help="check search path (default %(default)s)")
    p.add_argument("--perflogs", metavar="DIR",
                   help="where ReFrame writes perflogs and fabreg ingests them (default: "
                        "$FABREG_PERFLOG_DIR, else perflogs/ next to the configuration); "
                        "passed to ReFrame as FABREG_PERFLOG_DIR")
    p.add_argument("--db", metavar="PATH",
                   help="the store (default: $FABREG_DB, else PERFLOGS/fabreg.db)")
    p.add_argument("--report", default="report", metavar="DIR",
                   help="report directory (default %(default)s)")
    p.add_argument("--prometheus", metavar="FILE.prom",
                   help="Prometheus textfile (default REPORT/fabreg.prom); its directory must "
                        "exist")
    p.add_argument("--junit", metavar="FILE",
                   help="ReFrame's JUnit report (default REPORT/reframe-junit.xml)")
    p.add_argument("--fail-on", choices=("regression", "suspect"), default="regression",
                   help="what fails the trends gate (see fabreg trends)")
    p.add_argument("--reframe", metavar="PATH",
                   help="the reframe command (default: next to this Python, else on PATH)")
    p.add_argument("reframe_args", nargs=argparse.REMAINDER, metavar="-- REFRAME OPTIONS")
    p.set_defaults(func=run)


@dataclass
class JUnitSummary:
    """What ReFrame's JUnit report says: test cases run and failed (a case retried later
    counts by its last run)."""

    cases: int
    failed: list[str]


def read_junit(path: Path) -> JUnitSummary | None:
    """The report's cases, or None when there is no readable report."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    last: dict[str, bool] = {}
    for case in root.iter("testcase"):
        name = case.get("name", "")
        last[name] = case.find("failure") is not None or case.find("error") is not None
    return JUnitSummary(len(last), sorted(name for name, failed in last.items() if failed))


def reframe_command(given: str | None) -> str:
    if given:
        found = shutil.which(given)
        if found is None:
            raise FabregError(f"--reframe {given}: no such command")
        return found
    here = Path(sys.executable).parent / "reframe"
    found = str(here) if here.exists() else shutil.which("reframe")
    if found is None:
        raise FabregError("reframe not found next to this Python or on PATH: install it "
                          "(pip install 'reframe-hpc>=4.10,<4.11', or make venv) or give "
                          "--reframe PATH")
    return found


def _step(number: int, what: str) -> None:
    print(f"fabreg nightly: [{number}/5] {what}", file=sys.stderr, flush=True)


def _fabreg(*args: str) -> int:
    """Run one fabreg command in this process, as the command line would."""
    sys.stdout.flush()
    return fabreg_main(list(args))


def run(args: argparse.Namespace) -> int:
    configs = [Path(c) for c in args.config or ["reframe-config.py"]]
    checks = Path(args.checks)
    for config in configs:
        if not config.is_file():
            raise FabregError(f"--config {config}: no such file (run from the fabreg checkout, "
                              "or give -C)")
    if not checks.exists():
        raise FabregError(f"--checks {checks}: no such file or directory")
    perflogs = Path(args.perflogs or os.environ.get("FABREG_PERFLOG_DIR")
                    or configs[0].resolve().parent / "perflogs")
    db = args.db or os.environ.get("FABREG_DB") or str(perflogs / "fabreg.db")
    report = Path(args.report)
    if report.exists() and not report.is_dir():
        raise FabregError(f"--report {report}: a file is in the way")
    if not report.exists() and not report.parent.is_dir():
        raise FabregError(f"--report {report}: no directory {report.parent} (create it first)")
    prom = Path(args.prometheus) if args.prometheus else report / "fabreg.prom"
    if args.prometheus and not prom.parent.is_dir():
        raise FabregError(f"--prometheus {prom}: no directory {prom.parent} (create it first)")
    junit = Path(args.junit) if args.junit else report / "reframe-junit.xml"
    if args.junit and not junit.parent.is_dir():
        raise FabregError(f"--junit {junit}: no directory {junit.parent} (create it first)")
    passthrough = list(args.reframe_args)
    if passthrough[:1] == ["--"]:
        passthrough = passthrough[1:]
    reframe = reframe_command(args.reframe)
    report.mkdir(exist_ok=True)
    perflogs.mkdir(parents=True, exist_ok=True)
    if junit.exists():
        junit.unlink()  # never read last night's report as tonight's

    command = [reframe, *(arg for c in configs for arg in ("-C", str(c))), "-c", str(checks), "-r",
               *(f"--tag={t}" for t in args.tag), f"--report-junit={junit}", *passthrough]
    _step(1, "reframe " + " ".join(command[1:]))
    env = dict(os.environ, FABREG_PERFLOG_DIR=str(perflogs.resolve()))
    try:
        status = subprocess.run(command, env=env).returncode
    except OSError as err:
        raise FabregError(f"cannot start {reframe}: {err.strerror or err}") from None
    junit_summary = read_junit(junit)
    problems: list[int] = []
    if junit_summary is None or junit_summary.cases == 0:
        what = ("no JUnit report: no check selected, or ReFrame stopped early (its output "
                "above says why)" if junit_summary is None else "its JUnit report has no test")
        print(f"fabreg nightly: ReFrame did not complete a run (exit {status}, {what})",
              file=sys.stderr)
        problems.append(RUN_FAILED)
    elif junit_summary.failed:
        print(f"fabreg nightly: {len(junit_summary.failed)} of {junit_summary.cases} test "
              f"case(s) failed (JUnit report {junit}): "
              + ", ".join(junit_summary.failed[:5])
              + (" ..." if len(junit_summary.failed) > 5 else ""), file=sys.stderr)
        problems.append(TESTS_FAILED)

    _step(2, f"fabreg ingest {perflogs}")
    ingested = _fabreg("ingest", "-q", "--db", db, str(perflogs))
    if ingested == USAGE:
        problems.append(NO_DATA)  # the store could not be written or read: nothing judged

    _step(3, f"fabreg trends --incremental --fail-on {args.fail_on}")
    gate = _fabreg("trends", "--incremental", "-q", "--db", db, "--fail-on", args.fail_on)
    if gate == EXIT_NO_DATA:
        problems.append(NO_DATA)
    elif gate == REGRESSION:
        problems.append(REGRESSION)
    elif gate != OK and NO_DATA not in problems:
        problems.append(NO_DATA)

    _step(4, f"fabreg report --out {report}")
    if _fabreg("report", "-q", "--db", db, "--out", str(report)) != OK:
        print("fabreg nightly: the report could not be written (see above)", file=sys.stderr)
    _step(5, f"fabreg export prometheus --out {prom}")
    if _fabreg("export", "prometheus", "--db", db, "--out", str(prom)) != OK:
        print("fabreg nightly: the Prometheus textfile could not be written (see above)",
              file=sys.stderr)

    for code in (RUN_FAILED, NO_DATA, REGRESSION, TESTS_FAILED):
        if code in problems:
            print(f"fabreg nightly: exit {code}: {EXIT_CODES[code]}", file=sys.stderr)
            return code
    print(f"fabreg nightly: exit 0: {EXIT_CODES[OK]}", file=sys.stderr)
    return OK


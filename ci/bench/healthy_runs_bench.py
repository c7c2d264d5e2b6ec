#!/usr/bin/env python3
"""False alarms of the whole suite on a healthy machine, and its wall time.

Runs the suite as ``make run`` does (``reframe -C reframe-config.py -c checks/ -r``, on the
``local`` system unless ``--system`` says otherwise) ``--runs`` times with nothing changed,
each session in a fresh prefix, and prints side by side per session: test cases passed, failed
and skipped, the values judged ``inconclusive``, ``flaky`` and ``missing``, the host's other
work, the jobs whose confirmation joined a lasting failure an earlier job noted on the same
nodes (``joined``: one run confirmed them) and those whose confirmed failure was not noted,
their host control having read slow (``unnoted``), and the wall time; then the failed cases
by name, each saying how it was confirmed. A healthy machine must show 0 failed cases in every
session. The sessions' prefixes are kept (the first line on stderr names their directory) for
``control_replay_bench.py``; ``--kept DIR`` prints the same table for such a directory's
sessions without running any. Usage (from the repository root):

    .venv/bin/python ci/bench/healthy_runs_bench.py --runs 10 [--tag quick] [--system minicluster]
    .venv/bin/python ci/bench/healthy_runs_bench.py --kept /tmp/fabreg-healthy-XXXX
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cost_bench import driver_result  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REFRAME = Path(sys.executable).parent / "reframe"


def perflog_rows(perflogs: Path) -> Iterator[dict[str, str]]:
    """Every line of the perflogs under ``perflogs``, as column -> text (our '|' format)."""
    for log in sorted(perflogs.rglob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        header = lines[0].split("|") if lines else []
        for line in lines[1:]:
            yield dict(zip(header, line.split("|")))


def perflog_verdicts(perflogs: Path) -> Counter[str]:
    """Each logged value's verdict, counted over every perflog line of the session."""
    counts: Counter[str] = Counter()
    for row in perflog_rows(perflogs):
        try:
            verdicts = json.loads(row.get("verdicts") or "{}")
        except ValueError:
            continue
        counts.update(str(v) for v in verdicts.values())
        if str(row.get("tail_verdict", "")).startswith("inconclusive"):
            counts["inconclusive (tail environment)"] += 1
    return counts


@contextmanager
def forwarded_signals(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Pass TERM and INT on to ReFrame, so that a bench ended by ``timeout`` or Ctrl-C ends
    its session (ReFrame then cancels its jobs) instead of leaving it running; the bench exits
    once ReFrame has (the handler must not wait itself: ``Popen.wait`` is not reentrant)."""
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        print(f"bench ended by signal {received[0]}; ReFrame exited with {proc.returncode}",
              file=sys.stderr)
        sys.exit(128 + received[0])


def session(prefix: Path, extra: list[str]) -> dict[str, object]:
    prefix.mkdir(parents=True)
    report = prefix / "report.json"
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(REFRAME), "-C", str(REPO / "reframe-config.py"), "-c", str(REPO / "checks"),
         "--prefix", str(prefix), "--report-file", str(report), "-r", *extra],
        cwd=prefix, env=dict(os.environ, FABREG_PERFLOG_DIR=str(prefix / "perflogs")),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with forwarded_signals(proc):
        proc.wait()
    return summary(prefix, proc.returncode, time.monotonic() - start)


def how_confirmed(result: dict | None) -> str:
    """How a job's driver confirmed its failing values: ``joined job N`` (one run, an
    earlier job's lasting failure on the same nodes), ``over budget`` (one run), or
    ``in full``."""
    if result and (joined := result.get("joined_lasting_failure")):
        return f"joined job {joined.get('job')}"
    return "over budget" if result and result.get("confirmation_over_budget") else "in full"


def summary(prefix: Path, rc: int | None, seconds: float) -> dict[str, object]:
    """What one session in ``prefix`` (its ``report.json`` and perflogs) says."""
    report = prefix / "report.json"
    cases = json.loads(report.read_text())["runs"][-1]["testcases"] if report.is_file() else []
    results = Counter(str(c.get("result")) for c in cases)
    drivers = [driver_result(c) for c in cases]
    failed = [f"{c.get('display_name') or c.get('name')} @{c.get('system')}:"
              f"{c.get('environ')} (confirmed {how_confirmed(r)}): "
              f"{' '.join((c.get('fail_reason') or '').split())[:400]}"
              for c, r in zip(cases, drivers) if c.get("result") == "fail"]
    return {"rc": rc, "seconds": seconds, "results": results,
            "verdicts": perflog_verdicts(prefix / "perflogs"), "failed": failed,
            "joined": sum(bool(r and r.get("joined_lasting_failure")) for r in drivers),
            "unnoted": sum(bool(r and r.get("lasting_failure_withheld")) for r in drivers)}


def kept_session(prefix: Path) -> dict[str, object]:
    """A session this bench ran earlier, read back (its wall time from ReFrame's report)."""
    info = json.loads((prefix / "report.json").read_text()).get("session_info", {}) \
        if (prefix / "report.json").is_file() else {}
    seconds = float(info.get("time_elapsed") or 0.0)
    return summary(prefix, None, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tag", help="only checks with this tag (e.g. quick)")
    parser.add_argument("--system", help="ReFrame system (default: this host's, local)")
    parser.add_argument("--kept", type=Path, metavar="DIR",
                        help="read the sessions an earlier run of this bench kept in DIR")
    args = parser.parse_args()
    extra = (["--tag", args.tag] if args.tag else []) + (
        ["--system", args.system] if args.system else [])
    sessions = []
    if args.kept:
        runs = sorted(args.kept.glob("run*/report.json"), key=lambda p: int(p.parent.name[3:]))
        if not runs:
            raise SystemExit(f"healthy_runs_bench: {args.kept}: no run*/report.json in it")
        sessions = [kept_session(p.parent) for p in runs]
    else:
        tmp = Path(tempfile.mkdtemp(prefix="fabreg-healthy-"))
        print(f"# sessions kept in {tmp} (control_replay_bench.py reads them)", file=sys.stderr)
    for i in range(0 if args.kept else args.runs):
        s = session(tmp / f"run{i}", extra)
        sessions.append(s)
        print(f"session {i + 1}/{args.runs}: {dict(s['results'])} in {s['seconds']:.0f} s",
              file=sys.stderr, flush=True)
    print(f"{'session':>8}{'passed':>8}{'failed':>8}{'skipped':>9}{'incon.':>8}{'flaky':>7}"
          f"{'missing':>9}{'joined':>8}{'unnoted':>9}{'wall s':>9}")
    for i, s in enumerate(sessions, start=1):
        r, v = s["results"], s["verdicts"]
        incon = v["inconclusive"] + v["inconclusive (tail environment)"]
        print(f"{i:>8}{r['pass']:>8}{r['fail']:>8}{r['skip']:>9}{incon:>8}{v['flaky']:>7}"
              f"{v['missing']:>9}{s['joined']:>8}{s['unnoted']:>9}{s['seconds']:>9.0f}")
    failed = sum(s["results"]["fail"] for s in sessions)
    walls = sorted(s["seconds"] for s in sessions)
    print(f"\n{sum(bool(s['results']['fail']) for s in sessions)} of {len(sessions)} sessions "
          f"had a failed case ({failed} failed cases in all); median wall time "
          f"{walls[len(walls) // 2]:.0f} s (min {walls[0]:.0f}, max {walls[-1]:.0f})")
    for i, s in enumerate(sessions, start=1):
        for name in s["failed"]:
            print(f"  session {i}: FAIL {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

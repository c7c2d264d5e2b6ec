#!/usr/bin/env python3
"""False alarms of the whole suite on a healthy machine, and its wall time.

Runs the suite as ``make run`` does (``reframe -C reframe-config.py -c checks/ -r``, on the
``local`` system unless ``--system`` says otherwise) ``--runs`` times with nothing changed,
each session in a fresh prefix, and prints side by side per session: test cases passed, failed
and skipped, the values judged ``inconclusive``, ``flaky`` and ``missing``, the host's other
work, and the wall time; then the failed cases by name. A healthy machine must show 0 failed
cases in every session. The sessions' prefixes are kept (the first line on stderr names
their directory) for ``control_replay_bench.py``. Usage (from the repository root):

    .venv/bin/python ci/bench/healthy_runs_bench.py --runs 10 [--tag quick] [--system minicluster]
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
    seconds = time.monotonic() - start
    cases = json.loads(report.read_text())["runs"][-1]["testcases"] if report.is_file() else []
    results = Counter(str(c.get("result")) for c in cases)
    failed = [f"{c.get('display_name') or c.get('name')} @{c.get('system')}:"
              f"{c.get('environ')}: {' '.join((c.get('fail_reason') or '').split())[:400]}"
              for c in cases if c.get("result") == "fail"]
    return {"rc": proc.returncode, "seconds": seconds, "results": results,
            "verdicts": perflog_verdicts(prefix / "perflogs"), "failed": failed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tag", help="only checks with this tag (e.g. quick)")
    parser.add_argument("--system", help="ReFrame system (default: this host's, local)")
    args = parser.parse_args()
    extra = (["--tag", args.tag] if args.tag else []) + (
        ["--system", args.system] if args.system else [])
    tmp = Path(tempfile.mkdtemp(prefix="fabreg-healthy-"))
    print(f"# sessions kept in {tmp} (control_replay_bench.py reads them)", file=sys.stderr)
    sessions = []
    for i in range(args.runs):
        s = session(tmp / f"run{i}", extra)
        sessions.append(s)
        print(f"session {i + 1}/{args.runs}: {dict(s['results'])} in {s['seconds']:.0f} s",
              file=sys.stderr, flush=True)
    print(f"{'session':>8}{'passed':>8}{'failed':>8}{'skipped':>9}{'incon.':>8}{'flaky':>7}"
          f"{'missing':>9}{'wall s':>9}")
    for i, s in enumerate(sessions, start=1):
        r, v = s["results"], s["verdicts"]
        incon = v["inconclusive"] + v["inconclusive (tail environment)"]
        print(f"{i:>8}{r['pass']:>8}{r['fail']:>8}{r['skip']:>9}{incon:>8}{v['flaky']:>7}"
              f"{v['missing']:>9}{s['seconds']:>9.0f}")
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

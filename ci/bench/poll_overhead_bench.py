#!/usr/bin/env python3
"""What ReFrame's job polling costs a single-host run: its default rate against the suite's.

The ``local`` and ``minicluster`` systems run one job at a time (``max_jobs: 1``), so the
time between a job's end and the poll that notices it is time the whole run waits.
ReFrame's poll rate decays from 10 polls a second to ``poll_rate_min`` (0.1 by default:
one poll in 10 s on a long job); the suite's configuration sets 1 on those two systems.
This script runs the same jobs (``sleep`` of a few lengths, like the suite's short and
long benchmarks) with ReFrame's default minimum and with the configuration's, in one
invocation, and prints per job what ReFrame added to the sleeps, side by side.

Usage (from the repository, with the project virtualenv):
    .venv/bin/python ci/bench/poll_overhead_bench.py [--sleeps 3 10 30] [--pairs 1]
    .venv/bin/python ci/bench/poll_overhead_bench.py --system minicluster  # cluster up

Exit status: 0 when both rows were printed, 1 when a ReFrame run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFRAME = Path(sys.executable).parent / "reframe"
#: ReFrame's own default minimum poll rate (polls per second).
REFRAME_DEFAULT = "0.1"

CHECK = '''
import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, run_before, sanity_function


@rfm.simple_test
class PollSleep(rfm.RunOnlyRegressionTest):
    valid_systems = ["*"]
    valid_prog_environs = ["builtin"]
    seconds = parameter({sleeps!r})
    copy = parameter(range({copies}))
    executable = "sleep"

    @run_before("run")
    def set_length(self):
        self.executable_opts = [str(self.seconds)]

    @sanity_function
    def slept(self):
        return sn.assert_true(True)
'''


def session(checks: Path, system: str, rate: str | None, where: Path) -> tuple[float, float, int]:
    """One ReFrame session of the sleep jobs: (wall seconds, seconds slept, jobs)."""
    env = dict(os.environ, FABREG_PERFLOG_DIR=str(where / "perflogs"))
    env.pop("RFM_CONFIG_FILES", None)
    if rate is None:
        env.pop("RFM_POLL_RATE_MIN", None)
    else:
        env["RFM_POLL_RATE_MIN"] = rate
    report = where / "report.json"
    cmd = [str(REFRAME), "-C", str(REPO / "reframe-config.py"), "-c", str(checks),
           "--prefix", str(where), "--report-file", str(report), "--system", system, "-r"]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
        raise SystemExit(1)
    cases = json.loads(report.read_text())["runs"][0]["testcases"]
    slept = sum(float(c["seconds"]) for c in cases)  # parameters are top-level
    return wall, slept, len(cases)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleeps", type=int, nargs="+", default=[3, 10, 30],
                        help="job lengths in seconds (default: 3 10 30)")
    parser.add_argument("--copies", type=int, default=2, help="jobs per length (default 2)")
    parser.add_argument("--pairs", type=int, default=1,
                        help="sessions of each rate, alternated (default 1)")
    parser.add_argument("--system", default="local", help="local (default) or minicluster")
    args = parser.parse_args(argv)
    rows: dict[str, list[tuple[float, float, int]]] = {"reframe": [], "fabreg": []}
    with tempfile.TemporaryDirectory(prefix="fabreg-poll-") as tmp:
        checks = Path(tmp, "poll_sleep.py")
        checks.write_text(CHECK.format(sleeps=args.sleeps, copies=args.copies))
        for pair in range(args.pairs):
            for label, rate in (("reframe", REFRAME_DEFAULT), ("fabreg", None)):
                where = Path(tmp, f"{label}{pair}")
                rows[label].append(session(checks, args.system, rate, where))
                wall, slept, jobs = rows[label][-1]
                print(f"# {label} session {pair + 1}: {jobs} jobs, {wall:.1f} s", flush=True)
    print(f"\n{'poll_rate_min':<28}{'sessions':>9}{'jobs':>6}{'slept s':>9}{'wall s':>9}"
          f"{'added s/job':>13}")
    added = {}
    for label, name in (("reframe", f"{REFRAME_DEFAULT} (ReFrame default)"),
                        ("fabreg", "1 (reframe-config.py)")):
        wall = sum(r[0] for r in rows[label])
        slept = sum(r[1] for r in rows[label])
        jobs = sum(r[2] for r in rows[label])
        added[label] = (wall - slept) / jobs
        print(f"{name:<28}{len(rows[label]):>9}{jobs:>6}{slept:>9.0f}{wall:>9.1f}"
              f"{added[label]:>13.2f}")
    print(f"\nReFrame's time per job with the suite's rate / with ReFrame's default: "
          f"{added['fabreg'] / added['reframe']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

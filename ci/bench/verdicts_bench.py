#!/usr/bin/env python3
"""Detection power and false alarms of the OSU bandwidth verdict on the emulated cluster.

Brings up ``minicluster`` (root), calibrates this host's baseline from its own runs, then
runs the crossing ``OsuBandwidth`` (tcp, 2 nodes, 1 MiB) N times healthy and N times with
one node's link capped at half the calibrated bandwidth, and once per cap fraction to find
the smallest cap that is caught. Prints, side by side, healthy runs failed, capped runs
caught, and wall times. Usage (from the repository root, as root):

    .venv/bin/python ci/bench/verdicts_bench.py --repetitions 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
REFRAME = Path(sys.executable).parent / "reframe"
FABREG = [sys.executable, "-m", "fabreg.cli"]
CASE = ["-n", "OsuBandwidth%transport=tcp%nodes=2", "-p", "openmpi", "-S", "perf_sizes=1048576",
        "-S", "iterations=20", "-S", "warmup=2", "-S", "repeats=5", "-S", "time_limit=5m"]


def run(cmd: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)


def reframe(work: Path, checks: Path, env: dict[str, str], *extra: str) -> tuple[str, float]:
    """One ReFrame session; returns the case's verdict (pass/fail/inconclusive) and seconds."""
    work.mkdir(parents=True)
    start = time.monotonic()
    run([str(REFRAME), "-C", str(REPO / "reframe-config.py"), "-c", str(checks), "--prefix",
         str(work), "--system", "minicluster", "-r", *CASE, *extra],
        dict(env, FABREG_PERFLOG_DIR=str(work / "perflogs")), cwd=work, timeout=900)
    seconds = time.monotonic() - start
    log = work / "perflogs" / "minicluster" / "compute" / "OsuBandwidth.log"
    if not log.is_file():
        return "error", seconds
    lines = log.read_text().splitlines()
    row = dict(zip(lines[0].split("|"), lines[-1].split("|")))
    return ("inconclusive" if row["ref_status"] == "inconclusive" else row["result"]), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--calibration-runs", type=int, default=8)
    parser.add_argument("--fractions", default="0.9,0.8,0.7,0.6,0.5",
                        help="link caps to try, as fractions of the calibrated bandwidth")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fabreg-verdicts-"))
    state = tmp / "cluster"
    env = dict(os.environ, FABREG_CLUSTER_DIR=str(state))
    cluster = [*FABREG, "cluster", "--state-dir", str(state)]
    up = run([*cluster, "up", "--nodes", "2"], env, timeout=300)
    if up.returncode != 0:
        print(f"cannot bring the cluster up: {up.stderr.strip()}", file=sys.stderr)
        return 2
    try:
        checks = tmp / "checks"
        checks.mkdir()
        shutil.copy(REPO / "checks" / "osu.py", checks)
        (checks / "references").mkdir()
        cal = tmp / "calibrate"
        t0 = time.monotonic()
        reframe(cal, checks, env, "--repeat", str(args.calibration_runs))
        db = tmp / "fabreg.db"
        run([*FABREG, "ingest", "-q", "--db", str(db), str(cal / "perflogs")], env, check=True)
        run([*FABREG, "references", "calibrate", "--system", "minicluster", "--checks",
             str(checks), "--db", str(db)], env, check=True)
        calibration_s = time.monotonic() - t0
        (baseline,) = (checks / "references" / "minicluster").glob("*.yaml")
        (row,) = [r for r in yaml.safe_load(baseline.read_text())["references"]
                  if r["metric"] == "bandwidth"]
        value = float(row["value"])
        print(f"baseline: {value:g} MB/s, warn -{row['warn']:.0%}, fail -{row['fail']:.0%} "
              f"({args.calibration_runs} runs, {calibration_s:.0f} s)")

        def capped(fraction: float, label: str) -> tuple[str, float]:
            rate = f"{int(value * fraction * 8)}mbit"
            run([*cluster, "degrade", "node2", "--rate", rate], env, check=True)
            try:
                return reframe(tmp / label, checks, env)
            finally:
                run([*cluster, "restore"], env, check=True)

        healthy = [reframe(tmp / f"healthy{i}", checks, env) for i in range(args.repetitions)]
        half = [capped(0.5, f"half{i}") for i in range(args.repetitions)]
        sweep = {f: capped(f, f"cap{f}")[0] for f in map(float, args.fractions.split(","))}
        print()
        print(f"{'':28}{'healthy':>12}{'link at 1/2':>14}")
        print(f"{'runs':28}{len(healthy):>12}{len(half):>14}")
        print(f"{'failed (a verdict of fail)':28}"
              f"{sum(v == 'fail' for v, _ in healthy):>12}{sum(v == 'fail' for v, _ in half):>14}")
        print(f"{'inconclusive':28}{sum(v == 'inconclusive' for v, _ in healthy):>12}"
              f"{sum(v == 'inconclusive' for v, _ in half):>14}")
        mid_healthy = sorted(s for _, s in healthy)[len(healthy) // 2]
        mid_half = sorted(s for _, s in half)[len(half) // 2]
        print(f"{'median wall time (s)':28}{mid_healthy:>12.1f}{mid_half:>14.1f}")
        print()
        print("cap (fraction of baseline) -> verdict: " +
              ", ".join(f"{f:g}: {v}" for f, v in sweep.items()))
        caught = [f for f, v in sweep.items() if v == "fail"]
        print(f"mildest cap caught: {max(caught):g} of the calibrated bandwidth"
              if caught else "no cap in the sweep was caught")
        print(json.dumps({"healthy": healthy, "half": half, "sweep": sweep}))
    finally:
        run([*cluster, "down"], env, timeout=300)
    return 0


if __name__ == "__main__":
    sys.exit(main())

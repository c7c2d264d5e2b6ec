#!/usr/bin/env python3
"""Does the sweep name exactly the bad node and exactly the bad link, and never a healthy one?

Brings up ``minicluster`` with 4 nodes (root), then repeats N times: a healthy sweep (no
suspect expected; its healthy pair bandwidth B sets this repetition's caps: the shared host's
load moves B by 2x within minutes), one node capped at B/3 (``degrade node3``: exactly
``node node3`` expected) and one node pair capped at B/3 (``degrade node1 --peer node3``:
exactly ``link node1<->node3`` expected). Every sweep is a
real ReFrame session through Slurm (``--tag sweep``), judged by ``fabreg isolate`` on its own
perflogs. Prints named-correctly counts, what was named instead, and the sweep wall times.
Usage (from the repository root, as root, under the cluster lock):

    .venv/bin/python ci/bench/isolation_bench.py --repetitions 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFRAME = Path(sys.executable).parent / "reframe"
FABREG = [sys.executable, "-m", "fabreg.cli"]
#: OpenMPI only: Debian's MPICH over UCX TCP hangs in MPI_Finalize on 4 nodes of a shared
#: 2-core host now and then (docs/cluster.md, "Known issues").
CASE = ["--tag", "sweep", "-p", "openmpi", "-n", "Sweep%transport=tcp"]
BAD_NODE = "node3"
BAD_LINK = ("node1", "node3")


def run(cmd: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)


@dataclass
class SweepOutcome:
    named: list[tuple[str, tuple[str, ...]]]
    seconds: float
    level: float = float("nan")
    problem: str = ""
    detail: dict = field(default_factory=dict)
    #: the check's note when other work took the CPUs while it measured ('' otherwise)
    inconclusive: str = ""


def sweep(work: Path, env: dict[str, str]) -> SweepOutcome:
    """One ReFrame session running the sweep, judged by ``fabreg isolate`` on its perflogs."""
    work.mkdir(parents=True)
    start = time.monotonic()
    rfm = run([str(REFRAME), "-C", str(REPO / "reframe-config.py"), "-c", str(REPO / "checks"),
               "--prefix", str(work), "--system", "minicluster", "-r", *CASE],
              dict(env, FABREG_PERFLOG_DIR=str(work / "perflogs")), cwd=work, timeout=900)
    seconds = time.monotonic() - start
    db = work / "fabreg.db"
    ingest = run([*FABREG, "ingest", str(work / "perflogs"), "--db", str(db)], env)
    if ingest.returncode != 0:
        return SweepOutcome([], seconds, problem=f"ingest: {ingest.stderr.strip()} / "
                                                 f"{rfm.stdout[-2000:]}")
    iso = run([*FABREG, "isolate", "--format", "json", "--db", str(db)], env)
    if iso.returncode not in (0, 1):
        return SweepOutcome([], seconds, problem=f"isolate: {iso.stderr.strip()} / "
                                                 f"{rfm.stdout[-2000:]}")
    try:
        report = json.loads(iso.stdout)
    except ValueError:
        return SweepOutcome([], seconds, problem=f"isolate printed no JSON: {iso.stderr[-500:]}")
    named = sorted({(s["kind"], tuple(s["nodes"])) for s in report["suspects"]})
    level = report["sweeps"][0]["metrics"]["bandwidth"]["level"]
    return SweepOutcome(named, seconds, level, detail=report,
                        inconclusive=report["sweeps"][0]["inconclusive"])


def cluster(env: dict[str, str], state: Path, *args: str) -> None:
    proc = run([*FABREG, "cluster", "--state-dir", str(state), *args], env, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"fabreg cluster {' '.join(args)}: {proc.stdout}{proc.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--fraction", type=float, default=1 / 3,
                        help="cap as a fraction of the healthy pair bandwidth (default 1/3)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (the emulated cluster)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="fabreg-isolation-bench-"))
    state = tmp / "cluster"
    env = dict(os.environ, FABREG_CLUSTER_DIR=str(state))
    expected = {"healthy": [], "node": [("node", (BAD_NODE,))], "link": [("link", BAD_LINK)]}
    results: dict[str, list[SweepOutcome]] = {case: [] for case in expected}
    cluster(env, state, "up", "--nodes", str(args.nodes))
    try:
        first = sweep(tmp / "calibrate", env)
        if first.problem:
            print(first.problem, file=sys.stderr)
            return 2
        rate_mbit = max(1, int(first.level * 8 * args.fraction))
        print(f"healthy pair bandwidth {first.level:.0f} MB/s: caps at {rate_mbit} mbit "
              f"({args.fraction:.2f} of it); first sweep {first.seconds:.0f} s, named "
              f"{first.named or 'nothing'}", flush=True)
        for rep in range(args.repetitions):
            for case in expected:
                if case == "node":
                    cluster(env, state, "degrade", BAD_NODE, "--rate", f"{rate_mbit}mbit")
                elif case == "link":
                    cluster(env, state, "degrade", BAD_LINK[0], "--peer", BAD_LINK[1],
                            "--rate", f"{rate_mbit}mbit")
                try:
                    out = sweep(tmp / f"{case}-{rep}", env)
                finally:
                    if case != "healthy":
                        cluster(env, state, "restore")
                results[case].append(out)
                if case == "healthy" and out.level == out.level and not out.problem:
                    # a third of the bandwidth the pairs have now: the host's load moves it
                    rate_mbit = max(1, int(out.level * 8 * args.fraction))
                cap = "" if case == "healthy" else f", cap {rate_mbit} mbit"
                print(f"  repetition {rep + 1}/{args.repetitions} {case}: named "
                      f"{out.named or 'nothing'} in {out.seconds:.0f} s (pairs at "
                      f"{out.level:.0f} MB/s{cap}) {out.inconclusive} {out.problem[:300]}",
                      flush=True)
    finally:
        cluster(env, state, "down")
    print(f"\n{'case':8} {'named exactly right':>20} {'of which inconclusive':>22} "
          f"{'errors':>7}  {'sweep wall s (median, max)':>27}  named instead")
    for case, outs in results.items():
        good = [o for o in outs if o.named == expected[case] and not o.problem]
        errors = sum(bool(o.problem) for o in outs)
        secs = [o.seconds for o in outs]
        wrong = [(o.named, "inconclusive" if o.inconclusive else "confirmed") for o in outs
                 if o.named != expected[case] and not o.problem]
        print(f"{case:8} {len(good):>12} of {len(outs):<5} "
              f"{sum(bool(o.inconclusive) for o in good):>22} {errors:>7}  "
              f"{statistics.median(secs):>14.0f} {max(secs):>10.0f}     {wrong or '-'}")
    print("(inconclusive: other work took more than 10 % of the host's CPU while the sweep "
          "measured; the check then reports its suspects as inconclusive and does not fail)")
    print(f"(work directory {tmp})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

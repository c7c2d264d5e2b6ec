#!/usr/bin/env python3
"""Benchmark: what a verdict costs, per check family, against the benchmark's own floor.

Runs the suite (or reads a finished run's JSON report) and, for every test case, splits its
wall time the way the in-job drivers recorded it:

- **floor**: the benchmark's first launch (the whole curve, or the probe's first run), the
  time the sizes and iterations a verdict rests on need at the least;
- **pilot**: the iteration-costing pilot (OSU time-per-operation benchmarks);
- **more launches**: repeats, confirmation runs, calibration steps (tail latency),
  baselines (fan-in streams): every launch after the first;
- **in job, other**: the job's run time less its launches (meter, host control, counters,
  launcher start);
- **ReFrame**: its stages around the job (setup, build, sanity, performance); ReFrame's
  polling is inside the job's time, the time a case waits for other cases is left out.

Prints, per family and system, the median case's figures and the ratio of its total to its
floor, side by side for every system given.

Usage:
  python ci/bench/cost_bench.py [--system local] [--system minicluster] [-- RFM_OPTIONS...]
  python ci/bench/cost_bench.py --report run-report.json [--report ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFRAME = Path(sys.executable).parent / "reframe"
#: The result file each in-job driver writes beside the job's output.
RESULTS = ("measure.json", "repeat-probe.json", "client-server.json", "tail-environment.json",
           "sweep.json")
PARTS = ("floor", "pilot", "more", "job_other", "reframe")


def run_suite(system: str, rfm_args: list[str], workdir: Path) -> Path:
    """One ReFrame session on ``system``; returns its JSON report."""
    report = workdir / f"report-{system}.json"
    cmd = [str(REFRAME), "-C", str(REPO / "reframe-config.py"), "-c", str(REPO / "checks"),
           "-r", "--system", system, "--prefix", str(workdir / system), "--report-file",
           str(report), *rfm_args]
    env = dict(os.environ, FABREG_PERFLOG_DIR=str(workdir / system / "perflogs"))
    print(f"# running: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    if not report.exists():
        raise SystemExit(f"cost_bench: ReFrame wrote no report for {system}")
    return report


def driver_result(case: dict) -> dict | None:
    for folder in (case.get("outputdir"), case.get("stagedir")):
        for name in RESULTS:
            path = Path(folder or "") / name
            if folder and path.is_file():
                try:
                    return json.loads(path.read_text())
                except ValueError:
                    return None
    return None


def case_costs(case: dict) -> dict[str, float] | None:
    """The case's wall time split into PARTS, or None for a case that measured nothing."""
    if case.get("result") != "pass":
        return None
    result = driver_result(case)
    if not result or not result.get("launches"):
        return None
    launches = [float(x.get("seconds", 0)) for x in result["launches"]]
    launches += [float(x.get("seconds", 0)) for x in result.get("baseline_launches") or []]
    pilot = float((result.get("pilot") or {}).get("seconds") or 0)
    job = float(case.get("time_run") or 0)
    # ReFrame's own stages for this case; the time a case waits for others (max_jobs) is
    # not its cost.
    reframe = sum(float(case.get(k) or 0) for k in
                  ("time_setup", "time_compile", "time_sanity", "time_performance"))
    floor = launches[0]
    more = sum(launches[1:])
    return {"floor": floor, "pilot": pilot, "more": more,
            "job_other": max(0.0, job - floor - more - pilot),
            "reframe": reframe, "total": job + reframe}


def family(case: dict) -> str:
    return str(case.get("display_name") or case.get("name", "?")).split()[0]


def read_report(path: Path) -> tuple[str, dict[str, list[dict[str, float]]], int]:
    data = json.loads(path.read_text())
    by_family: dict[str, list[dict[str, float]]] = defaultdict(list)
    system, skipped = "?", 0
    for run in data.get("runs", []):
        for case in run.get("testcases", []):
            system = str(case.get("system", system)).split(":")[0]
            costs = case_costs(case)
            if costs is None:
                skipped += 1
                continue
            by_family[family(case)].append(costs)
    return system, by_family, skipped


def median_case(cases: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(c[k] for c in cases) for k in (*PARTS, "total")}


def print_table(reports: list[tuple[str, dict[str, list[dict[str, float]]], int]]) -> None:
    families = sorted({f for _, fams, _ in reports for f in fams})
    print("# cost of one case, median over the family's passing cases (seconds); "
          "ratio = total / floor")
    head = f"{'family':18}" + "".join(f" | {s[:28]:>28}" for s, _, _ in reports)
    print(head)
    print(f"{'':18}" + "".join(f" | {'n  total  floor  ratio':>28}" for _ in reports))
    for fam in families:
        cells = []
        for _, fams, _ in reports:
            cases = fams.get(fam)
            if not cases:
                cells.append(f" | {'-':>28}")
                continue
            m = median_case(cases)
            ratio = m["total"] / m["floor"] if m["floor"] > 0 else float("inf")
            cells.append(f" | {len(cases):>3} {m['total']:6.1f} {m['floor']:6.2f} "
                         f"{ratio:6.1f}x")
        print(f"{fam:18}" + "".join(cells))
    print("\n# where the time goes: shares of all passing cases' total (floor / pilot / more "
          "launches / in job other / ReFrame)")
    for system, fams, skipped in reports:
        sums = {k: sum(c[k] for cases in fams.values() for c in cases)
                for k in (*PARTS, "total")}
        total = sums["total"] or 1.0
        shares = "  ".join(f"{k} {100 * sums[k] / total:4.1f}%" for k in PARTS)
        print(f"{system:14} {sum(len(c) for c in fams.values()):4} cases "
              f"{sums['total']:7.1f} s: {shares}  ({skipped} cases measured nothing: "
              "skipped or failed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", action="append", default=[],
                        help="run the suite on this system (repeatable; default local)")
    parser.add_argument("--report", action="append", default=[], type=Path,
                        help="read a finished run's JSON report instead (repeatable)")
    parser.add_argument("rfm_args", nargs="*", help="after --: ReFrame options")
    args = parser.parse_args()
    reports = [read_report(p) for p in args.report]
    if not args.report or args.system:
        with tempfile.TemporaryDirectory(prefix="cost-bench-") as tmp:
            for system in args.system or ["local"]:
                reports.append(read_report(run_suite(system, args.rfm_args, Path(tmp))))
            print_table(reports)
            return
    print_table(reports)


if __name__ == "__main__":
    main()

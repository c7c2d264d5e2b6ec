#!/usr/bin/env python3
"""Benchmark: what a verdict costs, per check family, against the benchmark's own floor.

Runs the suite (or reads a finished run's JSON report) and, for every test case, splits its
wall time the way the in-job drivers recorded it:

- **floor**: the benchmark's first launch (the whole curve, or the probe's first run), the
  time the sizes and iterations a verdict rests on need at the least;
- **pilot**: the iteration-costing pilot (OSU time-per-operation benchmarks);
- **validation**: OSU's data validation, a short run of its own (no measured run validates);
- **more launches**: repeats, confirmation runs, calibration steps (tail latency),
  baselines (fan-in streams): every launch after the first;
- **in job, other**: the job's run time less its launches (meter, host control, counters,
  launcher start);
- **ReFrame**: its stages around the job (setup, build, sanity, performance); ReFrame's
  polling is inside the job's time, the time a case waits for other cases is left out.

Prints, per family and system, the median case's figures, the launches it made and the
ratio of its total to its floor, side by side for every system given; then each session's
wall time and where the time went. ``--before REV`` runs every session a second time with
the suite as it was at REV (a git worktree: its checks, its config and its ``fabreg``
package), printed beside the current one. ``--calibrate N`` first runs N sessions and
records this host's baseline from them (``fabreg references calibrate``, ``--min-runs``),
which then judges every timed session: a site's nightly, as against a fresh clone's first
run. ``--calibration-exclude PATTERN`` leaves cases out of the calibration sessions only
(the loaded tail environments, which no reference judges, save a third of a 4-node session).
``--calibration-gap MIN`` spaces the calibration sessions (a virtual host's states last
minutes to hours: a baseline of back-to-back sessions holds for the hour it was measured
in), and ``--baseline DIR`` judges the sessions by a baseline recorded earlier instead
(``references/SYSTEM/`` of a kept ``--calibrate`` run's checks).

Usage:
  python ci/bench/cost_bench.py [--system local] [--system minicluster] [--before REV]
                                [--calibrate N [--min-runs N] [--calibration-exclude PATTERN]
                                 [--calibration-gap MIN] | --baseline DIR]
                                [--keep] [-- RFM_OPTIONS...]
  python ci/bench/cost_bench.py --report run-report.json [--report ...] [--by-nodes]

``--by-nodes`` splits each report by the cases' node count (a 4-node cluster's run holds
the 1-, 2- and 4-node variants): the session line then gives the cases' summed time.

Each session line also counts the launches that hung after their complete results (MPICH
4.0 over UCX's TCP, ended by the driver with their values kept) and how many of them waited
out a full grace (``hang_grace``) rather than the short one a known hang gives
(``fabreg.run.launch.KNOWN_HANG_GRACE_S``), with the seconds all of them spent past their
results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from worktree import checked_out, with_package

from fabreg.run.launch import KNOWN_HANG_GRACE_S

REPO = Path(__file__).resolve().parents[2]
REFRAME = Path(sys.executable).parent / "reframe"
#: The result file each in-job driver writes beside the job's output.
RESULTS = ("measure.json", "repeat-probe.json", "client-server.json", "tail-environment.json",
           "sweep.json")
PARTS = ("floor", "pilot", "validation", "more", "job_other", "reframe")


def run_suite(system: str, rfm_args: list[str], workdir: Path, repo: Path = REPO,
              label: str = "", checks: Path | None = None) -> Path:
    """One ReFrame session on ``system`` with the suite in ``repo`` (its checks, or
    ``checks``); returns its JSON report (its system named ``system (label)`` where a label
    is given)."""
    name = f"{system}-{label}" if label else system
    report = workdir / f"report-{name}.json"
    checks = checks or repo / "checks"
    cmd = [str(REFRAME), "-C", str(repo / "reframe-config.py"), "-c", str(checks),
           "-r", "--system", system, "--prefix", str(workdir / name), "--report-file",
           str(report), *rfm_args]
    env = dict(os.environ, FABREG_PERFLOG_DIR=str(workdir / name / "perflogs"))
    if repo != REPO:  # the suite's own package at that revision, in ReFrame and in the jobs
        env = with_package(env, repo)
    print(f"# running ({label or 'now'}): {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    subprocess.run(cmd, env=env, cwd=repo, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    if not report.exists():
        raise SystemExit(f"cost_bench: ReFrame wrote no report for {name}")
    if label:
        data = json.loads(report.read_text())
        data["fabreg_label"] = label
        report.write_text(json.dumps(data))
    return report


def copied_checks(repo: Path, to: Path) -> Path:
    """The suite's checks of ``repo`` copied to ``to``, so that a baseline recorded here
    never lands in a working tree."""
    shutil.copytree(repo / "checks", to)
    return to


def calibrate(system: str, sessions: int, rfm_args: list[str], work: Path,
              checks: list[Path], min_runs: int = 5, gap_s: float = 0.0) -> None:
    """Run ``sessions`` sessions of the current suite and record this host's baseline from
    them into every one of ``checks`` (``fabreg references calibrate``; a key measured in
    fewer than ``min_runs`` of them gets no row). Each session starts ``gap_s`` after the
    previous one started, at the earliest: a virtual host's states last minutes to hours,
    and a baseline of back-to-back sessions knows only the hour it was measured in."""
    db = work / f"calibrate-{system}.db"
    fabreg = [sys.executable, "-m", "fabreg.cli"]
    first = last = time.monotonic()
    for i in range(sessions):
        if i:
            time.sleep(max(0.0, last + gap_s - time.monotonic()))
        last = time.monotonic()
        report = run_suite(system, rfm_args, work, label=f"calibration{i + 1}",
                           checks=checks[-1])
        perflogs = report.parent / report.stem.removeprefix("report-") / "perflogs"
        subprocess.run([*fabreg, "ingest", "-q", "--db", str(db), str(perflogs)], check=True)
    done = subprocess.run([*fabreg, "references", "calibrate", "--system", system, "--checks",
                           str(checks[-1]), "--db", str(db), "--min-runs", str(min_runs)],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"cost_bench: calibration failed: {done.stderr.strip()}")
    print(f"# baseline from {sessions} sessions over {(time.monotonic() - first) / 60:.0f} "
          f"min: {done.stdout.strip().splitlines()[-1]}", file=sys.stderr, flush=True)
    recorded = checks[-1] / "references" / system
    for other in checks[:-1]:
        shutil.copytree(recorded, other / "references" / system, dirs_exist_ok=True)


def use_baseline(system: str, baseline: Path, checks: list[Path]) -> None:
    """Judge every one of ``checks`` by ``baseline``: a host baseline folder recorded
    earlier (``references/<system>/`` of a kept ``--calibrate`` run's checks)."""
    if not any(baseline.glob("*.yaml")):
        raise SystemExit(f"cost_bench: {baseline}: no host baseline (*.yaml) in it")
    for tree in checks:
        shutil.copytree(baseline, tree / "references" / system, dirs_exist_ok=True)
    print(f"# judged by the baseline in {baseline}", file=sys.stderr, flush=True)


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


def hangs(result: dict) -> tuple[int, int, float]:
    """The driver's launches that hung after their results: how many, how many of them
    waited out a full grace, and the seconds all of them spent past their results (a short
    run that says no ``results_s``, from before the driver wrote it, counts the whole of its
    time as past them)."""
    runs = [*(result.get("launches") or []), *(result.get("baseline_launches") or []),
            *(x for x in (result.get("validation"), result.get("pilot")) if x)]
    hung = [x for x in runs if isinstance(x, dict) and x.get("hung_after_results")]
    past = [float(x["seconds"]) - float(x["results_s"]) if x.get("results_s") is not None
            else float(x["seconds"]) for x in hung]
    full = sum(p > KNOWN_HANG_GRACE_S + 1.0 for p in past)
    return len(hung), full, sum(past)


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
    validation = float((result.get("validation") or {}).get("seconds") or 0)
    job = float(case.get("time_run") or 0)
    # ReFrame's own stages for this case; the time a case waits for others (max_jobs) is
    # not its cost.
    reframe = sum(float(case.get(k) or 0) for k in
                  ("time_setup", "time_compile", "time_sanity", "time_performance"))
    floor = launches[0]
    more = sum(launches[1:])
    hung, full, past = hangs(result)
    return {"floor": floor, "pilot": pilot, "validation": validation, "more": more,
            "job_other": max(0.0, job - floor - more - pilot - validation),
            "reframe": reframe, "total": job + reframe, "launches": len(launches),
            "hung": hung, "full_grace": full, "past_results": past}


def family(case: dict) -> str:
    return str(case.get("display_name") or case.get("name", "?")).split()[0]


@dataclass
class Session:
    """What one ReFrame session's report says of its cost."""

    system: str
    by_family: dict[str, list[dict[str, float]]]
    #: Cases that measured nothing (skipped or failed).
    skipped: int
    #: The session's wall time and its cases' verdicts.
    seconds: float
    passed: int
    failed: int


def read_report(path: Path) -> Session:
    data = json.loads(path.read_text())
    by_family: dict[str, list[dict[str, float]]] = defaultdict(list)
    system, skipped = "?", 0
    info = data.get("session_info", {})
    for run in data.get("runs", []):
        for case in run.get("testcases", []):
            system = str(case.get("system", system)).split(":")[0]
            costs = case_costs(case)
            if costs is None:
                skipped += 1
                continue
            by_family[family(case)].append(costs)
    if label := data.get("fabreg_label"):
        system = f"{system} ({label})"
    return Session(system, by_family, skipped, float(info.get("time_elapsed") or 0),
                   int(info.get("num_cases", 0)) - int(info.get("num_failures", 0))
                   - int(info.get("num_skipped", 0)), int(info.get("num_failures", 0)))


def nodes_of(case: dict) -> int:
    """The case's node count (its ``nodes`` parameter; 1 where it has none)."""
    for part in str(case.get("display_name", "")).split():
        if part.startswith("%nodes="):
            return int(part.split("=", 1)[1])
    return 1


def by_nodes(path: Path) -> list[Session]:
    """One finished run's report as one session per node count (the 1-, 2- and 4-node
    variants of a 4-node cluster side by side); their wall time is their cases' sum."""
    data = json.loads(path.read_text())
    groups: dict[int, Session] = {}
    for run in data.get("runs", []):
        for case in run.get("testcases", []):
            nodes = nodes_of(case)
            system = str(case.get("system", "?")).split(":")[0]
            session = groups.setdefault(nodes, Session(f"{system}, {nodes} node(s)",
                                                       defaultdict(list), 0, 0.0, 0, 0))
            costs = case_costs(case)
            if costs is None:
                session.skipped += 1
                session.failed += case.get("result") == "fail"
                continue
            session.by_family[family(case)].append(costs)
            session.passed += 1
            session.seconds += costs["total"]
    return [groups[n] for n in sorted(groups)]


def median_case(cases: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(c[k] for c in cases) for k in (*PARTS, "total", "launches")}


def print_table(reports: list[Session]) -> None:
    families = sorted({f for r in reports for f in r.by_family})
    print("# cost of one case, median over the family's passing cases (seconds); "
          "l = launches, ratio = total / floor; all = the family's cases together, and their "
          "share of the session's")
    width = 40
    print(f"{'family':18}" + "".join(f" | {r.system[:width]:>{width}}" for r in reports))
    print(f"{'':18}" + "".join(f" | {'n  l  total  floor  ratio     all':>{width}}"
                               for _ in reports))
    measured = [sum(c["total"] for cs in r.by_family.values() for c in cs) or 1.0
                for r in reports]
    for fam in families:
        cells = []
        for r, session_total in zip(reports, measured, strict=True):
            cases = r.by_family.get(fam)
            if not cases:
                cells.append(f" | {'-':>{width}}")
                continue
            m = median_case(cases)
            ratio = m["total"] / m["floor"] if m["floor"] > 0 else float("inf")
            family_total = sum(c["total"] for c in cases)
            share = 100 * family_total / session_total
            cell = (f"{len(cases):>3} {m['launches']:>2g} {m['total']:6.1f} {m['floor']:6.2f} "
                    f"{ratio:6.1f}x {family_total:5.0f} s {share:2.0f}%")
            cells.append(f" | {cell:>{width}}")
        print(f"{fam:18}" + "".join(cells))
    print("\n# each session: wall time, cases, launches; where its cases' time went (floor / "
          "pilot / validation / more launches / in job other / ReFrame's stages)")
    for r in reports:
        cases = [c for cs in r.by_family.values() for c in cs]
        sums = {k: sum(c[k] for c in cases) for k in
                (*PARTS, "total", "launches", "hung", "full_grace", "past_results")}
        total = sums["total"] or 1.0
        shares = "  ".join(f"{k} {100 * sums[k] / total:4.1f}%" for k in PARTS)
        print(f"{r.system:24} {r.seconds:7.1f} s  {r.passed:4} passed {r.failed:3} failed  "
              f"{sum(len(c) for c in r.by_family.values()):4} measured "
              f"({sums['launches']:.0f} launches, {sums['total']:.1f} s): {shares}  "
              f"({r.skipped} cases measured nothing: skipped or failed); hung after their "
              f"results: {sums['hung']:.0f} launches, {sums['full_grace']:.0f} of them a full "
              f"grace, {sums['past_results']:.1f} s past their results")
    if len(reports) == 2 and reports[0].seconds:
        print(f"\n# wall time {reports[1].system} / {reports[0].system}: "
              f"{reports[1].seconds / reports[0].seconds:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", action="append", default=[],
                        help="run the suite on this system (repeatable; default local)")
    parser.add_argument("--report", action="append", default=[], type=Path,
                        help="read a finished run's JSON report instead (repeatable)")
    parser.add_argument("--before", metavar="REV",
                        help="also run each session with the suite at this git revision")
    parser.add_argument("--calibrate", type=int, default=0, metavar="N",
                        help="record this host's baseline from N sessions first")
    parser.add_argument("--min-runs", type=int, default=5, metavar="N",
                        help="with --calibrate: sessions a key needs for a baseline row "
                             "(fabreg references calibrate --min-runs; default 5)")
    parser.add_argument("--calibration-exclude", metavar="PATTERN",
                        help="with --calibrate: leave these cases out of the calibration "
                             "sessions (ReFrame -x; e.g. checks no reference judges)")
    parser.add_argument("--calibration-gap", type=float, default=0.0, metavar="MIN",
                        help="with --calibrate: start each calibration session at least MIN "
                             "minutes after the previous one started (default 0)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="judge the sessions by this host baseline folder instead of "
                             "calibrating (references/SYSTEM/ of a kept --calibrate run)")
    parser.add_argument("--by-nodes", action="store_true",
                        help="with --report: one column per node count of each report")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (reports, perflogs, outputs)")
    parser.add_argument("rfm_args", nargs="*", help="after --: ReFrame options")
    args = parser.parse_args()
    if args.baseline and args.calibrate:
        parser.error("--baseline and --calibrate exclude each other")
    reports = [s for p in args.report for s in by_nodes(p)] if args.by_nodes else \
        [read_report(p) for p in args.report]
    if not args.report or args.system:
        work = Path(tempfile.mkdtemp(prefix="cost-bench-"))
        before = work / "before"
        try:
            with checked_out(REPO, args.before, before) if args.before else nullcontext():
                for system in args.system or ["local"]:
                    trees = {"now": (REPO, copied_checks(REPO, work / f"checks-{system}-now"))}
                    if args.before:
                        trees = {args.before: (before, copied_checks(
                            before, work / f"checks-{system}-before")), **trees}
                    if args.calibrate:
                        excluded = ["-x", args.calibration_exclude] \
                            if args.calibration_exclude else []
                        calibrate(system, args.calibrate, [*args.rfm_args, *excluded], work,
                                  [checks for _, checks in trees.values()], args.min_runs,
                                  args.calibration_gap * 60)
                    elif args.baseline:
                        use_baseline(system, args.baseline, [c for _, c in trees.values()])
                    for label, (repo, checks) in trees.items():
                        reports.append(read_report(run_suite(
                            system, args.rfm_args, work, repo,
                            label if args.before or args.calibrate or args.baseline else "",
                            checks)))
        finally:
            if args.keep:
                print(f"# kept {work}: its reports, perflogs and outputs", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)
    print_table(reports)


if __name__ == "__main__":
    main()

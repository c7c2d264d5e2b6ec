#!/usr/bin/env python3
"""Detection power and false alarms of the OSU bandwidth verdict on the emulated cluster.

Brings up ``minicluster`` (root) with 2 or 4 nodes, calibrates this host's baseline from its
own runs, then runs the bandwidth cases that cross node2's link N times healthy and N times
with that link capped at half the calibrated bandwidth, and once per cap fraction to find the
smallest cap that is caught. The cases (tcp, 1 MiB): ``OsuBandwidth`` between node1 and node2,
and with ``--nodes 4`` also ``OsuAllreduce`` over all four nodes (its bus bandwidth crosses
every link). Prints, side by side and per case, healthy runs failed or inconclusive, capped
runs caught, and wall times. With ``--spans 0,60`` the healthy runs alternate between those
confirmation spans (``confirm_span``: seconds over which a failing value's confirmation runs
are spread) and are printed side by side: a spell in which the whole host runs slow fails a
healthy run when its confirmation is measured at once, not when it is spread. With
``--after-fault`` each healthy repetition runs right after a capped one was restored, as a site
reruns its checks once a fault is fixed: the minute of sustained load a confirmed fault's
session puts on a virtual host is then behind every healthy run but the first. Then the cost
side: how many measurements a healthy and a capped value rest on (the perflog's
``measurements``), and the wall time of one capped session of ``--session-jobs`` failing jobs
on the same link (``--repeat``, as the acceptance mode runs), where all but the first join the
first one's confirmation; with ``--before REV`` that session runs a second time with the suite
as it was at REV (a git worktree: its checks and its ``fabreg`` package), side by side. Usage
(from the repository root, as root):

    .venv/bin/python ci/bench/verdicts_bench.py --repetitions 10 [--nodes 4] [--spans 0,60]
                                                [--after-fault] [--session-jobs 3]
                                                [--before REV]
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
from contextlib import nullcontext
from pathlib import Path

import yaml
from worktree import checked_out, with_package

from fabreg.schema import lower_is_better

REPO = Path(__file__).resolve().parents[2]
REFRAME = Path(sys.executable).parent / "reframe"
FABREG = [sys.executable, "-m", "fabreg.cli"]
COMMON = ["-S", "perf_sizes=1048576", "-S", "iterations=20", "-S", "warmup=2",
          "-S", "repeats=5", "-S", "time_limit=5m"]
#: node count -> the cases that cross node2's link: (check, its ReFrame name filter)
CASES = {
    2: [("OsuBandwidth", "OsuBandwidth%transport=tcp%nodes=2")],
    4: [("OsuBandwidth", "OsuBandwidth%transport=tcp%nodes=2"),
        ("OsuAllreduce", "OsuAllreduce%transport=tcp%nodes=4")],
}


def run(cmd: list[str], env: dict[str, str], check: bool = False,
        **kw) -> subprocess.CompletedProcess[str]:
    """``cmd``'s outcome; with ``check``, a failure ends the bench with what it said (the
    cluster still comes down)."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        sys.exit(f"{' '.join(cmd[2:])}: exit {proc.returncode}: {said}")
    return proc


def reframe(work: Path, checks: Path, env: dict[str, str], cases: list[tuple[str, str]],
            *extra: str, mpi: str, repo: Path = REPO) -> tuple[dict[str, str], float]:
    """One ReFrame session of ``mpi``'s cases (with the suite in ``repo``); returns each
    case's verdict (pass/fail/inconclusive/error) and the session's seconds."""
    work.mkdir(parents=True)
    start = time.monotonic()
    names = [arg for _, name in cases for arg in ("-n", name)]
    env = dict(env, FABREG_PERFLOG_DIR=str(work / "perflogs"))
    if repo != REPO:  # that revision's package, in ReFrame and in the jobs Slurm starts
        env = with_package(env, repo)
    run([str(REFRAME), "-C", str(repo / "reframe-config.py"), "-c", str(checks), "--prefix",
         str(work), "--system", "minicluster", "-r", *names, "-p", mpi, *COMMON, *extra], env,
        cwd=work, timeout=3600)
    seconds = time.monotonic() - start
    verdicts = {}
    for check, _ in cases:
        row = last_row(work, check)
        if row is None:
            verdicts[check] = "error"
            continue
        verdicts[check] = (row["ref_status"] if row["ref_status"] in ("inconclusive", "flaky")
                           else row["result"])
    return verdicts, seconds


def perflog_rows(work: Path, check: str) -> list[dict[str, str]]:
    """The perflog rows ``check`` wrote in the session ``work``."""
    log = work / "perflogs" / "minicluster" / "compute" / f"{check}.log"
    if not log.is_file():
        return []
    lines = log.read_text().splitlines()
    return [dict(zip(lines[0].split("|"), line.split("|"))) for line in lines[1:]]


def last_row(work: Path, check: str) -> dict[str, str] | None:
    """The last perflog row ``check`` wrote in the session ``work``, or None (none)."""
    return (perflog_rows(work, check) or [None])[-1]


def measurements(works: list[Path], check: str) -> list[int]:
    """How many measurements each value of these sessions' ``check`` rows rests on (the
    perflog's ``measurements``; none where the suite logged no such column)."""
    return [int(n) for work in works for row in perflog_rows(work, check)
            for n in json.loads(row.get("measurements") or "{}").values()]


def host_controls(works: list[Path], check: str) -> dict[str, list[float]]:
    """Figure -> the host control's values over these sessions' last ``check`` rows: what
    judged their failing values (``fabreg.run.host_control``)."""
    out: dict[str, list[float]] = {}
    for work in works:
        row = last_row(work, check)
        if row is None:
            continue
        control = json.loads(row.get("host_control") or "{}")
        for name, value in control.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and name not in ("samples", "other_share"):
                out.setdefault(name, []).append(float(value))
    return out


def capped_sessions(args: argparse.Namespace, cluster: list[str], env: dict[str, str],
                    checks: Path, value: float, tmp: Path,
                    old: Path | None) -> dict[str, dict]:
    """One session of ``--session-jobs`` failing jobs per case on node2's link at half
    ``value``: its wall time and verdicts, and the same with the suite of ``old`` (the
    ``--before`` worktree) where given."""
    cases = CASES[args.nodes]
    trees = {"now": (REPO, checks)}
    if old is not None:
        old_checks = tmp / "checks-before"
        shutil.copytree(checks, old_checks)
        shutil.copy(old / "checks" / "osu.py", old_checks)
        trees = {args.before: (old, old_checks), **trees}
    rate = f"{int(value * 0.5 * 8)}mbit"
    sessions = {}
    for label, (repo, where) in trees.items():
        run([*cluster, "degrade", "node2", "--rate", rate], env, check=True)
        try:
            work = tmp / f"session-{label}"
            _, took = reframe(work, where, env, cases, "--repeat", str(args.session_jobs),
                              mpi=args.mpi, repo=repo)
        finally:
            run([*cluster, "restore"], env, check=True)
        sessions[label] = {"seconds": round(took, 1), "verdicts": [
            r["result"] for check, _ in cases for r in perflog_rows(work, check)]}
    return sessions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--nodes", type=int, choices=sorted(CASES), default=2)
    parser.add_argument("--capped-repetitions", type=int,
                        help="runs with the link at half speed (default: --repetitions)")
    parser.add_argument("--spans", default="",
                        help="confirmation spans (s) the healthy runs alternate between, e.g. "
                             "0,60 (default: the check's own)")
    parser.add_argument("--after-fault", action="store_true",
                        help="run each healthy repetition right after a capped one is restored "
                             "(as a site reruns a check once a fault is fixed), not all first")
    parser.add_argument("--calibration-runs", type=int, default=8)
    parser.add_argument("--fractions", default="0.9,0.8,0.7,0.6,0.5",
                        help="link caps to try, as fractions of the calibrated bandwidth")
    parser.add_argument("--session-jobs", type=int, default=3,
                        help="failing jobs in the capped session that is timed (0: none)")
    parser.add_argument("--before", metavar="REV",
                        help="also time the capped session with the suite at this revision")
    parser.add_argument("--mpi", default="openmpi", choices=("openmpi", "mpich", "mvapich2"),
                        help="the MPI whose cases are judged (default: openmpi)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (cluster logs, stage, perflogs)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fabreg-verdicts-"))
    state = tmp / "cluster"
    env = dict(os.environ, FABREG_CLUSTER_DIR=str(state))
    cluster = [*FABREG, "cluster", "--state-dir", str(state)]
    cases = CASES[args.nodes]
    try:
        up = run([*cluster, "up", "--nodes", str(args.nodes)], env, timeout=300)
        if up.returncode != 0:
            print(f"cannot bring the cluster up: {up.stderr.strip()}", file=sys.stderr)
            return 2
        checks = tmp / "checks"
        checks.mkdir()
        shutil.copy(REPO / "checks" / "osu.py", checks)
        (checks / "references").mkdir()
        cal = tmp / "calibrate"
        t0 = time.monotonic()
        reframe(cal, checks, env, cases, "--repeat", str(args.calibration_runs), mpi=args.mpi)
        db = tmp / "fabreg.db"
        run([*FABREG, "ingest", "-q", "--db", str(db), str(cal / "perflogs")], env, check=True)
        calibrated = run([*FABREG, "references", "calibrate", "--system", "minicluster",
                          "--checks", str(checks), "--db", str(db)], env, check=True)
        calibration_s = time.monotonic() - t0
        (baseline,) = (checks / "references" / "minicluster").glob("*.yaml")
        rows = yaml.safe_load(baseline.read_text())["references"]
        (row,) = [r for r in rows if r["metric"] == "bandwidth"]
        control_rows = {r["metric"]: r for r in rows if r["benchmark"] == "host_control"}
        value = float(row["value"])
        print(f"baseline ({args.nodes} nodes): OsuBandwidth {value:g} MB/s, warn "
              f"-{row['warn']:.0%}, fail -{row['fail']:.0%}; {len(rows)} rows "
              f"({args.calibration_runs} runs, {calibration_s:.0f} s)")
        # the row's own comment (how many runs, how they spread), and what the calibration
        # set aside (interference, a slow host control), as it said it
        lines = baseline.read_text().splitlines()
        print("  bandwidth row:", *[lines[i - 1].strip("# ") for i, line in enumerate(lines)
                                     if "metric: bandwidth" in line][:1])
        for other in rows:  # the 4-node allreduce's row, which the capped link also crosses
            if other is not row and other["benchmark"] != "host_control":
                worse = "+" if lower_is_better(other["metric"], other["unit"]) else "-"
                print(f"  {other['benchmark']} {other['metric']}: {other['value']:g} "
                      f"{other['unit']}, fail {worse}{other['fail']:.0%}")
        for line in calibrated.stdout.splitlines():
            if line.startswith("left out"):
                print(f"  calibration {line}")

        def capped(fraction: float, label: str) -> tuple[dict[str, str], float]:
            rate = f"{int(value * fraction * 8)}mbit"
            run([*cluster, "degrade", "node2", "--rate", rate], env, check=True)
            try:
                return reframe(tmp / label, checks, env, cases, mpi=args.mpi)
            finally:
                run([*cluster, "restore"], env, check=True)

        spans = [s for s in args.spans.split(",") if s] or [""]
        healthy: dict[str, list[tuple[dict[str, str], float]]] = {s: [] for s in spans}
        half: list[tuple[dict[str, str], float]] = []
        capped_runs = args.capped_repetitions or args.repetitions

        def healthy_runs(i: int) -> None:
            for span in spans:  # alternating: a slow spell of the host meets every span
                extra = ["-S", f"confirm_span={span}"] if span else []
                healthy[span].append(reframe(tmp / f"healthy{i}-{span}", checks, env, cases,
                                             *extra, mpi=args.mpi))

        if args.after_fault:  # a capped run, restored, then healthy runs: a site's rerun
            for i in range(max(args.repetitions, capped_runs)):
                if i < capped_runs:
                    half.append(capped(0.5, f"half{i}"))
                if i < args.repetitions:
                    healthy_runs(i)
        else:
            for i in range(args.repetitions):
                healthy_runs(i)
            half = [capped(0.5, f"half{i}") for i in range(capped_runs)]
        sweep = {f: capped(f, f"cap{f}")[0] for f in map(float, args.fractions.split(","))}
        columns = {(f"healthy {s} s" if s else "healthy"): runs for s, runs in healthy.items()}
        columns["link at 1/2"] = half
        print()
        print(f"{'':34}" + "".join(f"{c:>16}" for c in columns))
        for check, _ in cases:
            print(f"{check + ' runs':34}" + "".join(f"{len(r):>16}" for r in columns.values()))
            for verdict, label in (("fail", "failed (a verdict of fail)"),
                                   ("flaky", "flaky (not confirmed)"),
                                   ("inconclusive", "inconclusive"), ("error", "error")):
                print(f"{'  ' + label:34}" + "".join(
                    f"{sum(v[check] == verdict for v, _ in r):>16}" for r in columns.values()))
        print(f"{'median session wall time (s)':34}" + "".join(
            f"{sorted(s for _, s in r)[len(r) // 2]:>16.1f}" for r in columns.values()))
        print()
        for check, _ in cases:
            print(f"{check}: cap (fraction of baseline) -> verdict: " +
                  ", ".join(f"{f:g}: {v[check]}" for f, v in sweep.items()))
            caught = [f for f, v in sweep.items() if v[check] == "fail"]
            print(f"  mildest cap caught: {max(caught):g} of the calibrated bandwidth"
                  if caught else "  no cap in the sweep was caught")
        print()
        works = {"healthy": [tmp / f"healthy{i}-{s}" for i in range(args.repetitions)
                             for s in spans],
                 "link at 1/2": [tmp / f"half{i}"
                                 for i in range(args.capped_repetitions or args.repetitions)]}
        for check, _ in cases:
            print(f"{check}: host control, lowest-highest over the sessions (baseline, fail limit)")
            for label, dirs in works.items():
                for name, values in sorted(host_controls(dirs, check).items()):
                    ref = control_rows.get(name)
                    worse = "+" if ref and lower_is_better(name, ref["unit"]) else "-"
                    base = (f" (baseline {ref['value']:g} {ref['unit']}, fail "
                            f"{worse}{ref['fail']:.0%})" if ref else " (no baseline row)")
                    print(f"  {label:12} {name:15} {min(values):g}-{max(values):g}{base}")
        print()
        for check, _ in cases:
            for label, dirs in works.items():
                counts = measurements(dirs, check)
                if counts:
                    print(f"{check}: measurements per value, {label}: median "
                          f"{sorted(counts)[len(counts) // 2]}, {min(counts)}-{max(counts)} "
                          f"over {len(counts)} values")
        sessions = {}
        if args.session_jobs:
            with (checked_out(REPO, args.before, tmp / "before") if args.before
                  else nullcontext()) as old:
                sessions = capped_sessions(args, cluster, env, checks, value, tmp, old)
            print(f"\nlink at 1/2, one session of {args.session_jobs} jobs per case "
                  f"(--repeat {args.session_jobs}): wall time, verdicts")
            for label, session in sessions.items():
                print(f"  {label:12} {session['seconds']:7.1f} s  "
                      f"{', '.join(session['verdicts'])}")
        print(json.dumps({"healthy": healthy, "half": half, "sweep": sweep,
                          "sessions": sessions}))
    finally:
        run([*cluster, "down"], env, timeout=300)
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark: the matrix multiply's figures from one run per launch against the fastest of
the runs ``fabreg_matmul --seconds S`` makes, on the emulated cluster (root).

One run of a sub-millisecond phase is mostly its own noise: its buffers' first touch, a
time slice lost. A launch whose first value lies beyond its failure limit goes to a
confirmation that is spread over a minute, so that noise is paid in wall time by every
session (two healthy 512 multiplies took 25 s of a 78 s local session). This bench runs the
real probe (built here from ``src/probes``, out of tree) with Open MPI over TCP between two
nodes of ``fabreg cluster``, both ways interleaved, in three phases:

- **calibration**: ``--sessions`` sessions of 3 launches each way (the suite measures a
  value without a reference 3 times and logs the best), and from their bests each figure's
  baseline row the way ``fabreg references calibrate`` draws it
  (``fabreg.review.suggest.baseline_band``);
- **healthy**: ``--launches`` launches each way, judged by that baseline: how many first
  values lie beyond their warning limit (a launch that would be repeated) and beyond their
  failure limit (one that would go to a confirmation: the false alarms a confirmation then
  has to clear);
- **capped**: node2's link capped at half the bandwidth ``osu_bw`` measured on it (1 MiB,
  the suite's own probe), ``--launches`` launches each way: how many first values of the
  communication figures lie beyond their failure limit (caught at once).

``--local`` runs the first two phases on this host instead (2 ranks over shared memory,
the placement of ``make run``; no link to cap, no root needed).

Prints both ways side by side per figure, and each way's launch wall time (median).

Usage (from the repository root, as root, nothing else running):
    .venv/bin/python ci/bench/matmul_runs_bench.py [--size 512] [--mode blocking]
        [--seconds 0.1] [--sessions 5] [--launches 20] [--local]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabreg.cluster.layout import Paths
from fabreg.review.suggest import BASELINE_FAIL, BASELINE_WARN, baseline_band
from fabreg.run import confirm
from fabreg.run.parsers.osu import parse_osu
from fabreg.run.parsers.probes import ProbeOutputError, parse_matmul
from fabreg.schema import lower_is_better

REPO = Path(__file__).resolve().parents[2]
FABREG = [sys.executable, "-m", "fabreg.cli"]
#: The judged figures and their units (checks/matmul.py).
UNITS = {"total": "s", "distribute": "s", "compute": "s", "gather": "s",
         "comm_fraction": "fraction", "gflops": "GFLOP/s"}
#: The figures a slow link sets.
COMMUNICATION = ("distribute", "gather", "comm_fraction")
MPIRUN = ["mpirun.openmpi", "--bind-to", "none", "--npernode", "1", "-np", "2",
          "--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
#: ``--local``: 2 ranks on this host over shared memory, as ``make run`` places them.
MPIRUN_LOCAL = ["mpirun.openmpi", "--bind-to", "none", "-np", "2", "--mca", "pml", "ob1",
                "--mca", "btl", "vader,self"]


def run(cmd: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd[:4])}: exit {proc.returncode}: "
                 f"{(proc.stderr.strip() or proc.stdout.strip())[-1500:]}")
    return proc


def build(into: Path) -> Path:
    """The suite's probes, built from src/probes into ``into`` (out of tree)."""
    into.mkdir(parents=True)
    run(["make", "-s", "-f", str(REPO / "src" / "probes" / "Makefile"), "CC=mpicc.openmpi",
         "fabreg_matmul", "osu_bw"], dict(os.environ), cwd=into)
    return into


def batch(launches: list[list[str]], work: Path, name: str, env: dict[str, str],
          local: bool = False) -> list[tuple[str, float]]:
    """One Slurm job on 2 nodes (or one script on this host, ``local``) that makes
    ``launches`` one after the other; each launch's output and wall seconds."""
    job = work / name
    job.mkdir()
    lines = ["#!/bin/bash", "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
             "export OMPI_MCA_mpi_yield_when_idle=1"]
    for i, argv in enumerate(launches):
        lines += [f"s=$(date +%s.%N); {' '.join(argv)} > {job}/{i}.out 2>&1",
                  f"echo $s $(date +%s.%N) > {job}/{i}.time"]
    script = job / "job.sh"
    script.write_text("\n".join(lines) + "\n")
    submit = ["bash"] if local else ["sbatch", "--wait", "-N", "2", "--exclusive", "-o",
                                     str(job / "slurm.out")]
    run([*submit, str(script)], env, timeout=3600)
    out = []
    for i in range(len(launches)):
        start, end = map(float, (job / f"{i}.time").read_text().split())
        out.append(((job / f"{i}.out").read_text(errors="replace"), end - start))
    return out


def figures(text: str) -> dict[str, float] | None:
    try:
        return parse_matmul(text).figures()
    except ProbeOutputError:
        return None


def best(values: list[float], figure: str) -> float:
    return confirm.best(values, lower_is_better(figure, UNITS[figure]))


def limits(sessions: list[list[dict[str, float]]]) -> dict[str, tuple[float, float]]:
    """Figure -> its (warn, fail) limit from the sessions' bests, as a baseline row."""
    out = {}
    for figure in UNITS:
        bests = [best([launch[figure] for launch in s], figure) for s in sessions]
        median = statistics.median(bests)
        lower = lower_is_better(figure, UNITS[figure])
        warn, fail = baseline_band(bests, median, lower, BASELINE_WARN, BASELINE_FAIL,
                                   control=False)
        sign = 1 if lower else -1
        out[figure] = (median * (1 + sign * warn), median * (1 + sign * fail))
    return out


def beyond(value: float, limit: float, figure: str) -> bool:
    return confirm.crosses(value, limit, lower_is_better(figure, UNITS[figure]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--mode", default="blocking", choices=("blocking", "nonblocking"))
    parser.add_argument("--seconds", type=float, default=0.1,
                        help="fabreg_matmul --seconds of the second way (default 0.1)")
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--local", action="store_true",
                        help="2 ranks on this host over shared memory, no cluster and no "
                             "capped phase (the placement of make run)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0 and not args.local:
        sys.exit("matmul_runs_bench: the emulated cluster needs root")
    tmp = Path(tempfile.mkdtemp(prefix="fabreg-matmul-runs-"))
    state = tmp / "cluster"
    env = dict(os.environ, FABREG_CLUSTER_DIR=str(state),
               SLURM_CONF=str(Paths(state).slurm_conf))
    cluster = [*FABREG, "cluster", "--state-dir", str(state)]
    probes = build(tmp / "probes")
    matmul = [str(probes / "fabreg_matmul"), "-n", str(args.size), "-m", args.mode]
    ways = {"one run": matmul, f"fastest, --seconds {args.seconds:g}":
            [*matmul, "--seconds", str(args.seconds)]}
    try:
        if not args.local:
            run([*cluster, "up", "--nodes", "2"], env, timeout=300)
        mpirun = MPIRUN_LOCAL if args.local else MPIRUN

        def launches(n: int, name: str) -> dict[str, list[tuple[dict[str, float], float]]]:
            argvs = [[*mpirun, *argv] for _ in range(n) for argv in ways.values()]
            outs = batch(argvs, tmp, name, env, args.local)
            got: dict[str, list[tuple[dict[str, float], float]]] = {w: [] for w in ways}
            for i, (text, seconds) in enumerate(outs):
                values = figures(text)
                if values is None:
                    sys.exit(f"matmul_runs_bench: launch {i} of {name} gave no result: "
                             f"{text[-800:]}")
                got[list(ways)[i % len(ways)]].append((values, seconds))
            return got

        t0 = time.monotonic()
        calibration = [launches(3, f"calibration{i + 1}") for i in range(args.sessions)]
        baseline = {w: limits([[v for v, _ in s[w]] for s in calibration]) for w in ways}
        healthy = launches(args.launches, "healthy")
        capped: dict[str, list[tuple[dict[str, float], float]]] | None = None
        if args.local:
            where = "Open MPI over shared memory, 2 ranks on this host"
        else:
            bw = batch([[*MPIRUN, str(probes / "osu_bw"), "-m", "1048576:1048576"]], tmp,
                       "bandwidth", env)[0][0]
            mbs = parse_osu(bw).value(1048576)
            rate = f"{int(mbs * 8 / 2)}mbit"
            run([*cluster, "degrade", "node2", "--rate", rate], env)
            capped = launches(args.launches, "capped")
            run([*cluster, "restore"], env)
            where = (f"Open MPI over TCP, 2 nodes, link {mbs:,.0f} MB/s capped at {rate} "
                     f"for {args.launches} launches each way")
        print(f"# fabreg_matmul n={args.size} {args.mode}, {where}; baseline from "
              f"{args.sessions} sessions of 3 launches; {args.launches} healthy launches "
              f"each way; {time.monotonic() - t0:.0f} s")
        print(f"{'figure':<14}| " + " | ".join(f"{w:^44}" for w in ways))
        print(f"{'':<14}| " + " | ".join(
            f"{'baseline':>9} {'fail':>8} {'warn':>5} {'fail':>5} {'caught':>7}"
            for _ in ways) + "\n" + "-" * (16 + 47 * len(ways)))
        for figure in UNITS:
            cells = []
            for w in ways:
                warn, fail = baseline[w][figure]
                median = statistics.median(
                    best([v[figure] for v, _ in s[w]], figure) for s in calibration)
                over_warn = sum(beyond(v[figure], warn, figure) for v, _ in healthy[w])
                over_fail = sum(beyond(v[figure], fail, figure) for v, _ in healthy[w])
                caught = sum(beyond(v[figure], fail, figure) for v, _ in capped[w]) \
                    if capped and figure in COMMUNICATION else None
                cells.append(f"{median:>9.4g} {(fail / median - 1):>+8.0%} {over_warn:>5} "
                             f"{over_fail:>5} {'-' if caught is None else caught:>7}")
            print(f"{figure:<14}| " + " | ".join(cells))
        for w in ways:
            warn_any = sum(any(beyond(v[f], baseline[w][f][0], f) for f in UNITS)
                           for v, _ in healthy[w])
            fail_any = sum(any(beyond(v[f], baseline[w][f][1], f) for f in UNITS)
                           for v, _ in healthy[w])
            caught = "" if capped is None else "capped launches caught {} of {}; ".format(
                sum(any(beyond(v[f], baseline[w][f][1], f) for f in COMMUNICATION)
                    for v, _ in capped[w]), args.launches)
            wall = statistics.median(s for _, s in healthy[w])
            print(f"{w}: healthy launches beyond a warning limit {warn_any} of "
                  f"{args.launches}, beyond a failure limit {fail_any} of {args.launches}; "
                  f"{caught}a launch {wall:.2f} s (median)")
    finally:
        if not args.local:
            subprocess.run([*cluster, "down"], env=env, capture_output=True)
        if args.keep:
            print(f"# kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

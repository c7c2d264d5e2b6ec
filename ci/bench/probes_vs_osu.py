#!/usr/bin/env python3
"""Side-by-side benchmark: fabreg's probes against real OSU Micro-Benchmarks on this host.

The probes claim to measure what OSU measures, the same way (issue 2: within 5 % for
latency and bandwidth). This script checks the claim: for each MPI that has a real
OSU build, it builds the probes with that MPI's compiler wrapper, then runs probe
and OSU alternately (interleaved, several rounds, 2 ranks, same launcher and
options) and prints the median of each, the ratio probe/OSU and whether it is
within the tolerance. Both outputs are read with the suite's one OSU parser.

Usage (from the repository, with the project virtualenv):
    .venv/bin/python ci/bench/probes_vs_osu.py --osu-prefix PREFIX [--mpi openmpi]
    FABREG_OSU_PREFIX_OPENMPI=... FABREG_OSU_PREFIX_MPICH=... .venv/bin/python ci/bench/...

Exit status: 0 when the table was printed (1 with --strict if a pair is outside the
tolerance), 2 when nothing could be compared (no real OSU given, a tool missing,
a run that failed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fabreg.parsers.osu import OsuResult, parse_osu, powers_of_two, table_problem
from fabreg.providers import find_osu_binary, osu_prefix_problem

REPO = Path(__file__).resolve().parents[2]
PROBES_SRC = REPO / "src" / "probes"
KB, MB = 1 << 10, 1 << 20

DEFAULT_BENCHMARKS = ["osu_latency", "osu_bw", "osu_bibw", "osu_allreduce"]
DEFAULT_SIZES = [8, 1 * KB, 64 * KB, 1 * MB, 4 * MB]
UNITS = {"osu_latency": "us", "osu_bw": "MB/s", "osu_bibw": "MB/s"}  # collectives: us


@dataclass(frozen=True)
class Mpi:
    """How to compile for and launch 2 ranks of one MPI on this host."""

    name: str
    cc: str
    launcher: tuple[str, ...]
    bind_none: tuple[str, ...]
    bind_core: tuple[str, ...]
    version_cmd: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


MPIS = {
    "openmpi": Mpi("openmpi", "mpicc.openmpi", ("mpirun.openmpi", "-np", "2"),
                   ("--bind-to", "none"), ("--bind-to", "core"),
                   ("mpirun.openmpi", "--version"),
                   (("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"))),
    "mpich": Mpi("mpich", "mpicc.mpich", ("mpiexec.mpich", "-n", "2"),
                 ("-bind-to", "none"), ("-bind-to", "core"), ("mpichversion",)),
}


class BenchError(Exception):
    """Something that stops the comparison; printed as one line."""


@dataclass
class Series:
    """The figures of one (MPI, benchmark, size) for the probe and for OSU, one per round."""

    probe: list[float] = field(default_factory=list)
    osu: list[float] = field(default_factory=list)


def osu_targets(args: argparse.Namespace) -> dict[str, Path]:
    """MPI name -> real OSU prefix, from --osu-prefix/--mpi and FABREG_OSU_PREFIX_<MPI>."""
    targets: dict[str, Path] = {}
    for name in MPIS:
        env_prefix = os.environ.get(f"FABREG_OSU_PREFIX_{name.upper()}", "")
        if env_prefix:
            targets[name] = Path(env_prefix)
    if args.osu_prefix:
        targets[args.mpi or "openmpi"] = Path(args.osu_prefix)
    if args.mpi:
        targets = {k: v for k, v in targets.items() if k == args.mpi}
    return targets


def tool_env(mpi: Mpi) -> dict[str, str]:
    return dict(os.environ, **dict(mpi.env))


def build_probes(mpi: Mpi, dest: Path) -> Path:
    """Build the probes with this MPI's wrapper compiler into ``dest`` (out of tree)."""
    for tool in (mpi.cc, mpi.launcher[0]):
        if shutil.which(tool) is None:
            raise BenchError(f"{mpi.name}: {tool} not found on PATH")
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["make", "-s", "-f", str(PROBES_SRC / "Makefile"), f"CC={mpi.cc}"],
                          cwd=dest, capture_output=True, text=True, env=tool_env(mpi))
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise BenchError(f"{mpi.name}: building the probes failed in {dest}: {last[0]}")
    return dest


def run_benchmark(mpi: Mpi, bind: tuple[str, ...], binary: Path, options: list[str],
                  benchmark: str, sizes: list[int], timeout: float) -> OsuResult:
    """One launch of ``binary`` on 2 ranks; its parsed table, checked for every size."""
    cmd = [*mpi.launcher, *bind, str(binary), *options]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=tool_env(mpi))
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(cmd)}: no result within {timeout:.0f} s") from None
    result = parse_osu(proc.stdout)
    problem = table_problem(result, benchmark, sizes)
    if proc.returncode != 0 or problem:
        why = problem or f"exit status {proc.returncode}"
        detail = (proc.stderr.strip().splitlines() or [""])[0]
        raise BenchError(f"{' '.join(cmd)}: {why}" + (f" ({detail})" if detail else ""))
    return result


def compare(mpi: Mpi, osu_prefix: Path, probes_dir: Path, args: argparse.Namespace,
            results: dict[tuple[str, str, int], Series]) -> None:
    """Run probe and OSU alternately, ``args.rounds`` times per benchmark."""
    problem = osu_prefix_problem(osu_prefix, args.benchmarks)
    if problem:
        raise BenchError(f"{mpi.name}: {problem}")
    sizes = sorted(args.sizes)
    sweep = powers_of_two(sizes[0], sizes[-1])
    options = ["-m", f"{sizes[0]}:{sizes[-1]}", *args.extra]
    bind = mpi.bind_core if args.bind == "core" else mpi.bind_none
    for round_no in range(args.rounds):
        for benchmark in args.benchmarks:
            osu_binary = find_osu_binary(osu_prefix, benchmark)
            assert osu_binary is not None  # osu_prefix_problem checked every benchmark
            pair = [("probe", probes_dir / benchmark), ("osu", osu_binary)]
            if round_no % 2:
                pair.reverse()  # alternate who goes first, so drift hits both alike
            for who, binary in pair:
                table = run_benchmark(mpi, bind, binary, options, benchmark, sweep,
                                      args.timeout)
                for size in sizes:
                    series = results.setdefault((mpi.name, benchmark, size), Series())
                    getattr(series, who).append(table.value(size))
            print(f"  {mpi.name} round {round_no + 1}/{args.rounds}: {benchmark} done",
                  file=sys.stderr, flush=True)


def spread(values: list[float]) -> float:
    """(max - min) / median: how much one side moved between rounds."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else float("inf")


def render(results: dict[tuple[str, str, int], Series], tolerance: float) -> tuple[str, int]:
    """The side-by-side table and the number of pairs outside the tolerance."""
    header = (f"{'MPI':<8} {'benchmark':<14} {'size':>8} {'unit':<5} {'probe':>10} "
              f"{'OSU':>10} {'probe/OSU':>9} {'within':>7} {'probe spread':>12} "
              f"{'OSU spread':>10}")
    lines = [header, "-" * len(header)]
    outside = 0
    for (mpi, benchmark, size), series in results.items():
        probe, osu = statistics.median(series.probe), statistics.median(series.osu)
        ratio = probe / osu if osu else float("inf")
        ok = abs(ratio - 1.0) <= tolerance
        outside += not ok
        lines.append(
            f"{mpi:<8} {benchmark:<14} {size:>8} {UNITS.get(benchmark, 'us'):<5} "
            f"{probe:>10.2f} {osu:>10.2f} {ratio:>9.3f} {'yes' if ok else 'NO':>7} "
            f"{spread(series.probe):>11.0%} {spread(series.osu):>10.0%}")
    return "\n".join(lines), outside


def first_line(cmd: tuple[str, ...]) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return next((ln.strip() for ln in out.splitlines() if ln.strip()), "unknown")


def host_description() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({model}), "
            f"load average {load:.2f} at start")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run fabreg's probes and real OSU alternately and compare their figures.")
    parser.add_argument("--osu-prefix", help="install prefix of a real OSU 7.x build "
                        "(for --mpi, default openmpi); also FABREG_OSU_PREFIX_OPENMPI/_MPICH")
    parser.add_argument("--mpi", choices=sorted(MPIS), help="compare only this MPI")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each side (default 5)")
    parser.add_argument("--benchmarks", nargs="+", default=DEFAULT_BENCHMARKS,
                        help=f"default: {' '.join(DEFAULT_BENCHMARKS)}")
    parser.add_argument("--sizes", nargs="+", type=int, default=DEFAULT_SIZES,
                        help="sizes to compare in bytes; each run sweeps MIN..MAX of them")
    parser.add_argument("--bind", choices=["core", "none"], default="core",
                        help="rank binding passed to the launcher (default core)")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="allowed |probe/OSU - 1| (default 0.05)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per launch")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when any pair is outside the tolerance")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="options passed to both sides, e.g. --extra -i 100 -x 10")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if min(args.sizes) < 1:
        parser.error("--sizes must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = osu_targets(args)
    if not targets:
        which = f" for {args.mpi}" if args.mpi else ""
        print(f"probes_vs_osu: error: no real OSU build given{which}: pass --osu-prefix PREFIX "
              "(with --mpi) or set FABREG_OSU_PREFIX_OPENMPI / FABREG_OSU_PREFIX_MPICH; "
              "nothing to compare against", file=sys.stderr)
        return 2
    started = time.monotonic()
    results: dict[tuple[str, str, int], Series] = {}
    versions = []
    try:
        with tempfile.TemporaryDirectory(prefix="fabreg-probes-") as tmp:
            for name, prefix in targets.items():
                mpi = MPIS[name]
                probes = build_probes(mpi, Path(tmp) / name)
                versions.append(f"{name}: {first_line(mpi.version_cmd)}")
                compare(mpi, prefix, probes, args, results)
    except BenchError as err:
        print(f"probes_vs_osu: error: {err}", file=sys.stderr)
        return 2
    table, outside = render(results, args.tolerance)
    bind = "--bind-to core" if args.bind == "core" else "--bind-to none"
    print(f"# probes vs OSU, {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(f"# host: {host_description()}")
    print(f"# MPI: {'; '.join(versions)}; 2 ranks on one host, launcher binding {bind}")
    print(f"# {args.rounds} interleaved rounds per benchmark, each run -m "
          f"{min(args.sizes)}:{max(args.sizes)} {' '.join(args.extra)}".rstrip()
          + "; medians; spread = (max-min)/median over rounds")
    print(f"# took {time.monotonic() - started:.0f} s")
    print(table)
    print(f"# {len(results) - outside} of {len(results)} within {args.tolerance:.0%}")
    return 1 if (args.strict and outside) else 0


if __name__ == "__main__":
    sys.exit(main())

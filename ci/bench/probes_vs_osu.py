#!/usr/bin/env python3
"""Side-by-side benchmark: fabreg's probes against real OSU Micro-Benchmarks on this host.

The probes claim to measure what OSU measures, the same way (issue 2: within 5 % for
latency and bandwidth). This script checks the claim: for each MPI that has a real
OSU build, it builds the probes with that MPI's compiler wrapper, then runs probe
and OSU alternately (interleaved, several rounds, 2 ranks, same launcher and
options) and prints the median of each, the ratio probe/OSU and whether it is
within the tolerance. Both outputs are read with the suite's one OSU parser. Both sides
run the same datatype: where OSU's default differs from the probes' MPI_CHAR (OSU 7.5
reduces MPI_INT), OSU is given ``-T mpi_char`` and the table's header says so.

Usage (from the repository, with the project virtualenv):
    .venv/bin/python ci/bench/probes_vs_osu.py --osu-prefix PREFIX [--mpi openmpi]
    FABREG_OSU_PREFIX_OPENMPI=... FABREG_OSU_PREFIX_MPICH=... .venv/bin/python ci/bench/...
Each MPI is Debian's (mpicc.openmpi, mpicc.mpich, mpicc.mvapich2) unless FABREG_<MPI>_PREFIX
names its install prefix, as for the suite (docs/mpis.md).

Exit status: 0 when the table was printed (1 with --strict if a pair is outside the
tolerance or a benchmark's launch failed), 2 when nothing could be compared (no real OSU
given, a tool missing, every run failed). A benchmark whose launch fails with one MPI (an
MPI that aborts in it) is left out for that MPI, named with the reason under the table.
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
from dataclasses import dataclass, field, replace
from pathlib import Path

from fabreg.run import procfs
from fabreg.run import transport as tx
from fabreg.run.parsers.osu import OsuResult, parse_osu, powers_of_two, table_problem
from fabreg.run.providers import find_osu_binary, osu_prefix_problem

REPO = Path(__file__).resolve().parents[2]
PROBES_SRC = REPO / "src" / "probes"
KB, MB = 1 << 10, 1 << 20

DEFAULT_BENCHMARKS = ["osu_latency", "osu_bw", "osu_bibw", "osu_allreduce"]
DEFAULT_SIZES = [8, 1 * KB, 64 * KB, 1 * MB, 4 * MB]
UNITS = {"osu_latency": "us", "osu_bw": "MB/s", "osu_bibw": "MB/s"}  # collectives: us
#: The probes' datatype (OSU 7.2's for every benchmark) and its equivalents: OSU 7.3 on
#: reduces MPI_CHAR as MPI_SIGNED_CHAR, the type the MPI standard allows MPI_SUM on.
PROBE_DATATYPES = {"MPI_CHAR", "MPI_SIGNED_CHAR"}


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
    "mvapich2": Mpi("mvapich2", "mpicc.mvapich2", ("mpiexec.mvapich2", "-n", "2"),
                    ("-bind-to", "none"), ("-bind-to", "core"), ("mpichversion.mvapich2",)),
}


def mpi_of(name: str) -> Mpi:
    """``MPIS[name]``, from the install prefix ``FABREG_<MPI>_PREFIX`` names when it is set
    (what the suite itself runs: a site's or a source build, e.g. MVAPICH2 or PyPI's MPICH)."""
    mpi = MPIS[name]
    prefix = os.environ.get(f"FABREG_{name.upper()}_PREFIX", "")
    if not prefix:
        return mpi
    bindir = Path(prefix) / "bin"
    if name == "openmpi":
        launcher, version = str(bindir / "mpirun"), (str(bindir / "mpirun"), "--version")
    else:
        launcher, version = str(bindir / "mpiexec"), (str(bindir / "mpichversion"),)
    return replace(mpi, cc=str(bindir / "mpicc"), launcher=(launcher, *mpi.launcher[1:]),
                   version_cmd=version)


class BenchError(Exception):
    """Something that stops the comparison; printed as one line."""


@dataclass
class Series:
    """The figures of one (MPI, benchmark, size) for the probe and for OSU, one per round."""

    probe: list[float] = field(default_factory=list)
    osu: list[float] = field(default_factory=list)

    def paired_ratio(self) -> float:
        """Median over rounds of probe/OSU within the same round (both saw similar load)."""
        return statistics.median(p / o if o else float("inf")
                                 for p, o in zip(self.probe, self.osu))


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


def run_benchmark(mpi: Mpi, prefix: list[str], binary: Path, options: list[str],
                  benchmark: str, sizes: list[int], timeout: float) -> OsuResult:
    """One launch of ``binary`` on 2 ranks; its parsed table, checked for every size."""
    cmd = [*prefix, str(binary), *options]
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


def shm_value(mpi: str, probes: Path, probe: str, size: int, iterations: int,
              warmup: int) -> float:
    """One launch of ``probe`` on 2 ranks over ``mpi``'s shared memory, as the suite
    launches it: its value at ``size``, NaN if it printed none."""
    spec = tx.launch_spec(mpi, "shm", nodes=1, ranks_per_node=2)
    return _value(mpi, spec, probes, probe, size, iterations, warmup)


def loopback_tcp_value(mpi: str, probes: Path, probe: str, size: int, iterations: int,
                       warmup: int) -> float:
    """One launch of ``probe`` on 2 ranks of this host over ``mpi``'s TCP transport, as the
    suite launches it between two nodes (one rank each), on the loopback interface: the
    software path of a TCP value of the emulated cluster, without its links."""
    spec = tx.launch_spec(mpi, "tcp", nodes=2, ranks_per_node=1,
                          net=tx.NetConfig(tcp_interfaces=("lo",)), verify=False)
    return _value(mpi, spec, probes, probe, size, iterations, warmup)


def probe_output(mpi: str, spec: tx.LaunchSpec, probes: Path, probe: str,
                 options: list[str]) -> str:
    """The standard output of one launch of ``probe`` with ``options``, as ``spec`` says."""
    style = tx.launcher_style(mpi, MPIS[mpi].launcher)
    cmd = [*MPIS[mpi].launcher, *spec.options(style), str(probes / probe), *options]
    env = dict(tool_env(MPIS[mpi]), **spec.environment(style))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120).stdout


def _value(mpi: str, spec: tx.LaunchSpec, probes: Path, probe: str, size: int,
           iterations: int, warmup: int) -> float:
    out = probe_output(mpi, spec, probes, probe,
                       ["-m", f"{size}:{size}", "-i", str(iterations), "-x", str(warmup)])
    table = parse_osu(out)
    return table.value(size) if size in table.rows else float("nan")


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot."""
    times = procfs.cpu_times()
    return times.idle, times.total


def host_busy(interval: float = 0.5) -> float:
    """Fraction of all CPUs busy with other work over ``interval`` (none of ours runs then)."""
    try:
        idle0, total0 = _cpu_times()
        time.sleep(interval)
        idle1, total1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return float("nan")
    total = total1 - total0
    return 1.0 - (idle1 - idle0) / total if total > 0 else 0.0


def wait_for_quiet(args: argparse.Namespace) -> float:
    """Wait up to --wait-quiet seconds for the host to be at most --quiet busy; return busy."""
    deadline = time.monotonic() + args.wait_quiet
    busy = host_busy()
    while busy > args.quiet and time.monotonic() < deadline:
        time.sleep(2.0)
        busy = host_busy()
    return busy


def runs_per_round(args: argparse.Namespace) -> list[tuple[str, list[int]]]:
    """(benchmark, sizes of one launch): one launch per size, or one sweep with --sweep."""
    sizes = sorted(set(args.sizes))
    if args.sweep:
        return [(b, sizes) for b in args.benchmarks]
    return [(b, [size]) for b in args.benchmarks for size in sizes]


def same_datatype_options(mpi: Mpi, launch: list[str], osu_binary: Path, benchmark: str,
                          timeout: float) -> list[str]:
    """OSU's options that make it run the probe's datatype: OSU 7.5 reduces MPI_INT by default
    (7.2, whose output the probes follow, MPI_CHAR), and MPICH 5.0.2 sums a 1 MiB MPI_INT
    allreduce 2.4x faster than MPI_CHAR on this host, so the two would not measure the same
    thing. One short launch reads the datatype OSU prints."""
    table = run_benchmark(mpi, launch, osu_binary, ["-m", "8:8"], benchmark, [8], timeout)
    if table.datatype is None or table.datatype.upper() in PROBE_DATATYPES:
        return []
    return ["-T", "mpi_char"]


def compare(mpi: Mpi, osu_prefix: Path, probes_dir: Path, args: argparse.Namespace,
            results: dict[tuple[str, str, int], Series], busy: list[float],
            failed: dict[tuple[str, str], str],
            adjusted: dict[tuple[str, str], list[str]]) -> None:
    """Run probe and OSU alternately, ``args.rounds`` times per benchmark and size.

    A benchmark whose launch fails (an MPI that aborts in it) is left out of the comparison
    for this MPI, with the reason in ``failed``; the other benchmarks go on.
    """
    problem = osu_prefix_problem(osu_prefix, args.benchmarks)
    if problem:
        raise BenchError(f"{mpi.name}: {problem}")
    bind = mpi.bind_core if args.bind == "core" else mpi.bind_none
    launch = [*mpi.launcher, *bind]
    osu_binaries: dict[str, Path] = {}
    osu_options: dict[str, list[str]] = {}
    for benchmark in args.benchmarks:
        binary = find_osu_binary(osu_prefix, benchmark)
        assert binary is not None  # osu_prefix_problem checked every benchmark
        osu_binaries[benchmark] = binary
        try:
            osu_options[benchmark] = same_datatype_options(mpi, launch, binary, benchmark,
                                                           args.timeout)
        except BenchError as err:
            failed[(mpi.name, benchmark)] = f"osu: {err}"
        if osu_options.get(benchmark):
            adjusted[(mpi.name, benchmark)] = osu_options[benchmark]
    for round_no in range(args.rounds):
        for benchmark, sizes in runs_per_round(args):
            if (mpi.name, benchmark) in failed:
                continue
            osu_binary = osu_binaries[benchmark]
            options = ["-m", f"{sizes[0]}:{sizes[-1]}", *args.extra]
            # --control: OSU on both sides (an A/A test), to see this host's noise floor.
            probe_binary = osu_binary if args.control else probes_dir / benchmark
            # --control runs OSU on both sides: with the same options on both
            probe_options = [*options, *osu_options[benchmark]] if args.control else options
            pair = [("probe", probe_binary, probe_options),
                    ("osu", osu_binary, [*options, *osu_options[benchmark]])]
            if round_no % 2:
                pair.reverse()  # alternate who goes first, so drift hits both alike
            try:
                tables = []
                for who, binary, launch_options in pair:
                    busy.append(wait_for_quiet(args))
                    tables.append((who, run_benchmark(mpi, launch, binary, launch_options,
                                                      benchmark,
                                                      powers_of_two(sizes[0], sizes[-1]),
                                                      args.timeout)))
            except BenchError as err:
                failed[(mpi.name, benchmark)] = f"{who}: {err}"
                for key in [k for k in results if k[:2] == (mpi.name, benchmark)]:
                    del results[key]
                continue
            for who, table in tables:
                for size in sizes:
                    series = results.setdefault((mpi.name, benchmark, size), Series())
                    getattr(series, who).append(table.value(size))
        print(f"  {mpi.name}: round {round_no + 1}/{args.rounds} done", file=sys.stderr,
              flush=True)


def spread(values: list[float]) -> float:
    """(max - min) / median: how much one side moved between rounds."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else float("inf")


def best(values: list[float], unit: str) -> float:
    """The least disturbed figure: lowest latency, highest bandwidth."""
    return max(values) if unit == "MB/s" else min(values)


def render(results: dict[tuple[str, str, int], Series], tolerance: float) -> tuple[str, int]:
    """The side-by-side table and the number of rows outside the tolerance.

    ``probe/OSU`` is the ratio of the medians and decides ``within``. Two more ratios help
    to read a noisy host: ``paired``, the median of the per-round ratios (a probe run and
    the OSU run next to it saw similar load), and ``best``, the ratio of each side's least
    disturbed figure.
    """
    header = (f"{'MPI':<8} {'benchmark':<14} {'size':>8} {'unit':<5} {'probe':>10} "
              f"{'OSU':>10} {'probe/OSU':>9} {'within':>6} {'paired':>7} {'best':>6} "
              f"{'probe spread':>12} {'OSU spread':>10}")
    lines = [header, "-" * len(header)]
    outside = 0
    for (mpi, benchmark, size), series in results.items():
        unit = UNITS.get(benchmark, "us")
        probe, osu = statistics.median(series.probe), statistics.median(series.osu)
        ratio = probe / osu if osu else float("inf")
        best_osu = best(series.osu, unit)
        best_ratio = best(series.probe, unit) / best_osu if best_osu else float("inf")
        ok = abs(ratio - 1.0) <= tolerance
        outside += not ok
        lines.append(
            f"{mpi:<8} {benchmark:<14} {size:>8} {unit:<5} "
            f"{probe:>10.2f} {osu:>10.2f} {ratio:>9.3f} {'yes' if ok else 'NO':>6} "
            f"{series.paired_ratio():>7.3f} {best_ratio:>6.3f} {spread(series.probe):>11.0%} "
            f"{spread(series.osu):>10.0%}")
    return "\n".join(lines), outside


def first_line(cmd: tuple[str, ...]) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return next((" ".join(ln.split()) for ln in out.splitlines() if ln.strip()), "unknown")


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
                        "(for --mpi, default openmpi); also FABREG_OSU_PREFIX_OPENMPI/_MPICH/"
                        "_MVAPICH2; each MPI from FABREG_<MPI>_PREFIX when set")
    parser.add_argument("--mpi", choices=sorted(MPIS), help="compare only this MPI")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each side (default 5)")
    parser.add_argument("--benchmarks", nargs="+", default=DEFAULT_BENCHMARKS,
                        help=f"default: {' '.join(DEFAULT_BENCHMARKS)}")
    parser.add_argument("--sizes", nargs="+", type=int, default=DEFAULT_SIZES,
                        help="sizes to compare in bytes (default 8 1024 65536 1048576 4194304)")
    parser.add_argument("--sweep", action="store_true",
                        help="one launch per benchmark sweeping MIN..MAX of --sizes, instead "
                        "of one short launch per size (-m S:S)")
    parser.add_argument("--bind", choices=["core", "none"], default="core",
                        help="rank binding passed to the launcher (default core)")
    parser.add_argument("--quiet", type=float, default=0.2,
                        help="CPU busy fraction (other work) below which the host counts as "
                        "quiet (default 0.2)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each launch wait up to SECONDS for a quiet host "
                        "(default 0: measure and report only)")
    parser.add_argument("--control", action="store_true",
                        help="run real OSU in place of the probe too (A/A test): shows how "
                        "far two identical programs differ on this host")
    parser.add_argument("--raw", type=Path, metavar="FILE",
                        help="also write every figure (one line per run and size) to FILE")
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
              "(with --mpi) or set FABREG_OSU_PREFIX_OPENMPI / _MPICH / _MVAPICH2; "
              "nothing to compare against", file=sys.stderr)
        return 2
    started = time.monotonic()
    results: dict[tuple[str, str, int], Series] = {}
    versions: list[str] = []
    busy: list[float] = []
    failed: dict[tuple[str, str], str] = {}
    adjusted: dict[tuple[str, str], list[str]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="fabreg-probes-") as tmp:
            for name, prefix in targets.items():
                mpi = mpi_of(name)
                probes = build_probes(mpi, Path(tmp) / name)
                versions.append(f"{name}: {first_line(mpi.version_cmd)}")
                compare(mpi, prefix, probes, args, results, busy, failed, adjusted)
    except BenchError as err:
        print(f"probes_vs_osu: error: {err}", file=sys.stderr)
        return 2
    if not results:
        for (mpi_name, benchmark), why in failed.items():
            print(f"probes_vs_osu: error: {mpi_name} {benchmark}: {why}", file=sys.stderr)
        return 2
    if args.raw:
        with args.raw.open("w") as out:
            out.write("mpi\tbenchmark\tsize\tround\tprobe\tosu\n")
            for (mpi_name, benchmark, size), series in results.items():
                for n, (p, o) in enumerate(zip(series.probe, series.osu), 1):
                    out.write(f"{mpi_name}\t{benchmark}\t{size}\t{n}\t{p}\t{o}\n")
    table, outside = render(results, args.tolerance)
    bind = "--bind-to core" if args.bind == "core" else "--bind-to none"
    what = "OSU vs OSU (control: OSU in the probe column)" if args.control else "probes vs OSU"
    print(f"# {what}, {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(f"# host: {host_description()}")
    print(f"# MPI: {'; '.join(versions)}; 2 ranks on one host, launcher binding {bind}")
    runs = (f"one run -m {min(args.sizes)}:{max(args.sizes)} per benchmark" if args.sweep
            else "one run -m S:S per benchmark and size")
    extra = f" with {' '.join(args.extra)}" if args.extra else " with OSU's default iterations"
    print(f"# {args.rounds} rounds, {runs}{extra}, probe and OSU alternating who goes first; "
          "medians; best = best value of each side; spread = (max-min)/median over rounds")
    if adjusted:
        said = "; ".join(f"{m} {b}: {' '.join(o)}" for (m, b), o in adjusted.items())
        print(f"# OSU given the probe's datatype (MPI_CHAR; its own default differs): {said}")
    noisy = sum(b > args.quiet for b in busy)
    print(f"# took {time.monotonic() - started:.0f} s; other work kept the CPUs "
          f"{statistics.median(busy):.0%} busy (median, max {max(busy):.0%}) just before "
          f"launches; {noisy} of {len(busy)} launches started above {args.quiet:.0%}")
    print(table)
    print(f"# {len(results) - outside} of {len(results)} within {args.tolerance:.0%}")
    for (mpi_name, benchmark), why in failed.items():
        print(f"# {mpi_name} {benchmark}: not compared, a launch failed: {why}")
    return 1 if (args.strict and (outside or failed)) else 0


if __name__ == "__main__":
    sys.exit(main())

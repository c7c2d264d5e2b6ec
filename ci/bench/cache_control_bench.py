#!/usr/bin/env python3
"""Would a control that streams a larger working set see the state that slows a healthy
matrix multiply while every current control reads normal?

On the AMD EPYC VM a healthy 2-rank multiply of 512 (MPICH, shared memory) has run 1.7x
slow for over a minute, its ``compute`` phase too, while the job's ``copy_bandwidth`` (a 1 MiB
``memmove``), ``handoff_bandwidth`` and ``shared_compute`` read what they read in passing
sessions (ci/bench/RESULTS.md, sessions 64 and 65). The multiply streams the whole of B
(2 MiB for 512) once per row it computes; the candidate control is the same ``memmove`` of a
larger buffer (``--copy-mib``), which leaves the core's own cache.

For ``--minutes`` the bench alternates one launch of the suite's multiply (the suite's probe,
launched as the checks launch it) with one sample of every figure: the current three of the
shared-memory path and the copy at each candidate size. ``--window`` consecutive rounds are a
job: the multiply's best ``compute`` and ``total`` and each figure's best (a job's repeats;
a failing job's control samples). Each figure's failure limit is drawn from the first half's
jobs as ``calibrate`` draws a host control row; a multiply job is slow when its ``compute``
(or its ``total``) lies beyond +25 % of its median over the run (the floor of a value's
failure band). Printed side by side, per figure: the slow jobs it flags (what it would
explain: detection) and the normal jobs it flags (what it would excuse of a fault there:
false excuses), with its median in both. A candidate is worth a round only if it flags slow
jobs that the current figures miss and few normal ones; a run in which the VM never slows
(no slow job) says nothing either way.

Usage (repository root; nothing else running):

    .venv/bin/python ci/bench/cache_control_bench.py --minutes 30
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from host_control_bench import row  # noqa: E402
from probes_vs_osu import MPIS, BenchError, build_probes, mpi_of, tool_env  # noqa: E402

from fabreg.errors import FabregError  # noqa: E402
from fabreg.run import host_control  # noqa: E402
from fabreg.run import transport as tx  # noqa: E402
from fabreg.run.parsers.probes import parse_matmul  # noqa: E402
from fabreg.run.references import Reference  # noqa: E402

#: The current figures of the shared-memory path (``fabreg.schema.FIGURES_ON_PATH``).
CURRENT = ("copy_bandwidth", "handoff_bandwidth", "shared_compute")
#: A multiply job beyond this fraction over its median is slow (a value's floor fail band).
SLOW = 0.25


def copy_figure(mib: int) -> float:
    """``host_control.copy_bandwidth`` of a ``mib`` MiB buffer, about as many bytes a batch as
    the 1 MiB control moves (64 MiB), so each size costs the same."""
    size = mib << 20
    return host_control.copy_bandwidth(size=size, copies=max(2, host_control.COPIES // mib))


def sample(cpus: tuple[int, int], sizes: list[int]) -> dict[str, float]:
    """One sample of every figure: the current three, then the copy at each size."""
    out = {"copy_bandwidth": host_control.copy_bandwidth(),
           "handoff_bandwidth": host_control.handoff_bandwidth(cpus),
           "shared_compute": host_control.shared_compute(cpus)}
    out.update({f"copy_{mib}MiB": copy_figure(mib) for mib in sizes})
    return out


def multiply(mpi: str, probes: Path, size: int) -> tuple[float, float]:
    """One launch of the suite's 2-rank multiply over shared memory: (compute, total) s."""
    spec = tx.launch_spec(mpi, "shm", nodes=1, ranks_per_node=2, verify=False)
    style = tx.launcher_style(mpi, MPIS[mpi].launcher)
    cmd = [*MPIS[mpi].launcher, *spec.options(style), str(probes / "fabreg_matmul"),
           "-n", str(size), "-m", "blocking"]
    env = dict(tool_env(MPIS[mpi]), **spec.environment(style))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise BenchError(f"{' '.join(cmd)}: exit {proc.returncode}: {last[0]}")
    result = parse_matmul(proc.stdout)
    return result.figures()["compute"], result.total_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--window", type=int, default=5, help="rounds a job (default 5)")
    parser.add_argument("--mpi", default="mpich", choices=sorted(MPIS))
    parser.add_argument("--size", type=int, default=512, help="matrix order (default 512)")
    parser.add_argument("--copy-mib", default="4,8,32",
                        help="candidate copy sizes in MiB (default 4,8,32)")
    parser.add_argument("--rounds-out", type=Path,
                        help="also write every round's figures there (JSON, one per line)")
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.copy_mib.split(",") if s]
    except ValueError:
        print(f"--copy-mib {args.copy_mib!r}: not a list of whole MiB", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or args.window < 1 or args.minutes <= 0 or not sizes:
        print("needs 2 CPUs, --window >= 1, --minutes > 0 and a copy size", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fabreg-cache-") as tmp:
        try:
            probes = build_probes(mpi_of(args.mpi), Path(tmp) / "probes")
            rounds = measure(args, probes, (cpus[0], cpus[1]), sizes)
        except (BenchError, FabregError, OSError, RuntimeError) as err:
            print(err, file=sys.stderr)
            return 1
    if args.rounds_out:
        args.rounds_out.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    return report(args, rounds, sizes)


def measure(args: argparse.Namespace, probes: Path, cpus: tuple[int, int],
            sizes: list[int]) -> list[dict[str, float]]:
    """Rounds of one multiply and one sample of the figures, until ``--minutes`` pass."""
    end = time.monotonic() + args.minutes * 60
    rounds: list[dict[str, float]] = []
    last_note = time.monotonic()
    while time.monotonic() < end:
        compute, total = multiply(args.mpi, probes, args.size)
        rounds.append({"compute": compute, "total": total, **sample(cpus, sizes)})
        if time.monotonic() - last_note > 60:
            last_note = time.monotonic()
            print(f"# {len(rounds)} rounds, {max(0.0, end - last_note) / 60:.0f} min left",
                  file=sys.stderr)
    return rounds


def jobs_of(rounds: list[dict[str, float]], window: int) -> list[dict[str, float]]:
    """Each ``window`` of rounds as a job: each figure's best (interference only slows)."""
    jobs = []
    for k in range(0, len(rounds) - window + 1, window):
        part = rounds[k:k + window]
        jobs.append({name: (min if lower(name) else max)(r[name] for r in part)
                     for name in part[0]})
    return jobs


def lower(name: str) -> bool:
    """Is a smaller figure better (times), or a larger one (bandwidths)?"""
    return name in ("compute", "total", "shared_compute")


def report(args: argparse.Namespace, rounds: list[dict[str, float]], sizes: list[int]) -> int:
    """Print, for ``compute`` and ``total``, what each figure flags of slow and normal jobs."""
    jobs = jobs_of(rounds, args.window)
    if len(jobs) < 4:
        print(f"{len(rounds)} rounds make {len(jobs)} jobs: too few to judge (longer "
              "--minutes)", file=sys.stderr)
        return 1
    figures = [*CURRENT, *(f"copy_{mib}MiB" for mib in sizes)]
    first = jobs[:len(jobs) // 2]
    limits = {name: row([j[name] for j in first], "ms" if lower(name) else "GB/s",
                        lower(name), control=True) for name in figures}
    medians = {v: statistics.median(j[v] for j in jobs) for v in ("compute", "total")}
    print(f"{len(rounds)} rounds ({args.mpi}, 2-rank multiply of {args.size}, blocking) in "
          f"{args.minutes:g} min, {len(jobs)} jobs of {args.window}; figures' limits from "
          f"the first {len(first)} jobs; a job slow beyond +{SLOW:.0%} of its median "
          f"(compute {medians['compute'] * 1e3:.2f} ms, total {medians['total'] * 1e3:.2f} ms)")
    for value in ("compute", "total"):
        slow = [j for j in jobs if j[value] > medians[value] * (1 + SLOW)]
        normal = [j for j in jobs if j[value] <= medians[value] * (1 + SLOW)]
        missed = [j for j in slow if not any(beyond(limits[f], j[f]) for f in CURRENT)]
        worst = max(j[value] for j in jobs) / medians[value]
        print(f"\n{value}: {len(slow)} slow jobs (the worst {worst:.2f}x), {len(missed)} of "
              "them with every current figure inside its limit (missed)")
        print(f"{'figure':<20}{'limit':>10}{'slow flagged':>14}{'missed flagged':>16}"
              f"{'normal flagged':>16}{'median slow':>13}{'median normal':>15}")
        for name in figures:
            ref = limits[name]
            print(f"{name:<20}{ref.failure_limit:>10.3g}"
                  f"{count(slow, name, ref):>14}{count(missed, name, ref):>16}"
                  f"{count(normal, name, ref):>16}{median(slow, name):>13}"
                  f"{median(normal, name):>15}")
    return 0


def beyond(ref: Reference, value: float) -> bool:
    """Does ``value`` lie beyond the row's failure limit?"""
    return ref.verdict(value) == "fail"


def count(jobs: list[dict[str, float]], name: str, ref: Reference) -> str:
    """``k of n``: the jobs whose ``name`` lies beyond ``ref``'s failure limit."""
    return f"{sum(beyond(ref, j[name]) for j in jobs)} of {len(jobs)}"


def median(jobs: list[dict[str, float]], name: str) -> str:
    """The median of ``name`` over ``jobs``, printed; ``-`` for none."""
    return f"{statistics.median(j[name] for j in jobs):.3g}" if jobs else "-"


if __name__ == "__main__":
    sys.exit(main())

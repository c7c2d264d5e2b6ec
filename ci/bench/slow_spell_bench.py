#!/usr/bin/env python3
"""What does a slow spell of the whole host look like, and which control figure sees it?

Healthy sessions on a calibrated 2-vCPU VM have failed a shared-memory value now and then,
confirmed over its minute, while the host control on its path read the host's usual state
(`ci/bench/RESULTS.md`: a 1 MiB reduce at +31 %, a 1 MiB broadcast at +47 %, a matrix
multiply's compute phase at 1.8x), and the sessions around them ran up to 2x their usual
time: the whole VM ran slow, for minutes, in a way the control's figures did not feel. They
are each the best of short batches (a few milliseconds), which filter a slowdown that comes
in spells longer than a batch, and their buffers fit the caches the workloads overflow.

This bench watches for such a spell. For ``--minutes`` it repeats, nothing else running,
a round of: the shared-memory values that failed (Open MPI, 2 ranks, the suite's probes),
the host control as a job measures it (``fabreg.run.host_control.measure_host``), and
candidate figures a control could add:

- ``cpu_share``: the share of 200 ms in which a process pinned to each of the two CPUs ran
  (time outside gaps of over 20 us between two reads of the clock), the worse CPU's: less
  where the hypervisor takes the vCPU away, which the Intel VM reports as no steal time;
- ``dram_copy``: ``memmove`` of 64 MiB, beyond the last-level cache (GB/s, best of 3);
- ``l3_copy``: ``memmove`` of 8 MiB, beyond the per-core cache, within the shared one;
- ``compute_median``: the control's compute loop, median of 9 batches instead of the best.

With ``--matmul MPI`` each round also runs the suite's 2-rank multiply of 512 (blocking, over
that MPI's shared memory, as ``Matmul`` launches it) and takes its ``compute`` phase as a
value: a multiply's compute ran 1.7x slow for over a minute in a healthy session while every
control on its path read normal (session 65), and it streams the whole of B (2 MiB) once per
row it computes, which the 1 MiB copy does not.

Then, per figure, how far it moved in the rounds where a value ran 25 % or more above its
median (a failure by the suite's narrowest band) against the other rounds, and the rounds
each figure called slow. A figure worth adding moves with the slow rounds and stays put in
the others. Every round is written to ``--out`` (CSV). Usage (repository root):

    .venv/bin/python ci/bench/slow_spell_bench.py --minutes 50 --out /tmp/spells.csv
    .venv/bin/python ci/bench/slow_spell_bench.py --minutes 40 --matmul mpich --out /tmp/mm.csv
"""

from __future__ import annotations

import argparse
import csv
import mmap
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from probes_vs_osu import MPIS, BenchError, build_probes, probe_output, shm_value  # noqa: E402

from fabreg.errors import FabregError  # noqa: E402
from fabreg.run import host_control  # noqa: E402
from fabreg.run import transport as tx  # noqa: E402
from fabreg.run.parsers.probes import parse_matmul  # noqa: E402
from fabreg.schema import HOST_CONTROL_FIGURES, lower_is_better  # noqa: E402

#: (probe, size): shared-memory values that failed healthy sessions in a slow spell.
CASES = (("osu_reduce", 1 << 20), ("osu_bcast", 1 << 20), ("osu_allreduce", 1 << 20))
#: The value ``--matmul`` adds: the multiply's compute phase, ms.
MATMUL = "matmul_compute"
MATMUL_SIZE = 512
SLOW = 1.25
GAP_NS = 20_000
SPIN_S = 0.2
#: Rounds a lasting slowdown spans (about 15 s).
WINDOW = 9
#: Candidate figures: name -> True where lower is better (a time or a share lost).
CANDIDATES = {"cpu_share": False, "dram_copy": False, "l3_copy": False,
              "compute_median": True}


def _lost(seconds: float) -> float:
    """Share of ``seconds`` this process spent in gaps of over GAP_NS between clock reads."""
    now = time.perf_counter_ns
    start = last = now()
    end = start + int(seconds * 1e9)
    lost = 0
    while last < end:
        t = now()
        if t - last > GAP_NS:
            lost += t - last
        last = t
    return lost / (last - start)


def cpu_share(cpus: tuple[int, int]) -> float:
    """The share of :data:`SPIN_S` the worse of the two CPUs ran (1 - :func:`_lost`),
    measured at once on both."""
    buf = mmap.mmap(-1, mmap.PAGESIZE)

    def partner() -> bool:
        buf[8:16] = struct.pack("d", _lost(SPIN_S))
        return True

    try:
        with host_control._pinned_pair(cpus, partner):
            own = _lost(SPIN_S)
        other = struct.unpack("d", buf[8:16])[0]
    finally:
        buf.close()
    return 1.0 - max(own, other)


def steal_jiffies() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8])


def matmul_compute(mpi: str, probes: Path) -> float:
    """One launch of the suite's 2-rank multiply over ``mpi``'s shared memory, as the
    ``Matmul`` check launches it: its compute phase in ms (NaN: no result)."""
    spec = tx.launch_spec(mpi, "shm", nodes=1, ranks_per_node=2, verify=False)
    out = probe_output(mpi, spec, probes, "fabreg_matmul",
                       ["-n", str(MATMUL_SIZE), "-m", "blocking"])
    try:
        return parse_matmul(out).figures()["compute"] * 1e3
    except FabregError:
        return float("nan")


def one_round(probes: Path, cpus: tuple[int, int],
              matmul: tuple[str, Path] | None = None) -> dict[str, float]:
    row: dict[str, float] = {"t": time.time()}
    steal = steal_jiffies()
    for probe, size in CASES:
        row[probe] = shm_value("openmpi", probes, probe, size, 100, 10)
    if matmul is not None:
        row[MATMUL] = matmul_compute(*matmul)
    control = host_control.measure_host()
    row.update(control.figures())
    row["cpu_share"] = cpu_share(cpus)
    row["dram_copy"] = host_control.copy_bandwidth(64 << 20, 2, 3)
    row["l3_copy"] = host_control.copy_bandwidth(8 << 20, 8, 7)
    row["compute_median"] = statistics.median(host_control.compute_seconds(
        host_control.COMPUTE_STEPS) for _ in range(9)) * 1e3
    row["steal_jiffies"] = steal_jiffies() - steal
    return row


def slowness(v: float, median: float, lower: bool) -> float:
    """How many times slower than its median (> 1: slower)."""
    if lower:
        return v / median if median else float("nan")
    return median / v if v else float("nan")


def report(rows: list[dict[str, float]], width_s: float = 60.0) -> None:
    """Per figure, how far it moved where a value ran slow for a while, and per minute."""
    figures = {name: lower_is_better(name, unit) for name, unit in HOST_CONTROL_FIGURES.items()
               if all(name in r for r in rows)}
    figures.update(CANDIDATES)
    values = [p for p, _ in CASES] + [MATMUL] * (MATMUL in rows[0])
    medians = {k: statistics.median(r[k] for r in rows if r[k] == r[k])
               for k in [*figures, *values]}
    x = {k: [slowness(r[k], medians[k], k in values or figures[k]) for r in rows]
         for k in [*values, *figures]}
    n = len(rows)
    # A value slow for a while: the median of WINDOW rounds around it (about 15 s) is
    # SLOW x its median: what a confirmation over its minute would confirm.
    lasting = {p: [statistics.median(x[p][max(0, i - WINDOW // 2):i + WINDOW // 2 + 1])
                   for i in range(n)] for p in values}
    slow = [i for i in range(n) if any(lasting[p][i] >= SLOW for p in values)]
    others = sorted(set(range(n)) - set(slow))
    # A figure as a failing job's control reads it: the best of three samples in a row.
    judged = {k: [min(x[k][max(0, i - 1):i + 2]) for i in range(n)] for k in figures}
    minutes = (rows[-1]["t"] - rows[0]["t"]) / 60
    print(f"{n} rounds over {minutes:.0f} min; {len(slow)} rounds in which a value's median "
          f"over {WINDOW} rounds was {SLOW:.2f}x its overall median or more; "
          f"{sum(r['steal_jiffies'] for r in rows):.0f} jiffies of steal time in all")
    for p in values:
        what = (f"{p} {dict(CASES)[p] >> 10} KiB: median {medians[p]:.1f} us" if p != MATMUL
                else f"{p} (2 ranks, {MATMUL_SIZE}): median {medians[p]:.2f} ms")
        print(f"  {what}; single rounds >= {SLOW:.2f}x: {sum(v >= SLOW for v in x[p])}, "
              f"lasting: {sum(v >= SLOW for v in lasting[p])}")
    print(f"\n{'figure':<18}{'median':>9}{'x, slow':>9}{'x, others':>11}"
          f"{'>=1.25x slow':>14}{'others':>8}{'corr':>7}")
    worst = [max(lasting[p][i] for p in values) for i in range(n)]
    for name in figures:
        j = judged[name]
        in_slow, in_others = [j[i] for i in slow], [j[i] for i in others]
        corr = statistics.correlation(j, worst) if n > 2 else float("nan")
        print(f"{name:<18}{medians[name]:>9.4g}"
              f"{statistics.median(in_slow) if in_slow else float('nan'):>9.2f}"
              f"{statistics.median(in_others) if in_others else float('nan'):>11.2f}"
              f"{sum(v >= SLOW for v in in_slow):>14}{sum(v >= SLOW for v in in_others):>8}"
              f"{corr:>7.2f}")
    print("\n(x: a figure's slowness against its own median, as a failing job's control reads "
          "it, the best of 3 rounds in a row; median over the rounds; >=1.25x: the rounds in "
          "which it read that much slower; corr: Pearson correlation with the slowest value's "
          "lasting slowness)")
    print("\nper minute: each value's and figure's median slowness")
    start = rows[0]["t"]
    names = [*values, *figures]
    print(f"{'min':>4}" + "".join(f"{k.replace('osu_', '')[:10]:>11}" for k in names))
    for k in range(int((rows[-1]["t"] - start) // width_s) + 1):
        idx = [i for i, r in enumerate(rows) if k * width_s <= r["t"] - start < (k + 1) * width_s]
        if idx:
            print(f"{k:>4}" + "".join(f"{statistics.median(x[m][i] for i in idx):>11.2f}"
                                      for m in names))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=50)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--matmul", choices=sorted(MPIS),
                        help="also run the suite's 2-rank multiply of 512 over this MPI")
    parser.add_argument("--read", action="store_true",
                        help="only print the report of an earlier --out file")
    args = parser.parse_args()
    if args.read:
        with args.out.open() as f:
            report([{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)])
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("slow_spell_bench: needs two CPUs", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="fabreg-spell-bench-"))
    try:
        probes = build_probes(MPIS["openmpi"], work / "openmpi")
        matmul = None
        if args.matmul:
            built = (probes if args.matmul == "openmpi"
                     else build_probes(MPIS[args.matmul], work / args.matmul))
            matmul = (args.matmul, built)
    except BenchError as err:
        print(err, file=sys.stderr)
        return 2
    rows: list[dict[str, float]] = []
    end = time.monotonic() + args.minutes * 60
    try:
        with args.out.open("w", newline="") as f:
            writer = None
            while time.monotonic() < end:
                row = one_round(probes, (cpus[0], cpus[1]), matmul)
                if writer is None:
                    writer = csv.DictWriter(f, fieldnames=list(row))
                    writer.writeheader()
                writer.writerow(row)
                f.flush()
                rows.append(row)
                if len(rows) % 50 == 0:
                    print(f"round {len(rows)}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

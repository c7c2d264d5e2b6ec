#!/usr/bin/env python3
"""Does the host control follow the host's slow modes, and does it ever mask a real failure?

The host control (``fabreg.run.host_control``) turns a confirmed failure into
``inconclusive`` when its own figures lie beyond the host baseline's limit. Two things must
hold: it must move when the host runs slow as a whole (or it is useless), and it must not
cross its limit while the host is healthy (or it would hide a regression: a false mask).
This bench interleaves, for ``--rounds`` rounds, one control with one shared-memory allreduce
launch per MPI (2 ranks, the suite's probe, 64 KiB and 1 MiB: the values that went slow in
healthy sessions), nothing else running. The first half of the rounds calibrates the
control's rows exactly as ``fabreg references calibrate`` does (median, bands 1x/1.5x the
worst healthy run, floors 10 %/25 %); the second half is judged against them. It then
measures the control ``--rounds`` / 2 times more while a CPU hog takes one core, through the
path a failing job takes (``after_job``: wait for a quiet host, else ``contended``).

Printed side by side: per figure, the control's lowest/median/highest and how many judged
rounds crossed the limit (false masks); per MPI and size, the allreduce's spread and the
control's median in the allreduce's slow rounds (above 1.3x its lowest) against its fast
ones; and under the hog, how many controls were contended (judge nothing) and how many
crossed the limit without being contended. Usage (repository root):

    .venv/bin/python ci/bench/host_control_bench.py --rounds 60
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from probes_vs_osu import MPIS, BenchError, build_probes, tool_env  # noqa: E402

from fabreg.review import suggest  # noqa: E402
from fabreg.run import host_control  # noqa: E402
from fabreg.run import transport as tx  # noqa: E402
from fabreg.run.parsers.osu import parse_osu  # noqa: E402
from fabreg.schema import HOST_CONTROL_FIGURES, lower_is_better  # noqa: E402

SIZES = (65536, 1048576)
SLOW = 1.3  # an allreduce round this far above its lowest is in a slow mode


def allreduce(mpi: str, probes: Path) -> dict[int, float]:
    spec = tx.launch_spec(mpi, "shm", nodes=1, ranks_per_node=2)
    style = tx.launcher_style(mpi, MPIS[mpi].launcher)
    cmd = [*MPIS[mpi].launcher, *spec.options(style), str(probes / "osu_allreduce"),
           "-m", f"{min(SIZES)}:{max(SIZES)}", "-i", "200", "-x", "20"]
    env = dict(tool_env(MPIS[mpi]), **spec.environment(style))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120).stdout
    table = parse_osu(out)
    return {s: table.value(s) for s in SIZES if s in table.rows}


def limits(values: list[float], lower_better: bool) -> tuple[float, float]:
    """(median, failure limit) of a baseline row made of ``values`` (as calibrate makes it)."""
    median = statistics.median(values)
    worst = suggest.worst_deviation(values, median, lower_better)
    _, fail = suggest.baseline_tolerances(worst, lower_better, 0.10, 0.25)
    return median, median * (1 + fail) if lower_better else median * (1 - fail)


def crossed(value: float, limit: float, lower_better: bool) -> bool:
    return value > limit if lower_better else value < limit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--mpis", default="openmpi,mpich")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fabreg-control-bench-"))
    mpis = args.mpis.split(",")
    try:
        probes = {m: build_probes(MPIS[m], work / m) for m in mpis}
    except BenchError as err:
        print(err, file=sys.stderr)
        return 2
    controls: list[host_control.HostControl] = []
    reduce: dict[tuple[str, int], list[float]] = {(m, s): [] for m in mpis for s in SIZES}
    for i in range(args.rounds):
        controls.append(host_control.measure_host())
        for m in mpis:
            got = allreduce(m, probes[m])
            for s in SIZES:
                reduce[(m, s)].append(got.get(s, float("nan")))
        print(f"round {i + 1}/{args.rounds}: round trip {controls[-1].round_trip:.3f} us",
              file=sys.stderr)
    half = args.rounds // 2
    print(f"\nhost control over {args.rounds} rounds (calibrated on the first {half}, "
          f"judged on the other {args.rounds - half}), nothing else running")
    print(f"{'figure':<16}{'lowest':>9}{'median':>9}{'highest':>9}{'limit':>9}"
          f"{'crossed (false masks)':>24}")
    bounds = {}
    for name, unit in HOST_CONTROL_FIGURES.items():
        lower = lower_is_better(name, unit)
        series = [getattr(c, name) for c in controls]
        _, limit = limits(series[:half], lower)
        bounds[name] = (limit, lower)
        judged = series[half:]
        false = sum(crossed(v, limit, lower) for v in judged)
        print(f"{name + ' ' + unit:<16}{min(series):>9.3f}{statistics.median(series):>9.3f}"
              f"{max(series):>9.3f}{limit:>9.3f}{f'{false} of {len(judged)}':>24}")
    print(f"\nshared-memory allreduce (2 ranks) and the control in the same rounds "
          f"(slow round: above {SLOW}x the lowest)")
    print(f"{'MPI, size':<18}{'lowest us':>10}{'median':>9}{'slow rounds':>12}"
          f"{'trip us, slow':>15}{'trip us, fast':>15}{'copy, slow':>12}{'copy, fast':>12}")
    for (m, s), values in reduce.items():
        low = min(v for v in values if v == v)
        slow = [i for i, v in enumerate(values) if v > SLOW * low]
        fast = [i for i in range(len(values)) if i not in slow]

        def med(rounds: list[int], name: str) -> str:
            got = [getattr(controls[i], name) for i in rounds]
            return f"{statistics.median(got):.3f}" if got else "-"
        print(f"{m + ' ' + str(s // 1024) + ' KiB':<18}{low:>10.1f}"
              f"{statistics.median(values):>9.1f}{len(slow):>12}{med(slow, 'round_trip'):>15}"
              f"{med(fast, 'round_trip'):>15}{med(slow, 'copy_bandwidth'):>12}"
              f"{med(fast, 'copy_bandwidth'):>12}")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = [host_control.after_job("bench", 0.10, failing=True)
                  for _ in range(min(half, 10))]
    finally:
        hog.kill()
        hog.wait()
    contended = sum(bool(c.get("contended")) for c in loaded)
    masked = sum(not c.get("contended") and any(
        crossed(float(c[n]), *bounds[n]) for n in bounds if n in c) for c in loaded)
    print(f"\nunder a CPU hog on one core, through a failing job's path (wait up to "
          f"{host_control.QUIET_WAIT_S:g} s for a quiet host):")
    print(f"  controls {len(loaded)}, contended (judge nothing) {contended}, "
          f"crossed a limit while not contended {masked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Does the host control tell a slow host from a slow fabric: the false alarms it removes,
and the faults it would mask?

The host control (``fabreg.run.host_control``) turns a confirmed failure into
``inconclusive`` when a figure on the value's path lies beyond its row in the host's baseline
by enough to explain the value. It is worth its place when it explains the healthy values
that a slow state of the host fails, and harmful when it would explain a real fault.

This bench interleaves, for ``--rounds`` rounds, one control with shared-memory collectives
of each MPI (2 ranks, the suite's probes; a 128 KiB allgather, a 64 KiB and a 1 MiB
allreduce: the values that failed healthy sessions on this VM), nothing else running. The
first half of the rounds is the baseline, drawn as ``fabreg references calibrate`` draws it:
the control's rows from every round (a baseline holds every job's control), each
collective's row from ``--baseline-runs`` jobs spread over the half (a baseline holds a
handful of runs of each case). A job is three rounds: its value the best of them (a job's
repeats), its control, when the value fails, the best of their three controls (a failing
job's samples). The second half's jobs are judged, each value by the band and then by the
control's shared-memory figures, as a check judges a confirmed failure (the first half's
jobs whose control read a figure on the path beyond its limit are left out of the rows, as
``calibrate`` leaves them out: ``slow``), with the control's rows drawn now and as before
(each figure's worst run; the round trip and the copy), and with a figure beyond its row's
warning band counted as beyond its failure limit (a candidate rule: a control whose own runs
are bimodal has a wide failure band, and a host a third slower by it can fail a value's
narrower one).

Printed side by side: per control figure, its spread and the judged rounds beyond its limit;
per collective, its row, the judged jobs that failed it (healthy values: false alarms),
how many of them the control explained (left ``inconclusive``) and how many still fail; and,
for the smallest fault worth catching (the same values at twice their time, a path at half
speed), how many the band caught and how many of those the control would have excused
(masked). The same for a TCP value of the emulated cluster (Open MPI's and MPICH's 2-rank
``osu_bw`` of 1 MiB over the suite's TCP transport, on the loopback: the path of its links'
bandwidth without the links; a fault: the path at half speed), judged by the TCP path's
figures and, beside them, by that path with the placements' figures too (the handoff and
the shared compute): whether those would explain the TCP values that a slow placement fails,
and what they would mask. Then the control under a CPU hog on one core, through a failing
job's path.
Usage (repository root):

    .venv/bin/python ci/bench/host_control_bench.py --rounds 300
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from probes_vs_osu import (  # noqa: E402
    MPIS,
    UNITS,
    BenchError,
    build_probes,
    loopback_tcp_value,
    shm_value,
)

from fabreg.review import suggest  # noqa: E402
from fabreg.run import host_control  # noqa: E402
from fabreg.run.references import Assessment, Reference  # noqa: E402
from fabreg.schema import HOST_CONTROL_FIGURES, figures_on_path, lower_is_better  # noqa: E402

#: (probe, size): the shared-memory values that failed healthy sessions on this VM.
CASES = (("osu_allgather", 131072), ("osu_allreduce", 65536), ("osu_allreduce", 1048576))
#: (probe, size): a TCP value of the emulated cluster (its links' OSU bandwidth).
TCP_CASE = ("osu_bw", 1048576)
WARN, FAIL = suggest.BASELINE_WARN, suggest.BASELINE_FAIL
#: Rounds a judged job spans: a value is the best of its rounds (a job's repeats), a failing
#: job's control the best of their controls (``host_control.FAILING_SAMPLES``).
JOB = host_control.FAILING_SAMPLES


def row(values: list[float], unit: str, lower: bool, control: bool) -> Reference:
    """The baseline's row drawn from ``values``, as ``calibrate`` draws it."""
    median = statistics.median(values)
    warn, fail = suggest.baseline_band(values, median, lower, WARN, FAIL, control)
    return Reference(median, unit, warn, fail, lower, "bench baseline")


def per_rule(counts: dict, k: int, rules: tuple[str, ...]) -> str:
    """``now / before / ...`` of the ``k``-th count, one per rule."""
    return " / ".join(str(counts[rule][k]) for rule in rules)


def at_warning(baseline: dict[str, Reference]) -> dict[str, Reference]:
    """``baseline`` with each row failing beyond its warning band: what a figure would have
    to lie beyond for the candidate rule to count it."""
    return {name: Reference(r.value, r.unit, r.warn, r.warn, r.lower_is_better, r.source)
            for name, r in baseline.items()}


def spread_out(items: list[float], k: int) -> list[float]:
    """``k`` of ``items`` evenly spread over them (a baseline's runs over its hour)."""
    step = max(1, len(items) // k)
    return items[::step][:k]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--baseline-runs", type=int, default=6,
                        help="rounds each collective's row is drawn from (default 6)")
    parser.add_argument("--mpis", default="openmpi,mpich")
    parser.add_argument("--no-tcp", dest="tcp", action="store_false",
                        help="leave out the TCP bandwidth over the loopback")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fabreg-control-bench-"))
    try:
        return bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench(args: argparse.Namespace, work: Path) -> int:
    mpis = args.mpis.split(",")
    try:
        probes = {m: build_probes(MPIS[m], work / m) for m in mpis}
    except BenchError as err:
        print(err, file=sys.stderr)
        return 2
    controls: list[host_control.HostControl] = []
    series: dict[tuple[str, str, int], list[float]] = {(m, p, s): [] for m in mpis
                                                      for p, s in CASES}
    tcp: dict[tuple[str, str, int], list[float]] = (
        {(m, *TCP_CASE): [] for m in mpis} if args.tcp else {})
    for i in range(args.rounds):
        controls.append(host_control.measure_host())
        for m, p, s in series:
            series[(m, p, s)].append(shm_value(m, probes[m], p, s, 200, 20))
        for m, p, s in tcp:
            tcp[(m, p, s)].append(loopback_tcp_value(m, probes[m], p, s, 20, 2))
        c = controls[-1]
        print(f"round {i + 1}/{args.rounds}: handoff {c.handoff_bandwidth or 0:.1f} GB/s, "
              f"shared compute {c.shared_compute or 0:.2f} ms", file=sys.stderr)
    half = args.rounds // 2
    shm = figures_on_path("shm")

    print(f"\nhost control over {args.rounds} rounds: rows drawn from the first {half}, the "
          f"other {args.rounds - half} judged; a row's limit as calibrate draws it now (the "
          "control's usual noise) and before (its worst run)")
    print(f"{'figure':<22}{'lowest':>9}{'median':>9}{'highest':>9}{'limit':>9}"
          f"{'beyond it':>11}{'limit before':>14}{'beyond it':>11}")
    baselines: dict[str, dict[str, Reference]] = {"now": {}, "before": {}}
    for name, unit in HOST_CONTROL_FIGURES.items():
        values = [v for c in controls if (v := getattr(c, name)) is not None]
        if len(values) < args.rounds:
            print(f"{name}: not measured in every round", file=sys.stderr)
            continue
        lower = lower_is_better(name, unit)
        cells = ""
        for rule, control_rule in (("now", True), ("before", False)):
            ref = baselines[rule][name] = row(values[:half], unit, lower, control_rule)
            beyond = sum(ref.verdict(v) == "fail" for v in values[half:])
            cells += f"{ref.failure_limit:>{9 if rule == 'now' else 14}.3f}{beyond:>11}"
        print(f"{name + ' ' + unit:<22}{min(values):>9.3f}{statistics.median(values):>9.3f}"
              f"{max(values):>9.3f}{cells}")

    jobs = [range(i, i + JOB) for i in range(half, args.rounds - JOB + 1, JOB)]
    first = [range(i, i + JOB) for i in range(0, half - JOB + 1, JOB)]
    print(f"\nshared-memory collectives, 2 ranks, judged as a job judges them: a value is the "
          f"best of {JOB} rounds (a job's repeats), a failing job's control the best of those "
          f"rounds' ({JOB} samples); rows from {args.baseline_runs} such jobs spread over the "
          f"first {half} rounds (a baseline's runs), {len(jobs)} jobs judged on the other "
          f"{args.rounds - half}. Failed: healthy jobs that failed, and those the control "
          "explained; a fault (the same values at twice their time): caught, and those the "
          "control would have excused (masked); now / before / a figure beyond its warning "
          "band counted")
    # Before: the shared-memory path's figures were the round trip and the copy.
    judge_table(args, series, controls, first, jobs,
                {"now": (baselines["now"], shm),
                 "before": (baselines["before"], ("round_trip", "copy_bandwidth")),
                 "warn": (at_warning(baselines["now"]), shm)})
    if tcp:
        print("\nTCP bandwidth, 2 ranks over the loopback (the emulated cluster's TCP path "
              "without its links), judged the same way; a fault: the value at half speed. "
              "Explained / masked by the TCP path's figures now / by the path with the "
              "placements' figures too (the handoff and the shared compute) / by the TCP "
              "path's figures beyond their warning bands")
        judge_table(args, tcp, controls, first, jobs,
                    {"now": (baselines["now"], figures_on_path("tcp")),
                     "before": (baselines["now"], (*figures_on_path("tcp"),
                                                   "handoff_bandwidth", "shared_compute")),
                     "warn": (at_warning(baselines["now"]), figures_on_path("tcp"))})

    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = [host_control.after_job("bench", 0.10, failing=True)
                  for _ in range(min(half, 10))]
    finally:
        hog.kill()
        hog.wait()
    contended = sum(bool(c.get("contended")) for c in loaded)
    slow = sum(not c.get("contended") and host_control.slow_host(c, baselines["now"])
               is not None for c in loaded)
    print(f"\nunder a CPU hog on one core, through a failing job's path (wait up to "
          f"{host_control.QUIET_WAIT_S:g} s for a quiet host):")
    print(f"  controls {len(loaded)}, contended (judge nothing) {contended}, "
          f"beyond a limit while not contended {slow}")
    return 0


def judge_table(args: argparse.Namespace, series: dict[tuple[str, str, int], list[float]],
                controls: list[host_control.HostControl], first: list[range],
                jobs: list[range], judges: dict[str, tuple[dict[str, Reference], tuple]]) -> None:
    """Print one row per value: its baseline row, the judged healthy jobs that failed it and
    those the control explained, the fault's catches and those the control would mask, under
    each of the ``judges`` (baseline, figures on the path)."""
    print(f"{'MPI, benchmark, size':<30}{'median':>10}{'limit':>8}{'slow':>6}{'failed':>8}"
          f"{'explained':>12}{'fault caught':>14}{'masked':>12}")
    rules = tuple(judges)
    totals: dict = {"failed": 0, "caught": 0, **{rule: [0, 0] for rule in rules}}
    # As calibrate: a job whose control (sampled once, at its end) read a figure on the path
    # beyond its own limit was measured while the host ran slow, and is left out of the rows.
    baseline_now, figures_now = judges["now"]
    kept = [job for job in first if host_control.slow_host(
        controls[job[-1]].as_dict(), baseline_now, figures_now) is None]
    for (m, p, s), values in series.items():
        unit = UNITS.get(p, "us")
        lower = lower_is_better(p, unit)
        best_of_job = min if lower else max
        best = [best_of_job(values[i] for i in job) for job in kept]
        ref = row(spread_out(best, args.baseline_runs), unit, lower, False)
        failed = caught = 0
        excused = {rule: [0, 0] for rule in rules}  # [explained, masked]
        for job in jobs:
            measured = [values[i] for i in job]
            if any(v != v for v in measured):  # a launch printed no value: no job
                continue
            value = best_of_job(measured)
            control = host_control.best_of([controls[i] for i in job]).as_dict()
            fault_value = 2 * value if lower else value / 2
            for judged, fault in ((value, False), (fault_value, True)):
                a = Assessment(f"{p}_{s}", judged, unit, ref)
                if a.verdict != "fail":
                    continue
                caught += fault
                failed += not fault
                for rule, (baseline, figures) in judges.items():
                    slow = host_control.slow_host(control, baseline, figures)
                    excused[rule][fault] += slow is not None and slow.explains(a)
        totals["failed"] += failed
        totals["caught"] += caught
        for rule in judges:
            totals[rule] = [t + e for t, e in zip(totals[rule], excused[rule])]
        print(f"{f'{m} {p} {s // 1024} KiB':<30}{statistics.median(values):>10.1f}"
              f"{ref.failure_limit:>8.1f}{len(first) - len(kept):>6}{failed:>8}"
              f"{per_rule(excused, 0, rules):>12}{caught:>14}{per_rule(excused, 1, rules):>12}")
    print(f"{'all, of ' + str(len(jobs) * len(series)) + ' jobs':<30}{'':>24}"
          f"{totals['failed']:>8}{per_rule(totals, 0, rules):>12}{totals['caught']:>14}"
          f"{per_rule(totals, 1, rules):>12}")


if __name__ == "__main__":
    sys.exit(main())

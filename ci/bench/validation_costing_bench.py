#!/usr/bin/env python3
"""Benchmark: does the validation run cost the curve as the pilot does?

The OSU driver (``fabreg.run.measure``) runs two short runs of the whole curve before it
measures: the validation run (5 iterations a size with ``-c``) and, for a time-per-operation
table, the pilot (the same without ``-c``), which decides whether OSU's own iteration counts
fit ``curve_seconds``. Where the validation run already puts them within
``curve_seconds / VALIDATION_COSTING_MARGIN``, the pilot is left out. That is only the same
decision if ``-c`` never makes a curve look more than the margin cheaper than it is.

For each MPI, transport (shared memory, and TCP over the loopback as the suite launches it
between two nodes) and collective or latency probe, this runs both short runs back to back,
``--rounds`` times (the pilot forced), and prints side by side the curve's cost with OSU's
counts as each run estimates it, the worst ratio pilot / validation (the margin must exceed
it), how often the pilot was left out, how often that skip was wrong (the pilot would have
cut the counts at ``--curve-s``), and the pilot's seconds saved. Usage (repository root,
project virtualenv):

    .venv/bin/python ci/bench/validation_costing_bench.py [--rounds 5] [--mpi openmpi]
        [--benchmarks osu_latency,osu_allreduce] [--max-size 4194304] [--curve-s 30]

Exit status 0 when the table was printed (1 when a skip was wrong), 2 when nothing ran.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probes_vs_osu import MPIS, BenchError, build_probes, tool_env  # noqa: E402

from fabreg.run import measure  # noqa: E402
from fabreg.run import transport as tx  # noqa: E402
from fabreg.run.iteration_budget import kind_of  # noqa: E402

BENCHMARKS = ["osu_latency", "osu_allreduce", "osu_bcast", "osu_reduce", "osu_allgather",
              "osu_alltoall"]
#: transport -> how the suite launches 2 ranks over it on this host
SPECS = {
    "shm": lambda mpi: tx.launch_spec(mpi, "shm", nodes=1, ranks_per_node=2),
    "tcp": lambda mpi: tx.launch_spec(mpi, "tcp", nodes=2, ranks_per_node=1,
                                      net=tx.NetConfig(tcp_interfaces=("lo",)), verify=False),
}


@dataclass
class Case:
    """Both short runs' estimates of one curve, one per round."""

    validation_s: list[float] = field(default_factory=list)
    pilot_s: list[float] = field(default_factory=list)
    pilot_seconds: list[float] = field(default_factory=list)
    skipped: int = 0
    wrong: int = 0
    failed: str = ""


def plan_for(command: list[str], benchmark: str, max_size: int, curve_s: float
             ) -> measure.Plan:
    sizes = [1 << k for k in range(max_size.bit_length())]
    return measure.Plan(command=command, full_options=["-m", f"1:{max_size}"],
                        full_sizes=sizes, repeat_options=["-m", "{low}:{high}"],
                        sizes=[max_size], lower_is_better=True, validate=True,
                        iteration_kind=kind_of(benchmark) or "", curve_s=curve_s)


def one_round(plan: measure.Plan, env: dict[str, str], work: Path, case: Case) -> None:
    _, validated = measure.validation(plan, work, env, [])
    piloted = measure.pilot(plan, work, env, [])  # forced: no validation budget given
    if validated is None or not piloted or piloted.get("default_s") is None:
        case.failed = "a short run printed no usable table"
        return
    case.validation_s.append(validated.default_s)
    case.pilot_s.append(float(piloted["default_s"]))
    case.pilot_seconds.append(float(piloted["seconds"]))
    if measure.pilot_left_out(plan, validated):
        case.skipped += 1
        case.wrong += piloted["iterations"] is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mpi", action="append", choices=sorted(MPIS))
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    parser.add_argument("--max-size", type=int, default=4 << 20)
    parser.add_argument("--curve-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    cases: dict[tuple[str, str, str], Case] = {}
    with tempfile.TemporaryDirectory(prefix="validation-costing-") as tmp:
        for name in args.mpi or ["openmpi", "mpich"]:
            mpi = MPIS[name]
            try:
                probes = build_probes(mpi, Path(tmp) / name)
            except BenchError as err:
                print(f"# {err}", file=sys.stderr)
                continue
            for transport, spec_of in SPECS.items():
                spec = spec_of(name)
                style = tx.launcher_style(name, mpi.launcher)
                env = dict(tool_env(mpi), **spec.environment(style))
                for benchmark in args.benchmarks.split(","):
                    command = [*mpi.launcher, *spec.options(style), str(probes / benchmark)]
                    plan = plan_for(command, benchmark, args.max_size, args.curve_s)
                    case = cases.setdefault((name, transport, benchmark), Case())
                    work = Path(tmp) / f"{name}-{transport}-{benchmark}"
                    work.mkdir()
                    for _ in range(args.rounds):
                        one_round(plan, env, work, case)
                        if case.failed:
                            break
                    print(f"# {name} {transport} {benchmark}: {len(case.pilot_s)} rounds",
                          file=sys.stderr, flush=True)
    measured = {k: c for k, c in cases.items() if c.pilot_s}
    if not measured:
        print("nothing ran", file=sys.stderr)
        return 2
    print(f"curve 1 B-{args.max_size} B, curve_seconds {args.curve_s:g}, margin "
          f"{measure.VALIDATION_COSTING_MARGIN:g}, {args.rounds} rounds\n")
    print("| MPI | transport | benchmark | curve by validation (s) | curve by pilot (s) | "
          "pilot / validation, median (max) | pilot left out | wrongly | pilot s saved |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst, wrong, saved, total = 0.0, 0, 0.0, 0.0
    for (name, transport, benchmark), c in sorted(measured.items()):
        ratios = [p / v for p, v in zip(c.pilot_s, c.validation_s) if v > 0]
        worst = max(worst, *ratios)
        wrong += c.wrong
        kept = statistics.median(c.pilot_seconds)
        saved += kept * c.skipped
        total += sum(c.pilot_seconds)
        print(f"| {name} | {transport} | {benchmark} | {statistics.median(c.validation_s):.3f}"
              f" | {statistics.median(c.pilot_s):.3f} | {statistics.median(ratios):.2f} "
              f"({max(ratios):.2f}) | {c.skipped} of {len(c.pilot_s)} | {c.wrong} | "
              f"{kept * c.skipped:.2f} |")
    for (name, transport, benchmark), c in sorted(cases.items()):
        if c.failed:
            print(f"\n{name} {transport} {benchmark}: {c.failed}")
    print(f"\nworst pilot / validation: {worst:.2f} (margin "
          f"{measure.VALIDATION_COSTING_MARGIN:g}); skips that the pilot would have "
          f"overruled: {wrong}; pilot seconds saved {saved:.1f} of {total:.1f}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

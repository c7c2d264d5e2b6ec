"""Robust measurement inside the job: ``python -m fabreg.run.measure PLAN.json``.

A one-shot value judged against a band is what made healthy runs fail on a busy host.
Interference only ever lowers bandwidth and raises latency, so the job measures each
asserted size several times and the check judges the best value (the lowest latency, the
highest bandwidth), which other work cannot fake. The job script runs this driver instead
of the benchmark; it:

1. runs the benchmark over its whole size curve once (the sanity run, printed on stdout
   as the benchmark printed it);
2. repeats it at the asserted sizes until each has ``repeats`` values or the time budget
   is spent;
3. re-measures a size whose best value still crosses its failure limit, spread in time and
   on a quiet host (:mod:`fabreg.run.confirm`): only a failure that reproduces is
   *confirmed*;
4. meters the CPU time other work took on the host meanwhile (``fabreg.run.interference``);
5. ends a launch that printed its complete table but does not exit (MPICH 4.0 with UCX
   1.13 hangs in ``MPI_Finalize`` over TCP) after a grace period, keeping its values.

Everything it learnt goes to ``measure.json`` beside the benchmark's outputs.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabreg.run import host_control
from fabreg.run.confirm import CONFIRM_RUNS, Confirmation, Measurements
from fabreg.run.interference import (
    CONTENDED_SHARE,
    TOKEN_VARIABLE,
    JobMeter,
)
from fabreg.run.launch import Completion, JsonPlan, Launch, driver_main, run_once, summary
from fabreg.run.parsers.osu import parse_osu

RESULT = "measure.json"
PLAN = "measure-plan.json"
_ROW = re.compile(rb"^\s*(\d+)\s+[-+0-9.]")


@dataclass
class Plan(JsonPlan):
    """What the job measures; written by the check, read by the driver in the job."""

    #: The launcher and the benchmark, e.g. ``["mpirun", "-np", "2", "/.../osu_bw"]``.
    command: list[str]
    #: Options of the sanity run over the whole curve, and the sizes it must print.
    full_options: list[str]
    full_sizes: list[int]
    #: Options of a repeat at the asserted sizes (``{low}``/``{high}`` are filled in).
    repeat_options: list[str]
    #: The asserted sizes, and their failure limits where a reference exists.
    sizes: list[int]
    lower_is_better: bool
    fail_limits: dict[int, float] = field(default_factory=dict)
    #: The column of the table that is judged (None: the first).
    column: str | None = None
    repeats: int = 3
    #: Seconds after which no more plain repeats start (confirmation still runs).
    budget_s: float = 120.0
    #: Seconds a launch may linger after printing its complete table.
    grace_s: float = 20.0
    contended_share: float = CONTENDED_SHARE
    #: Seconds the confirmation runs may wait, in all, for the host to be quiet.
    quiet_wait_s: float = 30.0
    #: Seconds over which the confirmation runs are spread (first at once, last at the end).
    confirm_span_s: float = 60.0
    #: Confirmation runs of a failing value at most.
    confirm_runs: int = CONFIRM_RUNS

    @classmethod
    def decoded(cls, data: dict[str, Any]) -> dict[str, Any]:
        limits = data.get("fail_limits", {})
        return {**data, "fail_limits": {int(k): float(v) for k, v in limits.items()}}


def table_complete(sizes: list[int]) -> Completion:
    """OSU prints sizes in increasing order: the row of the largest one ends the table (its
    smallest depends on the datatype, which the run itself reports)."""
    last = max(sizes)

    def complete(line: bytes) -> bool:
        return bool((m := _ROW.match(line)) and int(m.group(1)) == last)
    return complete


def _values(path: Path, sizes: list[int], column: str | None) -> dict[int, float]:
    result = parse_osu(path.read_text(errors="replace"))
    out = {}
    for size in sizes:
        if size in result.rows:
            try:
                out[size] = result.value(size, column)
            except (KeyError, ValueError):
                continue
    return out


def measure(plan: Plan, workdir: Path) -> dict[str, Any]:
    """Run the plan in ``workdir``; return (and write) what ``measure.json`` holds."""
    token = uuid.uuid4().hex
    env = dict(os.environ, **{TOKEN_VARIABLE: token})
    meter = JobMeter(token, workdir).start()
    start = time.monotonic()
    launches: list[Launch] = []
    # Figures are keyed by message size, as text (the result file's keys).
    measurements = Measurements(dict.fromkeys(map(str, plan.sizes), plan.lower_is_better))

    def launch(options: list[str], sizes: list[int], echo: bool = False) -> dict[str, float]:
        out = workdir / f"measure-{len(launches)}.out"
        done = run_once(plan.command, options, out, table_complete(sizes), plan.grace_s, env,
                        echo)
        launches.append(done)
        return {str(size): v for size, v in _values(out, plan.sizes, plan.column).items()}

    def repeat(names: list[str]) -> dict[str, float]:
        low, high = min(map(int, names)), max(map(int, names))
        opts = [o.format(low=low, high=high) for o in plan.repeat_options]
        return launch(opts, [s for s in plan.full_sizes if low <= s <= high])

    def short() -> list[str]:
        return [n for n in measurements.lower_is_better
                if len(measurements.values.get(n, [])) < plan.repeats]

    got = measurements.record(launch(plan.full_options, plan.full_sizes, echo=True))
    first = launches[0]
    if len(got) == len(plan.sizes) and not (first.returncode and not first.hung_after_results):
        while time.monotonic() - start < plan.budget_s and (names := short()):
            if not measurements.record(repeat(names)):
                break  # a repeat that prints nothing will not start printing
    limits = {str(s): v for s, v in plan.fail_limits.items()}
    measurements.confirm(limits, Confirmation.of(plan, token, workdir), repeat)
    interference = meter.stop()
    result = {
        **measurements.as_dict(),
        **interference.job_summary(plan.contended_share),
        "host_control": host_control.after_job(token, plan.contended_share,
                                               bool(measurements.failing(limits))),
        **summary(launches),
        # The job's status: the first launch's, or 0 if it hung after complete results.
        "returncode": 0 if launches[0].hung_after_results else launches[0].returncode,
    }
    (workdir / RESULT).write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    return driver_main("fabreg.run.measure", argv, Plan, measure)


if __name__ == "__main__":
    sys.exit(main())

"""Robust measurement inside the job: ``python -m fabreg.run.measure PLAN.json``.

A one-shot value judged against a band is what made healthy runs fail on a busy host.
Interference only ever lowers bandwidth and raises latency, so the job measures each
asserted size several times and the check judges the best value (the lowest latency, the
highest bandwidth), which other work cannot fake. The job script runs this driver instead
of the benchmark; it:

1. runs the benchmark over its whole size curve once (the sanity run, printed on stdout
   as the benchmark printed it);
2. repeats it at the asserted sizes that are not settled yet (``fabreg.run.confirm.settled``:
   a value inside its warning band after one measurement; otherwise ``repeats`` values)
   until the time budget is spent, in as many launches as save time
   (:mod:`fabreg.run.repeat_ranges`);
3. re-measures a size whose best value still crosses its failure limit, spread in time and
   on a quiet host (:mod:`fabreg.run.confirm`): only a failure that reproduces is
   *confirmed*;
4. meters the CPU time other work took on the host meanwhile (``fabreg.run.interference``);
5. ends a launch that printed its complete table but does not exit (MPICH 4.0 with UCX
   1.13 hangs in ``MPI_Finalize`` over TCP) after a grace period, keeping its values.

Before all that, two short runs of the whole curve with a handful of iterations:

- where the plan validates, the *validation run*: OSU's data validation (``-c``) checks what
  every size delivers (``measure-validation.out``, read by the check's sanity). Only this
  run validates: validation fills and checks the buffers around every call, which moves
  some figures up to 2x either way, so no measured run carries it (one method per value);
- where the plan asks for it, a *pilot* that costs the curve
  (:mod:`fabreg.run.iteration_budget`): if OSU's own iteration counts would make it longer
  than ``curve_s``, every later run of the job uses the count that fits. The validation run
  has the pilot's options with ``-c`` added, so it costs the curve too: where it puts OSU's
  own counts within ``curve_s / VALIDATION_COSTING_MARGIN``, the pilot would keep them
  whatever ``-c`` moved, and it is not run.

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
from fabreg.run.confirm import Confirmation, ConfirmationPlan, Measurements
from fabreg.run.interference import (
    TOKEN_VARIABLE,
    JobMeter,
)
from fabreg.run.iteration_budget import (
    PILOT_ITERATIONS,
    PILOT_WARMUP,
    IterationBudget,
    iteration_costs,
    iterations_within,
)
from fabreg.run.launch import (
    Completion,
    JsonPlan,
    Launch,
    driver_main,
    grace_after,
    run_once,
    summary,
)
from fabreg.run.parsers.osu import parse_osu
from fabreg.run.repeat_ranges import launch_seconds, repeat_ranges, size_seconds

RESULT = "measure.json"
PLAN = "measure-plan.json"
#: The validation run's table (UCX's log lines, on stdout, among it), and its stderr apart.
VALIDATION_OUT = "measure-validation.out"
VALIDATION_ERR = "measure-validation.err"
_ROW = re.compile(rb"^\s*(\d+)\s+[-+0-9.]")
#: How far inside ``curve_s`` the validation run must put OSU's own counts for the pilot to
#: be left out: ``-c`` moves a table's figure up to 2x either way, so a curve that fits half
#: the time with it fits the whole without. (Its row times, which the costs rest on, also
#: carry the buffers' filling and checking: ci/bench/validation_costing_bench.py found the
#: pilot's estimate 0.10-0.67 of the validation run's, never above it.)
VALIDATION_COSTING_MARGIN = 2.0


@dataclass
class Plan(JsonPlan, ConfirmationPlan):
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
    #: The asserted sizes' warning limits, where a reference exists: a size whose first value
    #: lies inside it is not repeated (``fabreg.run.confirm.settled``).
    warn_limits: dict[int, float] = field(default_factory=dict)
    #: The column of the table that is judged (None: the first).
    column: str | None = None
    #: Seconds after which no more plain repeats start (confirmation still runs).
    budget_s: float = 120.0
    #: Seconds a launch may linger after printing its complete table.
    grace_s: float = 20.0
    #: A file that says an earlier job of the run, launching the same way, hung after its
    #: results (``fabreg.run.launch.note_hang``); empty: none.
    hang_note: str = ""
    #: Whose iteration defaults the benchmark has (``fabreg.run.iteration_budget``); empty:
    #: no pilot.
    iteration_kind: str = ""
    #: Seconds the whole-curve run may take; 0: OSU's iteration counts, however long.
    curve_s: float = 0.0
    #: Check the data of every size in a short validation run (OSU's ``-c``) first.
    validate: bool = False
    #: Arguments after every option of every run (OSU's buffer locations, ``D D``).
    operands: list[str] = field(default_factory=list)

    @classmethod
    def decoded(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, **{name: {int(k): float(v) for k, v in data.get(name, {}).items()}
                           for name in ("fail_limits", "warn_limits")}}


def stamped(complete: Completion, printed_at: dict[int, float]) -> Completion:
    """``complete``, noting in ``printed_at`` when each size's row came (monotonic clock)."""
    def stamp(line: bytes) -> bool:
        if m := _ROW.match(line):
            printed_at.setdefault(int(m.group(1)), time.monotonic())
        return complete(line)
    return stamp


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


def short_options(plan: Plan) -> list[str]:
    """The whole-curve options with a handful of iterations (a count set by hand is
    overridden: OSU takes the last one)."""
    return [*plan.full_options, "-i", str(PILOT_ITERATIONS), "-x", str(PILOT_WARMUP)]


def last_operands(plan: Plan, options: list[str]) -> list[str]:
    """A run's arguments: OSU reads options only up to its first operand (``D D``)."""
    return [*options, *plan.operands]


def _short_run(done: Launch) -> dict[str, Any]:
    """What ``measure.json`` says of a short run (the validation run, the pilot)."""
    return {"seconds": round(done.seconds, 3), "returncode": done.returncode,
            "hung_after_results": done.hung_after_results,
            "results_s": None if done.results_s is None else round(done.results_s, 3)}


def costed(plan: Plan) -> bool:
    """Whether the plan bounds the curve's iterations by time (a pilot costs it)."""
    return bool(plan.iteration_kind and plan.curve_s > 0)


def short_run_budget(plan: Plan, out: Path, printed_at: dict[int, float], done: Launch,
                     whole: bool = False) -> IterationBudget | None:
    """What a short run of the whole curve (``short_options``) says the curve costs; None
    where it failed or printed no row (``whole``: or its table is not complete)."""
    times = _values(out, plan.full_sizes, plan.column)
    if not times or (done.returncode and not done.hung_after_results):
        return None
    if whole and max(plan.full_sizes) not in times:
        return None
    costs = iteration_costs(times, printed_at, PILOT_ITERATIONS + PILOT_WARMUP)
    return iterations_within(costs, plan.iteration_kind, plan.curve_s)


def validation(plan: Plan, workdir: Path, env: dict[str, str], launched: list[Launch]
               ) -> tuple[dict[str, Any] | None, IterationBudget | None]:
    """Check the data of every size in a short run with OSU's ``-c``: what ``measure.json``
    says of it (None when the plan does not validate) and, where the plan costs the curve,
    what the run says the curve costs. The check's sanity reads the table
    (``VALIDATION_OUT``)."""
    if not plan.validate:
        return None, None
    printed_at: dict[int, float] = {}
    out = workdir / VALIDATION_OUT
    done = run_once(plan.command, last_operands(plan, [*short_options(plan), "-c"]), out,
                    stamped(table_complete(plan.full_sizes), printed_at),
                    grace_after(launched, plan.grace_s, plan.hang_note), env,
                    hang_note=plan.hang_note, errors=workdir / VALIDATION_ERR)
    launched.append(done)
    budget = short_run_budget(plan, out, printed_at, done, whole=True) if costed(plan) \
        else None
    return _short_run(done), budget


def pilot_left_out(plan: Plan, validated: IterationBudget | None) -> bool:
    """Whether the validation run's estimate keeps OSU's counts with
    ``VALIDATION_COSTING_MARGIN`` to spare, so that the pilot would keep them too."""
    return (validated is not None and validated.iterations is None
            and validated.default_s * VALIDATION_COSTING_MARGIN <= plan.curve_s)


def pilot(plan: Plan, workdir: Path, env: dict[str, str], launched: list[Launch],
          validated: IterationBudget | None = None) -> dict[str, Any] | None:
    """Cost the curve with a short run of the whole-curve options; None when the plan asks
    for no pilot.

    ``validated``: what the validation run said the curve costs. Where that leaves the pilot
    out (:func:`pilot_left_out`), it is not run, and the record says ``costed_by:
    validation``.

    A pilot that prints no usable table leaves OSU's counts: the whole-curve run that
    follows is what reports the benchmark's problem.
    """
    if not costed(plan):
        return None
    if validated is not None and pilot_left_out(plan, validated):
        return {"costed_by": "validation", **validated.as_dict(), "options": []}
    options = last_operands(plan, short_options(plan))
    out = workdir / "measure-pilot.out"
    printed_at: dict[int, float] = {}
    done = run_once(plan.command, options, out,
                    stamped(table_complete(plan.full_sizes), printed_at),
                    grace_after(launched, plan.grace_s, plan.hang_note), env,
                    hang_note=plan.hang_note, errors=workdir / "measure-pilot.err")
    launched.append(done)
    found = {"costed_by": "pilot", **_short_run(done)}
    if budget := short_run_budget(plan, out, printed_at, done):
        found.update(budget.as_dict(), options=budget.options())
    return found


def measure(plan: Plan, workdir: Path) -> dict[str, Any]:
    """Run the plan in ``workdir``; return (and write) what ``measure.json`` holds."""
    token = uuid.uuid4().hex
    env = dict(os.environ, **{TOKEN_VARIABLE: token})
    meter = JobMeter(token, workdir).start()
    start = time.monotonic()
    launches: list[Launch] = []
    # Figures are keyed by message size, as text (the result file's keys).
    measurements = Measurements(dict.fromkeys(map(str, plan.sizes), plan.lower_is_better))
    # The short runs' launches: a hang there shortens the later graces.
    short: list[Launch] = []
    validated, validation_budget = validation(plan, workdir, env, short)
    budget = pilot(plan, workdir, env, short, validation_budget)
    counts = list(budget.get("options", [])) if budget else []

    # When each row of the first run over the whole curve came: what each size costs.
    printed_at: dict[int, float] = {}

    def launch(options: list[str], sizes: list[int], echo: bool = False) -> dict[str, float]:
        out = workdir / f"measure-{len(launches)}.out"
        complete = table_complete(sizes)
        done = run_once(plan.command, last_operands(plan, options), out,
                        complete if launches else stamped(complete, printed_at),
                        grace_after([*short, *launches], plan.grace_s, plan.hang_note), env,
                        echo, plan.hang_note)
        launches.append(done)
        return {str(size): v for size, v in _values(out, plan.sizes, plan.column).items()}

    def repeat(names: list[str]) -> dict[str, float]:
        """Each of ``names`` measured once more (:mod:`fabreg.run.repeat_ranges`)."""
        got: dict[str, float] = {}
        for low, high in repeat_ranges(list(map(int, names)), plan.full_sizes, costs,
                                       launch_s):
            opts = [o.format(low=low, high=high) for o in plan.repeat_options]
            got.update(launch(opts + counts, [s for s in plan.full_sizes if low <= s <= high]))
        return got

    warn_limits = {str(s): v for s, v in plan.warn_limits.items()}
    limits = {str(s): v for s, v in plan.fail_limits.items()}
    confirmed = plan.repeat_limits(limits)
    got = measurements.record(launch(plan.full_options + counts, plan.full_sizes, echo=True))
    first = launches[0]
    # What the first run said each size and a launch cost: where repeats split.
    costs = size_seconds(printed_at)
    launch_s = launch_seconds(first.seconds, costs)
    unsettled: list[str] = []
    if len(got) == len(plan.sizes) and not (first.returncode and not first.hung_after_results):
        while unsettled := measurements.unsettled(warn_limits, plan.repeats, confirmed):
            if time.monotonic() - start >= plan.budget_s:
                break
            if not set(measurements.record(repeat(unsettled))) & set(unsettled):
                break  # a repeat that prints nothing will not start printing
    measurements.confirm(limits, Confirmation.of(plan, token, workdir), repeat)
    interference = meter.stop()
    control = host_control.after_plan(token, plan, bool(measurements.failing(limits)))
    measurements.leave_note(control)
    result = {
        **measurements.as_dict(),
        "size_seconds": {str(size): round(t, 4) for size, t in costs.items()},
        "launch_seconds": round(launch_s, 3),
        # The sizes the time budget left with fewer measurements than they needed.
        "unsettled": unsettled,
        **interference.job_summary(plan.contended_share),
        "host_control": control,
        **summary(launches),
        "validation": validated,
        "pilot": budget,
        # The job's status: the first launch's, or 0 if it hung after complete results.
        "returncode": 0 if launches[0].hung_after_results else launches[0].returncode,
    }
    (workdir / RESULT).write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    return driver_main("fabreg.run.measure", argv, Plan, measure)


if __name__ == "__main__":
    sys.exit(main())

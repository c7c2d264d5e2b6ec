"""A workload probe measured repeatedly in the job: ``python -m fabreg.run.repeat_probe PLAN``.

A single run of a probe is a one-shot value: on a healthy 2-core VM the distribution phase
of a 512x512 matrix multiply took 9 ms in most runs and 35 ms in one. The job runs this
driver instead of the probe: it launches the probe until each figure is settled, at most
``repeats`` times (:func:`fabreg.run.confirm.settled`; each launch through
:mod:`fabreg.run.launch`, so one that hangs after its complete block is ended with its
results kept), prints the first run's output on stdout (sanity reads it), judges each figure
by its best run (interference only makes a time longer, a rate lower) and has a figure whose
best still crosses its failure limit measured again, spread in time and on a quiet host
(:mod:`fabreg.run.confirm`). A check whose figure is a ratio to another launch (the fan-in
share: the slowest of k streams against one stream alone) names that launch as the plan's
``baseline``: it runs before every run, its figures join the run's under their recorded
names, and each side of the ratio is the best of its own runs. Everything it learnt goes to
``repeat-probe.json``.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabreg.errors import FabregError
from fabreg.run import host_control
from fabreg.run.confirm import Confirmation, ConfirmationPlan, Measurements
from fabreg.run.interference import (
    TOKEN_VARIABLE,
    JobMeter,
)
from fabreg.run.launch import JsonPlan, Launch, driver_main, grace_after, run_once, summary
from fabreg.run.parsers.probes import parse_matmul, parse_streams

PLAN = "repeat-probe-plan.json"
RESULT = "repeat-probe.json"

#: How each probe's output gives its figures (perf variable -> value).
READERS: dict[str, Callable[[str], dict[str, float]]] = {
    "fabreg_matmul": lambda text: parse_matmul(text).figures(),
    "fabreg_streams": lambda text: parse_streams(text).figures(),
}


def run_output(run: int) -> str:
    """The output file of run ``run`` (1-based)."""
    return f"probe-run{run}.out"


def baseline_output(run: int) -> str:
    """The output file of the baseline launch before run ``run`` (1-based)."""
    return f"probe-run{run}-baseline.out"


@dataclass
class Plan(JsonPlan, ConfirmationPlan):
    """What the job runs; written by the check, read by the driver in the job."""

    #: The launcher and the probe, e.g. ``["mpirun", "-np", "4", ".../fabreg_matmul"]``.
    command: list[str]
    options: list[str]
    #: The probe (a key of :data:`READERS`).
    probe: str
    #: Perf variable -> whether lower is better (the figures judged).
    figures: dict[str, bool] = field(default_factory=dict)
    #: Perf variable -> its failure limit, where a reference exists.
    fail_limits: dict[str, float] = field(default_factory=dict)
    #: Perf variable -> its warning limit, where a reference exists: a figure whose first
    #: value lies inside it needs no more runs (``fabreg.run.confirm.settled``).
    warn_limits: dict[str, float] = field(default_factory=dict)
    #: Seconds a probe may go on after printing its complete block before it is ended.
    grace_s: float = 20.0
    #: A file that says an earlier job of the run, launching the same way, hung after its
    #: results (``fabreg.run.launch.note_hang``); empty: none.
    hang_note: str = ""
    #: A launch (command and options) run before every run, e.g. one stream alone before
    #: the fan-in; empty: none.
    baseline: list[str] = field(default_factory=list)
    #: The baseline's figure -> the name it is recorded under (a key of ``figures``).
    baseline_figures: dict[str, str] = field(default_factory=dict)


def _complete(probe: str) -> Callable[[bytes], bool]:
    end = f"# end {probe}".encode()
    return lambda line: line.startswith(end)


def run(plan: Plan, workdir: Path) -> dict[str, Any]:
    """Run the plan in ``workdir``; return (and write) what ``repeat-probe.json`` holds."""
    if plan.probe not in READERS:
        raise FabregError(f"no figures known for probe {plan.probe!r} "
                          f"(one of: {', '.join(READERS)})")
    token = uuid.uuid4().hex
    env = dict(os.environ, **{TOKEN_VARIABLE: token})
    meter = JobMeter(token, workdir).start()
    measurements = Measurements(dict(plan.figures))
    launches: list[Launch] = []
    baselines: list[Launch] = []  # they shorten later graces too, but are not runs
    read = READERS[plan.probe]

    def grace() -> float:
        return grace_after(launches + baselines, plan.grace_s, plan.hang_note)

    def figures_in(path: Path) -> dict[str, float]:
        try:
            return read(path.read_text(errors="replace"))
        except FabregError:
            return {}  # a run without a complete block adds nothing

    def once(names: list[str] | None = None) -> dict[str, float]:
        """One run (and its baseline, unless ``names`` need none of the baseline's figures)."""
        figures: dict[str, float] = {}
        wanted = names is None or bool(set(names) & set(plan.baseline_figures.values()))
        if plan.baseline and wanted:
            out = workdir / baseline_output(len(launches) + 1)
            baselines.append(run_once(plan.baseline, [], out, _complete(plan.probe),
                                      grace(), env, hang_note=plan.hang_note))
            figures = {plan.baseline_figures[name]: value
                       for name, value in figures_in(out).items()
                       if name in plan.baseline_figures}
        out = workdir / run_output(len(launches) + 1)
        launches.append(run_once(plan.command, plan.options, out, _complete(plan.probe),
                                 grace(), env, echo=not launches, hang_note=plan.hang_note))
        return {**figures, **figures_in(out)}

    measurements.record(once())
    if launches[0].returncode == 0 or launches[0].hung_after_results:
        while len(launches) < plan.repeats and (
                unsettled := measurements.unsettled(plan.warn_limits, plan.repeats,
                                                    plan.repeat_limits(plan.fail_limits))):
            measurements.record(once(unsettled))
        measurements.confirm(plan.fail_limits, Confirmation.of(plan, token, workdir), once)
    interference = meter.stop()
    first = launches[0]
    control = host_control.after_plan(token, plan, bool(measurements.failing(plan.fail_limits)))
    measurements.leave_note(control)
    result = {
        **measurements.as_dict(),
        **summary(launches),
        "baseline_launches": summary(baselines)["launches"],
        **interference.job_summary(plan.contended_share),
        "host_control": control,
        "returncode": 0 if first.hung_after_results else first.returncode,
    }
    (workdir / RESULT).write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    return driver_main("fabreg.run.repeat_probe", argv, Plan, run)


if __name__ == "__main__":
    sys.exit(main())

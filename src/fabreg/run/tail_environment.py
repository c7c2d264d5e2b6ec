"""Controlled tail environments for collective latency: ``python -m fabreg.run.tail_environment``.

The practice the tail-latency check comes from compares allreduce schemes under controlled
tail environments: background traffic is set so that the measured collective's p99/p50
reaches a target, about 1.5x for a *low-tail* environment and about 3x for a *high-tail*
one, and every algorithm is compared under the same environment. A fixed background means
something else on every machine (a 2-core VM and an HDR fabric differ by orders of
magnitude), so the job calibrates it: it walks a ladder of background intensities (burst
size, messages in flight, share of time streaming) by bisection, each step a short run of
the probe, until the loaded p99/p50 lands within ``tolerance`` of the target; then it
measures ``repeats`` full runs at that setting. A step whose quiet blocks already show a
p99/p50 above the target's reach (the host's own tail: 2-18x on a 2-core VM) ends the
calibration: no background can make the environment, its verdict is ``inconclusive``
whatever more steps or runs would show, and that step's run is the one the perflog gets (no
run is measured after it). The *quiet* environment's figures are judged by references: a run
whose figures all lie inside their warning bands is its only one, as for every other check
(``fabreg.run.confirm.settled``). The run's later jobs of the same environment, collective, MPI,
transport and node count (the other algorithms) try the step the last one chose first
(``step_note``): on 4 MPICH nodes a calibration step takes 8-20 s, and three of four later
jobs needed only that one step (session 15). The *quiet* environment runs no background.
A run whose planned iterations would take longer than ``run_s`` (4 busy-polling MPICH ranks
on 2 cores: 28 s for 1,000) runs the count that fits, costed by the launch before it at the
same setting (the chosen calibration step, then each run; the quiet environment's first run
by the last run of the run's earlier quiet job of the same collective, where there was one,
else by the probe itself from the wall time of its warm-up, ``-T``); at least
``MIN_RUN_ITERATIONS``.

Everything it learnt goes to ``tail-environment.json``: the environment, its target, the
ladder steps tried with the ratio each reached, the chosen background, the ratio the final
runs reached and the files they wrote. Each launch goes through ``fabreg.run.launch``: a
probe that hangs in ``MPI_Finalize`` after its complete block is ended, its results kept.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fabreg.errors import FabregError
from fabreg.run import host_control
from fabreg.run.confirm import Confirmation, ConfirmationPlan, Measurements
from fabreg.run.interference import TOKEN_VARIABLE
from fabreg.run.launch import JsonPlan, Launch, driver_main, grace_after, run_once, summary
from fabreg.run.parsers.probes import ProbeOutputError, TailLatencyResult, parse_tail_latency

RESULT = "tail-environment.json"
PLAN = "tail-environment-plan.json"

#: Target p99/p50 of each environment (None: no background at all).
TARGETS: dict[str, float | None] = {"quiet": None, "low_tail": 1.5, "high_tail": 3.0}

#: How far (as a fraction of the target) the reached ratio may lie from it.
TOLERANCE = 0.25

#: A measured run cut to fit ``run_s`` keeps at least this many iterations per phase (its
#: p99 is then at worst the 2nd-largest of 200 samples), and never more than planned.
MIN_RUN_ITERATIONS = 200


@dataclass(frozen=True)
class Background:
    """One background intensity: ``window`` messages of ``size`` bytes each way per burst,
    streaming ``duty`` percent of the time."""

    size: int
    window: int
    duty: int

    def options(self) -> list[str]:
        return ["-B", str(self.size), "-W", str(self.window), "-D", str(self.duty)]


#: Background intensities from gentlest to strongest (bytes in flight x share of time).
LADDER: tuple[Background, ...] = (
    Background(16 << 10, 1, 5), Background(64 << 10, 1, 5), Background(64 << 10, 1, 15),
    Background(256 << 10, 1, 15), Background(512 << 10, 2, 15), Background(512 << 10, 2, 25),
    Background(512 << 10, 2, 50), Background(1 << 20, 4, 75), Background(1 << 20, 4, 100),
)


def within(ratio: float, target: float, tolerance: float = TOLERANCE) -> bool:
    return abs(ratio - target) <= tolerance * target


@dataclass
class Calibration:
    """The ladder steps tried (index, ratio reached) and the one chosen."""

    steps: list[tuple[int, float]] = field(default_factory=list)
    chosen: int = 0

    @property
    def ratio(self) -> float:
        return dict(self.steps)[self.chosen]


class OutOfReach(Exception):
    """A calibration step showed the host's own tail already above the target: no background
    can make the environment, and the outcome (``inconclusive``) is known."""

    def __init__(self, quiet_ratio: float) -> None:
        super().__init__(f"quiet p99/p50 {quiet_ratio:.2f}")
        self.quiet_ratio = quiet_ratio


def out_of_reach(quiet_ratio: float, target: float, tolerance: float = TOLERANCE) -> bool:
    """Whether the host's own (quiet) tail lies above the environment's reach: a background
    only adds to the tail, so no step can bring the loaded ratio back within the target."""
    return quiet_ratio > target * (1 + tolerance)


def beyond_gentlest(calibration: Calibration, target: float,
                    tolerance: float = TOLERANCE) -> bool:
    """Whether the calibration ended at the gentlest background with the tail already past
    the target's reach: a stronger background only raises it more, so no step makes the
    environment, and the outcome (``inconclusive``) is known (seen: 4 MPICH ranks on 2
    cores, p99/p50 5.1 at the gentlest step against the 3x target)."""
    return calibration.chosen == 0 and calibration.ratio > target * (1 + tolerance)


def calibrate(measure: Callable[[Background], float], target: float,
              ladder: tuple[Background, ...] = LADDER,
              tolerance: float = TOLERANCE, start: int | None = None) -> Calibration:
    """Bisect the ladder for the step whose loaded p99/p50 is nearest ``target``.

    The tail grows with the background's intensity, so the search halves the ladder after
    each step: log2(len(ladder)) short runs. It stops at the first step within
    ``tolerance``; otherwise the step nearest the target (in ratio, on a log scale) wins.
    ``start``: the step to try first (where an earlier job's calibration landed), instead of
    the ladder's middle; the bisection goes on from what it shows.
    """
    result = Calibration()
    low, high = 0, len(ladder) - 1
    first = start if start is not None and low <= start <= high else None
    while low <= high:
        middle = first if first is not None else (low + high) // 2
        first = None
        ratio = measure(ladder[middle])
        result.steps.append((middle, ratio))
        if within(ratio, target, tolerance):
            break
        if ratio < target:
            low = middle + 1
        else:
            high = middle - 1
    result.chosen = min(result.steps, key=lambda s: abs(math.log(max(s[1], 1e-9) / target)))[0]
    return result


#: The quiet figures a reference may judge -> their field in the probe's quiet row.
QUIET_FIGURES = {"p50": "p50_us", "p99": "p99_us", "p99_over_p50": "p99_over_p50"}


@dataclass
class Plan(JsonPlan, ConfirmationPlan):
    """What the job runs; written by the check, read by the driver in the job."""

    #: The launcher and the probe, e.g. ``["mpirun", "-np", "4", ".../fabreg_tail_latency"]``.
    command: list[str]
    #: The probe's options without the background's intensity (-B/-W/-D).
    options: list[str]
    environment: str
    #: Iterations and blocks of one calibration step (the final runs use ``options``' own).
    calibration_iterations: int = 300
    calibration_blocks: int = 6
    tolerance: float = TOLERANCE
    grace_s: float = 20.0
    #: A file that says an earlier job of the run, launching the same way, hung after its
    #: results (``fabreg.run.launch.note_hang``); empty: none.
    hang_note: str = ""
    #: A file where the run's jobs of this environment, collective, MPI, transport and node
    #: count note the ladder step their calibration chose; the next one tries that step
    #: first (:func:`noted_step`). The quiet environment notes there what one iteration of
    #: its last run cost; the next quiet job's first run is costed by it
    #: (:func:`noted_cost`). Empty: none.
    step_note: str = ""
    #: Quiet environment: the figures a verdict rests on (the check's judged ones): a run
    #: is settled once they lie inside their warning bands; the others are logged from the
    #: same runs.
    judged: list[str] = field(default_factory=lambda: list(QUIET_FIGURES))
    #: Quiet environment: perf variable (``p50``, ``p99``, ``p99_over_p50``) -> failure
    #: limit; a figure whose best run crosses it is confirmed (fabreg.run.confirm).
    fail_limits: dict[str, float] = field(default_factory=dict)
    #: Quiet environment: perf variable -> warning limit. A run whose figures all lie inside
    #: theirs is the only one: interference only raises a latency and its tail, so more runs
    #: could only lower the best (fabreg.run.confirm.settled). Without a limit a figure is
    #: measured ``repeats`` times.
    warn_limits: dict[str, float] = field(default_factory=dict)
    #: Seconds a measured run may take (0: no limit): where the planned iterations would take
    #: longer, the runs use the count that fits (:func:`iterations_within`).
    run_s: float = 0.0

    @property
    def target(self) -> float | None:
        if self.environment not in TARGETS:
            raise FabregError(f"unknown tail environment {self.environment!r} "
                              f"(one of: {', '.join(TARGETS)})")
        return TARGETS[self.environment]


def noted_step(step_note: str) -> int | None:
    """The ladder step an earlier job of the run chose (``Plan.step_note``), or None."""
    try:
        step = int(json.loads(Path(step_note).read_text())["step"]) if step_note else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if step is not None and 0 <= step < len(LADDER) else None


def note_step(step_note: str, calibration: Calibration) -> None:
    """Leave the step ``calibration`` chose where the run's next job of the same environment
    will look."""
    _leave_note(step_note, {"step": calibration.chosen, "ratio": round(calibration.ratio, 4)})


def noted_cost(step_note: str) -> float | None:
    """Seconds per iteration of an earlier quiet job's last run (``Plan.step_note``), or
    None: the same collective, MPI, transport and node count, another algorithm."""
    try:
        cost = float(json.loads(Path(step_note).read_text())["seconds_per_iteration"]) \
            if step_note else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cost if cost is not None and cost > 0 else None


def note_cost(step_note: str, seconds_per_iteration: float) -> None:
    """Leave what one iteration of a quiet run cost where the run's next quiet job of the
    same collective will look: its first run is then costed by a whole launch's wall time,
    not only by the probe's warm-up."""
    _leave_note(step_note, {"seconds_per_iteration": round(seconds_per_iteration, 9)})


def _leave_note(note: str, content: dict[str, Any]) -> None:
    """Write a note for the run's later jobs (atomically: jobs of a run may end together)."""
    if not note:
        return
    path = Path(note)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(content) + "\n")
        os.replace(tmp, path)
    except OSError as err:  # a note is an economy: the job's own results do not depend on it
        print(f"fabreg: could not leave the calibration note {note}: {err}", file=sys.stderr)


def _with_counts(options: list[str], iterations: int, blocks: int) -> list[str]:
    """``options`` with -i/-k replaced: a calibration step is a shorter run."""
    out, skip = [], False
    for i, opt in enumerate(options):
        if skip:
            skip = False
            continue
        if opt in ("-i", "-k") and i + 1 < len(options):
            skip = True
            continue
        out.append(opt)
    return [*out, "-i", str(iterations), "-k", str(blocks)]


def _count(options: list[str], flag: str, default: int) -> int:
    """The value of ``flag`` (``-i``, ``-k``) in the probe's options (the last one wins)."""
    values = [options[i + 1] for i, opt in enumerate(options[:-1]) if opt == flag]
    return int(values[-1]) if values else default


def seconds_per_iteration(result: TailLatencyResult, results_s: float | None = None) -> float:
    """What one iteration (per phase) of a run costs in wall time, from a launch that
    printed ``result`` ``results_s`` seconds after it started.

    The larger of the means of its phases and its wall time to complete results per
    iteration. The means alone undercost: on 4 emulated nodes a high-tail MPICH run costed
    at 541 x 18.5 ms = 10 s took 19-32 s to its results (the probe's start on 4 nodes, the
    switching of 20 blocks between quiet and loaded); the wall time counts both, and the
    start spread over the iterations errs towards shorter runs, not longer ones.
    """
    loaded = result.loaded.mean_us if result.loaded else 0.0
    means = (result.quiet.mean_us + loaded) / 1e6
    if results_s is None or result.iterations <= 0:
        return means
    return max(means, results_s / result.iterations)


def iterations_within(run_s: float, per_iteration: float, planned: int, blocks: int) -> int:
    """The iterations per phase that fit ``run_s`` seconds: never more than ``planned``,
    never fewer than ``MIN_RUN_ITERATIONS`` (or the blocks, the probe's own minimum)."""
    if run_s <= 0 or per_iteration <= 0:
        return planned
    floor = min(planned, max(MIN_RUN_ITERATIONS, blocks))
    return max(floor, min(planned, int(run_s / per_iteration)))


def _block_complete(line: bytes) -> bool:
    return line.startswith(b"# end fabreg_tail_latency")


def loaded_ratio(result: TailLatencyResult) -> float:
    if result.loaded is None:
        raise ProbeOutputError("fabreg_tail_latency printed no loaded row")
    return result.loaded.p99_over_p50


def quiet_figures(result: TailLatencyResult) -> dict[str, float]:
    """The quiet figures of one run, by perf variable."""
    return {name: float(getattr(result.quiet, row)) for name, row in QUIET_FIGURES.items()}


def quiet_fail_limits(plan: Plan) -> dict[str, float]:
    """The failure limits of the quiet figures, the ones a quiet environment confirms."""
    return {n: v for n, v in plan.fail_limits.items() if n in QUIET_FIGURES}


def _confirm_quiet_figures(plan: Plan, workdir: Path, measurements: Measurements,
                           results: list[TailLatencyResult], runs: list[str],
                           launch: Callable[..., TailLatencyResult], options: list[str],
                           env: dict[str, str]) -> Measurements | None:
    """Quiet environment: measure a figure whose best run fails again, spread in time, as
    the other checks do: joining a lasting failure an earlier job of the run confirmed on
    the same nodes, within the run's confirmation budget (``fabreg.run.confirm``).

    ``measurements`` holds the quiet figures of ``results``. Appends the confirmation runs
    to all three; returns ``measurements`` (None: nothing to judge), which then say what the
    confirmation found.
    """
    limits = quiet_fail_limits(plan)
    if plan.target is not None or not limits:
        return None

    def again(_: list[str]) -> dict[str, float]:
        runs.append(f"tail_run{len(runs) + 1}.out")
        results.append(launch(runs[-1], options))
        return quiet_figures(results[-1])

    measurements.confirm(limits, Confirmation.of(plan, env[TOKEN_VARIABLE], workdir), again)
    return measurements


def run(plan: Plan, workdir: Path) -> dict[str, Any]:
    """Calibrate (unless quiet), then measure; return (and write) ``tail-environment.json``."""
    # The job's processes carry the job's meter token (MeteredJob); a bare run gets its own.
    env = dict(os.environ)
    env.setdefault(TOKEN_VARIABLE, uuid.uuid4().hex)
    launches: list[Launch] = []
    target = plan.target

    def launch(name: str, options: list[str], echo: bool = False) -> TailLatencyResult:
        out = workdir / name
        done = run_once(plan.command, options, out, _block_complete,
                        grace_after(launches, plan.grace_s, plan.hang_note), env, echo,
                        plan.hang_note)
        launches.append(done)
        if done.returncode and not done.hung_after_results:
            raise ProbeOutputError(f"{name}: the probe exited with status {done.returncode}")
        return parse_tail_latency(out.read_text(errors="replace"))

    calibration: Calibration | None = None
    background: Background | None = None
    hint: int | None = None
    host_tail: float | None = None  # the quiet p99/p50 that put the target out of reach
    # ladder index -> the step's result and launch
    stepped: dict[int, tuple[TailLatencyResult, Launch]] = {}
    if target is not None:
        short = _with_counts(plan.options, plan.calibration_iterations, plan.calibration_blocks)

        def step(setting: Background) -> float:
            index = LADDER.index(setting)
            result = launch(f"tail_calibrate{index}.out", [*short, *setting.options()])
            stepped[index] = (result, launches[-1])
            calibration_steps.append((index, loaded_ratio(result)))
            if out_of_reach(result.quiet.p99_over_p50, target, plan.tolerance):
                raise OutOfReach(result.quiet.p99_over_p50)
            return calibration_steps[-1][1]
        hint = noted_step(plan.step_note)
        calibration_steps: list[tuple[int, float]] = []
        try:
            calibration = calibrate(step, target, LADDER, plan.tolerance, start=hint)
            note_step(plan.step_note, calibration)
        except OutOfReach as known:
            # The outcome is known after this step: no more steps, no measured run.
            host_tail = known.quiet_ratio
            calibration = Calibration(calibration_steps, calibration_steps[-1][0])
        background = LADDER[calibration.chosen]
    # The gentlest background already past the target: known too (a later job of the run
    # starts at the step noted, so for it after its first step).
    gentlest_exceeds = bool(target is not None and calibration and not host_tail
                            and beyond_gentlest(calibration, target, plan.tolerance))
    final = base = [*plan.options, *(background.options() if background else [])]
    planned, blocks = _count(plan.options, "-i", 1000), _count(plan.options, "-k", 5)
    results: list[TailLatencyResult] = []
    costs: list[float] = []
    warmup_costed = ""  # the run the probe costed by its own warm-up (-T), if one was
    # Quiet: the figures references judge, measured only as often as their verdict needs.
    quiet_measured = Measurements(dict.fromkeys(plan.judged, True))
    confirmed = plan.repeat_limits(quiet_fail_limits(plan))
    if (host_tail or gentlest_exceeds) and calibration:
        # The outcome is known: the step that showed it is the environment's one run (its
        # figures go to the perflog, marked inconclusive), no run measured after it.
        runs = [f"tail_calibrate{calibration.chosen}.out"]
        results.append(stepped[calibration.chosen][0])
        sys.stdout.write((workdir / runs[0]).read_text(errors="replace"))
    else:
        runs = [f"tail_run{i}.out" for i in range(1, plan.repeats + 1)]

        def cost_of(done: tuple[TailLatencyResult, Launch]) -> float:
            return seconds_per_iteration(done[0], done[1].results_s)
        # Each run is costed by the launch before it at the same setting: the chosen
        # calibration step, then the previous run. Quiet: no steps, so the first run is
        # costed by the run's earlier quiet job of the same collective (another algorithm),
        # if there was one, else by the probe's own warm-up; this job notes its own for the
        # next.
        costed_by = stepped.get(calibration.chosen) if calibration else None
        noted = noted_cost(plan.step_note) if target is None else None
        for name in runs:
            cost = cost_of(costed_by) if costed_by is not None else noted
            options = final
            if plan.run_s > 0 and cost is not None:
                costs.append(cost)
                fit = iterations_within(plan.run_s, costs[-1], planned, blocks)
                options = final = _with_counts(base, fit, blocks) if fit < planned else base
            elif plan.run_s > 0:
                # No launch before it to cost it by (the run's first quiet job of a
                # collective): the probe costs it by its own warm-up.
                options = final = [*base, "-T", f"{plan.run_s:g}", "-M",
                                   str(MIN_RUN_ITERATIONS)]
                warmup_costed = name
            results.append(launch(name, options, echo=name == runs[-1]))
            costed_by = (results[-1], launches[-1])
            if target is None:
                quiet_measured.record(quiet_figures(results[-1]))
                if not quiet_measured.unsettled(plan.warn_limits, plan.repeats, confirmed):
                    break
        if len(results) < len(runs):  # settled early: its last run was not echoed yet
            runs = runs[:len(results)]
            sys.stdout.write((workdir / runs[-1]).read_text(errors="replace"))
        if target is None and costed_by is not None:
            note_cost(plan.step_note, cost_of(costed_by))
    quiet = _confirm_quiet_figures(plan, workdir, quiet_measured, results, runs, launch,
                                   final, env)
    # A quiet figure that still fails is judged by the host control as the other checks'
    # values are (fabreg.run.host_control): measured now, and only then (nothing else of
    # this job needs it).
    failing = bool(quiet and quiet.failing(plan.fail_limits))
    control = host_control.after_plan(env[TOKEN_VARIABLE], plan, True) if failing else {}
    if quiet is not None:
        quiet.leave_note(control)
    counts = [r.iterations for r in results]  # every run's, confirmations included
    # what a planned run would have taken: the last cost given, else what the probe-costed
    # run turned out to cost
    per_iteration = costs[-1] if costs else seconds_per_iteration(
        results[0], launches[0].results_s) if warmup_costed else 0.0
    budget = None if not per_iteration else {
        "planned": planned, "iterations": min(counts), "per_run": counts, "run_s": plan.run_s,
        "seconds_per_iteration": [round(c, 6) for c in costs],
        "costed_by_its_warmup": warmup_costed or None,
        "planned_s": round(planned * per_iteration, 3)}
    stats = [(r.loaded if target is not None else r.quiet) for r in results]
    ratios = [s.p99_over_p50 for s in stats if s is not None]
    reached = statistics.median(ratios) if ratios else 0.0
    result = {
        "environment": plan.environment,
        "target": target,
        "tolerance": plan.tolerance,
        "reached": round(reached, 4),
        "within_target": target is None or within(reached, target, plan.tolerance),
        "background": asdict(background) if background else None,
        "calibration": [{"step": i, **asdict(LADDER[i]), "ratio": round(r, 4)}
                        for i, r in (calibration.steps if calibration else [])],
        "calibration_started_at": hint,
        # The quiet p99/p50 of the calibration step that showed the target out of this
        # host's reach (calibration then stopped there, and that step is the one run);
        # else None.
        "host_tail_out_of_reach": host_tail,
        # Whether the gentlest background already raised the tail past the target (the
        # calibration's last step, then, is the one run).
        "gentlest_exceeds": gentlest_exceeds,
        "strongest": target is not None and calibration is not None
        and calibration.chosen == len(LADDER) - 1,
        "gentlest": target is not None and calibration is not None and calibration.chosen == 0,
        "quiet_ratio": round(statistics.median(r.quiet.p99_over_p50 for r in results), 4),
        "runs": runs,
        "confirmation": quiet.first if quiet else {},
        "quiet_confirmations": quiet.quiet if quiet else {},
        "joined_lasting_failure": quiet.joined.__dict__ if quiet and quiet.joined else None,
        "confirmation_over_budget": bool(quiet and quiet.over_budget),
        "host_control": control,
        "run_budget": budget,
        **summary(launches),
    }
    (workdir / RESULT).write_text(json.dumps(result, indent=1) + "\n")
    return result


@dataclass(frozen=True)
class Judgement:
    """Whether a loaded environment can be judged: ``ok``, ``inconclusive`` (with why) or
    ``broken`` (the background does not reach the measured ranks: a sanity failure)."""

    verdict: str
    why: str = ""


def judge(result: dict[str, Any], runs: list[TailLatencyResult], contended: str = "") -> Judgement:
    """Judge a loaded environment from ``tail-environment.json`` and its measured runs.

    ``contended`` names the other work that took the host's CPUs while the job ran (empty:
    none). Only a background that demonstrably fails to raise the tail is ``broken``: its
    calibration could not reach the target, and the loaded tail is not above the quiet one
    in most runs. When the target *was* reached but the quiet blocks of the same runs are as
    high (the host's own tail is at the environment's level: quiet p99/p50 2.2-3.0 on a
    2-core VM against the 3x target), the background's share of the tail cannot be told from
    the host's own: ``inconclusive``, never a failure. A busy host raises the quiet tail too.
    """
    target, tolerance = float(result["target"]), float(result["tolerance"])
    reached, quiet = float(result["reached"]), float(result["quiet_ratio"])
    environment = result["environment"]
    higher = [r for r in runs if r.loaded and r.loaded.p99_over_p50 > r.quiet.p99_over_p50]
    pairs = ", ".join(f"{r.quiet.p99_over_p50:.2f} -> "
                      f"{r.loaded.p99_over_p50 if r.loaded else 0:.2f}" for r in runs)
    if contended and not result["within_target"]:
        return Judgement("inconclusive", f"p99/p50 {reached:.2f} against the target "
                                         f"{target:g}; {contended}")
    if host_tail := result.get("host_tail_out_of_reach"):
        return Judgement("inconclusive", f"{environment} environment out of reach: the host's "
                                         f"own tail (quiet p99/p50 {float(host_tail):.2f} in "
                                         f"calibration) is already above the target {target:g}"
                                         f" +/- {tolerance:.0%}; calibration stopped there")
    if 2 * len(higher) <= len(runs):
        problem = (f"p99/p50 not higher under background traffic in most runs (quiet -> "
                   f"loaded: {pairs})")
        if contended:
            return Judgement("inconclusive", f"{problem}; {contended}")
        if quiet > target * (1 + tolerance):
            # The host's own tail is already past the environment (4 ranks on 2 cores:
            # quiet p99/p50 2-6): a background cannot be seen against it.
            return Judgement("inconclusive", f"{problem}; the host's own tail (quiet p99/p50 "
                                             f"{quiet:.2f}) is already above the "
                                             f"{environment} target {target:g}")
        if result["within_target"]:
            return Judgement("inconclusive", f"{problem}; the {environment} target {target:g} "
                                             f"is reached (p99/p50 {reached:.2f}) but the "
                                             f"host's own tail (quiet p99/p50 {quiet:.2f}) is "
                                             "as high: the background's share cannot be told")
        own = max((r.quiet.p99_over_p50 for r in runs), default=0.0)
        if own >= target * (1 - tolerance):
            # The host's own tail reached the environment's level in a measured run (seen:
            # quiet p99/p50 1.77-3.71 against the 3x target on 2 busy-polling cores): runs
            # whose background did not show above it cannot tell a background that misses
            # the measured ranks from one the host's own tail hides.
            return Judgement("inconclusive", f"{problem}; the host's own tail reached the "
                                             f"{environment} target's level in a run (quiet "
                                             f"p99/p50 up to {own:.2f}, target {target:g})")
        raised = [c for c in result.get("calibration", [])
                  if float(c["ratio"]) > quiet * (1 + tolerance)]
        if raised:
            # The calibration saw the background raise the tail (seen: 3.5 at the gentlest
            # step, 5.6 at a stronger one, quiet 1.7), so it reaches the measured ranks; the
            # longer measured runs at the chosen step did not reproduce that tail.
            top = max(raised, key=lambda c: float(c["ratio"]))
            return Judgement("inconclusive", f"{problem}; the background does reach the "
                                             f"measured ranks (p99/p50 {float(top['ratio']):.2f}"
                                             f" at calibration step {top['step']}, quiet "
                                             f"{quiet:.2f}), but the measured runs at the chosen "
                                             "step did not reproduce that tail")
        return Judgement("broken", f"{problem}: the background does not reach the measured "
                                   "ranks")
    if not result["within_target"]:
        side = ("the gentlest background already exceeds it" if result["gentlest"] and
                reached > target else
                "the strongest background stays below it" if result["strongest"] else
                "no background step lands within the tolerance")
        return Judgement("inconclusive", f"{environment} environment not reached: p99/p50 "
                                         f"{reached:.2f} against the target {target:g} +/- "
                                         f"{tolerance:.0%} ({side}; quiet p99/p50 {quiet:.2f})")
    return Judgement("ok")


def main(argv: list[str] | None = None) -> int:
    return driver_main("fabreg.run.tail_environment", argv, Plan, run)


if __name__ == "__main__":
    sys.exit(main())

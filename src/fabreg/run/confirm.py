"""Confirmation: a value beyond its failure limit is measured again before it is reported.

Interference only ever lowers bandwidth and raises latency, so a value is judged by the best of
its measurements (:func:`best`), and one whose best still crosses its failure limit is measured
again by the job itself: up to ``confirm_runs`` (:data:`CONFIRM_RUNS`) more measurements spread
over ``confirm_span_s`` seconds (the first ``repeats - 1`` at once, the last at the end of the
span), stopping at the first one after which nothing fails any more. A virtual host has spells
in which everything runs slow with no process to blame (on a 2-core VM: every launch of a
healthy ``osu_bw`` 25-35 % slow for up to ~20 s, several times an hour); a spell ends within
the span, a fault does not. Each confirmation run first waits (up to ``quiet_wait_s`` over all
of them) for a second in which other work leaves the host alone, and is metered by itself: a
failure confirmed by a run on a quiet host is a failure even if other work took the CPUs during
the rest of the job.

Before any confirmation a driver measures each figure only as often as its verdict needs
(:func:`settled`): once when the first value is inside its warning band, ``repeats`` times
when it is within reach of its failure limit or has no reference; a value beyond its failure
limit goes straight to its confirmation, whose first runs are those repeats, back to back.

Every in-job driver keeps its figures in a :class:`Measurements` and confirms through it:
:mod:`fabreg.run.measure` (OSU, keyed by message size), :mod:`fabreg.run.tail_environment`
(the quiet tail figures), :mod:`fabreg.run.client_server` (perftest and ucx_perftest) and
:mod:`fabreg.run.repeat_probe` (the matrix multiply, the streams), keyed by perf variable.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from fabreg.run.interference import CONTENDED_SHARE, InterferenceMeter, JobMeter
from fabreg.schema import HOST_CONTROL_FIGURES, lower_is_better

Key = TypeVar("Key", bound=Hashable)

#: Confirmation runs of a failing value at most. A virtual host has modes as well as spells:
#: on the 2-core VM a healthy MPICH shared-memory allreduce of 1 MiB takes ~285 us in about
#: one launch in four and ~430 us in the others, with runs of the slow mode lasting a minute;
#: ten runs over the span find the fast mode when it is there (a fault has none).
CONFIRM_RUNS = 10
#: Seconds between the samples of the host control that will judge a job's failing values
#: (``fabreg.run.host_control.after_job``): far enough apart that one slow moment of the
#: host does not show in all of them.
CONTROL_GAP_S = 3.0


def best(values: list[float], lower_is_better: bool) -> float:
    """The value interference cannot fake: the lowest latency, the highest bandwidth."""
    return min(values) if lower_is_better else max(values)


def spread(values: list[float], lower_is_better: bool) -> float:
    """How far the worst value lies from the best, relative to the best."""
    top = best(values, lower_is_better)
    worst = max(values) if lower_is_better else min(values)
    return abs(worst - top) / top if top else 0.0


def crosses(value: float, limit: float, lower_is_better: bool) -> bool:
    return value > limit if lower_is_better else value < limit


def settled(values: list[float], lower_is_better: bool, warn_limit: float | None,
            repeats: int, fail_limit: float | None = None) -> bool:
    """Whether a figure needs no more plain measurements.

    Interference only makes a value worse, so more measurements can only make its best
    better: a best already inside its warning band is a pass with margin whatever they
    would say, and one measurement is enough. A value within reach of its limit is measured
    ``repeats`` times. One beyond its failure limit (``fail_limit``, given where a
    confirmation follows) is left to the confirmation (:class:`Confirmation`): its runs
    are repeats too, on a quiet host and spread in time, and they stop at the first after
    which it passes, so plain repeats before them only cost a lasting fault
    ``repeats - 1`` launches more (tried: 8 measurements instead of 4 for a half-speed link
    on the emulated cluster, 15 instead of 11 in the verdict benchmark's sessions). So is a
    value without a reference (``warn_limit`` None) measured ``repeats`` times: it is what a
    baseline is calibrated from, and a baseline from fewer measurements is a wider band
    (tried: settled by two measurements within 5 % of each other, the half-speed link was
    still caught but the mildest cap caught went from 0.8 to 0.7 of the calibrated bandwidth).
    """
    if len(values) >= repeats:
        return True
    if not values or warn_limit is None:
        return False
    top = best(values, lower_is_better)
    return not crosses(top, warn_limit, lower_is_better) or (
        fail_limit is not None and crosses(top, fail_limit, lower_is_better))


@dataclass(frozen=True)
class Limit:
    """A value's failure limit and which way the value is better."""

    value: float
    lower_is_better: bool


def beyond_limit(values: dict[Key, list[float]], limits: dict[Key, Limit],
                 keys: Iterable[Key]) -> list[Key]:
    """The ``keys`` whose best value so far crosses their failure limit."""
    return [k for k in keys if k in limits and values.get(k) and crosses(
        best(values[k], limits[k].lower_is_better), limits[k].value, limits[k].lower_is_better)]


#: Runs of a short confirmation (a failure that joins a lasting one, or one confirmed once
#: the run's budget is spent) at most: it stops at the first that still fails on a quiet host.
SHORT_CONFIRM_RUNS = 3
#: A lasting failure an earlier job of the run confirmed on the same path joins a new one's
#: confirmation for this long after that job ended; later, the path is confirmed afresh.
LASTING_FAILURE_FRESH_S = 600.0


@dataclass(frozen=True)
class LastingFailure:
    """A failure that jobs of this run confirmed on one path (a partition's nodes): it
    reproduced in every confirmation run from ``first`` to ``last`` (wall-clock seconds)."""

    first: float
    last: float
    #: The job that first confirmed it (Slurm's job id, or the driver's process id).
    job: str


def path_note(notes: str) -> Path | None:
    """The note of this job's path in the run's ``notes`` directory: one file per node list
    (``SLURM_JOB_NODELIST``; ``local`` without Slurm); None when no directory is named."""
    if not notes:
        return None
    return Path(notes) / os.environ.get("SLURM_JOB_NODELIST", "local").replace("/", "_")


def lasting_failure(note: Path | None) -> LastingFailure | None:
    """The lasting failure noted for this job's path, or None."""
    try:
        return LastingFailure(**json.loads(note.read_text())) if note else None
    except (OSError, ValueError, TypeError):
        return None


def note_lasting_failure(note: Path | None, failure: LastingFailure) -> None:
    """Leave ``failure`` where the run's later jobs on the same path look (atomically)."""
    if note is None:
        return
    try:
        note.parent.mkdir(parents=True, exist_ok=True)
        tmp = note.with_name(f".{note.name}.{os.getpid()}")
        tmp.write_text(json.dumps(failure.__dict__) + "\n")
        os.replace(tmp, note)
    except OSError as err:  # a note is an economy: the job's own verdicts do not depend on it
        print(f"fabreg: could not leave the lasting-failure note {note}: {err}",
              file=sys.stderr)


#: The file, among a run's lasting-failure notes, where its jobs add up the seconds their
#: confirmations took (one line per job, appended).
SPENT = "confirmation-seconds"


def spent_seconds(notes: str) -> float:
    """The seconds the run's confirmations took so far (0 without a notes directory)."""
    try:
        lines = (Path(notes) / SPENT).read_text().split() if notes else []
    except OSError:
        return 0.0
    return sum(float(x) for x in lines if x.replace(".", "", 1).isdigit())


def add_spent(notes: str, seconds: float) -> None:
    """Add one confirmation's ``seconds`` to the run's total (an append: jobs may end
    together)."""
    if not notes:
        return
    try:
        Path(notes).mkdir(parents=True, exist_ok=True)
        fd = os.open(Path(notes) / SPENT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{seconds:.3f}\n".encode())
        finally:
            os.close(fd)
    except OSError as err:
        print(f"fabreg: could not add to the confirmation time in {notes}: {err}",
              file=sys.stderr)


def wait_for_quiet(token: str, threshold: float, deadline: float) -> float:
    """Wait, one-second windows at a time, until other work takes at most ``threshold`` of
    this host's CPU or ``deadline`` (monotonic) passes; return the last window's share."""
    while True:
        meter = InterferenceMeter(token, interval=0.2).start()
        time.sleep(1.0)
        share = meter.stop().share
        if share <= threshold or time.monotonic() >= deadline:
            return share


@dataclass(kw_only=True)
class ConfirmationPlan:
    """The fields of an in-job driver's plan that say how it confirms failing values (every
    driver's ``Plan`` has them; :meth:`Confirmation.of` reads them)."""

    #: Measurements of a value at most before its confirmation (fewer where the first settle
    #: it, :func:`settled`); a confirmation's first ``repeats - 1`` runs follow at once.
    repeats: int = 3
    #: Other work's share of the host's CPU beyond which a measurement is contended.
    contended_share: float = CONTENDED_SHARE
    #: Seconds the confirmation runs may wait, in all, for the host to be quiet.
    quiet_wait_s: float = 30.0
    #: Seconds over which the confirmation runs are spread (the first ``repeats - 1`` at
    #: once, the last at the end).
    confirm_span_s: float = 60.0
    #: Confirmation runs of a failing value at most.
    confirm_runs: int = CONFIRM_RUNS
    #: The run's directory of lasting failures per path (:func:`path_note`): a failure an
    #: earlier job confirmed on the same nodes joins this job's; empty: none.
    lasting_failures: str = ""
    #: Seconds the run's confirmations may take in all (0: no bound).
    confirm_budget_s: float = 0.0
    #: Seconds between the samples of the host control that judges failing values.
    control_gap_s: float = CONTROL_GAP_S
    #: The host control figures on the job's path (``fabreg.schema.FIGURES_ON_PATH``): the
    #: ones its control measures (``fabreg.run.host_control.after_job``).
    control_figures: list[str] = field(default_factory=lambda: list(HOST_CONTROL_FIGURES))
    #: Figures whose failure is not the path's (a matrix multiply's arithmetic): they
    #: neither join an earlier job's lasting failure nor note one for later jobs.
    off_path: list[str] = field(default_factory=list)
    #: Host control figure -> its failure limit in the host's baseline, for the figures on
    #: the job's path that have a row: a job whose control read one of them beyond it notes
    #: no lasting failure (:meth:`Confirmation.leave_note`).
    control_limits: dict[str, float] = field(default_factory=dict)

    def repeat_limits(self, fail_limits: Mapping[str, float]) -> Mapping[str, float] | None:
        """The failure limits beyond which a figure gets no plain repeat (``fail_limits`` of
        :meth:`Measurements.unsettled`): all of them where a confirmation follows, else none."""
        return fail_limits if self.confirm_runs else None


@dataclass
class Confirmation(ConfirmationPlan):
    """How a job confirms its failing values (see the module's docstring): its plan's
    fields, and what the confirmation found."""

    #: The job's own processes carry this token (``fabreg.run.interference``).
    token: str
    #: Where each confirmation run's own meter writes (``meter-confirmN/``).
    workdir: Path
    #: The earlier job's lasting failure this confirmation joined, if it did.
    joined: LastingFailure | None = None
    #: Whether the run's confirmation budget was spent when this confirmation began.
    over_budget: bool = False
    #: Other work's share of the host's CPU that each confirmation run's own meter read
    #: (the hypervisor's steal included); beyond ``contended_share`` the run was not quiet.
    other_shares: list[float] = field(default_factory=list)
    #: The lasting failure this confirmation found, and its note, until the job's host
    #: control says whether it is the path's (:meth:`leave_note`).
    pending: tuple[Path | None, LastingFailure] | None = None
    #: Why a lasting failure the confirmation found was not noted: what of the host control
    #: read beyond its limit.
    withheld: str = ""

    @classmethod
    def of(cls, plan: ConfirmationPlan, token: str, workdir: Path) -> Confirmation:
        """The confirmation a driver's plan asks for (its ``confirm_runs``, ``confirm_span_s``,
        ``quiet_wait_s``, ``contended_share``, ``lasting_failures`` and ``confirm_budget_s``)."""
        return cls(token, workdir, **{f.name: getattr(plan, f.name)
                                      for f in fields(ConfirmationPlan)})

    def runs_at_once(self, runs: int) -> int:
        """How many of ``runs`` confirmation runs follow the first value back to back: with it
        they make the ``repeats`` measurements a baseline's value is the best of, so a first
        value that one launch's scatter put beyond its limit is judged on the footing of its
        band before the confirmation waits for the span (two healthy 512 multiplies once
        waited 9 and 16 s for their spread runs). The rest keep the span, the last at its
        end: a spell ends within it, a fault does not."""
        return max(1, min(self.repeats - 1, runs - 1))

    def confirm(self, failing: list[Key], measure_again: Callable[[list[Key]], Collection[Key]],
                still_failing: Callable[[list[Key]], list[Key]]) -> dict[Key, int]:
        """Measure ``failing`` again until none of them fails or the runs are spent.

        ``measure_again(keys)`` runs the benchmark once more for ``keys`` and returns the
        keys it measured (their values recorded where ``still_failing`` reads them);
        ``still_failing(keys)`` says which of them still fail. Returns, per key, how many
        confirmation runs measured it on a quiet host.

        Failures of one cause are confirmed together: where an earlier job of the run
        confirmed a lasting failure on this job's path (the same nodes) at least
        ``confirm_span_s`` ago and ended less than :data:`LASTING_FAILURE_FRESH_S` ago, the path has
        already been slow for longer than a spell lasts, and one quiet run that still fails
        confirms this job's failure (``joined``). A failure that every run confirms, on a
        quiet host at least once, is the path's lasting failure, which :meth:`leave_note`
        notes for the run's later jobs once the job's host control cleared the host. A
        figure ``off_path`` does neither: its failure is not the path's (a matrix
        multiply's arithmetic, which once confirmed 1.66x slow on a healthy path and 9 later
        jobs joined it). Once the run's
        confirmations took ``confirm_budget_s`` in all, a failure is confirmed by one quiet run too
        (``over_budget``): many failures at once are a broken fabric, and the run must end
        in time to act on it. Such a short confirmation makes up to
        :data:`SHORT_CONFIRM_RUNS` runs, one after the other, and stops at the first that
        still fails on a quiet host: a run that other work slowed is no evidence of the
        path (a joined job's one run, at 12 % other work, once failed a healthy matrix
        multiply).
        """
        quiet: dict[Key, int] = {}
        confirming = list(failing)
        on_path = {key for key in failing if str(key) not in self.off_path}
        note = path_note(self.lasting_failures) if on_path else None
        earlier, now = lasting_failure(note), time.time()
        self.joined = earlier if earlier and len(on_path) == len(failing) and \
            now - earlier.first >= self.confirm_span_s and \
            now - earlier.last <= LASTING_FAILURE_FRESH_S else None
        self.over_budget = bool(confirming and not self.joined and self.confirm_budget_s > 0 and
                                spent_seconds(self.lasting_failures) >= self.confirm_budget_s)
        short = bool(self.joined or self.over_budget)
        runs = min(SHORT_CONFIRM_RUNS, self.confirm_runs) if short else self.confirm_runs
        quiet_left = self.quiet_wait_s
        started, begun = now, time.monotonic()
        # The span is counted from the first run's start, after its wait for a quiet host:
        # counted from before it, a long wait ate the span and the runs followed each other
        # 1.4 s apart instead of 2 s (CI, session 12). The start is the measurement's, its
        # meter already running: counted from before the meter started, a first meter slow to
        # start on a loaded host brought the second run 17 ms too close (CI, session 55).
        first: float | None = None
        at_once = self.runs_at_once(runs)
        for run in range(runs if confirming else 0):
            if first is not None and not short and run >= at_once:
                slot = first + self.confirm_span_s * (run - at_once + 1) / (runs - at_once)
                time.sleep(max(0.0, slot - time.monotonic()))
            waited_from = time.monotonic()
            wait_for_quiet(self.token, self.contended_share, waited_from + quiet_left)
            quiet_left = max(0.0, quiet_left - (time.monotonic() - waited_from))
            own = self.workdir / f"meter-confirm{run + 1}"
            own.mkdir(exist_ok=True)
            meter = JobMeter(self.token, own).start()
            if first is None:
                first, started = time.monotonic(), time.time()
            measured = measure_again(confirming)
            metered = meter.stop()
            self.other_shares.append(round(metered.share, 4))
            if not metered.contended(self.contended_share):
                for key in measured:
                    quiet[key] = quiet.get(key, 0) + 1
            confirming = still_failing(confirming)
            if not confirming:
                break  # a run that no longer fails: the failure did not reproduce
            if short and all(quiet.get(key) for key in confirming):
                break  # a quiet run that still fails: the short confirmation's evidence
        if failing:
            add_spent(self.lasting_failures, time.monotonic() - begun)
        if any(quiet.get(key) for key in confirming if key in on_path):
            job = os.environ.get("SLURM_JOB_ID", str(os.getpid()))
            self.pending = note, LastingFailure(
                self.joined.first if self.joined else started, time.time(),
                self.joined.job if self.joined else job)
        return quiet

    def leave_note(self, control: Mapping[str, Any]) -> None:
        """Note the lasting failure the confirmation found (if it found one) for the run's
        later jobs on the same path, unless the job's host ``control`` read a figure of
        ``control_limits`` beyond its limit.

        A host that itself ran slow may have failed the values, and a note would make every
        failure on the path in the next minutes confirmed by one run: on the 2-vCPU VM a
        multiply whose failure the control explained (``inconclusive``) noted one, and seven
        cases of four checks that joined it failed a healthy session while their own
        controls read normal. Without the note each is confirmed in full.
        """
        if self.pending is None:
            return
        note, failure = self.pending
        self.pending = None
        self.withheld = ", ".join(control_beyond_limits(control, self.control_limits))
        if not self.withheld:
            note_lasting_failure(note, failure)


def control_beyond_limits(control: Mapping[str, Any], limits: Mapping[str, float]) -> list[str]:
    """The figures of a host ``control`` that read beyond their failure ``limits``, each
    with its value and limit (``copy_bandwidth 16.1 beyond 23.7``)."""
    out = []
    for name, limit in limits.items():
        value = control.get(name)
        if isinstance(value, (int, float)) and value > 0 and name in HOST_CONTROL_FIGURES and \
                crosses(float(value), limit, lower_is_better(name)):
            out.append(f"{name} {value:g} beyond {limit:.3g}")
    return out


@dataclass
class Measurements:
    """Every measurement of each figure of a job (perf variable -> values), and what the
    confirmation of the failing ones found: the drivers' common bookkeeping."""

    #: Perf variable -> whether lower is better.
    lower_is_better: dict[str, bool]
    values: dict[str, list[float]] = field(default_factory=dict)
    #: Perf variable -> its best value before confirmation, for the figures confirmed.
    first: dict[str, float] = field(default_factory=dict)
    #: Perf variable -> confirmation runs that measured it on a quiet host.
    quiet: dict[str, int] = field(default_factory=dict)
    #: The lasting failure of an earlier job on the same path that the confirmation joined.
    joined: LastingFailure | None = None
    #: Other work's share of the host's CPU in each confirmation run.
    confirmation_other_shares: list[float] = field(default_factory=list)
    #: Whether the run's confirmation budget was spent before this job confirmed.
    over_budget: bool = False
    _confirmation: Confirmation | None = field(default=None, repr=False)

    def record(self, figures: Mapping[str, float], names: Collection[str] = ()) -> list[str]:
        """Keep one run's ``figures`` (only ``names``, when given); return the names kept."""
        kept = [n for n in figures if n in self.lower_is_better and (not names or n in names)]
        for name in kept:
            self.values.setdefault(name, []).append(figures[name])
        return kept

    def best(self) -> dict[str, float]:
        return {n: best(v, self.lower_is_better[n]) for n, v in self.values.items() if v}

    def unsettled(self, warn_limits: Mapping[str, float], repeats: int,
                  fail_limits: Mapping[str, float] | None = None) -> list[str]:
        """The figures that need another plain measurement (:func:`settled`); pass the
        failure limits where a confirmation follows (``confirm_runs`` > 0)."""
        fail = fail_limits or {}
        return [n for n, lower in self.lower_is_better.items()
                if not settled(self.values.get(n, []), lower, warn_limits.get(n), repeats,
                               fail.get(n))]

    def failing(self, limits: Mapping[str, float], names: Iterable[str] | None = None) -> list[str]:
        """The figures (of ``names``, default all) whose best value crosses its limit."""
        bounds = {n: Limit(v, self.lower_is_better[n]) for n, v in limits.items()
                  if n in self.lower_is_better}
        return beyond_limit(self.values, bounds, self.lower_is_better if names is None else names)

    def confirm(self, limits: Mapping[str, float], confirmation: Confirmation,
                measure_once: Callable[[list[str]], Mapping[str, float]]) -> None:
        """Measure the failing figures again (``measure_once(names)`` runs the benchmark once
        more, for ``names`` where it can measure only some, and returns its figures) until none
        fails or ``confirmation``'s runs are spent; only the failing figures are recorded."""
        failing = self.failing(limits)
        self.first = {n: best(self.values[n], self.lower_is_better[n]) for n in failing}
        self.quiet = confirmation.confirm(
            failing, lambda names: self.record(measure_once(names), names),
            lambda names: self.failing(limits, names))
        self.joined, self.over_budget = confirmation.joined, confirmation.over_budget
        self.confirmation_other_shares = list(confirmation.other_shares)
        self._confirmation = confirmation

    def leave_note(self, control: Mapping[str, Any]) -> None:
        """Note the lasting failure the confirmation found, unless the job's host
        ``control`` read slow (:meth:`Confirmation.leave_note`); call it once the control is
        measured."""
        if self._confirmation is not None:
            self._confirmation.leave_note(control)

    @property
    def lasting_failure_withheld(self) -> str:
        """What of the host control read slow, where that kept the lasting failure the
        confirmation found from being noted (:meth:`leave_note`); empty otherwise."""
        return self._confirmation.withheld if self._confirmation is not None else ""

    def as_dict(self) -> dict[str, Any]:
        """What a driver's result file says of its figures (read by ``ConfirmedValues``)."""
        return {
            "values": self.values,
            "best": self.best(),
            "spread": {n: round(spread(v, self.lower_is_better[n]), 4)
                       for n, v in self.values.items() if v},
            # How many measurements each figure rests on, confirmation runs included.
            "measurements": {n: len(v) for n, v in self.values.items() if v},
            "confirmation": self.first,
            "quiet_confirmations": self.quiet,
            "confirmation_other_shares": self.confirmation_other_shares,
            "joined_lasting_failure": self.joined.__dict__ if self.joined else None,
            "confirmation_over_budget": self.over_budget,
            "lasting_failure_withheld": self.lasting_failure_withheld or None,
        }

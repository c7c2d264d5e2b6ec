"""The confirmation loop (fabreg.run.confirm): how many runs, when, and when it stops.

The runs themselves are real benchmarks in test_measure.py, test_client_server.py and
test_verdicts_reframe.py; here the loop's schedule is checked with a measurement that
returns a scripted series of values, and the quiet-host wait is left out."""

from __future__ import annotations

import time

import pytest

from fabreg.run import confirm
from fabreg.run.confirm import CONFIRM_RUNS, Confirmation, Limit, beyond_limit


@pytest.fixture(autouse=True)
def no_quiet_wait(monkeypatch):
    monkeypatch.setattr(confirm, "wait_for_quiet", lambda *args: 0.0)


def scripted(series: list[float], key: str = "lat"):
    """A latency measured again: the next value of ``series`` each run, with its time."""
    values = {key: [50.0, 51.0, 52.0]}  # the first batch: all beyond the limit of 40
    times: list[float] = []

    def again(keys: list[str]) -> list[str]:
        times.append(time.monotonic())
        values[key].append(series[len(times) - 1])
        return keys
    return values, times, again


# values of the confirmation runs -> runs made
SCHEDULES = [
    ([45.0] * CONFIRM_RUNS, CONFIRM_RUNS),  # a fault: every run fails, all runs are made
    ([45.0] * 6 + [30.0] + [45.0] * 3, 7),  # the fast mode in the 7th run: stop there
    ([30.0] + [45.0] * 9, 1),                # a spell over at once
]


@pytest.mark.parametrize("series,runs", SCHEDULES)
def test_confirmation_stops_at_the_first_passing_run_and_spreads_the_rest(series, runs,
                                                                          tmp_path):
    values, times, again = scripted(series)
    limits = {"lat": Limit(40.0, lower_is_better=True)}

    def still_failing(keys: list[str]) -> list[str]:
        return beyond_limit(values, limits, keys)

    start = time.monotonic()
    quiet = Confirmation("token", tmp_path, confirm_span_s=0.9).confirm(["lat"], again,
                                                                       still_failing)
    assert len(times) == runs
    # (each run's own meter sees this test's process as other work: its count is not tested
    # here, but in test_verdicts_reframe.py with real runs)
    assert set(quiet) <= {"lat"} and quiet.get("lat", 0) <= runs
    # The first repeats - 1 = 2 runs follow at once (with the first value, the 3
    # measurements a baseline's value is the best of); run i >= 2 starts no earlier than
    # its slot, (i - 1) x span / (runs - 2) after the start (a busy host only delays a run;
    # two runs' gap may be shorter when the first started late), the last at the span's end.
    early = [(i, t - start) for i, t in enumerate(times) if i >= 2
             and t - start < (i - 1) * 0.9 / (CONFIRM_RUNS - 2)]
    assert not early, early
    if runs > 1:
        assert times[1] - times[0] < 0.9 / (CONFIRM_RUNS - 2), times
    if runs == CONFIRM_RUNS:
        assert times[-1] - times[0] >= 0.9 - 0.01, times


def test_nothing_failing_is_not_measured_again(tmp_path):
    values, times, again = scripted([])
    assert Confirmation("token", tmp_path).confirm([], again, lambda keys: keys) == {}
    assert times == []


def test_a_long_wait_for_a_quiet_host_does_not_eat_the_span(tmp_path, monkeypatch):
    """The first run waits (here 2 s of 'other work' a scripted quiet wait reports); the span
    is counted from that run's start, so the runs are still spread over it. Its start is its
    measurement's: a first meter slow to start (here 50 ms, as on a loaded host) does not
    bring the next run closer."""
    waits = iter([2.0])
    meter_starts = iter([0.05])
    start_meter = confirm.JobMeter.start

    def quiet_after_a_while(token, threshold, deadline):
        time.sleep(next(waits, 0.0))
        return 0.0

    def slow_first_start(meter):
        time.sleep(next(meter_starts, 0.0))
        return start_meter(meter)

    monkeypatch.setattr(confirm, "wait_for_quiet", quiet_after_a_while)
    monkeypatch.setattr(confirm.JobMeter, "start", slow_first_start)
    values, times, again = scripted([45.0] * 3)
    limits = {"lat": Limit(40.0, lower_is_better=True)}
    start = time.monotonic()
    Confirmation("token", tmp_path, confirm_runs=3, confirm_span_s=2.0).confirm(
        ["lat"], again, lambda keys: beyond_limit(values, limits, keys))
    assert times[0] - start >= 2.0
    assert times[1] - times[0] < 0.5 and times[2] - times[0] >= 1.99, times


@pytest.mark.parametrize("repeats,runs,at_once", [
    (3, 10, 2), (3, 3, 2), (3, 2, 1), (3, 1, 1), (5, 3, 2), (1, 10, 1), (2, 10, 1)])
def test_a_confirmation_makes_the_repeats_at_once_and_keeps_its_span(repeats, runs, at_once,
                                                                     tmp_path):
    """With the first value, the runs at once make ``repeats`` measurements, never all of a
    confirmation's runs: its last stays at the end of the span, where a spell is over."""
    assert Confirmation("token", tmp_path, repeats=repeats).runs_at_once(runs) == at_once


def test_a_healthy_value_beyond_its_limit_once_is_passed_by_a_run_at_once(tmp_path):
    """One launch's scatter (the first value 45 against a limit of 40) is passed by the next
    run, made at once, without waiting for the span's next slot."""
    values, times, again = scripted([45.0, 30.0] + [45.0] * 8)
    limits = {"lat": Limit(40.0, lower_is_better=True)}
    start = time.monotonic()
    Confirmation("token", tmp_path, confirm_span_s=30.0).confirm(
        ["lat"], again, lambda keys: beyond_limit(values, limits, keys))
    assert len(times) == 2 and time.monotonic() - start < 5.0, times


# values measured so far, lower is better?, warning limit, failure limit (a confirmation
# follows), repeats -> settled?
SETTLING = [
    ([50.0], True, 60.0, None, 3, True),      # inside its warning band: once is enough
    ([70.0], True, 60.0, None, 3, False),     # within reach of its limit: repeat
    ([70.0, 65.0, 61.0], True, 60.0, None, 3, True),  # the repeats are spent (then: confirmation)
    ([70.0, 55.0], True, 60.0, None, 3, True),  # a repeat brought it inside
    ([900.0], False, 1000.0, None, 3, False),  # a bandwidth below its warning limit
    ([1100.0], False, 1000.0, None, 3, True),
    ([70.0], True, 60.0, 80.0, 3, False),     # between its warning and failure limits: repeat
    ([90.0], True, 60.0, 80.0, 3, True),      # beyond its failure limit: its confirmation's
    ([400.0], False, 1000.0, 500.0, 3, True),  # runs are its repeats
    ([600.0], False, 1000.0, 500.0, 3, False),
    ([90.0], True, 60.0, None, 3, False),     # no confirmation follows: repeated
    ([100.0], True, None, None, 3, False),    # no reference: what a baseline is made of,
    ([100.0, 100.0], True, None, None, 3, False),  # measured repeats times, however close
    ([100.0, 100.0, 120.0], True, None, None, 3, True),
    ([], True, None, None, 3, False),
    ([], True, 60.0, 80.0, 3, False),
]


@pytest.mark.parametrize("values,lower,warn,fail,repeats,expected", SETTLING)
def test_a_value_is_measured_as_often_as_its_verdict_needs(values, lower, warn, fail, repeats,
                                                           expected):
    assert confirm.settled(values, lower, warn, repeats, fail) is expected


def test_unsettled_names_the_figures_that_need_another_measurement():
    kept = confirm.Measurements({"lat": True, "bw": False, "rate": False})
    kept.record({"lat": 5.0, "bw": 800.0, "rate": 10.0})
    assert kept.unsettled({"lat": 6.0, "bw": 1000.0}, repeats=3) == ["bw", "rate"]
    kept.record({"bw": 1200.0, "rate": 10.2})
    assert kept.unsettled({"lat": 6.0, "bw": 1000.0}, repeats=3) == ["rate"]
    kept.record({"rate": 10.1})
    assert kept.unsettled({"lat": 6.0, "bw": 1000.0}, repeats=3) == []
    assert kept.as_dict()["measurements"] == {"lat": 1, "bw": 2, "rate": 3}


def test_a_failing_figure_is_left_to_its_confirmation_and_the_others_repeated():
    kept = confirm.Measurements({"lat": True, "bw": False})
    kept.record({"lat": 9.0, "bw": 900.0})  # lat beyond its failure limit, bw within reach
    warn, fail = {"lat": 6.0, "bw": 1000.0}, {"lat": 8.0, "bw": 500.0}
    assert kept.unsettled(warn, 3, fail) == ["bw"]
    assert kept.unsettled(warn, 3) == ["lat", "bw"]  # no confirmation: both repeated


class QuietMeter:
    """The confirmation runs' own meter on a quiet host (the real one is tested with real
    runs in test_verdicts_reframe.py; here this test's own process would count as other work)."""

    def __init__(self, *args) -> None:
        pass

    share = 0.0  # other work's share of the host's CPU while it metered

    def start(self) -> QuietMeter:
        return self

    def stop(self) -> QuietMeter:
        return self

    def contended(self, share: float) -> bool:
        return False


def confirm_failing(tmp_path, series: list[float], notes, runs: int = 4, span: float = 0.3,
                    control: dict | None = None):
    """A job's confirmation of a failing latency, then its note left by what its host
    ``control`` read (none: no control, nothing read slow)."""
    values, times, again = scripted(series)
    limits = {"lat": Limit(40.0, lower_is_better=True)}
    confirmation = Confirmation("token", tmp_path, confirm_runs=runs, confirm_span_s=span,
                                lasting_failures=str(notes), control_limits=CONTROL_LIMITS)
    quiet = confirmation.confirm(["lat"], again, lambda keys: beyond_limit(values, limits, keys))
    confirmation.leave_note(control or {})
    return confirmation, quiet, times


#: A host's baseline failure limits of two control figures (a bandwidth in GB/s, a time in ms).
CONTROL_LIMITS = {"copy_bandwidth": 40.0, "shared_compute": 3.6}


def test_failures_of_one_cause_in_a_run_are_confirmed_together(tmp_path, monkeypatch):
    monkeypatch.setattr(confirm, "JobMeter", QuietMeter)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    notes = tmp_path / "notes"
    first, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes)
    assert len(times) == 4 and quiet == {"lat": 4} and first.joined is None
    noted = confirm.lasting_failure(notes / "node[1-2]")
    assert noted.job == "41" and noted.last - noted.first >= 0.3
    # The next job on the same nodes: the path has failed for longer than the span already,
    # one quiet run that still fails confirms it, and the note keeps the first job's start.
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    second, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes)
    assert len(times) == 1 and quiet == {"lat": 1} and second.joined == noted
    again = confirm.lasting_failure(notes / "node[1-2]")
    assert again.first == noted.first and again.job == "41" and again.last > noted.last
    # A run that passes is no lasting failure: a job on the same path that recovers says so
    third, quiet, times = confirm_failing(tmp_path, [30.0], notes)
    assert len(times) == 1 and third.joined == again
    # Other nodes are another path: their failure is confirmed in full.
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[3-4]")
    other, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes)
    assert len(times) == 4 and other.joined is None


def test_a_joining_failure_needs_a_quiet_run_of_its_own(tmp_path, monkeypatch):
    """A joined job's run that other work slowed is no evidence of the path: the short
    confirmation goes on to its next run, and stops at the first quiet one that fails."""
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    notes = tmp_path / "notes"
    now = time.time()
    confirm.note_lasting_failure(notes / "node[1-2]",
                                 confirm.LastingFailure(now - 120, now - 5, "41"))
    busy = iter([True, False, True])

    class FirstBusyMeter(QuietMeter):
        def __init__(self, *args) -> None:
            self.busy = next(busy)
            self.share = 0.12 if self.busy else 0.0

        def contended(self, share: float) -> bool:
            return self.busy

    monkeypatch.setattr(confirm, "JobMeter", FirstBusyMeter)
    joined, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes, runs=10)
    assert joined.joined is not None and len(times) == 2 and quiet == {"lat": 1}
    assert joined.other_shares == [0.12, 0.0]
    # On a host that never quietens the short confirmation ends after SHORT_CONFIRM_RUNS,
    # with no quiet run: the failure is not noted again as lasting.
    busy = iter([True] * 10)
    before = confirm.lasting_failure(notes / "node[1-2]")
    _, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes, runs=10)
    assert len(times) == confirm.SHORT_CONFIRM_RUNS and quiet == {}
    assert confirm.lasting_failure(notes / "node[1-2]") == before


def test_a_figure_off_the_path_neither_joins_nor_notes_a_lasting_failure(tmp_path,
                                                                           monkeypatch):
    """A matrix multiply's arithmetic that fails says nothing of the path: it is confirmed
    in full though the path has a lasting failure, and its own confirmed failure leaves no
    note that later jobs on the same nodes would join."""
    monkeypatch.setattr(confirm, "JobMeter", QuietMeter)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    notes = tmp_path / "notes"
    limits = {"compute": Limit(40.0, lower_is_better=True)}

    def confirm_compute() -> tuple[Confirmation, list[float]]:
        values, times, again = scripted([45.0] * 4, key="compute")
        confirmation = Confirmation("token", tmp_path, confirm_runs=4, confirm_span_s=0.3,
                                    lasting_failures=str(notes), off_path=["compute"])
        confirmation.confirm(["compute"], again, lambda keys: beyond_limit(values, limits, keys))
        confirmation.leave_note({})
        return confirmation, times

    alone, times = confirm_compute()
    assert len(times) == 4 and alone.joined is None and not (notes / "node[1-2]").exists()
    now = time.time()
    confirm.note_lasting_failure(notes / "node[1-2]",
                                 confirm.LastingFailure(now - 120, now - 5, "41"))
    beside, times = confirm_compute()
    assert len(times) == 4 and beside.joined is None
    # the same failure of a figure on the path joins the path's lasting failure
    on_path, _, times = confirm_failing(tmp_path, [45.0] * 4, notes)
    assert len(times) == 1 and on_path.joined is not None


@pytest.mark.parametrize("control", [{"copy_bandwidth": 30.0, "shared_compute": 2.7},
                                     {"copy_bandwidth": 50.0, "shared_compute": 4.7}])
def test_a_failure_on_a_host_its_control_read_slow_is_not_noted(tmp_path, monkeypatch,
                                                                  control):
    """The host itself ran slow (a control figure beyond its limit, either way): the failure
    may be the host's, so the next job's failure on the same path is confirmed in full, not
    by one run. A control inside its limits notes it as before."""
    monkeypatch.setattr(confirm, "JobMeter", QuietMeter)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    notes = tmp_path / "notes"
    slow, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes, control=control)
    assert len(times) == 4 and quiet == {"lat": 4}
    assert not (notes / "node[1-2]").exists()
    figure = next(name for name in control if name in slow.withheld)
    assert slow.withheld == f"{figure} {control[figure]:g} beyond {CONTROL_LIMITS[figure]:g}"
    later, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes)
    assert len(times) == 4 and later.joined is None and later.withheld == ""
    assert confirm.lasting_failure(notes / "node[1-2]") is not None


def test_measurements_say_why_a_lasting_failure_was_not_noted(tmp_path, monkeypatch):
    monkeypatch.setattr(confirm, "JobMeter", QuietMeter)
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    kept = confirm.Measurements({"lat": True})
    kept.record({"lat": 50.0})
    values = iter([45.0] * 4)
    confirmation = Confirmation("token", tmp_path, confirm_runs=4, confirm_span_s=0.3,
                                lasting_failures=str(tmp_path / "notes"),
                                control_limits=CONTROL_LIMITS)
    kept.confirm({"lat": 40.0}, confirmation, lambda names: {"lat": next(values)})
    kept.leave_note({"copy_bandwidth": 12.5, "shared_compute": 2.0})
    assert kept.as_dict()["lasting_failure_withheld"] == "copy_bandwidth 12.5 beyond 40"
    assert not (tmp_path / "notes" / "local").exists()


def test_a_lasting_failure_too_young_or_too_old_is_confirmed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(confirm, "JobMeter", QuietMeter)
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    notes = tmp_path / "notes"
    now = time.time()
    for first, last in ((now - 0.1, now),  # noted less than a span ago: could be a spell
                        (now - 4000, now - confirm.LASTING_FAILURE_FRESH_S - 60)):  # stale
        confirm.note_lasting_failure(notes / "local", confirm.LastingFailure(first, last, "7"))
        confirmation, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes, span=1.0)
        assert len(times) == 4 and confirmation.joined is None


def test_a_failure_measured_only_on_a_busy_host_is_not_noted(tmp_path, monkeypatch):
    notes = tmp_path / "notes"
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)

    class BusyMeter(QuietMeter):
        share = 0.4

        def contended(self, share: float) -> bool:
            return True

    monkeypatch.setattr(confirm, "JobMeter", BusyMeter)
    confirmation, quiet, times = confirm_failing(tmp_path, [45.0] * 4, notes)
    assert len(times) == 4 and quiet == {} and not (notes / "local").exists()
    assert confirmation.other_shares == [0.4] * 4  # what each run's meter read, kept


def test_once_the_runs_confirmations_took_their_budget_a_failure_takes_one_run(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setattr(confirm, "JobMeter", QuietMeter)
    notes = tmp_path / "notes"

    def failing_job(nodes: str, budget: float):
        monkeypatch.setenv("SLURM_JOB_NODELIST", nodes)
        values, times, again = scripted([45.0] * 4)
        limits = {"lat": Limit(40.0, lower_is_better=True)}
        confirmation = Confirmation("token", tmp_path, confirm_runs=4, confirm_span_s=0.3,
                                    lasting_failures=str(notes), confirm_budget_s=budget)
        confirmation.confirm(["lat"], again, lambda keys: beyond_limit(values, limits, keys))
        return confirmation, times

    first, times = failing_job("node[1-2]", budget=0.2)
    assert len(times) == 4 and not first.over_budget
    assert confirm.spent_seconds(str(notes)) >= 0.3
    # other nodes, so no lasting failure to join: the spent budget alone shortens it
    second, times = failing_job("node[3-4]", budget=0.2)
    assert len(times) == 1 and second.over_budget and second.joined is None
    third, times = failing_job("node[5-6]", budget=0)  # no bound
    assert len(times) == 4 and not third.over_budget

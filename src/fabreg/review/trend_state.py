"""Trends in proportion to the new data: each series judged from the start of its window.

``fabreg trends --incremental`` keeps per series, in the store, where its window starts and
what came before it: the changes, and a summary of the runs at the window's first level (their
number and sum, as the search needs them) and of their noise. A night's run reads each series
from a few runs before its window (context for outlier clipping) to its newest run (one index
range), searches the window with the same method as a full run
(:func:`fabreg.review.trends.detect`, its first segment reaching back over the summarised runs)
and puts the kept changes in front of what it finds: the verdict comes from all of them
(:func:`fabreg.review.trends.overall`), so a regression that started before the window stays
open until a change closes it.

The window is the newest ``WINDOW`` runs (it grows night by night to ``WINDOW + STEP``, then
moves: a state is written once a month), reaching back to the start of the old level of every
change among them: a change at the end of a series (a suspect) is judged again each night
until it is confirmed or gone; only changes older than the window are kept as last judged. A
series without a state (the first run, other settings, a value ingested older than its window)
is read whole: that run is a full one. ``ci/bench/trends_bench.py --nightly N`` prints how often
the two agree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from fabreg.review import stable_screen, sweeps, trends
from fabreg.review.store import SeriesData, SeriesKey, Store, series_order

#: Runs every series' window holds at least (two months of nightlies) ...
WINDOW = 60
#: ... and at most this many more: a window moves in steps, so a series' state is written
#: once a month, not every night.
STEP = 30
#: Runs read before a window for context only: outlier clipping (a rolling median of
#: ``2 MIN_RUN + 1`` runs) sees them as a full run does, so a spike at the start of a window is
#: tamed as it would be anywhere else, and no change is placed among them.
MARGIN = 2 * trends.MIN_RUN + 1


def settings(alpha: float, min_shift_pct: float, window: int = WINDOW) -> str:
    """What a state depends on: a state made with other settings is not reused."""
    return json.dumps({"alpha": alpha, "min_shift_pct": min_shift_pct, "window": window,
                       "step": STEP, "margin": MARGIN, "min_run": trends.MIN_RUN,
                       "confirm_runs": trends.CONFIRM_RUNS,
                       "noise": "winsorised differences, t tail",
                       "dof_per_difference": trends.DOF_PER_DIFFERENCE,
                       "family": "links of a sweep figure, Bonferroni"}, sort_keys=True)


@dataclasses.dataclass
class State:
    """Where a series' next read starts and what came before its window."""

    start: float = 0.0  # the time of the first run read
    before: int = 0  # runs before the first run read
    #: the runs read before the window, its first level before it, their noise
    #: (:class:`fabreg.review.trends.Window`)
    context: trends.Window = trends.FULL
    kept: list[trends.Change] = dataclasses.field(default_factory=list)

    def row(self) -> tuple:
        """The ``trend_state`` columns after the series id."""
        c = self.context
        return (self.start, self.before, c.margin, c.level_runs, c.level_sum, c.sigma,
                c.sigma_runs, changes_text(self.kept) if self.kept else "")

    @classmethod
    def from_row(cls, row: tuple) -> State:
        start, before, *context, kept = row
        return cls(start, before, trends.Window(*context),
                   changes_of(kept) if kept else [])


#: How the store keeps no change: most kept rows (a short series' verdict).
NO_CHANGES = json.dumps([])


def changes_text(changes: list[trends.Change]) -> str:
    """Changes as the store keeps them (``trend_state.kept``, ``trend_verdicts.changes``);
    no change written without the encoder (450,000 times a night at 10,000 nodes)."""
    return json.dumps([dataclasses.asdict(c) for c in changes]) if changes else NO_CHANGES


def changes_of(text: str) -> list[trends.Change]:
    """The changes of :func:`changes_text`."""
    return [trends.Change(**c) for c in json.loads(text)]


def next_start(changes: list[trends.Change], n: int, window: int, first: int = 0,
               step: int = STEP) -> int:
    """The index (of ``n`` runs read, the window from ``first``) where the next window
    starts: where it is until it holds ``window + step`` runs, then ``window`` runs back; or
    the start of the old level of the first change within them."""
    start = first if n - first < window + step else n - window
    bounds = [first] + [c.index for c in changes]
    for j, c in enumerate(changes):
        if c.index >= start:
            return min(start, bounds[j])
    return start


def judge(series: SeriesData, state: State, alpha: float, min_shift_pct: float,
          window: int, stable: trends.Prepared | None = None
          ) -> tuple[trends.SeriesVerdict, State]:
    """One series read from ``state.start`` judged: its verdict (kept changes first), and the
    state the next run starts from (``stable``: see :func:`fabreg.review.trends.detect`)."""
    ctx = state.context
    verdict = trends.detect(series, alpha=alpha, min_shift_pct=min_shift_pct, window=ctx,
                            stable=stable)
    found = verdict.changes
    changes = state.kept + found
    result = trends.SeriesVerdict(series, trends.overall(changes), changes,
                                  verdict.noise_pct, state.before)
    if verdict.verdict == trends.TOO_FEW:
        result.verdict = trends.overall(state.kept) if state.kept else trends.TOO_FEW
        return result, state  # too few runs to move the window: read them all again
    start = next_start(found, len(series), window, ctx.margin)
    # a change at the window's first run leaves too: its old level is no longer read
    leaving = [c for c in found if c.index <= start]
    prepared = verdict.prepared
    assert prepared is not None  # not too few runs
    clipped = prepared.y
    if leaving:  # the window's first level starts at the last change that leaves it
        level_runs = start - leaving[-1].index
        level_sum = float(clipped[leaving[-1].index:start].sum())
    else:
        level_runs = ctx.level_runs + start - ctx.margin
        level_sum = ctx.level_sum + float(clipped[ctx.margin:start].sum())
    # the runs that leave the window take the window's own noise with them
    moved = start - ctx.margin
    own = prepared.own_sigma
    sigma_runs = ctx.sigma_runs + moved
    sigma = (ctx.sigma * ctx.sigma_runs + own * moved) / sigma_runs if sigma_runs else 0.0
    read = max(0, start - MARGIN)
    kept = state.kept + [dataclasses.replace(c, index=-1) for c in leaving]
    return result, State(float(series.time[read]), state.before + read,
                         trends.Window(start - read, level_runs, level_sum, sigma, sigma_runs),
                         kept)


#: Below this many series one process judges them all (forking costs more than it saves).
PARALLEL_FROM = 20000

#: The row of a series that has no state yet (``State()``): nothing to write.
_NO_STATE = State().row()


def _judge_windows(share: list[SeriesData], states: dict[int, tuple], alpha: float,
                   min_shift_pct: float, window: int) -> list[tuple]:
    """(verdict, changes, noise %, row or None) per series of ``share``."""
    rows = [states.get(series.id) for series in share]
    before = [State.from_row(row) if row else State() for row in rows]
    out = []
    stable = stable_screen.stable_windows(share, [state.context for state in before], alpha)
    for series, row, state, prepared in zip(share, rows, before, stable):
        verdict, after = judge(series, state, alpha, min_shift_pct, window, prepared)
        new = after.row()
        out.append((verdict.verdict, verdict.changes, verdict.noise_pct,
                    new if new != (row or _NO_STATE) else None))
    return out


#: Series a first run (no state yet: each series read whole) reads and judges at a time: its
#: memory follows this many series' histories and every series' window, not the store's
#: history (a year of a 10,000-node sweep is 164 M values).
FIRST_BATCH = 5000


def analyse(store: Store, alpha: float = trends.ALPHA,
            min_shift_pct: float = trends.MIN_SHIFT_PCT, window: int = WINDOW,
            keep: Callable[[SeriesData], bool] = lambda s: True,
            progress: Callable[[int, int], None] | None = None,
            jobs: int | None = None, save: bool = True) -> list[trends.SeriesVerdict]:
    """Every series (``keep`` chooses) judged from its window, by ``jobs`` processes (default:
    one per CPU from ``PARALLEL_FROM`` series); with ``save``, the states kept for the next
    run and, when every series was judged, the verdicts for the store's readers
    (:mod:`fabreg.review.standing`). Each verdict holds its series from its new window on,
    as the next run will read it."""
    made_with = settings(alpha, min_shift_pct, window)
    states = store.trend_states(made_with, reading=not save)
    out, saved, every = [], [], True
    keys: list[tuple[int, SeriesKey]] = []  # of every series read, kept or not: its family
    for loaded, windows, results in _judged(store, states, keep, alpha, min_shift_pct, window,
                                            jobs, progress):
        every = every and len(windows) == len(loaded)
        keys += [(s.id, s.key) for s in loaded]
        del loaded
        for series, (verdict, changes, noise, row) in zip(windows, results):
            before = states[series.id][1] if series.id in states else 0
            judged = trends.SeriesVerdict(series, verdict, changes, noise, before)
            if row is not None:  # most nights a window only grows: nothing to write
                saved.append((series.id, *row))
                if not states:  # read whole: only its window is kept
                    judged = _from(judged, State.from_row(row))
            out.append(judged)
        del windows, results  # the batch read whole goes before the next is read
    out.sort(key=lambda v: series_order(v.series))  # the parts came by series id
    # the states keep each series' own verdicts; its family's bar is applied on every read
    trends.family_wise(out, sweeps.link_families(keys), alpha)
    if save:
        store.save_trend_states(saved)
        if every:
            store.save_trend_verdicts(made_with, verdict_rows(out))
    return out


def _judged(store: Store, states: dict[int, tuple], keep: Callable[[SeriesData], bool],
            alpha: float, min_shift_pct: float, window: int, jobs: int | None,
            progress: Callable[[int, int], None] | None
            ) -> Iterator[tuple[list[SeriesData], list[SeriesData], list[tuple]]]:
    """(the series read, those ``keep`` chooses, what :func:`_judge_windows` says of each)
    a range of series at a time: their windows, or without states their whole history,
    read and judged here or by ``jobs`` processes that each read what they judge (reading
    tens of millions of values is most of a nightly run at 10,000 nodes, and one process
    reading them left the others waiting). The processes send back the values they read as
    columns, which this process makes into its series without reading them again."""
    global _READ, _READ_STORE
    ids = store.series_ids()
    jobs = _jobs(jobs, len(ids))
    reader = store.reader()  # before any fork: the processes inherit it
    chunk = FIRST_BATCH if jobs == 1 else max(1, min(FIRST_BATCH, len(ids) // (jobs * 4)))
    ranges = [(ids[i], ids[min(i + chunk, len(ids)) - 1]) for i in range(0, len(ids), chunk)]
    _READ = (store.path, reader, states, keep, alpha, min_shift_pct, window)
    done = 0
    # The series read so far are never freed while judging: kept out of the collector's
    # walks, in this process and in the forked ones (whose pages they then leave unwritten).
    gc.freeze()
    try:
        with contextlib.ExitStack() as stack:
            if jobs > 1:
                pool = stack.enter_context(ProcessPoolExecutor(
                    jobs, mp_context=multiprocessing.get_context("fork"),
                    initializer=_open_store))
                parts: Iterator[tuple[list[SeriesData], list[tuple]]] = (
                    (reader.series(columns), results)
                    for columns, results in pool.map(_read_and_judge_range, ranges))
            else:
                _READ_STORE = store
                parts = ((loaded, results) for _, loaded, results in map(_read_judged, ranges))
            for loaded, results in parts:
                done += len(loaded)
                if progress is not None:
                    progress(done, len(ids))
                yield loaded, [s for s in loaded if keep(s)], results
    finally:
        _READ = _READ_STORE = None
        gc.unfreeze()


def _jobs(jobs: int | None, series: int) -> int:
    """The processes that judge ``series`` series: ``jobs``, by default one per CPU from
    ``PARALLEL_FROM`` series."""
    if jobs is None:
        return (os.cpu_count() or 1) if series >= PARALLEL_FROM else 1
    return jobs


#: What :func:`_judged` reads and judges with (set before the processes fork): the store's
#: path, its reader, the states, keep, alpha, min_shift_pct, window.
_READ: tuple | None = None
#: The store ranges are read from: a forked process's own connection (a connection does not
#: cross a fork), else the caller's.
_READ_STORE: Store | None = None


def _open_store() -> None:
    global _READ_STORE
    assert _READ is not None
    _READ_STORE = Store(_READ[0], create=False)


def _read_judged(bounds: tuple[int, int]
                 ) -> tuple[list[np.ndarray], list[SeriesData], list[tuple]]:
    """The series with ids in ``bounds`` read (as value columns and as series) and what
    :func:`_judge_windows` says of those ``keep`` chooses."""
    assert _READ is not None and _READ_STORE is not None
    _, reader, states, keep, alpha, min_shift_pct, window = _READ
    columns = _READ_STORE.window_columns(*bounds, whole=not states)
    loaded = reader.series(columns)
    return columns, loaded, _judge_windows([s for s in loaded if keep(s)], states, alpha,
                                           min_shift_pct, window)


def _read_and_judge_range(bounds: tuple[int, int]) -> tuple[list[np.ndarray], list[tuple]]:
    """:func:`_read_judged` in a forked process: the values go back as columns, which cost
    little to send; the caller makes them into series."""
    columns, _, results = _read_judged(bounds)
    return columns, results


def _from(verdict: trends.SeriesVerdict, state: State) -> trends.SeriesVerdict:
    """``verdict`` over its series from ``state.start`` on (what the next run reads)."""
    series = verdict.series
    first = int(np.searchsorted(series.time, state.start, side="left"))
    # copies: a view would keep the whole history's arrays alive
    window = dataclasses.replace(
        series, time=series.time[first:].copy(), value=series.value[first:].copy(),
        ref=series.ref[first:].copy(), lower=series.lower[first:].copy(),
        upper=series.upper[first:].copy(), result=series.result[first:],
        session=series.session[first:], jobid=series.jobid[first:])
    return dataclasses.replace(placed(verdict, window), before=verdict.before + first)


def verdict_rows(verdicts: list[trends.SeriesVerdict]) -> list[tuple[int, str, str, float]]:
    """(series id, verdict, changes as JSON, noise %) of every series not stable without a
    change: what ``Store.save_trend_verdicts`` keeps."""
    return [(v.series.id, v.verdict, changes_text(v.changes), v.noise_pct)
            for v in verdicts if v.verdict != trends.STABLE or v.changes]


def stored_verdict(series: SeriesData, row: tuple[str, str, float] | None
                   ) -> trends.SeriesVerdict:
    """A series' verdict as ``verdict_rows`` kept it (None: stable without a change); its
    changes' indices placed in ``series`` by their time (-1 where it does not hold them)."""
    if row is None:
        return trends.SeriesVerdict(series, trends.STABLE)
    verdict, changes, noise = row
    if changes == NO_CHANGES:  # nothing to place
        return trends.SeriesVerdict(series, verdict, [], noise)
    return placed(trends.SeriesVerdict(series, verdict, changes_of(changes), noise))


def placed(verdict: trends.SeriesVerdict, series: SeriesData | None = None
           ) -> trends.SeriesVerdict:
    """The verdict over ``series`` (default: its own), each change's index found by the time
    of its first run at the new level (-1 where the series does not hold that run): a
    window's verdict drawn over the series' whole history."""
    series = series if series is not None else verdict.series
    times = series.time
    changes = []
    for c in verdict.changes:
        at = int(np.searchsorted(times, c.time)) if len(times) else 0
        changes.append(dataclasses.replace(
            c, index=at if at < len(times) and times[at] == c.time else -1))
    return dataclasses.replace(verdict, series=series, changes=changes, before=0)

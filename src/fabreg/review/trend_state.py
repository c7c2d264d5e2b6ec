"""Trends in proportion to the new data: each series judged from the start of its window.

``fabreg trends --incremental`` keeps per series, in the store, where its window starts and
the changes before it. A night's run reads each series from that start only (one index range),
finds the change points of the window with the same method as a full run
(:func:`fabreg.review.trends.detect`), and puts the kept changes in front of them: the verdict
comes from all of them (:func:`fabreg.review.trends.overall`), so a regression that started
before the window stays open until a change closes it.

The window is the newest ``WINDOW`` runs, reaching back to the start of the old level of every
change among them: a change is always judged against its whole old level, and a change at the
end of a series (a suspect) is judged again each night until it is confirmed or gone. Only
changes older than the window are kept as they were last judged. A series without a state (the
first run, other settings, a value ingested older than its window) is read whole: that run is a
full one. ``ci/bench/trends_bench.py --incremental`` prints how often the two agree.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from fabreg.review import trends
from fabreg.review.store import SeriesData, Store

#: Runs every series' window holds at least (two months of nightlies).
WINDOW = 60


def settings(alpha: float, min_shift_pct: float, window: int = WINDOW) -> str:
    """What a state depends on: a state made with other settings is not reused."""
    return json.dumps({"alpha": alpha, "min_shift_pct": min_shift_pct, "window": window,
                       "min_run": trends.MIN_RUN, "confirm_runs": trends.CONFIRM_RUNS},
                      sort_keys=True)


def next_start(changes: list[trends.Change], n: int, window: int) -> int:
    """The index (in a window of ``n`` runs) where the next window starts: ``window`` runs
    back, or the start of the old level of the first change within them."""
    start = max(0, n - window)
    bounds = [0] + [c.index for c in changes]
    for j, c in enumerate(changes):
        if c.index >= start:
            return min(start, bounds[j])
    return start


def _kept(text: str) -> list[trends.Change]:
    return [trends.Change(**c) for c in json.loads(text)] if text else []


def judge(series: SeriesData, before: int, kept: list[trends.Change], alpha: float,
          min_shift_pct: float, window: int
          ) -> tuple[trends.SeriesVerdict, tuple[float, int, list[trends.Change]]]:
    """One series' window judged: its verdict (kept changes first), and the state the next
    run starts from (window start, runs before it, changes before it)."""
    verdict = trends.detect(series, alpha=alpha, min_shift_pct=min_shift_pct)
    found = verdict.changes
    start = next_start(found, len(series), window)
    now_kept = kept + [dataclasses.replace(c, index=-1) for c in found if c.index < start]
    changes = kept + found
    result = trends.SeriesVerdict(series, trends.overall(changes), changes,
                                  verdict.noise_pct, before)
    if verdict.verdict == trends.TOO_FEW and not kept:
        result.verdict = trends.TOO_FEW
    return result, (float(series.time[start]), before + start, now_kept)


def analyse(store: Store, alpha: float = trends.ALPHA,
            min_shift_pct: float = trends.MIN_SHIFT_PCT, window: int = WINDOW,
            keep: Callable[[SeriesData], bool] = lambda s: True,
            progress: Callable[[int, int], None] | None = None) -> list[trends.SeriesVerdict]:
    """Every series (``keep`` chooses) judged from its window; the states saved for the
    next run."""
    made_with = settings(alpha, min_shift_pct, window)
    states = store.trend_states(made_with)
    windows = [s for s in store.load_windows({sid: st[0] for sid, st in states.items()})
               if keep(s)]
    out, saved = [], []
    for i, series in enumerate(windows):
        _, before, kept = states.get(series.id, (0.0, 0, ""))
        verdict, (start, now_before, now_kept) = judge(series, before, _kept(kept), alpha,
                                                       min_shift_pct, window)
        out.append(verdict)
        saved.append((series.id, start, now_before,
                      json.dumps([dataclasses.asdict(c) for c in now_kept]) if now_kept else ""))
        if progress is not None:
            progress(i + 1, len(windows))
    store.save_trend_states(made_with, saved)
    return out

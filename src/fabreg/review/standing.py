"""The verdicts as they stand, for the readers of the store: ``fabreg report``, ``export
prometheus`` and ``serve-metrics``.

They show every series' newest value and verdict, and the whole history of the few that moved.
Read in proportion to that, not to the history: the verdicts the last ``fabreg trends
--incremental`` kept (``Store.trend_verdicts``) with each series' newest value, when no run was
ingested since; otherwise each series judged from its window as that command does
(:func:`fabreg.review.trend_state.analyse`, nothing saved: a reader does not move the nightly
state), which is a full judgement on a store that has no state yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fabreg.review import trend_state, trends
from fabreg.review.store import SeriesData, Store

#: Where the verdicts came from (``Standing.source``).
STORED = "as the last `fabreg trends --incremental` left them"
JUDGED = "judged now from each series' window"


@dataclass
class Standing:
    """Every series' verdict, over its newest values (``verdict.series``: the newest value
    alone, or the window read), and where they came from."""

    verdicts: list[trends.SeriesVerdict]
    source: str

    @property
    def newest(self) -> list[SeriesData]:
        return [v.series for v in self.verdicts]


def read(store: Store, alpha: float = trends.ALPHA,
         min_shift_pct: float = trends.MIN_SHIFT_PCT,
         progress: Callable[[int, int], None] | None = None) -> Standing:
    """The verdicts of every series (sorted as ``Store.load`` sorts the series)."""
    kept = store.trend_verdicts(trend_state.settings(alpha, min_shift_pct))
    if kept is None:
        return Standing(trend_state.analyse(store, alpha, min_shift_pct, progress=progress,
                                            save=False), JUDGED)
    return Standing([trend_state.stored_verdict(s, kept.get(s.id))
                     for s in store.load_newest()], STORED)


def whole(store: Store, verdicts: list[trends.SeriesVerdict]) -> list[trends.SeriesVerdict]:
    """``verdicts`` over their series' whole history (one read of just those series), each
    change placed at its run: what a plot of the series draws."""
    if not verdicts:
        return []
    full = {s.id: s for s in store.load(ids=[v.series.id for v in verdicts])}
    return [trend_state.placed(v, full[v.series.id]) for v in verdicts]

"""The search's first step for many series at once: which of them it would find stable.

A nightly ``trends`` run at 10,000 nodes judges 450,000 windows, nearly all of them without a
change. For such a window the search (:func:`fabreg.review.trends.change_points`) prepares
the values and tries one split: its best split's p-value with the normal tail (never above
the t tail it then takes) is at least ``alpha``, and nothing is found. Those steps are the
same arithmetic for every window, and numpy does them for a block of windows of one length
as cheaply as for a few: the per-call cost of a window's dozen small array operations is
what a night spent its time on.

:func:`stable_rows` does them on the rows of a matrix, with the same operations in the same
order as the one-series code, so a window it calls stable is prepared to the same bits; a
window it cannot call stable (a possible change, values at or below zero, quantised noise,
too few runs) gets None and is searched one at a time as before
(``tests/test_stable_screen.py`` holds the two to the same results).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fabreg.review import trends
from fabreg.review.store import SeriesData

#: Windows of one length screened together from this many: below it, a block costs about
#: what the windows cost one at a time.
SCREEN_FROM = 8
#: ... and at most this many at once: the rolling median holds seven values a run of each.
SCREEN_AT_MOST = 5000


def _row_medians(x: np.ndarray) -> np.ndarray:
    """The median of each row (:func:`fabreg.review.trends._median` of each)."""
    width = x.shape[1]
    half = width // 2
    if width % 2:
        return np.partition(x, half, axis=1)[:, half]
    both = np.partition(x, (half - 1, half), axis=1)
    return (both[:, half - 1] + both[:, half]) / 2


def _rolling_medians(y: np.ndarray, half: int) -> np.ndarray:
    """:func:`fabreg.review.trends._rolling_median` of each row."""
    rows, n = y.shape
    width = 2 * half + 1
    out = np.empty_like(y)
    if n >= width:
        windows = y[:, trends._window_rows(n, width)]
        out[:, half: n - half] = np.partition(windows, half, axis=2)[:, :, half]
        edges = list(range(half)) + list(range(n - half, n))
    else:
        edges = list(range(n))
    for i in edges:  # the short windows at each end: a median of 4 to 6 values
        out[:, i] = _row_medians(y[:, max(0, i - half): i + half + 1])
    return out


def stable_rows(values: np.ndarray, windows: Sequence[trends.Window], alpha: float = trends.ALPHA,
                min_run: int = trends.MIN_RUN) -> list[trends.Prepared | None]:
    """For each row of ``values`` (one series' window a row, oldest first, all with the same
    ``margin`` of context runs; ``windows``: what came before each), the series as the search
    prepares it where the search would find no change in it, else None."""
    rows, n = values.shape
    out: list[trends.Prepared | None] = [None] * rows
    first = windows[0].margin if rows else 0
    assert all(w.margin == first for w in windows), "one margin for every row"
    if rows == 0 or n - first < 2 * min_run:
        return out  # too few runs: the one-series code says so
    usable = np.flatnonzero(np.all(np.isfinite(values) & (values > 0), axis=1))
    if len(usable) == 0:
        return out
    y = np.log(values[usable])
    # the noise of each row (trends.noise_sigma), n >= 2 * min_run > 2
    d = np.diff(y, axis=1)
    centre = _row_medians(d)
    centred = d - centre[:, None]
    start = 1.4826 * _row_medians(np.abs(centred))
    limit = (trends.CLIP_SIGMAS * start)[:, None]
    kept = np.clip(centred, -limit, limit)
    own = [max(math.sqrt(float(row @ row) / (n - 1) / 2), trends.NOISE_FLOOR) for row in kept]
    sigma = np.empty(len(usable))
    dof = np.empty(len(usable))
    for j, i in enumerate(usable):  # trends._prepare: the runs before a window weigh in
        w = windows[i]
        s = own[j]
        if w.sigma_runs:
            s = max((w.sigma * w.sigma_runs + s * (n - 1)) / (w.sigma_runs + n - 1),
                    trends.NOISE_FLOOR)
        sigma[j] = s
        dof[j] = max(1.0, trends.DOF_PER_DIFFERENCE * (n - 1 + w.sigma_runs))
    med = _rolling_medians(y, min_run)
    clip = (trends.CLIP_SIGMAS * sigma)[:, None]
    y = med + np.clip(y - med, -clip, clip)
    # the first split of the search (trends._best_split over the window, its level before)
    csum = np.cumsum(y, axis=1)
    csum = np.concatenate((np.zeros((len(usable), 1)), csum), axis=1)
    ks = np.arange(first + min_run, n - min_run + 1)
    runs = np.array([windows[i].level_runs for i in usable])
    total = np.array([windows[i].level_sum for i in usable])
    nl = ks - first + runs[:, None]
    nr = n - ks
    left = (csum[:, ks] - csum[:, first][:, None] + total[:, None]) / nl
    right = (csum[:, n][:, None] - csum[:, ks]) / nr
    t = np.abs(right - left) / (sigma[:, None] * np.sqrt(1.0 / nl + 1.0 / nr))
    tmax = t.max(axis=1)
    for j, i in enumerate(usable):
        if start[j] == 0.0:
            continue  # quantised noise: the one-series code takes another estimate
        p = min(1.0, (len(ks) + int(runs[j])) * trends.two_sided_p(float(tmax[j]), math.inf))
        if p >= alpha:  # the t tail is never below the normal one: no split passes
            out[i] = trends.Prepared(y[j], float(sigma[j]), True, 1.0, own[j], float(dof[j]))
    return out


def stable_windows(series: Sequence[SeriesData], windows: Sequence[trends.Window],
                   alpha: float = trends.ALPHA, min_run: int = trends.MIN_RUN
                   ) -> list[trends.Prepared | None]:
    """:func:`stable_rows` of each series (``windows``: what came before each), screened in
    blocks of one length and margin."""
    blocks: dict[tuple[int, int], list[int]] = {}
    for i, (one, window) in enumerate(zip(series, windows)):
        blocks.setdefault((len(one.value), window.margin), []).append(i)
    out: list[trends.Prepared | None] = [None] * len(series)
    for members in blocks.values():
        if len(members) < SCREEN_FROM:
            continue
        for start in range(0, len(members), SCREEN_AT_MOST):  # memory: a block's windows
            part = members[start:start + SCREEN_AT_MOST]
            values = np.stack([np.asarray(series[i].value, dtype=float) for i in part])
            for i, prepared in zip(part, stable_rows(values, [windows[i] for i in part],
                                                     alpha, min_run)):
                out[i] = prepared
    return out

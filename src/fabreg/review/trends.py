"""Direction-aware change-point detection on performance series.

Method (docs/trends.md has the evidence for choosing it):

1. Work on ``log(value)`` so a shift is relative (x % whatever the level) and
   multiplicative noise is even; non-positive data stay linear.
2. Estimate the noise ``sigma`` robustly from first differences (their standard deviation
   / sqrt 2, each winsorised at 3 MADs), which level shifts barely touch. An estimate from
   a few runs is itself uncertain: the tests below take Student's t tail with its degrees
   of freedom (``DOF_PER_DIFFERENCE`` a difference), not the normal one, or a short series
   whose noise happens to look small would show changes that are not there.
3. Tame outliers: each point is clipped to ``median of its 7 neighbours ± 3 sigma``.
   A lone spike then weighs like a 3-sigma point and cannot make a change point.
4. Binary segmentation with the two-sample statistic
   ``t = |mean(right) - mean(left)| / (sigma * sqrt(1/nl + 1/nr))`` over every split
   leaving at least ``min_run`` (3) points on each side; a split is kept when its
   Bonferroni-corrected p-value (number of candidate splits x two-sided t tail)
   is below ``alpha`` (0.001), then both halves are searched again.
5. Merge: change points are re-tested against their neighbours' segments, the
   weakest one that fails is dropped until all pass (as in Otava/Hunter); each
   survivor is re-placed at the best split between its neighbours.

Every change reports the first run at the new level, ``shift_pct`` (relative change
of the segment means) with a 95 % confidence interval, and whether it is a
regression or an improvement for this variable (:func:`fabreg.metrics.lower_is_better`).
A worse change at the end of a series is a regression only once ``CONFIRM_RUNS``
runs in a row sit at the new level and show the change on their own; until then it
is a ``suspect``.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from fabreg.review.significance import t_two_sided_p
from fabreg.review.store import SeriesData
from fabreg.schema import lower_is_better

ALPHA = 0.001
MIN_RUN = 3
CLIP_SIGMAS = 3.0
NOISE_FLOOR = 1e-3  # relative: 0.1 %, so constant series do not divide by zero
MIN_SHIFT_PCT = 1.0
#: Newest runs that must all sit at a worse new level for a change at the end of a series
#: to be a regression; until they do it is a ``suspect``: two odd nights at the end of a
#: stable series are noise until a third run confirms the level, and a normal run among the
#: newest ones says the old level is still there (interference only makes runs worse).
CONFIRM_RUNS = 3
#: Degrees of freedom of the noise estimate per first difference it comes from (the tests
#: take Student's t tail with them): a series of pure noise then shows about as few changes
#: as with its true noise known (``ci/bench/detector_bench.py``).
DOF_PER_DIFFERENCE = 1.0

REGRESSION = "regression"
SUSPECT = "suspect"
IMPROVEMENT = "improvement"
STABLE = "stable"
TOO_FEW = "too few points"


@dataclass
class Change:
    """One detected change point: the series moved at ``index``."""

    index: int  # first run at the new level
    shift_pct: float
    ci_low_pct: float
    ci_high_pct: float
    pvalue: float
    verdict: str  # REGRESSION, SUSPECT (a regression not yet confirmed) or IMPROVEMENT
    before: float  # typical value (geometric mean) before and after
    after: float
    #: the most consecutive runs that confirm the new level (:func:`confirming_runs`);
    #: CONFIRM_RUNS of them make a worse change at the end of a series a regression
    confirming: int = 0
    #: the first run at the new level: its time and session (:func:`detect` fills them in;
    #: a change kept from before an incremental window has no ``index`` in it: -1)
    time: float = math.nan
    session: str = ""


@dataclass
class SeriesVerdict:
    series: SeriesData
    verdict: str
    changes: list[Change] = field(default_factory=list)
    noise_pct: float = 0.0
    #: runs before ``series`` (which holds only the window ``trends --incremental`` read)
    before: int = 0
    #: the series as the search saw it (:func:`detect`; None with too few runs): what
    #: ``trends --incremental`` keeps of the runs that leave its window
    prepared: Prepared | None = field(default=None, repr=False)

    @property
    def runs(self) -> int:
        """How many runs the series has, read or not."""
        return self.before + len(self.series)

    @property
    def deciding(self) -> Change | None:
        """The change the verdict comes from: the last one, or the regression a suspect
        follows (it is still open: nothing better came after it)."""
        for c in reversed(self.changes):
            if c.verdict == self.verdict:
                return c
        return self.changes[-1] if self.changes else None

    @property
    def open_regression(self) -> bool:
        return self.verdict == REGRESSION

    @property
    def suspect(self) -> bool:
        return self.verdict == SUSPECT


@dataclass
class Prepared:
    """A series as the search sees it."""

    y: np.ndarray  # transformed, outlier-clipped
    sigma: float  # the noise the search uses (a window's: weighed with the runs before it)
    log: bool
    scale: float  # for linear mode: |median| the shift is relative to
    own_sigma: float = 0.0  # the noise of these values alone
    #: the effective degrees of freedom of ``sigma`` (:func:`two_sided_p`)
    dof: float = math.inf


@dataclass(frozen=True)
class Window:
    """What ``trends --incremental`` knows of the runs before the window it reads
    (:mod:`fabreg.review.trend_state`): the search sees the window as a full run would see
    that part of the series."""

    #: runs read before the window for context only: outlier clipping sees them, no change
    #: is placed among them
    margin: int = 0
    #: the runs before the window at its first level (since the last change before it):
    #: their number and the sum of their clipped values (the first segment's left side
    #: reaches back over them, and they count among its candidate splits)
    level_runs: int = 0
    level_sum: float = 0.0
    #: the noise of the runs before the window, and how many runs it comes from
    sigma: float = 0.0
    sigma_runs: int = 0


FULL = Window()


@functools.lru_cache(maxsize=64)
def _window_rows(n: int, width: int) -> np.ndarray:
    """The indices of each full window of ``width`` in ``n`` values, one row a window: most
    series of a nightly run have one of a few lengths."""
    return np.arange(n - width + 1)[:, None] + np.arange(width)


def _rolling_median(y: np.ndarray, half: int) -> np.ndarray:
    n = len(y)
    width = 2 * half + 1
    out = np.empty(n)
    if n >= width:
        # the middle of each odd window, by partition: the median without np.median's
        # checks and views, which cost more than the work on a window's few values
        out[half: n - half] = np.partition(y[_window_rows(n, width)], half, axis=1)[:, half]
        edges = list(range(half)) + list(range(n - half, n))
    else:
        edges = list(range(n))
    for i in edges:  # a handful of short windows: numpy's per-call overhead would dominate
        out[i] = statistics.median(y[max(0, i - half): i + half + 1].tolist())
    return out


def transform(values: np.ndarray) -> tuple[np.ndarray, bool, float]:
    """(y, log?, scale): ``log(values)`` when all are positive, else ``values / |median|``."""
    if bool(np.all(values > 0)):
        return np.log(values), True, 1.0
    scale = float(np.median(np.abs(values))) or 1.0
    return values / scale, False, scale


def noise_sigma(y: np.ndarray) -> float:
    """Noise of a transformed series from its first differences, which level shifts barely
    move: their standard deviation / sqrt 2, each difference first winsorised at
    ``CLIP_SIGMAS`` of a robust start (``1.4826 MAD``; of quantised data, whose MAD is 0,
    the mean absolute deviation), so a lone outlier or a shift counts as three sigmas at
    most; at least NOISE_FLOOR. The MAD alone scatters twice as much
    from one short series to the next, and where it happens to come out small, noise looks
    like changes."""
    if len(y) <= 2:
        return NOISE_FLOOR
    d = np.diff(y)
    centre = _median(d)
    spread = np.abs(d - centre)
    start = 1.4826 * _median(spread)
    if start == 0.0:  # quantised data, most differences 0: their mean absolute deviation
        start = math.sqrt(math.pi / 2) * float(spread.mean())
    kept = np.clip(d - centre, -CLIP_SIGMAS * start, CLIP_SIGMAS * start)
    return max(math.sqrt(float(kept @ kept) / len(kept) / 2), NOISE_FLOOR)


def _median(x: np.ndarray) -> float:
    """The median of a short 1-D array without NaN, by partition: ``np.median``'s own checks
    cost more than the work on a window's few dozen values, and a nightly run takes a
    median of every series."""
    half = len(x) // 2
    if len(x) % 2:
        return float(np.partition(x, half)[half])
    low, high = np.partition(x, (half - 1, half))[half - 1:half + 1]
    return (float(low) + float(high)) / 2


def two_sided_p(t: float, dof: float) -> float:
    """P(|T| >= t) for Student's t with ``dof`` degrees of freedom; the normal tail when
    ``dof`` is infinite."""
    if math.isinf(dof):
        return math.erfc(t / math.sqrt(2))
    return t_two_sided_p(t, dof)


def _prepare(values: np.ndarray, min_run: int, window: Window = FULL) -> Prepared:
    y, positive, scale = transform(values)
    sigma = own = noise_sigma(y)
    n = len(y) - 1  # the differences the noise comes from
    if window.sigma_runs:  # the runs before a window: their noise weighs by their number
        sigma = max((window.sigma * window.sigma_runs + sigma * n) / (window.sigma_runs + n),
                    NOISE_FLOOR)
    dof = max(1.0, DOF_PER_DIFFERENCE * (n + window.sigma_runs))
    med = _rolling_median(y, min_run)
    y = med + np.clip(y - med, -CLIP_SIGMAS * sigma, CLIP_SIGMAS * sigma)
    return Prepared(y, sigma, positive, scale, own, dof)


def _best_split(csum: np.ndarray, a: int, b: int, sigma: float, min_run: int,
                level: tuple[int, float] = (0, 0.0), dof: float = math.inf,
                fails_from: float = math.inf) -> tuple[int, float, float]:
    """Best split k in [a+min_run, b-min_run] of y[a:b]: (k, |t|, Bonferroni p). ``level``:
    (runs, sum) of the values before ``a`` at its level (a window's first segment), on the
    left of every split and counted among the candidates. ``fails_from``: a p the caller
    rejects; a split whose normal-tail p (never above the t tail's) already reaches it gets
    that p, not the t tail's (most series of a nightly run have no change: it saves the
    incomplete beta function for each)."""
    ks = np.arange(a + min_run, b - min_run + 1)
    if len(ks) == 0:
        return -1, 0.0, 1.0
    runs, total = level
    nl = ks - a + runs
    nr = b - ks
    left = (csum[ks] - csum[a] + total) / nl
    right = (csum[b] - csum[ks]) / nr
    t = np.abs(right - left) / (sigma * np.sqrt(1.0 / nl + 1.0 / nr))
    i = int(np.argmax(t))
    tmax = float(t[i])
    p = min(1.0, (len(ks) + runs) * two_sided_p(tmax, math.inf))
    if p < fails_from:
        p = min(1.0, (len(ks) + runs) * two_sided_p(tmax, dof))
    return int(ks[i]), tmax, p


def change_points(values: np.ndarray, alpha: float = ALPHA, min_run: int = MIN_RUN,
                  window: Window = FULL) -> tuple[list[int], Prepared]:
    """Indices where a new level starts (sorted), and the prepared series (``window``: what
    came before the values, when they are a window of the series)."""
    prep = _prepare(np.asarray(values, dtype=float), min_run, window)
    n = len(prep.y)
    csum = np.concatenate(([0.0], np.cumsum(prep.y)))
    first = window.margin
    level = (window.level_runs, window.level_sum)
    found: list[int] = []
    todo = [(first, n)]
    while todo:
        a, b = todo.pop()
        if b - a < 2 * min_run:
            continue
        k, _, p = _best_split(csum, a, b, prep.sigma, min_run, level if a == first else (0, 0.0),
                              prep.dof, fails_from=alpha)
        if k >= 0 and p < alpha:
            found.append(k)
            todo += [(a, k), (k, b)]
    cps = sorted(found)
    # Merge: drop the weakest change point that no longer passes against its
    # neighbouring segments, re-placing the rest, until all pass.
    while cps:
        bounds = [first] + cps + [n]
        worst, worst_p = -1, -1.0
        for j in range(len(cps)):
            a, b = bounds[j], bounds[j + 2]
            k, _, p = _best_split(csum, a, b, prep.sigma, min_run,
                                  level if j == 0 else (0, 0.0), prep.dof)
            if k >= 0:
                cps[j] = k
            if k < 0 or p > worst_p:
                worst, worst_p = j, (1.0 if k < 0 else p)
        if worst_p < alpha:
            break
        del cps[worst]
    return sorted(set(cps)), prep


def first_at_new_level(y: np.ndarray, a: int, k: int, b: int) -> int:
    """Move a split forward past runs that still sit at the old level: the change is
    placed on the first run at the new level, never on a normal run before it."""
    while k < b - 1:
        left, right = float(np.median(y[a:k])), float(np.median(y[k:b]))
        if abs(y[k] - left) >= abs(y[k] - right):
            break
        k += 1
    return k


def confirming_runs(y: np.ndarray, a: int, k: int, b: int, sigma: float, tests: int,
                    alpha: float, dof: float = math.inf) -> int:
    """The most consecutive runs of segment ``y[k:b]`` that confirm its level: each closer to
    the segment's median than to the old segment's (``y[a:k]``; the test of
    :func:`first_at_new_level`), and together, by their median alone, a significant change
    from the old level (the ``tests``-fold Bonferroni-corrected p below ``alpha``). Runs at the
    old level break a stretch; a stretch that is not significant on its own confirms nothing
    (three normal-looking runs before two odd nights are not a new level)."""
    old = y[a:k]
    left, right = float(np.median(old)), float(np.median(y[k:b]))
    at_new = np.abs(y[k:b] - left) >= np.abs(y[k:b] - right)
    best = 0
    edges = np.flatnonzero(np.diff(np.concatenate(([0], at_new.astype(int), [0]))))
    for start, stop in zip(edges[::2], edges[1::2]):
        length = int(stop - start)
        if length <= best:
            continue
        d = abs(float(np.median(y[k + start:k + stop])) - left)
        se = sigma * math.sqrt(1 / len(old) + 1 / length)
        if max(tests, 1) * two_sided_p(d / se, dof) < alpha:
            best = length
    return best


def detect_values(values: np.ndarray, lower_better: bool, alpha: float = ALPHA,
                  min_run: int = MIN_RUN, min_shift_pct: float = MIN_SHIFT_PCT,
                  confirm_runs: int = CONFIRM_RUNS) -> tuple[str, list[Change], float]:
    """(verdict, changes, noise %) for a plain array of values, oldest first."""
    verdict, changes, prep = _detect(np.asarray(values, dtype=float), lower_better, alpha,
                                     min_run, min_shift_pct, confirm_runs, FULL)
    return verdict, changes, _noise_pct(prep)


def _noise_pct(prep: Prepared | None) -> float:
    if prep is None:
        return 0.0
    return math.expm1(prep.sigma) * 100 if prep.log else prep.sigma * 100


def _detect(values: np.ndarray, lower_better: bool, alpha: float, min_run: int,
            min_shift_pct: float, confirm_runs: int, window: Window
            ) -> tuple[str, list[Change], Prepared | None]:
    """(verdict, changes, prepared values); the changes' indices count a window's margin."""
    first = window.margin
    if len(values) - first < 2 * min_run:
        return TOO_FEW, [], None
    cps, prep = change_points(values, alpha, min_run, window)
    n = len(values)
    bounds = [first] + cps + [n]
    changes = []
    # Clipping tames outliers for the search, but at the end of a series it also pulls a
    # new level towards the old one: place and size each change on the unclipped values,
    # by segment medians (robust to the outliers clipping was for).
    raw = np.log(values) if prep.log else values / prep.scale
    for j, k in enumerate(cps):
        a, b = bounds[j], bounds[j + 2]
        earlier = window.level_runs if a == first else 0  # a window's first level before it
        k = first_at_new_level(raw, a, k, b)
        left, right = raw[a:k], raw[k:b]
        d = float(np.median(right) - np.median(left))
        se = prep.sigma * math.sqrt(1 / (len(left) + earlier) + 1 / len(right))
        tests = b - a - 2 * min_run + 1 + earlier
        p = min(1.0, tests * two_sided_p(abs(d) / se, prep.dof))
        if prep.log:
            pct = [math.expm1(x) * 100 for x in (d, d - 1.96 * se, d + 1.96 * se)]
            before, after = (math.exp(float(np.median(left))),
                             math.exp(float(np.median(right))))
        else:
            base = abs(float(np.median(left))) or 1.0
            pct = [x / base * 100 for x in (d, d - 1.96 * se, d + 1.96 * se)]
            before = float(np.median(left)) * prep.scale
            after = float(np.median(right)) * prep.scale
        if abs(pct[0]) < min_shift_pct:
            continue
        worse = (d > 0) if lower_better else (d < 0)
        confirming = confirming_runs(raw, a, k, b, prep.sigma, tests, alpha, prep.dof)
        verdict = IMPROVEMENT
        if worse:
            # At the end of the series, runs after the change are not enough: CONFIRM_RUNS of
            # them in a row must sit at the new level and show it on their own. A change the
            # search placed a few runs before two odd nights (on a noisy or outlying run)
            # has runs after it, but none that confirm a level.
            verdict = SUSPECT if b == n and confirming < confirm_runs else REGRESSION
        changes.append(Change(k, pct[0], pct[1], pct[2], p, verdict, before, after,
                              confirming))
    return overall(changes), changes, prep


def overall(changes: list[Change]) -> str:
    """A series' verdict from its changes, oldest first: the last change's."""
    verdict = changes[-1].verdict if changes else STABLE
    if verdict == SUSPECT and len(changes) > 1 and changes[-2].verdict == REGRESSION:
        verdict = REGRESSION  # a suspect worsening does not close the regression before it
    return verdict


def detect(series: SeriesData, alpha: float = ALPHA, min_run: int = MIN_RUN,
           min_shift_pct: float = MIN_SHIFT_PCT, window: Window = FULL,
           stable: Prepared | None = None) -> SeriesVerdict:
    """Change points and verdict for one series of the store (``window``: what came before
    ``series`` when it holds only a window of the series' runs; ``stable``: the series as
    :func:`fabreg.review.stable_screen.stable_rows` prepared it, having found that the search
    finds no change in it)."""
    if stable is not None:
        return SeriesVerdict(series, STABLE, [], _noise_pct(stable), prepared=stable)
    verdict, changes, prep = _detect(
        np.asarray(series.value, dtype=float), lower_is_better(series.key.perfvar, series.unit),
        alpha, min_run, min_shift_pct, CONFIRM_RUNS, window)
    for c in changes:
        c.time = float(series.time[c.index])
        c.session = series.session[c.index] if series.session else ""
    return SeriesVerdict(series, verdict, changes, _noise_pct(prep), prepared=prep)


#: Series screened at once by a full run (:func:`analyse`): what it holds prepared at a time.
SCREENED_AT_ONCE = 50000


def analyse(all_series: list[SeriesData], alpha: float = ALPHA, min_run: int = MIN_RUN,
            min_shift_pct: float = MIN_SHIFT_PCT, progress=None,
            families: Mapping[int, int] | None = None) -> list[SeriesVerdict]:
    """Every series judged whole; ``families``: see :func:`family_wise`. The series the
    search would find stable are found many at a time first (:mod:`.stable_screen`: the
    same verdicts, to the bit)."""
    from fabreg.review import stable_screen  # it builds on this module

    out = []
    for start in range(0, len(all_series), SCREENED_AT_ONCE):
        part = all_series[start:start + SCREENED_AT_ONCE]
        stable = stable_screen.stable_windows(part, [FULL] * len(part), alpha, min_run)
        for series, screened in zip(part, stable):
            verdict = detect(series, alpha, min_run, min_shift_pct, stable=screened)
            verdict.prepared = None  # a full run keeps no window: memory stays near the values
            out.append(verdict)
            if progress is not None:
                progress(len(out), len(all_series))
    return family_wise(out, families or {}, alpha)


def family_wise(verdicts: list[SeriesVerdict], families: Mapping[int, int],
                alpha: float = ALPHA) -> list[SeriesVerdict]:
    """``verdicts`` with each series of a family of ``n`` (``families``: series id -> ``n``;
    the links of one sweep figure, ``fabreg.review.sweeps.link_families``) judged against
    the whole family: a worse change is a regression only when its p-value holds at
    ``alpha / n`` (Bonferroni), else it is a suspect, shown and not gating.

    A sweep gives every link a series of its own: at 10,000 nodes 450,000 of them are
    judged each night, and at ``alpha`` each, noise alone would open dozens of regressions
    a night. A link at half speed is far beyond either bar (``ci/bench/detector_bench.py``
    prints what each family size still catches)."""
    for v in verdicts:
        n = families.get(v.series.id, 1)
        if n <= 1 or not any(c.verdict == REGRESSION and c.pvalue * n >= alpha
                             for c in v.changes):
            continue
        v.changes = [replace(c, verdict=SUSPECT)
                     if c.verdict == REGRESSION and c.pvalue * n >= alpha else c
                     for c in v.changes]
        v.verdict = overall(v.changes)
    return verdicts

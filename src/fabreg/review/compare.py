"""Compare two sets of runs (sessions) series by series, direction-aware.

A selector picks runs:

- ``key=value``: the results-DB sessions whose session extras match
  (``reframe --session-extras change=fw-2.1``);
- ``START..END``: runs with ``START <= time < END`` (ISO 8601, either side may be empty);
- ``latest``, ``latest~N``: the newest session, the one N before it;
- anything else: a session id or a unique prefix of one (results-DB UUID, or a
  derived ``run-...`` id, see :func:`fabreg.review.store.derive_sessions`).

With repeats on both sides the runs themselves show the noise; with one run on a side the
series' stored history does (:func:`compare`), or the series is ``cannot judge``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from fabreg.errors import FabregError
from fabreg.review.perflog import Session, parse_time
from fabreg.review.significance import welch_p
from fabreg.review.store import SeriesData
from fabreg.review.trends import CONFIRM_RUNS, MIN_RUN, noise_sigma, transform
from fabreg.schema import lower_is_better

REGRESSION = "regression"
#: Worse beyond the noise in a single candidate run: one run cannot tell a new level from a
#: lone outlier, so it is not a regression until repeats or the next runs confirm it.
SUSPECT = "suspect"
IMPROVEMENT = "improvement"
SAME = "same"
MISSING = "missing in candidate"
NEW = "new in candidate"
#: A side has a single run and the series' history is too short to know its noise.
CANNOT_JUDGE = "cannot judge"
_ORDER = {REGRESSION: 0, SUSPECT: 1, MISSING: 2, CANNOT_JUDGE: 3, IMPROVEMENT: 4, NEW: 5,
          SAME: 6}
#: Stored runs a series needs before its history may stand in for repeats (as trends).
HISTORY_MIN_RUNS = 2 * MIN_RUN


@dataclass
class SessionInfo:
    id: str
    start: float
    extras: dict[str, str]


def list_sessions(all_series: list[SeriesData],
                  known: dict[str, Session]) -> list[SessionInfo]:
    """Every session that has values, oldest first."""
    spans: dict[str, tuple[float, float]] = {}
    for series in all_series:
        for t, s in zip(series.time.tolist(), series.session):
            first, last = spans.get(s, (t, t))
            spans[s] = (min(first, t), max(last, t))
    return sessions_of(spans, known)


def sessions_of(spans: dict[str, tuple[float, float]],
                known: dict[str, Session]) -> list[SessionInfo]:
    """The sessions of ``spans`` (session -> first and last value's time, as
    ``Store.session_spans`` gives them), oldest first."""
    out = [SessionInfo(s, known[s].start if s in known else first,
                       known[s].extras if s in known else {})
           for s, (first, _) in spans.items()]
    return sorted(out, key=lambda s: (s.start, s.id))


def time_span(selection: Selection, spans: dict[str, tuple[float, float]]
              ) -> tuple[float, float]:
    """The times that hold every value ``selection`` picks (``spans`` as for
    ``sessions_of``): what to read of a large store to compare two sessions."""
    if selection.sessions is None:
        return selection.start, selection.end
    picked = [spans[s] for s in selection.sessions if s in spans]
    if not picked:
        return math.inf, -math.inf
    return min(a for a, _ in picked), max(b for _, b in picked)


@dataclass
class Selection:
    """A selector, resolved: either a set of session ids or a time range."""

    text: str
    sessions: frozenset[str] | None = None
    start: float = -math.inf
    end: float = math.inf

    def mask(self, series: SeriesData) -> np.ndarray:
        if self.sessions is not None:
            return np.array([s in self.sessions for s in series.session], dtype=bool)
        return (series.time >= self.start) & (series.time < self.end)


def resolve(selector: str, sessions: list[SessionInfo]) -> Selection:
    """Turn a selector into a Selection; FabregError when it matches nothing."""
    text = selector.strip()
    if not text:
        raise FabregError("empty session selector")
    if ".." in text:
        left, _, right = text.partition("..")
        try:
            start = parse_time(left) if left.strip() else -math.inf
            end = parse_time(right) if right.strip() else math.inf
        except ValueError as err:
            raise FabregError(f"selector {text!r}: {err}") from None
        return Selection(text, start=start, end=end)
    if "=" in text:
        key, _, value = text.partition("=")
        ids = frozenset(s.id for s in sessions if s.extras.get(key.strip()) == value.strip())
        if not ids:
            seen = sorted({f"{k}={v}" for s in sessions for k, v in s.extras.items()})
            raise FabregError(f"no session has extras {text!r} (known: "
                              f"{', '.join(seen) or 'none; use reframe --session-extras'})")
        return Selection(text, sessions=ids)
    if text == "latest" or text.startswith("latest~"):
        back = 0
        if text != "latest":
            try:
                back = int(text[len("latest~"):])
            except ValueError:
                raise FabregError(f"selector {text!r}: expected latest~N") from None
        if back >= len(sessions) or back < 0:
            raise FabregError(f"selector {text!r}: only {len(sessions)} session(s) in the store")
        return Selection(text, sessions=frozenset([sessions[-1 - back].id]))
    matches = [s.id for s in sessions if s.id.startswith(text)]
    if len(matches) > 1 and text not in matches:
        raise FabregError(f"session prefix {text!r} is ambiguous ({len(matches)} sessions)")
    if not matches:
        raise FabregError(f"no session {text!r} in the store (see 'fabreg sessions')")
    return Selection(text, sessions=frozenset([text if text in matches else matches[0]]))


def require_runs(selection: Selection, all_series: list[SeriesData]) -> None:
    """FabregError when ``selection`` picks no value of any series (e.g. a range in the
    future): comparing against nothing would pass every series."""
    if any(selection.mask(series).any() for series in all_series):
        return
    times = [t for series in all_series for t in (series.time[0], series.time[-1])]
    held = (f"the store holds runs from {_utc(min(times))} to {_utc(max(times))}" if times
            else "the store holds no runs")
    raise FabregError(f"selector {selection.text!r} matches no runs ({held})")


def _utc(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Difference:
    series: SeriesData
    verdict: str
    baseline: float | None  # geometric mean (mean for non-positive data)
    candidate: float | None
    shift_pct: float | None
    worse_pct: float | None  # > 0: worse, direction-aware
    n_baseline: int
    n_candidate: int
    pvalue: float | None
    #: where the noise came from: "repeats" (Welch), "history" (the series' stored runs), ""
    noise: str = ""
    note: str = ""


def _centre(values: np.ndarray) -> float:
    if np.all(values > 0):
        return float(np.exp(np.mean(np.log(values))))
    return float(np.mean(values))


def _median_var(n: int) -> float:
    """Variance of the median of n normal values, in units of sigma squared."""
    return 1.0 if n == 1 else 0.5 if n == 2 else math.pi / (2 * n)


def _by_history(series: SeriesData, b_mask: np.ndarray, c_mask: np.ndarray
                ) -> tuple[float, float, float]:
    """(baseline, candidate, two-sided p): each side's median, the noise taken from every
    stored run of the series (first differences: level shifts and outliers barely count).
    Medians, so a lone outlier among three runs moves nothing."""
    y, log, scale = transform(series.value)
    sigma = noise_sigma(y)
    mb, mc = float(np.median(y[b_mask])), float(np.median(y[c_mask]))
    se = sigma * math.sqrt(_median_var(int(b_mask.sum())) + _median_var(int(c_mask.sum())))
    p = math.erfc(abs(mc - mb) / se / math.sqrt(2))
    if log:
        return math.exp(mb), math.exp(mc), p
    return mb * scale, mc * scale, p


def compare(all_series: list[SeriesData], baseline: Selection, candidate: Selection,
            threshold_pct: float = 5.0, alpha: float = 0.05) -> list[Difference]:
    """Per series difference, most severe first.

    A series regresses when it is worse by more than ``threshold_pct`` and the difference
    is significant. With repeats on both sides, the geometric means are compared and
    Welch's t-test on log values must give p < ``alpha``. With a single run on a side,
    the series' stored history gives the noise (it needs HISTORY_MIN_RUNS runs, else the
    series is ``cannot judge``): the medians of the sides are compared, and p, Bonferroni-
    corrected over every series judged this way, must be below ``alpha``; a worse candidate
    with fewer than CONFIRM_RUNS runs is a ``suspect``, not a regression, since one or two
    runs cannot tell a new level from a lone outlier.
    """
    out: list[Difference] = []
    by_history: list[tuple[Difference, float]] = []
    for series in all_series:
        b_mask, c_mask = baseline.mask(series), candidate.mask(series)
        b, c = series.value[b_mask], series.value[c_mask]
        if len(b) == 0 and len(c) == 0:
            continue
        if len(c) == 0:
            out.append(Difference(series, MISSING, _centre(b), None, None, None, len(b), 0,
                                  None))
            continue
        if len(b) == 0:
            out.append(Difference(series, NEW, None, _centre(c), None, None, 0, len(c), None))
            continue
        repeats = len(b) >= 2 and len(c) >= 2
        history = not repeats and len(series) >= HISTORY_MIN_RUNS
        p = None
        if history:
            cb, cc, p = _by_history(series, b_mask, c_mask)
        else:
            cb, cc = _centre(b), _centre(c)
        shift = (cc / cb - 1.0) * 100.0 if cb else math.inf
        worse = shift if lower_is_better(series.key.perfvar, series.unit) else -shift
        diff = Difference(series, SAME, cb, cc, shift, worse, len(b), len(c), None)
        out.append(diff)
        if history:
            by_history.append((diff, p))
        elif repeats:
            positive = bool(np.all(b > 0) and np.all(c > 0))
            p = welch_p(np.log(b).tolist(), np.log(c).tolist()) if positive else \
                welch_p(b.tolist(), c.tolist())
            diff.pvalue, diff.noise = p, "repeats"
            if abs(shift) >= threshold_pct and (p is None or p < alpha):
                diff.verdict = REGRESSION if worse > 0 else IMPROVEMENT
        elif abs(shift) >= threshold_pct:
            diff.verdict = CANNOT_JUDGE
            diff.note = f"one run on a side and {len(series)} stored: noise unknown"
    for diff, p in by_history:
        diff.pvalue = min(1.0, p * len(by_history))
        diff.noise = "history"
        if abs(diff.shift_pct or 0.0) >= threshold_pct and diff.pvalue < alpha:
            if (diff.worse_pct or 0.0) <= 0:
                diff.verdict = IMPROVEMENT
                if diff.n_baseline < CONFIRM_RUNS:  # or the baseline run was an outlier
                    diff.note = f"{diff.n_baseline} baseline run(s): unconfirmed"
            elif diff.n_candidate >= CONFIRM_RUNS:
                diff.verdict = REGRESSION
            else:
                diff.verdict = SUSPECT
                diff.note = (f"{diff.n_candidate} candidate run(s): unconfirmed until "
                             f"{CONFIRM_RUNS} show it")
    out.sort(key=lambda d: (_ORDER[d.verdict], -(d.worse_pct or 0.0)
                            if d.verdict != IMPROVEMENT else (d.worse_pct or 0.0)))
    return out

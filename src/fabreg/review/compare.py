"""Compare two sets of runs (sessions) series by series, direction-aware.

A selector picks runs:

- ``key=value``: the results-DB sessions whose session extras match
  (``reframe --session-extras change=fw-2.1``);
- ``START..END``: runs with ``START <= time < END`` (ISO 8601, either side may be empty);
- ``latest``, ``latest~N``: the newest session, the one N before it;
- anything else: a session id or a unique prefix of one (results-DB UUID, or a
  derived ``run-...`` id, see :func:`fabreg.review.store.derive_sessions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fabreg.errors import FabregError
from fabreg.review.perflog import Session, parse_time
from fabreg.review.significance import welch_p
from fabreg.review.store import SeriesData
from fabreg.schema import lower_is_better

REGRESSION = "regression"
IMPROVEMENT = "improvement"
SAME = "same"
MISSING = "missing in candidate"
NEW = "new in candidate"
_ORDER = {REGRESSION: 0, MISSING: 1, IMPROVEMENT: 2, NEW: 3, SAME: 4}


@dataclass
class SessionInfo:
    id: str
    start: float
    extras: dict[str, str]


def list_sessions(all_series: list[SeriesData],
                  known: dict[str, Session]) -> list[SessionInfo]:
    """Every session that has values, oldest first."""
    first: dict[str, float] = {}
    for series in all_series:
        for t, s in zip(series.time.tolist(), series.session):
            if s not in first or t < first[s]:
                first[s] = t
    out = [SessionInfo(s, known[s].start if s in known else t,
                       known[s].extras if s in known else {}) for s, t in first.items()]
    return sorted(out, key=lambda s: (s.start, s.id))


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


def _centre(values: np.ndarray) -> float:
    if np.all(values > 0):
        return float(np.exp(np.mean(np.log(values))))
    return float(np.mean(values))


def compare(all_series: list[SeriesData], baseline: Selection, candidate: Selection,
            threshold_pct: float = 5.0, alpha: float = 0.05) -> list[Difference]:
    """Per series difference, most severe first.

    A series regresses when it is worse by more than ``threshold_pct`` and, when both
    sides have repeats, Welch's t-test on log values gives p < ``alpha``.
    """
    out = []
    for series in all_series:
        b = series.value[baseline.mask(series)]
        c = series.value[candidate.mask(series)]
        if len(b) == 0 and len(c) == 0:
            continue
        if len(c) == 0:
            out.append(Difference(series, MISSING, _centre(b), None, None, None, len(b), 0,
                                  None))
            continue
        if len(b) == 0:
            out.append(Difference(series, NEW, None, _centre(c), None, None, 0, len(c), None))
            continue
        cb, cc = _centre(b), _centre(c)
        shift = (cc / cb - 1.0) * 100.0 if cb else math.inf
        worse = shift if lower_is_better(series.key.perfvar, series.unit) else -shift
        positive = bool(np.all(b > 0) and np.all(c > 0))
        p = welch_p(np.log(b).tolist(), np.log(c).tolist()) if positive else \
            welch_p(b.tolist(), c.tolist())
        significant = p is None or p < alpha
        if abs(shift) >= threshold_pct and significant:
            verdict = REGRESSION if worse > 0 else IMPROVEMENT
        else:
            verdict = SAME
        out.append(Difference(series, verdict, cb, cc, shift, worse, len(b), len(c), p))
    out.sort(key=lambda d: (_ORDER[d.verdict], -(d.worse_pct or 0.0)
                            if d.verdict != IMPROVEMENT else (d.worse_pct or 0.0)))
    return out

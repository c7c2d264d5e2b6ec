"""Series that one changed column split in two: where a history stops being one series.

A series is its test, place, parameters and variable; a column a site added, or one whose
value changed with a new ReFrame or a new config (``num_tasks`` 4 -> 8, a column that carries
a build id), starts a new series, and the old one simply stops. Trends then judge two short
histories instead of one long one. This names such pairs so a site can decide: a real change
of what is measured, or a column to declare run-only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from fabreg.review.store import SeriesData, SeriesKey


@dataclass(frozen=True)
class Split:
    """Two series of one test, place and variable that differ in one column and follow on
    in time: the older ends before the newer starts."""

    before: SeriesKey
    after: SeriesKey
    column: str
    old_value: str  # '' where the column was absent
    new_value: str
    at: float  # the newer series' first time

    def text(self) -> str:
        old = self.old_value or "(absent)"
        new = self.new_value or "(absent)"
        return (f"{self.before.test} {self.before.perfvar} on {self.before.system}:"
                f"{self.before.partition}+{self.before.environ}: column {self.column!r} "
                f"changed {old} -> {new}")


def find_splits(series: Iterable[SeriesData]) -> list[Split]:
    """Every pair of consecutive series that one column tells apart, oldest change first."""
    groups: dict[tuple, list[SeriesData]] = defaultdict(list)
    for data in series:
        if len(data.time):
            k = data.key
            groups[(k.test, k.system, k.partition, k.environ, k.perfvar)].append(data)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda d: float(d.time[0]))
        for older, newer in zip(members, members[1:]):
            if float(older.time[-1]) > float(newer.time[0]):
                continue  # they ran side by side: two real series
            column = _one_column(dict(older.key.params), dict(newer.key.params))
            if column is not None:
                name, old, new = column
                out.append(Split(older.key, newer.key, name, old, new, float(newer.time[0])))
    return sorted(out, key=lambda s: s.at)


def _one_column(a: dict[str, str], b: dict[str, str]) -> tuple[str, str, str] | None:
    differ = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if len(differ) != 1:
        return None
    name = differ[0]
    return name, a.get(name, ""), b.get(name, "")

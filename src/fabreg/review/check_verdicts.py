"""What the checks themselves said about each series' newest run.

The trend verdicts (``fabreg.review.trends``) look at a series over time; a check judges one
run as it measures it and logs that per performance variable in its ``verdicts`` column
(``fabreg.schema.VERDICTS``: ``fail``, ``flaky``, ``inconclusive``, ``missing``, ``warn``,
``ok``), which the store keeps among the run's attributes. A report shows both: a value the
host interfered with (``inconclusive``) or that did not reproduce (``flaky``) is news an
engineer must see next to the regressions.
"""

from __future__ import annotations

import json

from fabreg.review.store import NEWEST_OF_DAY, Store

#: Read from the store's documented tables (docs/trends.md, "Schema"): the newest sample of
#: each series, with its run's attributes (a seek a series: ``newest_day`` names its day, whose
#: latest run is last).
_NEWEST = f"""
SELECT v.series_id, s.perfvar, r.attrs
FROM newest_day n
CROSS JOIN samples v ON {NEWEST_OF_DAY}
JOIN series s ON s.id = v.series_id
JOIN runs r ON r.id = v.run_id
ORDER BY n.series_id, r.time, v.run_id
"""


def newest(store: Store) -> dict[int, str]:
    """Series id -> the check's verdict on the series' newest value, where it logged one."""
    parsed: dict[str, dict] = {}
    out: dict[int, str] = {}
    latest = {row[0]: row for row in store.conn.execute(_NEWEST)}
    for series_id, perfvar, attrs in latest.values():
        if not attrs or "verdicts" not in attrs:
            continue
        if attrs not in parsed:
            try:
                parsed[attrs] = verdicts_of(json.loads(attrs).get("verdicts"))
            except (ValueError, AttributeError):
                parsed[attrs] = {}
        verdict = parsed[attrs].get(perfvar)
        if verdict:
            out[series_id] = verdict
    return out


def verdicts_of(logged: object) -> dict[str, str]:
    """The ``verdicts`` column as logged (a JSON object, or its text) -> perfvar -> verdict."""
    if isinstance(logged, str):
        try:
            logged = json.loads(logged)
        except ValueError:
            return {}
    if not isinstance(logged, dict):
        return {}
    return {str(k): str(v) for k, v in logged.items() if v}

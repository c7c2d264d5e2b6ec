#!/usr/bin/env python3
"""How many sessions must a host's baseline rest on before healthy sessions stop failing?

``fabreg references calibrate`` draws a host's baseline from the sessions it has seen; a VM
has slow modes that last minutes to an hour, and a baseline from sessions that all fell in
one fast mode fails the next slow one. This bench replays recorded healthy sessions (the
folders ``healthy_runs_bench.py`` leaves, in time order): for each number of calibration
sessions k, every window of k consecutive sessions calibrates a baseline exactly as
``calibrate`` does (``fabreg.review.suggest``, values measured under interference left out),
and the ``--judge`` sessions after the window are judged against it. Printed side by side
per k: the windows, their time span, how many judged sessions had a value beyond a failure
limit, how many values, and the median failure band (the price: a wider band catches less).

Offline judging is stricter than a run: a value that fails here was not confirmed (its
session had another baseline, or none), and a confirmation can turn it into ``flaky``.
Usage (repository root):

    .venv/bin/python ci/bench/calibration_sessions_bench.py /tmp/fabreg-healthy-*/run*
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from fabreg.review import suggest
from fabreg.review.store import RunValue, Store

FABREG = Path(sys.executable).parent / "fabreg"


def session_values(folder: Path, work: Path, system: str) -> list[RunValue]:
    """The values of one session folder, through the real ingest."""
    db = work / f"{len(list(work.iterdir()))}.db"
    subprocess.run([str(FABREG), "ingest", "-q", "--db", str(db), str(folder)], check=True,
                   capture_output=True)
    with Store(db, create=False) as store:
        return store.run_values(system)


def baseline(values: list[RunValue], host: str) -> dict[suggest.Key, suggest.Suggestion]:
    kept = suggest.baseline_values(values, host)
    rows, _ = suggest.suggest(suggest.group_values(kept), suggest.BASELINE_WARN,
                              suggest.BASELINE_FAIL, suggest.DEFAULT_MIN_RUNS, baseline=True)
    return {row.key: row for row in rows}


def failing(values: list[RunValue], rows: dict[suggest.Key, suggest.Suggestion],
            host: str) -> int:
    """Values beyond their row's failure limit (measured without interference)."""
    out = 0
    for rv in suggest.baseline_values(values, host):
        try:
            keys = json.loads(rv.attrs.get("ref_keys") or "{}")
        except ValueError:
            continue
        row = rows.get(suggest.key_of(keys.get(rv.perfvar)) or ())
        if row is None:
            continue
        sign = 1.0 if row.lower_is_better else -1.0
        out += sign * (rv.value - row.value) / row.value > row.fail
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sessions", nargs="+", type=Path)
    parser.add_argument("--system", default="local")
    parser.add_argument("--ks", default="3,5,8,12", help="calibration sessions to try")
    parser.add_argument("--judge", type=int, default=5,
                        help="sessions judged after each window (default %(default)s)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fabreg-calibration-bench-"))
    sessions = []
    for i, folder in enumerate(args.sessions, start=1):
        values = session_values(folder, work, args.system)
        if values:
            sessions.append(values)
        print(f"ingested {i}/{len(args.sessions)}: {folder} ({len(values)} values)",
              file=sys.stderr)
    sessions.sort(key=lambda vs: min(v.time for v in vs))
    host = Counter(v.attrs.get("host_key", "") for vs in sessions for v in vs).most_common(1)[0][0]
    print(f"{len(sessions)} sessions of host {host}, judged {args.judge} after each window")
    print(f"{'k':>3}{'windows':>9}{'span min':>10}{'judged':>8}{'failing sessions':>18}"
          f"{'failing values':>16}{'median fail band':>18}")
    for k in (int(x) for x in args.ks.split(",")):
        windows = range(0, len(sessions) - k - args.judge + 1)
        if not windows:
            continue
        judged = bad_sessions = bad_values = 0
        spans, bands = [], []
        for start in windows:
            window = sessions[start:start + k]
            rows = baseline([v for vs in window for v in vs], host)
            spans.append((max(v.time for v in window[-1]) - min(v.time for v in window[0])) / 60)
            bands.append(statistics.median(r.fail for r in rows.values()) if rows else 0)
            for later in sessions[start + k:start + k + args.judge]:
                n = failing(later, rows, host)
                judged += 1
                bad_sessions += n > 0
                bad_values += n
        print(f"{k:>3}{len(windows):>9}{statistics.median(spans):>10.0f}{judged:>8}"
              f"{f'{bad_sessions} ({bad_sessions / judged:.0%})':>18}{bad_values:>16}"
              f"{statistics.median(bands):>18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``fabreg migrate``: a store of an older layout rewritten in the current one, nothing lost.

The first layout kept a value's unit, reference, thresholds and result in its own row, each
run the path of its file and a unique index on its whole key, and each sweep run its whole
pair table beside the link series that hold its figures: about 120 bytes a value. The
second kept the values in series order, so that each night appended rewrote nearly every
page of the table. The current one (:mod:`fabreg.review.store`) keeps those once each, and
its values in day order. Migration copies every table into a new file beside the store,
with the same series and run ids, checks that every value and run arrived, and only then
puts the new file in the store's place; the old file stays beside it as
``<store>.schemaN`` (N: its layout) until the site removes it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fabreg.errors import FabregError
from fabreg.review.perflog import without_pair_table
from fabreg.review.store import (
    BLOBS,
    DAY_SECONDS,
    SCHEMA,
    SCHEMA_VERSION,
    TREND_STATE,
    TREND_VERDICTS,
    day_sql,
    key_hash,
    schema_version,
)

#: Samples of the first layout copied per statement: progress is reported between them.
CHUNK = 500_000
#: Samples of the second layout copied per statement, about: each statement reads the whole
#: old table (it is in series order) to take the days it copies, in the new order.
DAYS_CHUNK = 5_000_000


@dataclass
class Migrated:
    values: int
    runs: int
    series: int
    bytes_before: int
    bytes_after: int
    backup: Path


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def migrate(path: Path, progress: Callable[[int, int], None] | None = None) -> Migrated:
    """Rewrite the store at ``path`` in the current layout; raise FabregError when it is
    not a store, already current, or locked by an ingest."""
    if not path.is_file():
        raise FabregError(f"no store at {path}")
    work = Path(f"{path}.migrating")
    old = sqlite3.connect(str(path), timeout=60.0, isolation_level=None)
    try:
        tables = {r[0] for r in old.execute("SELECT name FROM sqlite_master")}
        if not {"series", "samples", "runs"} <= tables:
            raise FabregError(f"{path} is not a fabreg store")
        version = schema_version(old)
        if version == SCHEMA_VERSION:
            raise FabregError(f"store {path} already has the current layout: nothing to do")
        if version > SCHEMA_VERSION:
            raise FabregError(f"store {path} has layout {version}, newer than this fabreg's "
                              f"({SCHEMA_VERSION}): nothing to do")
        backup = Path(f"{path}.schema{version}")
        if backup.exists():
            raise FabregError(f"{backup} exists (an earlier migration's copy): move it away "
                              "first")
        work.unlink(missing_ok=True)
        # No ingest may add to the old file while it is copied: hold its write lock.
        old.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        old.execute("BEGIN IMMEDIATE")
        before = _size(path)
        counts = _copy(path, work, version, tables, progress)
        new_size = work.stat().st_size
        os.replace(path, backup)
        os.replace(work, path)
    except sqlite3.Error as err:
        work.unlink(missing_ok=True)
        if "not a database" in str(err):
            raise FabregError(f"{path} is not a fabreg store (SQLite says: {err})") from None
        raise FabregError(f"store {path}: {err}") from None
    finally:
        old.close()
    for suffix in ("-wal", "-shm"):  # the old file's, now stale beside the new one
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return Migrated(*counts, before, new_size, backup)


def _slim_attrs(text: str) -> str:
    """A run's attributes as an ingest now stores them: a sweep's pair table, whose figures
    the store holds as link series, becomes its pair rounds."""
    if '"pair_table"' not in text:
        return text
    try:
        return json.dumps(without_pair_table(json.loads(text)), sort_keys=True)
    except ValueError:  # a table the ingest could not read: kept as it was
        return text


def _copy_first_layout(new: sqlite3.Connection, total: int,
                       progress: Callable[[int, int], None] | None) -> int:
    """Copy a store of the first layout (attached as ``o``) into ``new``; the values
    copied."""
    new.execute("INSERT INTO series SELECT id, key_hash(key), test, system, partition, "
                "environ, perfvar, params FROM o.series")
    new.execute("INSERT INTO sources(path) SELECT DISTINCT source FROM o.runs ORDER BY 1")
    new.execute(
        "INSERT INTO runs(id, run_key, key_hash, time, jobid, nodelist, session, "
        "from_results_db, source_id, attrs) SELECT r.id, r.run_key, key_hash(r.run_key), "
        "r.time, r.jobid, r.nodelist, r.session, r.from_results_db, f.id, slim_attrs(r.attrs) "
        "FROM o.runs r JOIN sources f ON f.path = r.source ORDER BY r.id")
    new.execute("INSERT INTO bands(unit, ref, lower_thres, upper_thres, result) "
                "SELECT DISTINCT unit, ref, lower_thres, upper_thres, result FROM o.samples")
    last = new.execute("SELECT MAX(series_id) FROM o.samples").fetchone()[0] or 0
    done, low = 0, 0
    step = max(1, last * CHUNK // max(total, 1))
    while low <= last:  # by ranges of series ids, in the old primary key's order
        new.execute(
            "INSERT INTO samples(day, series_id, run_id, value, band_id) "
            f"SELECT {day_sql('v.time')}, v.series_id, v.run_id, v.value, b.id "
            "FROM o.samples v JOIN o.runs r ON r.id = v.run_id AND r.time = v.time "
            "JOIN bands b ON b.unit IS v.unit AND b.ref IS v.ref "
            "AND b.lower_thres IS v.lower_thres AND b.upper_thres IS v.upper_thres "
            "AND b.result IS v.result WHERE v.series_id >= ? AND v.series_id < ? "
            "ORDER BY 1, 2, 3", (low, low + step))
        low += step
        done = new.execute("SELECT changes()").fetchone()[0] + done
        if progress is not None:
            progress(done, total)
    return done


def _copy_second_layout(new: sqlite3.Connection, tables: set[str], total: int,
                        progress: Callable[[int, int], None] | None) -> int:
    """Copy a store of the second layout (attached as ``o``) into ``new``, its values in
    day order a few days at a time; the values copied."""
    for table in ("series", "sources", "runs", "bands"):
        new.execute(f"INSERT INTO {table} SELECT * FROM o.{table}")
    for table, create in (("blobs", BLOBS), ("trend_state", TREND_STATE),
                          ("trend_verdicts", TREND_VERDICTS)):
        if table in tables:
            new.execute(create)
            new.execute(f"INSERT INTO {table} SELECT * FROM o.{table}")
    days = [row[0] for row in new.execute(
        f"SELECT DISTINCT {day_sql('time')} FROM o.runs ORDER BY 1")]
    step = max(1, len(days) * DAYS_CHUNK // max(total, 1))
    done = 0
    for i in range(0, len(days), step):  # runs of one day have their values on that day
        first, last = days[i], days[min(i + step, len(days)) - 1]
        new.execute(
            "INSERT INTO samples(day, series_id, run_id, value, band_id) "
            f"SELECT {day_sql('v.time')}, v.series_id, v.run_id, v.value, v.band_id "
            "FROM o.samples v JOIN o.runs r ON r.id = v.run_id AND r.time = v.time "
            "WHERE v.time >= ? AND v.time < ? ORDER BY 1, 2, 3",
            (first * DAY_SECONDS, (last + 1) * DAY_SECONDS))
        done = new.execute("SELECT changes()").fetchone()[0] + done
        if progress is not None:
            progress(done, total)
    return done


def _copy(path: Path, work: Path, version: int, tables: set[str],
          progress: Callable[[int, int], None] | None) -> tuple[int, int, int]:
    """Copy the store at ``path`` (of layout ``version``) into a new file ``work``; (values,
    runs, series) copied."""
    new = sqlite3.connect(str(work), isolation_level=None)
    try:
        new.create_function("key_hash", 1, key_hash, deterministic=True)
        new.create_function("slim_attrs", 1, _slim_attrs, deterministic=True)
        new.execute("PRAGMA journal_mode=WAL")
        new.execute("PRAGMA synchronous=OFF")  # a crash leaves only the .migrating file
        new.execute("PRAGMA cache_size = -262144")
        new.execute("ATTACH DATABASE ? AS o", (str(path),))
        new.executescript("BEGIN;" + SCHEMA + "DELETE FROM meta;")
        total = new.execute("SELECT COUNT(*) FROM o.samples").fetchone()[0]
        if version == 1:
            done = _copy_first_layout(new, total, progress)
        else:
            done = _copy_second_layout(new, tables, total, progress)
        new.execute("INSERT INTO days SELECT DISTINCT day FROM samples")
        new.execute(f"INSERT INTO newest_day SELECT series_id, {day_sql('MAX(time)')} "
                    "FROM o.samples GROUP BY series_id")
        for table in ("sessions", "run_sessions", "files"):
            if table in tables:
                new.execute(f"INSERT INTO {table} SELECT * FROM o.{table}")
        new.execute("INSERT INTO meta SELECT key, value FROM o.meta "
                    "WHERE key NOT IN ('schema_version', 'values')")
        new.execute("INSERT INTO meta VALUES('values', ?), ('schema_version', ?)",
                    (str(done), str(SCHEMA_VERSION)))
        runs = new.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        series = new.execute("SELECT COUNT(*) FROM series").fetchone()[0]
        old_runs = new.execute("SELECT COUNT(*) FROM o.runs").fetchone()[0]
        if done != total or runs != old_runs:
            raise FabregError(f"migration of {path} copied {done} of {total} values and "
                              f"{runs} of {old_runs} runs (a value's time must be its run's): "
                              "the store is left as it was")
        new.execute("COMMIT")
        new.execute("DETACH DATABASE o")
        new.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        new.execute("PRAGMA journal_mode=DELETE")  # one file to move into place
        new.execute("PRAGMA journal_mode=WAL")
        return done, runs, series
    except BaseException:
        new.close()
        work.unlink(missing_ok=True)
        Path(f"{work}-wal").unlink(missing_ok=True)
        raise
    finally:
        try:
            new.close()
        except sqlite3.Error:
            pass

"""The fabreg store: every performance value ever ingested, in one SQLite file.

Layout (docs/trends.md): ``series`` names each series once (test, parameters,
system, partition, environment, performance variable); ``samples`` is the long
table of values, one narrow row each (day, series, run, value, band: a value's time is its
run's), kept in the order of the UTC day its value was measured, so that a night appended
is written at the end of the table whatever the history before it (``days`` lists the days
held, ``newest_day`` each series' newest); ``bands`` holds
each distinct unit, reference, thresholds and result once, ``sources`` each input file once;
``sessions``/``run_sessions`` come from ReFrame's results DB; the ``long`` view joins them
into one row per value; ``files`` holds how far each input file was read
(:mod:`fabreg.review.filemarks`), written with the values it covers.

Ingest is idempotent (a value is unique per series and run) and safe to
run concurrently: WAL journal, a busy timeout, and one ``BEGIN IMMEDIATE``
transaction per input file, so two ingests at once serialise instead of losing
or duplicating values.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import json.encoder
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from fabreg.errors import FabregError
from fabreg.review.filemarks import FileMark
from fabreg.review.gc_pause import collector_paused
from fabreg.review.link_params import ParamsReader
from fabreg.review.perflog import Run, RunLink, Sample, Session

if TYPE_CHECKING:  # numpy is imported by the readers that build arrays: `fabreg ingest`
    import numpy as np  # only writes, and numpy's import costs more than a night's values

DEFAULT_DB = os.path.join("perflogs", "fabreg.db")
#: Seconds to wait for another process's write lock before giving up.
DEFAULT_TIMEOUT = 60.0
#: Pages the WAL may hold before a commit copies them into the store (SQLite's default is
#: 1,000). A night appended to a large store touches about one page per series (10,000
#: series: 60 MB of WAL): with the default, a dozen checkpoints of two fsyncs each; with this,
#: one when the store is closed. The WAL file is deleted after that final checkpoint. A commit
#: not yet checkpointed that a power loss takes away is read again by the next ingest (its
#: file mark went with it).
WAL_CHECKPOINT_PAGES = 32768
#: Runs without a results-DB session belong to the same derived session while
#: consecutive runs are less than this many seconds apart.
SESSION_GAP = 3600.0

#: The layout this code writes; ``fabreg migrate`` rewrites the older ones. 1: the first
#: (unit, reference, thresholds, result and the input file's path in every row; about 120
#: bytes a value). 2: ``samples`` in series order, so that each night appended rewrote
#: nearly every page of it (a 10,000-node sweep's store: all its gigabytes, each night).
SCHEMA_VERSION = 3

#: Seconds in the days ``samples`` is ordered by (UTC, from the epoch).
DAY_SECONDS = 86400
#: A day beyond any stored one, either way: a day range left open.
ANY_DAY = 2**62

SCHEMA = """
CREATE TABLE IF NOT EXISTS series(
    id INTEGER PRIMARY KEY,
    key_hash INTEGER NOT NULL,
    test TEXT NOT NULL,
    system TEXT NOT NULL,
    partition TEXT NOT NULL,
    environ TEXT NOT NULL,
    perfvar TEXT NOT NULL,
    params TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS series_by_key ON series(key_hash);
CREATE TABLE IF NOT EXISTS sources(
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS runs(
    id INTEGER PRIMARY KEY,
    run_key TEXT NOT NULL,
    key_hash INTEGER NOT NULL,
    time REAL NOT NULL,
    jobid TEXT NOT NULL DEFAULT '',
    nodelist TEXT NOT NULL DEFAULT '',
    session TEXT,
    from_results_db INTEGER NOT NULL DEFAULT 0,
    source_id INTEGER NOT NULL DEFAULT 0,
    attrs TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS runs_by_key ON runs(key_hash);
CREATE INDEX IF NOT EXISTS runs_by_job ON runs(jobid);
CREATE TABLE IF NOT EXISTS bands(
    id INTEGER PRIMARY KEY,
    unit TEXT NOT NULL,
    ref REAL,
    lower_thres REAL,
    upper_thres REAL,
    result TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS bands_by_content ON bands(unit, ref, lower_thres, upper_thres, result);
CREATE TABLE IF NOT EXISTS samples(
    day INTEGER NOT NULL,
    series_id INTEGER NOT NULL REFERENCES series(id),
    run_id INTEGER NOT NULL REFERENCES runs(id),
    value REAL NOT NULL,
    band_id INTEGER NOT NULL REFERENCES bands(id),
    PRIMARY KEY(day, series_id, run_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS days(day INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS newest_day(
    series_id INTEGER PRIMARY KEY,
    day INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions(
    uuid TEXT PRIMARY KEY,
    start REAL,
    end REAL,
    extras TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS run_sessions(
    run_key TEXT PRIMARY KEY,
    session TEXT NOT NULL
);
CREATE VIEW IF NOT EXISTS long AS
    SELECT s.test, s.params, s.system, s.partition, s.environ, s.perfvar,
           r.time, v.value, b.unit, b.ref, b.lower_thres, b.upper_thres, b.result,
           r.jobid, r.nodelist, COALESCE(r.session, l.session) AS session,
           x.extras AS session_extras, r.attrs AS run_attributes, f.path AS source
    FROM samples v CROSS JOIN series s ON s.id = v.series_id JOIN runs r ON r.id = v.run_id
    JOIN bands b ON b.id = v.band_id LEFT JOIN sources f ON f.id = r.source_id
    LEFT JOIN run_sessions l ON l.run_key = r.run_key
    LEFT JOIN sessions x ON x.uuid = COALESCE(r.session, l.session);
CREATE TABLE IF NOT EXISTS files(
    path TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    device INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    lines INTEGER NOT NULL,
    head_digest TEXT NOT NULL,
    tail_digest TEXT NOT NULL,
    header TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
INSERT OR IGNORE INTO meta VALUES('values', '0');
""" + f"INSERT OR IGNORE INTO meta VALUES('schema_version', '{SCHEMA_VERSION}');"


#: Per-series state of ``fabreg trends --incremental`` (:mod:`fabreg.review.trend_state`),
#: made by its first run: the first run the next one reads, the runs before it, what came
#: before the window (``fabreg.review.trends.Window``: the margin read before it, the number
#: and sum of the runs at its first level, their noise and how many runs it comes from), and
#: the changes before it (JSON, '' when none); the settings it was made with are in ``meta``.
TREND_STATE = """
CREATE TABLE IF NOT EXISTS trend_state(
    series_id INTEGER PRIMARY KEY,
    start REAL NOT NULL,
    before INTEGER NOT NULL,
    margin INTEGER NOT NULL,
    level_runs INTEGER NOT NULL,
    level_sum REAL NOT NULL,
    sigma REAL NOT NULL,
    sigma_runs INTEGER NOT NULL,
    kept TEXT NOT NULL
)"""
TREND_STATE_COLUMNS = ("series_id", "start", "before", "margin", "level_runs", "level_sum",
                       "sigma", "sigma_runs", "kept")


#: The verdicts of the last whole ``fabreg trends --incremental`` run, for the store's readers
#: (``fabreg report``, ``export prometheus``, ``serve-metrics``): only the series that are not
#: stable without a change; ``meta`` holds the settings and the newest run they stand for.
TREND_VERDICTS = """
CREATE TABLE IF NOT EXISTS trend_verdicts(
    series_id INTEGER PRIMARY KEY,
    verdict TEXT NOT NULL,
    changes TEXT NOT NULL,
    noise REAL NOT NULL
)"""

#: A string as ``json.dumps`` writes it (ASCII, escaped; the C encoder)
_json_str = json.encoder.encode_basestring_ascii


#: Run attributes longer than this are kept once in ``blobs`` (``Store._attrs_text``).
BLOB_CHARS = 4096
#: How ``runs.attrs`` names a kept value: ``blob:`` and its ``key_hash``.
BLOB_PREFIX = "blob:"
BLOBS = "CREATE TABLE IF NOT EXISTS blobs(hash INTEGER PRIMARY KEY, text TEXT NOT NULL)"


def day_of(when: float) -> int:
    """``samples.day`` of a value measured at ``when`` (seconds since the epoch)."""
    return math.floor(when / DAY_SECONDS)


def day_sql(column: str) -> str:
    """:func:`day_of` as an SQL expression of ``column`` (CAST truncates toward zero)."""
    quotient = f"({column}) / {float(DAY_SECONDS)!r}"
    return (f"(CAST({quotient} AS INTEGER) - "
            f"({quotient} < 0 AND {quotient} != CAST({quotient} AS INTEGER)))")


def key_hash(key: str) -> int:
    """The 64-bit hash a run or a series is looked up by (``runs.key_hash``,
    ``series.key_hash``): an index of 8-byte integers instead of one of the whole key text
    (a fifth of the first layout's bytes; most of a link series' row). Two keys with one
    hash are told apart by the key itself."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big",
                          signed=True)


def schema_version(conn: sqlite3.Connection, schema: str = "main") -> int:
    """The layout of the store ``conn`` opened (``meta.schema_version``; 1 when a store of the
    first layout lacks it)."""
    try:
        row = conn.execute(f"SELECT value FROM {schema}.meta WHERE key = 'schema_version'"
                           ).fetchone()
    except sqlite3.OperationalError:
        return 1
    return int(row[0]) if row else 1


@dataclass(frozen=True)
class SeriesKey:
    """What identifies a series."""

    test: str
    params: tuple[tuple[str, str], ...]
    system: str
    partition: str
    environ: str
    perfvar: str

    def as_json_object(self) -> dict[str, object]:
        """The ``series`` object of ``fabreg trends --format json``."""
        return {"test": self.test, "parameters": dict(self.params), "perfvar": self.perfvar,
                "system": self.system, "partition": self.partition, "environ": self.environ}

    def text(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.params)
        return (f"{self.test} {params} {self.system}:{self.partition}+{self.environ} "
                f"{self.perfvar}").replace("  ", " ")

    @property
    def param(self) -> dict[str, str]:
        return dict(self.params)


class _RunTexts(dict):
    """Builds each run's stored parameters and key prefix, escaping each parameter pair once:
    kept for one file, whose runs share most pairs (a night of a 10,000-node sweep has
    150,000 link runs that differ in two). Maps a pair to its two texts, ``[name,value]``
    and ``name: value``; None for a pair that is not two strings."""

    def __init__(self) -> None:
        super().__init__()
        self._prefixes: dict[tuple, str] = {}

    def __missing__(self, pair: tuple[str, str]) -> tuple[str, str] | None:
        name, value = pair
        texts = None
        if type(name) is str and type(value) is str:
            name, value = _json_str(name), _json_str(value)
            texts = (f"[{name},{value}]", f"{name}: {value}")
        self[pair] = texts
        return texts

    def _pairs(self, params: tuple[tuple[str, str], ...]) -> list[tuple[str, str]] | None:
        try:
            pairs = list(map(self.__getitem__, params))
        except TypeError:  # a pair that cannot be a key: written by json.dumps
            return None
        return None if None in pairs else pairs

    def params_text(self, params: tuple[tuple[str, str], ...]) -> str:
        """``series.params``, the parameters as stored: ``json.dumps(dict(params),
        sort_keys=True)``, params being sorted, by JSON's own string encoder."""
        pairs = self._pairs(params)
        if pairs is None:
            return json.dumps(dict(params), sort_keys=True)
        return "{" + ", ".join([p[1] for p in pairs]) + "}"

    def link_params(self, sweep: tuple[tuple[str, str], ...]) -> tuple[str, str, str] | None:
        """The stored parameters of a sweep's links, whose parameters are the sweep's
        (``sweep``, sorted, without ``node_a``/``node_b``) and the link's two nodes: (left,
        middle, right) such that ``left + A + middle + B + right`` is ``params_text`` of a
        link, A and B being its nodes' JSON strings. None where ``params_text`` would not join
        pairs (a value that is not a string)."""
        pairs = self._pairs(sweep)
        if pairs is None:
            return None
        i = bisect.bisect_left(sweep, ("node_a",))
        j = bisect.bisect_left(sweep, ("node_b",), i)
        texts = [p[1] for p in pairs]
        left = "{" + "".join(f"{t}, " for t in texts[:i]) + '"node_a": '
        middle = "".join(f", {t}" for t in texts[i:j]) + ', "node_b": '
        right = "".join(f", {t}" for t in texts[j:]) + "}"
        return left, middle, right

    def prefix(self, test: str, params: tuple[tuple[str, str], ...], system: str,
               partition: str, environ: str) -> str:
        """``_key_text`` but its performance variable, the same for every variable of one
        run (kept: asked once a variable)."""
        run = (test, params, system, partition, environ)
        text = self._prefixes.get(run)
        if text is not None:
            return text
        pairs = self._pairs(params)
        names = (test, system, partition, environ)
        if pairs is None or not all(type(v) is str for v in names):
            text = json.dumps([test, params, system, partition, environ],
                              separators=(",", ":"))[:-1] + ","
        else:
            t, sy, pa, en = map(_json_str, names)
            text = f"[{t},[{','.join([p[0] for p in pairs])}],{sy},{pa},{en},"
        self._prefixes[run] = text
        return text


def _key_text(prefix: str, perfvar: str) -> str:
    """The text a series' hash is taken of: ``json.dumps([test, params, system, partition,
    environ, perfvar], separators=(",", ":"))``, from its run's prefix (``_RunTexts``, built from
    JSON's own string encoder: a night of a 10,000-node sweep has 450,000 of them)."""
    return prefix + _json_str(perfvar) + "]"


@dataclass
class SeriesData:
    """All values of one series, oldest first."""

    id: int
    key: SeriesKey
    unit: str
    time: np.ndarray
    value: np.ndarray
    ref: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    result: list[str]
    session: list[str]
    jobid: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.value)


def series_order(series: SeriesData) -> tuple:
    """The order the loads return series in: by test, parameters, system, partition,
    environment and variable."""
    k = series.key
    return (k.test, k.params, k.system, k.partition, k.environ, k.perfvar)


class LinkValue(NamedTuple):
    """A per-link series' newest value and its run: all a sweep's judgement needs of each
    link (a tuple: 450,000 made for a 10,000-node sweep)."""

    key: SeriesKey  # the series' key without ``node_a``/``node_b`` (fields here)
    node_a: str
    node_b: str
    time: float
    jobid: str
    value: float


@dataclass(frozen=True)
class RunValue:
    """One stored value with its run's attributes (``runs.attrs``: ``ref_keys``, ...)."""

    test: str
    environ: str
    perfvar: str
    time: float
    value: float
    unit: str
    run_key: str
    attrs: dict[str, str]
    partition: str = ""


@dataclass
class IngestCount:
    added: int = 0
    seen: int = 0
    sessions: int = 0


class Store:
    """A connection to the fabreg SQLite store."""


    def __init__(self, path: str | os.PathLike[str], create: bool = True,
                 timeout: float | None = None) -> None:
        self.path = Path(path)
        if timeout is None:
            timeout = float(os.environ.get("FABREG_DB_TIMEOUT", DEFAULT_TIMEOUT))
        self.timeout = timeout
        #: bands.id by (unit, ref, lower, upper, result): bands are never changed or removed
        self._bands: dict[tuple, int] = {}
        #: the latest start of a ``trends --incremental`` window (None: not read yet)
        self._latest_window: float | None = None
        #: run id -> session (``values_between``; None: not read yet)
        self._sessions: dict[int, str] | None = None
        #: run id -> time (``_run_times``; None: not read yet)
        self._times: np.ndarray | None = None
        if not self.path.exists() and not create:
            raise FabregError(f"no store at {self.path}: run 'fabreg ingest PATH' first "
                              "(or give --db / FABREG_DB)")
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=timeout,
                                        isolation_level=None)
            self.conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            # WAL + NORMAL: durable at each commit's checkpoint, much faster ingest.
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA cache_size = -65536")
            self.conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
            self._setup(create)
        except sqlite3.DatabaseError as err:
            raise self._error(err) from None

    def _error(self, err: sqlite3.Error) -> FabregError:
        text = str(err)
        if "locked" in text or "busy" in text:
            return FabregError(f"store {self.path} is locked by another process "
                               f"(waited {self.timeout:g} s; set FABREG_DB_TIMEOUT to wait longer)")
        if "not a database" in text or "malformed" in text:
            return FabregError(f"{self.path} is not a fabreg store (SQLite says: {text})")
        return FabregError(f"store {self.path}: {text}")

    def _setup(self, create: bool) -> None:
        tables = {r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if {"series", "samples"} <= tables:
            version = schema_version(self.conn)
            if version > SCHEMA_VERSION:
                raise FabregError(
                    f"store {self.path} has layout {version}, newer than this fabreg's "
                    f"({SCHEMA_VERSION}): read it with the fabreg that wrote it")
            if version != SCHEMA_VERSION:
                raise FabregError(
                    f"store {self.path} has an older layout of fabreg's store ({version}): run "
                    f"'fabreg migrate --db {self.path}' once (it keeps every value, and the "
                    "old file beside the new one)")
            return
        if tables - {"meta"} and not {"series", "samples"} & tables:
            raise FabregError(f"{self.path} is an SQLite file but not a fabreg store "
                              f"(tables: {', '.join(sorted(tables))})")
        if not create:
            raise FabregError(f"store {self.path} is empty: run 'fabreg ingest PATH' first")
        mode = self._journal_mode("WAL")
        if mode.lower() != "wal":  # e.g. a file system without shared memory
            self._journal_mode("DELETE")
        self._script(SCHEMA)

    def _journal_mode(self, mode: str) -> str:
        """Set the journal mode, waiting like any write for another process's lock.

        SQLite answers a journal-mode change with "database is locked" at once, without
        calling the busy handler, while another connection reads or creates the file: two
        ingests starting on a new store at the same moment hit this.
        """
        deadline = time.monotonic() + self.timeout
        pause = 0.001
        while True:
            try:
                return str(self.conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0])
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _script(self, sql: str) -> None:
        try:
            self.conn.executescript("BEGIN IMMEDIATE;" + sql + "COMMIT;")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction for the block: all of it or nothing, and one commit. (The
        connection is in autocommit mode, where ``with conn:`` begins none: each of the
        450,000 verdicts of a 10,000-node sweep was its own commit, 11 s instead of 1.)"""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------

    def add(self, samples: Sequence[Sample], sessions: Iterable[Session] = (),
            links: Iterable[RunLink] = (), from_results_db: bool = False,
            mark: FileMark | None = None) -> IngestCount:
        """Add one input file's content in one transaction; return what was new.

        Perflogs are the reference copy of a value: results-DB values are added only
        for runs no perflog line holds, and a perflog line replaces the results-DB copy
        of its run (the two may name parameters slightly differently). ``mark`` (how far
        the file was read) is stored in the same transaction as the values it covers.
        """
        count = IngestCount(seen=len(samples))
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                before = self.conn.total_changes
                self.conn.executemany(
                    "INSERT INTO sessions(uuid, start, end, extras) VALUES(?,?,?,?) "
                    "ON CONFLICT(uuid) DO UPDATE SET extras=excluded.extras "
                    "WHERE extras != excluded.extras",
                    [(s.uuid, s.start, s.end, json.dumps(s.extras, sort_keys=True))
                     for s in sessions])
                count.sessions = self.conn.total_changes - before
                self.conn.executemany("INSERT OR IGNORE INTO run_sessions VALUES(?,?)",
                                      [(link.run_key, link.session) for link in links])
                runs = {id(s.run): s.run for s in samples}
                run_ids, removed = self._run_ids(list(runs.values()), from_results_db)
                ids = self._series_ids(samples)
                bands = self._band_ids(samples)
                # run id -> time, and id(Run) -> (day, run id), of the runs whose samples
                # this file owns
                run_time = {rid: runs[key].time for key, rid in run_ids.items()}
                placed = {key: (day_of(run_time[rid]), rid) for key, rid in run_ids.items()}
                rows = []
                for sid, band, s in zip(ids, bands, samples):
                    where = placed.get(id(s.run))
                    if where is not None:
                        day, rid = where
                        rows.append((day, sid, rid, s.value, band))
                rows.sort()  # the table's order: a night goes in at its end, in one pass
                before = self.conn.total_changes
                self.conn.executemany(
                    "INSERT OR IGNORE INTO samples(day, series_id, run_id, value, band_id) "
                    "VALUES(?,?,?,?,?)", rows)
                net = self.conn.total_changes - before - removed
                self._note_days(rows)
                self._forget_trend_states(rows, run_time)
                count.added = max(0, net)
                if net:
                    self.conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? "
                                      "WHERE key = 'values'", (net,))
                if mark is not None:
                    self.conn.execute(
                        "INSERT OR REPLACE INTO files(path, kind, device, inode, size, "
                        "mtime_ns, offset, lines, head_digest, tail_digest, header) "
                        "VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                        (mark.path, mark.kind, mark.device, mark.inode, mark.size,
                         mark.mtime_ns, mark.offset, mark.lines, mark.head_digest,
                         mark.tail_digest, mark.header))
                self.conn.execute("COMMIT")
            except BaseException:
                self._bands.clear()  # it may hold bands the rollback takes away
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as err:
            raise self._error(err) from None
        return count

    def _note_days(self, rows: list[tuple]) -> None:
        """Keep ``days`` and ``newest_day`` up to date with ``rows`` (sorted samples rows):
        the readers find a series' values day by day, and its newest value in one seek."""
        self.conn.executemany("INSERT OR IGNORE INTO days VALUES(?)",
                              [(day,) for day in sorted({row[0] for row in rows})])
        newest = {row[1]: row[0] for row in rows}  # sorted by day: the last is the newest
        self.conn.executemany(
            "INSERT INTO newest_day VALUES(?,?) ON CONFLICT(series_id) DO UPDATE "
            "SET day = excluded.day WHERE excluded.day > newest_day.day",
            sorted(newest.items()))

    def _run_ids(self, runs: list[Run], from_results_db: bool) -> tuple[dict[int, int], int]:
        """Insert runs; map id(Run) -> runs.id for the runs whose samples this file owns, and
        count the samples removed because a perflog took a run over from a results DB."""
        removed = 0
        hashes = {k: key_hash(k) for k in {r.key for r in runs}}  # a sweep's links: one key
        known: dict[str, tuple[int, int]] = {}
        wanted = list(set(hashes.values()))
        for i in range(0, len(wanted), 500):  # runs stored before (a file read again)
            chunk = wanted[i:i + 500]
            for rid, key, flag in self.conn.execute(
                    "SELECT id, run_key, from_results_db FROM runs WHERE key_hash IN "
                    f"({','.join('?' * len(chunk))})", chunk):
                if key in hashes:  # the same hash is the same key but once in 2**64
                    known[key] = (rid, flag)
        new: dict[str, Run] = {}
        for r in runs:
            if r.key not in known:
                new.setdefault(r.key, r)
        if new:
            # Under our write lock SQLite numbers new rows max(id) + 1, + 2, ... in order.
            last_id = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0]
            sources = self._source_ids({r.source for r in new.values()})
            flag = int(from_results_db)
            self.conn.executemany(
                "INSERT INTO runs(id, run_key, key_hash, time, jobid, nodelist, session, "
                "from_results_db, source_id, attrs) VALUES(?,?,?,?,?,?,?,?,?,?)",
                [(last_id + 1 + i, k, hashes[k], r.time, r.jobid, r.nodelist, r.session, flag,
                  sources[r.source], self._attrs_text(r.attrs))
                 for i, (k, r) in enumerate(new.items())])
            known.update({k: (last_id + 1 + i, flag) for i, k in enumerate(new)})
        out: dict[int, int] = {}
        takeover = []
        for r in runs:
            rid, flag = known[r.key]
            if from_results_db and not flag:
                continue  # a perflog already holds this run
            if not from_results_db and flag:
                takeover.append(rid)
            out[id(r)] = rid
        if takeover:  # rare: the results DB was ingested before its perflogs
            before = self.conn.total_changes
            self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS takeover(id INTEGER PRIMARY KEY)")
            self.conn.execute("DELETE FROM takeover")
            self.conn.executemany("INSERT OR IGNORE INTO takeover VALUES(?)",
                                  [(i,) for i in takeover])
            taken_ids = set(takeover)
            days = sorted({day_of(r.time) for r in runs if known[r.key][0] in taken_ids})
            marks = ",".join("?" * len(days))
            touched = [row[0] for row in self.conn.execute(
                f"SELECT DISTINCT series_id FROM samples WHERE day IN ({marks}) "
                "AND run_id IN (SELECT id FROM takeover)", days)]
            self.conn.execute(f"DELETE FROM samples WHERE day IN ({marks}) "
                              "AND run_id IN (SELECT id FROM takeover)", days)
            removed = self.conn.total_changes - before
            self._renew_newest_days(touched)
            self.conn.executemany("UPDATE runs SET from_results_db=0 WHERE id=?",
                                  [(i,) for i in takeover])
            # The perflog's view of the run's attributes wins too.
            attrs = {r.key: r.attrs for r in runs}
            taken = set(takeover)
            self.conn.executemany(
                "UPDATE runs SET attrs=? WHERE id=? AND run_key=?",
                [(json.dumps(attrs[k], sort_keys=True), i, k)
                 for k, (i, _) in known.items() if i in taken])
        return out, removed

    def _renew_newest_days(self, series: list[int]) -> None:
        """``newest_day`` of these series found again from their values (after some were
        removed): a seek per series and day held, a rare case."""
        self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS renewed(id INTEGER PRIMARY KEY)")
        self.conn.execute("DELETE FROM renewed")
        self.conn.executemany("INSERT INTO renewed VALUES(?)", [(i,) for i in series])
        self.conn.execute("DELETE FROM newest_day WHERE series_id IN (SELECT id FROM renewed)")
        self.conn.execute(
            "INSERT INTO newest_day SELECT v.series_id, MAX(v.day) FROM days d CROSS JOIN "
            "samples v ON v.day = d.day AND v.series_id IN (SELECT id FROM renewed) "
            "GROUP BY v.series_id")

    def _source_ids(self, paths: set[str]) -> dict[str, int]:
        """``sources.id`` of each input file path, adding the paths not stored yet."""
        self.conn.executemany("INSERT OR IGNORE INTO sources(path) VALUES(?)",
                              [(p,) for p in paths])
        marks = ",".join("?" * len(paths))
        return dict(self.conn.execute(
            f"SELECT path, id FROM sources WHERE path IN ({marks})", list(paths)).fetchall())

    def _band_ids(self, samples: Sequence[Sample]) -> list[int]:
        """``bands.id`` of each sample's unit, reference, thresholds and result, adding the
        combinations not stored yet: a band is stored once however many values share it."""
        ids = self._bands
        out = []
        for s in samples:
            band = (s.unit, s.ref, s.lower_thres, s.upper_thres, s.result)
            found = ids.get(band)
            if found is None:
                row = self.conn.execute(  # another process may have added it
                    "SELECT id FROM bands WHERE unit IS ? AND ref IS ? AND lower_thres IS ? "
                    "AND upper_thres IS ? AND result IS ?", band).fetchone()
                if row is None:
                    row = self.conn.execute(
                        "INSERT INTO bands(unit, ref, lower_thres, upper_thres, result) "
                        "VALUES(?,?,?,?,?) RETURNING id", band).fetchone()
                found = ids[band] = row[0]
            out.append(found)
        return out

    def _series_ids(self, samples: Sequence[Sample]) -> list[int]:
        """The series id of each sample, creating series as needed: a few batched statements
        per file, whatever the number of series (a night appended costs little)."""
        # short key -> the series' key (test, param_key, system, partition, environ, perfvar)
        # and its row's columns (test, system, partition, environ, perfvar, params as stored).
        # The short key of a sweep's link (``Run.link``) names its sweep by a number and
        # the link by its nodes: a night of a 10,000-node sweep has 450,000 of them.
        keys: dict[tuple, tuple[tuple, tuple]] = {}
        sweeps: dict[tuple, int] = {}  # a sweep's key but its variable -> its number
        per_sample = []
        last_run = last_sweep = None
        base: tuple = ()
        run_texts = _RunTexts()
        head: tuple = ()
        template: tuple[str, str, str] | None = None
        for sample in samples:
            run = sample.run
            if run is not last_run:  # samples of one run come together
                last_run = run
                link = run.link
                if link is not None and link[0] is not last_sweep:
                    last_sweep = sweep = link[0]
                    template = run_texts.link_params(sweep.param_key)
                    number = sweeps.setdefault((sweep.test, sweep.param_key, sweep.system,
                                                sweep.partition, sweep.environ), len(sweeps))
                full = (run.test, run.param_key, run.system, run.partition, run.environ)
                if link is None or template is None:
                    base = (None, *full)
                    params = run_texts.params_text(run.param_key)
                else:
                    base = (number, link[1], link[2])
                    left, middle, right = template
                    params = (f"{left}{_json_str(link[1])}{middle}{_json_str(link[2])}"
                              f"{right}")
                head = (run.test, run.system, run.partition, run.environ)
            short = (*base, sample.perfvar)
            if short not in keys:
                keys[short] = ((*full, sample.perfvar), (*head, sample.perfvar, params))
            per_sample.append(short)
        ids = self._lookup_series(keys, run_texts)
        missing = [short for short in keys if short not in ids]
        if missing:
            new: dict[tuple, int] = {}  # columns -> id: one series reached by two short keys
            rows = []
            # Under our write lock SQLite numbers new rows max(id) + 1, + 2, ... in order.
            last_id = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM series").fetchone()[0]
            for short in missing:
                key, columns = keys[short]
                found = new.get(columns)
                if found is None:
                    found = new[columns] = last_id + 1 + len(rows)
                    rows.append((found, key_hash(_key_text(run_texts.prefix(*key[:5]), key[5])),
                                 *columns))
                ids[short] = found
            self.conn.executemany(
                "INSERT INTO series(id, key_hash, test, system, partition, environ, perfvar, "
                "params) VALUES(?,?,?,?,?,?,?,?)", rows)
        return [ids[short] for short in per_sample]

    def _lookup_series(self, keys: dict[tuple, tuple[tuple, tuple]], run_texts: _RunTexts
                       ) -> dict[tuple, int]:
        """Stored series ids of the keys stored, by short key. ``keys``: short key -> the key
        (test, params, system, partition, environ, perfvar) and its row's columns as written
        (``_series_ids``).

        Found by those columns where the keys are half the stored series or more (a night of
        a sweep: every link again; the table read in order costs less than hashing each key
        and looking it up); the others by their hash (``series.key_hash``), told apart from
        keys with the same hash by the columns themselves (the parameters' text as written,
        else as read: a store written by other code)."""
        out: dict[tuple, int] = {}
        stored = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM series").fetchone()[0]
        if stored and 2 * len(keys) >= stored:
            with collector_paused():
                out.update(self._by_columns(keys))
        # hash -> (the row's columns as written, the key) of each key with it
        wanted: dict[int, list[tuple[tuple, tuple, tuple]]] = {}
        for short, (key, columns) in keys.items():
            if short not in out:
                text = _key_text(run_texts.prefix(*key[:5]), key[5])
                wanted.setdefault(key_hash(text), []).append((columns, key, short))
        if not wanted or not stored:
            return out
        for row in self._series_rows(list(wanted), stored):
            for columns, key, short in wanted.get(row[0], ()):
                if (row[1:7] == columns
                        or (row[1:6] == columns[:5]
                            and tuple(sorted(json.loads(row[6]).items())) == key[1])):
                    out[short] = row[7]
        return out

    def _by_columns(self, keys: dict[tuple, tuple[tuple, tuple]]
                    ) -> Iterator[tuple[tuple, int]]:
        """(short key, id) of the stored ones of these keys, found by their columns."""
        heads = {columns[:4] for _, columns in keys.values()}
        if len(heads) == 1:  # one test on one system: by its other columns
            (head,) = heads
            by_columns = {head + row[:2]: row[2] for row in self.conn.execute(
                "SELECT perfvar, params, id FROM series WHERE test = ? AND system = ? "
                "AND partition = ? AND environ = ?", head)}
        else:
            by_columns = {row[:6]: row[6] for row in self.conn.execute(
                "SELECT test, system, partition, environ, perfvar, params, id FROM series")}
        for short, (_, columns) in keys.items():
            found = by_columns.get(columns)
            if found is not None:
                yield short, found

    def _series_rows(self, hashes: list[int], stored: int) -> Iterator[tuple]:
        """The stored series rows (hash, test, system, partition, environ, perfvar, params,
        id) of these hashes, and maybe others: when they are half the ``stored`` series or
        more (a first ingest of a sweep into a store), the table read in order costs half
        of looking each one up by the hash index."""
        columns = "key_hash, test, system, partition, environ, perfvar, params, id"
        if 2 * len(hashes) >= stored:
            yield from self.conn.execute(f"SELECT {columns} FROM series")
            return
        for i in range(0, len(hashes), 500):
            chunk = hashes[i:i + 500]
            yield from self.conn.execute(
                f"SELECT {columns} FROM series WHERE key_hash IN "
                f"({','.join('?' * len(chunk))})", chunk)

    # -- reading ---------------------------------------------------------------------

    def sessions(self) -> dict[str, Session]:
        """Results-DB sessions, by uuid."""
        rows = self._query("SELECT uuid, start, end, extras FROM sessions ORDER BY start")
        return {u: Session(u, s or 0.0, e or 0.0, json.loads(x)) for u, s, e, x in rows}

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as err:
            raise self._error(err) from None

    def count(self) -> tuple[int, int]:
        """(number of series, number of values); the value count is kept by each ingest, so
        this costs nothing however large the store."""
        nseries = self._query("SELECT COUNT(*) FROM series")[0][0]
        kept = self._query("SELECT value FROM meta WHERE key = 'values'")
        nvalues = int(kept[0][0]) if kept else self._query("SELECT COUNT(*) FROM samples")[0][0]
        return nseries, nvalues

    def file_marks(self) -> list[FileMark]:
        """How far each input file was read (see :mod:`fabreg.review.filemarks`)."""
        try:
            rows = self.conn.execute(
                "SELECT path, kind, device, inode, size, mtime_ns, offset, lines, head_digest, "
                "tail_digest, header FROM files").fetchall()
        except sqlite3.Error as err:
            raise self._error(err) from None
        return [FileMark(*row) for row in rows]

    def runs_of_jobs(self, prefixes: list[str]) -> dict[str, str]:
        """Stored run keys by their key without the time (``name|system|part|env|jobid|``):
        how a run report that dates no test case finds the perflog run of the same job."""
        found: dict[str, str] = {}
        for prefix in prefixes:
            jobid = prefix[:-1].rsplit("|", 1)[-1]
            for (key,) in self._query("SELECT run_key FROM runs WHERE jobid = ? "
                                      "AND from_results_db = 0", (jobid,)):
                if key.startswith(prefix):
                    found[prefix] = key
                    break
        return found

    def run_only_columns(self, add: Iterable[str] = ()) -> frozenset[str]:
        """The columns a site declared run-only (``ingest --run-only``), with ``add`` kept
        for every later ingest: a series must not split when a flag is forgotten."""
        row = self._query("SELECT value FROM meta WHERE key = 'run_only'")
        known = set(json.loads(row[0][0])) if row else set()
        new = known | {c.lstrip("%") for c in add if c.strip()}
        if new != known:
            try:
                with self._transaction():
                    self.conn.execute("INSERT OR REPLACE INTO meta VALUES('run_only', ?)",
                                      (json.dumps(sorted(new)),))
            except sqlite3.Error as err:
                raise self._error(err) from None
        return frozenset(new)

    def session_ids(self) -> set[str]:
        """The uuids of the results-DB sessions the store holds."""
        return {r[0] for r in self._query("SELECT uuid FROM sessions")}

    def systems(self) -> list[str]:
        """The systems the store holds values of."""
        return [r[0] for r in self._query("SELECT DISTINCT system FROM series ORDER BY system")]

    def run_values(self, system: str, since: float | None = None) -> list[RunValue]:
        """Every value of ``system`` (at or after ``since``), with its run's attributes.

        Series lose what describes one run (the reference key it was judged by, the
        transport used); readers that need it per value read it here.
        """
        sql = ("SELECT s.test, s.environ, s.perfvar, r.time, v.value, b.unit, r.run_key, "
               "r.attrs, s.partition FROM samples v CROSS JOIN series s ON s.id = v.series_id "
               "JOIN runs r ON r.id = v.run_id JOIN bands b ON b.id = v.band_id "
               "WHERE s.system = ?")
        args: list[object] = [system]
        if since is not None:
            sql += " AND v.day >= ? AND r.time >= ?"
            args += [day_of(since), since]
        parsed: dict[str, dict[str, str]] = {}
        out = []
        for test, environ, perfvar, when, value, unit, run_key, attrs, part in self._query(
                sql + " ORDER BY r.time, r.run_key, s.perfvar", args):
            if attrs not in parsed:
                parsed[attrs] = json.loads(attrs or "{}")
            out.append(RunValue(test, environ, perfvar, when, value, unit, run_key,
                                parsed[attrs], part))
        return out

    def _attrs_text(self, attrs: dict[str, str]) -> str:
        """``runs.attrs``: a run's attributes as JSON, each value longer than ``BLOB_CHARS``
        kept once in ``blobs`` and named ``blob:HASH`` (a nightly sweep's pair rounds are the
        same night after night: 1.5 MB a night at 10,000 nodes)."""
        if not attrs:
            return "{}"
        kept = dict(attrs)
        for name, value in attrs.items():
            if isinstance(value, str) and len(value) > BLOB_CHARS:
                blob = key_hash(value)
                self.conn.execute(BLOBS)
                self.conn.execute("INSERT OR IGNORE INTO blobs VALUES(?, ?)", (blob, value))
                (stored,) = self.conn.execute("SELECT text FROM blobs WHERE hash = ?",
                                              (blob,)).fetchone()
                if stored == value:  # else two texts with one hash: kept in the run
                    kept[name] = f"{BLOB_PREFIX}{blob}"
        return json.dumps(kept, sort_keys=True)

    def run_attributes(self, system: str, jobid: str, time: float) -> dict[str, str]:
        """The attributes of one run (``runs.attrs``, blobs read back), found by system, job
        id and time."""
        rows = self._query("SELECT run_key, attrs FROM runs WHERE jobid = ? AND time = ?",
                           (jobid, time))
        out: dict[str, str] = {}
        for key, attrs in rows:  # the key: name|system|partition|environ|jobid|time
            if key.rsplit("|", 5)[1] == system:
                out.update(json.loads(attrs or "{}"))
        for name, value in out.items():
            if isinstance(value, str) and value.startswith(BLOB_PREFIX):
                try:
                    found = self.conn.execute("SELECT text FROM blobs WHERE hash = ?",
                                              (int(value[len(BLOB_PREFIX):]),)).fetchone()
                except (ValueError, sqlite3.OperationalError):
                    found = None  # a value that only looks like a blob's name: as it is
                if found:
                    out[name] = found[0]
        return out

    def _forget_trend_states(self, rows: list[tuple], run_time: dict[int, float]) -> None:
        """A value older than the start of its series' trends window (a backfilled perflog)
        would never be read by ``trends --incremental``: that series is judged whole again."""
        if self._latest_window is None:  # once per store opened: a table scan
            try:
                (latest,) = self.conn.execute("SELECT MAX(start) FROM trend_state").fetchone()
            except sqlite3.OperationalError:  # no incremental trends run yet
                latest = None
            self._latest_window = -math.inf if latest is None else latest
        latest = self._latest_window
        early: dict[int, float] = {}
        for _, sid, rid, *_ in rows:
            when = run_time[rid]
            if when >= latest:  # a night appended: inside every window
                continue
            if when < early.get(sid, math.inf):
                early[sid] = when
        if early:
            self.conn.executemany("DELETE FROM trend_state WHERE series_id = ? AND start > ?",
                                  list(early.items()))

    def trend_states(self, settings: str, reading: bool = False) -> dict[int, tuple]:
        """series id -> the rest of its ``trend_state`` row (start, ..., kept). States made
        with other settings are dropped first: their series are read whole (``reading``:
        they are left as they are, and none is returned)."""
        if reading:
            made = self._query("SELECT value FROM meta WHERE key = 'trend_settings'")
            columns = tuple(r[1] for r in self._query("PRAGMA table_info(trend_state)"))
            if not made or made[0][0] != settings or columns != TREND_STATE_COLUMNS:
                return {}
            return {row[0]: row[1:] for row in self._query("SELECT * FROM trend_state")}
        try:
            with self._transaction():
                columns = tuple(r[1] for r in self.conn.execute(
                    "PRAGMA table_info(trend_state)"))
                if columns and columns != TREND_STATE_COLUMNS:
                    self.conn.execute("DROP TABLE trend_state")  # another fabreg's: made anew
                self.conn.execute(TREND_STATE)
                made = self.conn.execute("SELECT value FROM meta WHERE key = 'trend_settings'"
                                         ).fetchone()
                if columns != TREND_STATE_COLUMNS or not made or made[0] != settings:
                    self.conn.execute("DELETE FROM trend_state")
                    self.conn.execute("INSERT OR REPLACE INTO meta VALUES('trend_settings', ?)",
                                      (settings,))
            rows = self.conn.execute("SELECT * FROM trend_state").fetchall()
        except sqlite3.Error as err:
            raise self._error(err) from None
        self._latest_window = None
        return {row[0]: row[1:] for row in rows}

    def save_trend_states(self, states: Iterable[tuple]) -> None:
        """Keep ``trend_state`` rows (series id, start, ..., kept) for the next incremental
        run (after ``trend_states``, which made the table and set its settings)."""
        try:
            with self._transaction():
                self.conn.executemany("INSERT OR REPLACE INTO trend_state "
                                      "VALUES(?,?,?,?,?,?,?,?,?)", list(states))
            self._latest_window = None
        except sqlite3.Error as err:
            raise self._error(err) from None

    def save_trend_verdicts(self, settings: str, rows: Iterable[tuple[int, str, str, float]]
                            ) -> None:
        """Keep the verdicts a whole ``trends --incremental`` run gave (series id, verdict,
        changes as JSON, noise %; a series not among them is stable without a change) for
        the readers of the store, with the settings and the newest run they stand for."""
        try:
            with self._transaction():
                self.conn.execute(TREND_VERDICTS)
                self.conn.execute("DELETE FROM trend_verdicts")
                self.conn.executemany("INSERT INTO trend_verdicts VALUES(?,?,?,?)", list(rows))
                self.conn.execute("INSERT OR REPLACE INTO meta VALUES('trend_verdicts', ?)",
                                  (json.dumps({"settings": settings,
                                               "through": self._newest_run()}),))
        except sqlite3.Error as err:
            raise self._error(err) from None

    def trend_verdicts(self, settings: str) -> dict[int, tuple[str, str, float]] | None:
        """series id -> (verdict, changes as JSON, noise %) as the last whole ``trends
        --incremental`` run left them; None when there is none with these settings or a run
        was ingested after it (its verdicts no longer stand)."""
        made = self._query("SELECT value FROM meta WHERE key = 'trend_verdicts'")
        if not made:
            return None
        stands = json.loads(made[0][0])
        if stands.get("settings") != settings or stands.get("through") != self._newest_run():
            return None
        return {r[0]: r[1:] for r in self._query("SELECT * FROM trend_verdicts")}

    def _newest_run(self) -> list[int]:
        """The highest run id and the values stored: one of them grows with every ingest
        that adds a value."""
        return [self._query("SELECT COALESCE(MAX(id), 0) FROM runs")[0][0], self.count()[1]]

    def value_months(self, since: float | None = None) -> list[tuple[str, str]]:
        """(system, ``YYYY-MM``) of every month holding a run at or after ``since``, from
        the runs (one row a run, not one a value)."""
        months = set()
        for key, when in self._query("SELECT run_key, time FROM runs WHERE time >= ?",
                                     (-math.inf if since is None else since,)):
            system = key.rsplit("|", 5)[1]  # name|system|partition|environ|jobid|time
            months.add((system, datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m")))
        return sorted(months)

    def values_between(self, system: str, start: float, end: float) -> list[tuple]:
        """Every value of ``system`` in [start, end), as the ``long`` view's columns (a
        session the results DB does not name is derived, as ``load`` does), one index range
        a day at a time."""
        if self._sessions is None:
            self._sessions = self._runs_sessions()[0]
        sessions = self._sessions
        rows = self._query(
            "SELECT s.test, s.params, s.system, s.partition, s.environ, s.perfvar, r.time, "
            "v.value, b.unit, b.ref, b.lower_thres, b.upper_thres, b.result, r.jobid, "
            "r.nodelist, r.id, f.path "
            "FROM days d CROSS JOIN samples v ON v.day = d.day "
            "CROSS JOIN series s ON s.id = v.series_id "
            "JOIN runs r ON r.id = v.run_id JOIN bands b ON b.id = v.band_id "
            "LEFT JOIN sources f ON f.id = r.source_id WHERE d.day BETWEEN ? AND ? "
            "AND r.time >= ? AND r.time < ? AND s.system = ? ORDER BY r.time, s.id",
            (day_of(start), day_of(end), start, end, system))
        return [(*row[:15], sessions[row[15]], row[16]) for row in rows]

    def load(self, ids: Iterable[int] | None = None, since: float | None = None,
             until: float | None = None) -> list[SeriesData]:
        """Every series with its values, sessions resolved (results DB, else derived).
        ``ids``: those series only; ``since``/``until``: only the values in that time range
        (inclusive), a series without one left out."""
        if ids is None and since is None and until is None:
            ranges = self.series_ranges(LOADED_AT_ONCE)
            return self._load(self._range_columns(first, last) for first, last in ranges)
        # the days of the range, and in each the series asked for (a seek each) or all
        args: list[object] = []
        where = ""
        if ids is not None:
            where = "AND v.series_id IN (SELECT value FROM json_each(?)) "
            args.append(json.dumps(sorted(set(ids))))
        args += [-ANY_DAY if since is None else day_of(since),
                 ANY_DAY if until is None else day_of(until)]
        sql = (f"SELECT {VALUE_COLUMNS} FROM days d CROSS JOIN samples v ON v.day = d.day "
               f"{where}WHERE d.day BETWEEN ? AND ?")
        columns = self._columns(sql, args)
        low = -math.inf if since is None else since
        high = math.inf if until is None else until
        inside = (columns[1] >= low) & (columns[1] <= high)
        return self._load([columns if inside.all() else [c[inside] for c in columns]], ids)

    def series_ranges(self, size: int) -> list[tuple[int, int]]:
        """The stored series' ids cut into ranges (first, last) of ``size`` series."""
        ids = self.series_ids()
        return [(ids[i], ids[min(i + size, len(ids)) - 1]) for i in range(0, len(ids), size)]

    def series_ids(self) -> list[int]:
        """Every series' id, ascending."""
        return [row[0] for row in self._query("SELECT id FROM series ORDER BY id")]

    def load_newest(self) -> list[SeriesData]:
        """Every series with its newest value only (of two at that time, the later run's):
        what the report's counts, the gauges and a sweep's judgement need of a series, read
        with one index seek per series (``newest_day`` names its day), in proportion to the
        series, not to their history."""
        return self._load([self._columns(NEWEST, ())], newest=True)

    def session_spans(self) -> dict[str, tuple[float, float]]:
        """Session (the results DB's, else derived) -> its first and last run's time: the
        sessions a comparison chooses from, without reading a value."""
        run_session, _, run_time = self._runs_sessions()
        spans: dict[str, tuple[float, float]] = {}
        for run, session in run_session.items():
            when = run_time[run]
            first, last = spans.get(session, (when, when))
            spans[session] = (min(first, when), max(last, when))
        return spans

    def newest_link_values(self) -> list[LinkValue]:
        """Every per-link series (a sweep's pairs and host controls: ``node_a``/``node_b``
        parameters) with its newest value only: what ``fabreg isolate`` judges, read in
        proportion to the links, not to their history (one index seek per series; a
        10,000-node sweep has 450,000 links and a handful of distinct other parameters,
        each parsed once: :mod:`fabreg.review.link_params`)."""
        sql = ("SELECT s.id, s.test, s.system, s.partition, s.environ, s.perfvar, s.params, "
               "r.time, r.jobid, v.value FROM newest_day n CROSS JOIN samples v "
               f"ON {NEWEST_OF_DAY} CROSS JOIN series s ON s.id = n.series_id "
               "JOIN runs r ON r.id = v.run_id ORDER BY n.series_id, r.time, v.run_id")
        reader = ParamsReader()
        with collector_paused():
            # the newest run's of its newest day; of two at the same time, the later run's
            newest = {row[0]: row for row in self._query(sql)}
            # a sweep's links share a handful of keys: each made once
            keys: dict[tuple, SeriesKey] = {}
            out = []
            for _, test, system, part, env, perfvar, params, when, jobid, value in (
                    newest.values()):
                link = reader.link(params)
                if link is None:
                    continue
                rest, a, b = link
                shared = (test, system, part, env, perfvar, rest)
                key = keys.get(shared)
                if key is None:
                    key = keys[shared] = SeriesKey(test, rest, system, part, env, perfvar)
                out.append(LinkValue(key, a, b, when, jobid or "", value))
        return out

    def _runs_sessions(self) -> tuple[dict[int, str], dict[int, str], dict[int, float]]:
        """Run id -> its session (the results DB's, else derived), its job id, its time."""
        import numpy as np  # the readers only (see the imports)

        runs = self._query("SELECT r.id, COALESCE(r.session, l.session), r.time, r.jobid "
                           "FROM runs r LEFT JOIN run_sessions l ON l.run_key = r.run_key")
        derived = derive_sessions(np.array([r[2] for r in runs if r[1] is None], dtype=float))
        return ({r[0]: r[1] if r[1] is not None else derived[r[2]] for r in runs},
                {r[0]: r[3] for r in runs}, {r[0]: r[2] for r in runs})

    def _load(self, parts: Iterable[list[np.ndarray]], ids: Iterable[int] | None = None,
              newest: bool = False) -> list[SeriesData]:
        """The series of the value columns ``parts`` (each by series and time, each series
        whole in one part)."""
        reader = self.reader(ids)
        out: list[SeriesData] = []
        try:
            for columns in parts:
                out += reader.series(columns, newest)
        except sqlite3.Error as err:
            raise self._error(err) from None
        out.sort(key=series_order)
        return out

    def reader(self, ids: Iterable[int] | None = None) -> SeriesReader:
        """What turns the store's value rows into series (``ids``: of those series only),
        read once: a process forked after it can read ranges of series with its own
        connection (:meth:`window_columns`) and make them into series without reading it
        again."""
        import numpy as np  # the readers only (see the imports)

        def table(mapping: dict[int, str]) -> np.ndarray:
            out = np.empty(max(mapping, default=0) + 1, dtype=object)
            for i, text in mapping.items():
                out[i] = text
            return out

        run_session, run_job, _ = self._runs_sessions()
        bands = _Bands.read(self)
        return SeriesReader(self._series_keys(ids), bands, table(run_session), table(run_job),
                            table(bands.result))

    def window_columns(self, first: int, last: int, whole: bool = False) -> list[np.ndarray]:
        """The values ``trends --incremental`` reads of the series with ids ``first`` to
        ``last``, each from its ``trend_state.start`` on (``whole``: all their values), as
        columns (series id, time, run id, value, band id): a range of series, read by one of
        several processes (:meth:`SeriesReader.series` makes them series)."""
        if whole:
            return self._range_columns(first, last)
        try:
            states = self.conn.execute(
                "SELECT series_id, start FROM trend_state WHERE series_id BETWEEN ? AND ? "
                "ORDER BY series_id", (first, last)).fetchall()
            (count,) = self.conn.execute("SELECT COUNT(*) FROM series WHERE id BETWEEN ? AND ?",
                                         (first, last)).fetchone()
        except sqlite3.Error as err:
            raise self._error(err) from None
        if len(states) < count:  # a series without a state yet: read whole
            return self._windows(self._range_columns(first, last), states)
        return self._windows(self._range_columns(first, last, min(s for _, s in states)),
                             states)

    @staticmethod
    def _windows(columns: list[np.ndarray], states: list[tuple[int, float]]
                 ) -> list[np.ndarray]:
        """The values of ``columns`` at or after their series' window start (``states``:
        (series id, start) by series id; a series without one: all its values)."""
        import numpy as np  # the readers only (see the imports)

        if not states or not len(columns[0]):
            return columns
        sid, when = columns[0], columns[1]
        ids = np.array([s[0] for s in states], dtype="int64")
        starts = np.array([s[1] for s in states], dtype="float64")
        at = np.minimum(np.searchsorted(ids, sid), len(ids) - 1)
        start = np.where(ids[at] == sid, starts[at], -np.inf)
        keep = when >= start
        return columns if keep.all() else [c[keep] for c in columns]

    def _range_columns(self, first: int, last: int, since: float = -math.inf
                       ) -> list[np.ndarray]:
        """Every value of the series with ids ``first`` to ``last`` (from the day of
        ``since`` on) as columns by series and time: a range of ids in each day."""
        day = -ANY_DAY if since == -math.inf else day_of(since)
        return self._columns(RANGE, (first, last, day))

    def _columns(self, sql: str, args: Sequence[object]) -> list[np.ndarray]:
        """The values ``sql`` selects (``VALUE_COLUMNS``, in any order) as columns (series
        id, time, run id, value, band id) by series, time and run: a value's time is its
        run's."""
        import numpy as np  # the readers only (see the imports)

        try:
            parts = list(self._column_batches(sql, args))
            run_time = self._run_times()
        except sqlite3.Error as err:
            raise self._error(err) from None
        if not parts:
            return [np.empty(0, dtype=t) for t in COLUMN_TYPES]
        sid, run, value, band = ([np.concatenate(c) for c in zip(*parts)] if len(parts) > 1
                                 else parts[0])
        when = run_time[run]
        order = np.lexsort((run, when, sid))
        return [c[order] for c in (sid, when, run, value, band)]

    def _column_batches(self, sql: str, args: Sequence[object]) -> Iterator[list[np.ndarray]]:
        """The rows ``sql`` selects as columns, 50,000 rows at a time."""
        import numpy as np  # the readers only (see the imports)

        types = [COLUMN_TYPES[i] for i in (0, 2, 3, 4)]
        cursor = self.conn.execute(sql, args)
        with collector_paused():
            while rows := cursor.fetchmany(50000):
                yield [np.array(c, dtype=t) for c, t in zip(zip(*rows), types)]

    def _run_times(self) -> np.ndarray:
        """Each run's time by run id (NaN: no run), read again when runs were added."""
        import numpy as np  # the readers only (see the imports)

        (last,) = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()
        if self._times is None or len(self._times) <= last:
            times = np.full(last + 1, np.nan)
            for rid, when in self.conn.execute("SELECT id, time FROM runs"):
                times[rid] = when
            self._times = times
        return self._times

    def _series_keys(self, ids: Iterable[int] | None = None) -> dict[int, SeriesKey]:
        """Every series' key by id (``ids``: those series' only); a sweep's links' shared
        parameters parsed once, not once a link (:mod:`fabreg.review.link_params`)."""
        where, args = "", []
        if ids is not None:
            where, args = " WHERE id IN (SELECT value FROM json_each(?))", [json.dumps(
                sorted(set(ids)))]
        reader = ParamsReader()
        with collector_paused():
            return {sid: SeriesKey(test, reader.pairs(params), system, part, environ, perfvar)
                    for sid, test, system, part, environ, perfvar, params in self._query(
                        "SELECT id, test, system, partition, environ, perfvar, params "
                        "FROM series" + where, args)}


#: The types of the value columns the readers take in (series id, time, run id, value, band).
COLUMN_TYPES = ("int64", "float64", "int64", "float64", "int64")

#: What the value readers select of ``samples v`` (``Store._columns`` adds each run's time).
VALUE_COLUMNS = "v.series_id, v.run_id, v.value, v.band_id"

#: Every value of the series with ids in a range, from a day on (``Store._range_columns``):
#: one range of the table's key in each day.
RANGE = (f"SELECT {VALUE_COLUMNS} FROM days d "
         "CROSS JOIN samples v ON v.day = d.day AND v.series_id BETWEEN ? AND ? "
         "WHERE d.day >= ?")

#: A series' values of its newest day (``newest_day n``): its newest value is the one of
#: the latest run among them (of two at that time, the later run's).
NEWEST_OF_DAY = "v.day = n.day AND v.series_id = n.series_id"

#: Every series' values of its newest day (the reader keeps the newest).
NEWEST = f"SELECT {VALUE_COLUMNS} FROM newest_day n CROSS JOIN samples v ON {NEWEST_OF_DAY}"

#: Series ``Store.load`` reads and makes into series at a time (their values read at once
#: and sorted: a 10,000-node sweep of 62 nights, 0.6 M values).
LOADED_AT_ONCE = 10000


@dataclass
class SeriesReader:
    """What makes value columns into series (:meth:`Store.reader`)."""

    keys: dict[int, SeriesKey]
    bands: _Bands
    session_of: np.ndarray
    job_of: np.ndarray
    result_of: np.ndarray

    def series(self, columns: list[np.ndarray], newest: bool = False) -> list[SeriesData]:
        """The series of ``columns`` (series id, time, run id, value, band id; each series
        whole, by series and time); ``newest``: a series' last value only."""
        import numpy as np  # the readers only (see the imports)

        sid, time, run, value, band = columns
        if not len(sid):
            return []
        end = len(sid)
        starts = np.flatnonzero(np.concatenate(([True], sid[1:] != sid[:-1])))
        stops = np.append(starts[1:], end)
        if newest:
            starts = stops - 1
        bands, keys = self.bands, self.keys
        ref, lower, upper = bands.ref[band], bands.lower[band], bands.upper[band]
        sessions, jobs, results = self.session_of[run], self.job_of[run], self.result_of[band]
        out = []
        for a, b in zip(starts.tolist(), stops.tolist()):
            out.append(SeriesData(
                id=int(sid[a]), key=keys[int(sid[a])], unit=bands.unit[int(band[b - 1])],
                time=time[a:b], value=value[a:b], ref=ref[a:b], lower=lower[a:b],
                upper=upper[a:b], result=results[a:b].tolist(),
                session=sessions[a:b].tolist(), jobid=jobs[a:b].tolist()))
        return out


@dataclass
class _Bands:
    """The ``bands`` table as arrays indexed by band id, for readers of many values."""

    unit: dict[int, str]
    result: dict[int, str]
    ref: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    @classmethod
    def read(cls, store: Store) -> _Bands:
        import numpy as np  # the readers only (see the imports)

        rows = store._query("SELECT id, unit, ref, lower_thres, upper_thres, result FROM bands")
        size = max((r[0] for r in rows), default=0) + 1
        arrays = [np.full(size, np.nan) for _ in range(3)]
        for bid, _, *limits, _ in rows:
            for array, limit in zip(arrays, limits):
                array[bid] = np.nan if limit is None else limit
        return cls({r[0]: r[1] for r in rows}, {r[0]: r[5] for r in rows}, *arrays)


def derive_sessions(times: np.ndarray, gap: float = SESSION_GAP) -> dict[float, str]:
    """Name sessions for runs the results DB does not know.

    Rule: sort the run times; a new session starts where two consecutive runs are more
    than ``gap`` seconds apart. The session is named ``run-<UTC start>`` after its
    first run, e.g. ``run-20261121T055749Z``.
    """
    import numpy as np  # the readers only (see the imports)

    if len(times) == 0:
        return {}
    uniq = np.unique(times)
    starts = np.concatenate(([True], np.diff(uniq) > gap))
    first = uniq[np.maximum.accumulate(np.where(starts, np.arange(len(uniq)), 0))]
    label = {f: "run-" + datetime.fromtimestamp(f, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
             for f in np.unique(first).tolist()}
    return {t: label[f] for t, f in zip(uniq.tolist(), first.tolist())}

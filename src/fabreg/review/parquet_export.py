"""The store as Parquet files, one per system and month: what DuckDB, Spark or Trino read.

A site whose history outgrows one SQLite file on one machine queries these files with an
engine it already runs, not with fabreg: ``DIR/system=S/month=YYYY-MM/values.parquet``
(Hive-style partitions), one row per value with the columns of the store's ``long`` view
(docs/trends.md). ``--since`` rewrites only the months from that time on, so a nightly export
costs a month of values, not the history. Needs pyarrow (``pip install 'fabreg[parquet]'``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from fabreg.errors import FabregError
from fabreg.review.store import Store

#: The columns of each file, in order, with their Arrow types (``long``'s columns).
COLUMNS = (("test", "string"), ("params", "string"), ("system", "string"),
           ("partition", "string"), ("environ", "string"), ("perfvar", "string"),
           ("time", "timestamp"), ("value", "float64"), ("unit", "string"), ("ref", "float64"),
           ("lower_thres", "float64"), ("upper_thres", "float64"), ("result", "string"),
           ("jobid", "string"), ("nodelist", "string"), ("session", "string"),
           ("source", "string"))


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise FabregError("export parquet needs pyarrow: pip install 'fabreg[parquet]' "
                          "(or pyarrow) into fabreg's environment") from None
    return pa, pq


def month_bounds(month: str) -> tuple[float, float]:
    """``YYYY-MM`` -> [start, end) in seconds since the epoch (UTC)."""
    year, mon = (int(x) for x in month.split("-"))
    start = datetime(year, mon, 1, tzinfo=timezone.utc)
    end = datetime(year + mon // 12, mon % 12 + 1, 1, tzinfo=timezone.utc)
    return start.timestamp(), end.timestamp()


def _schema(pa):
    types = {"string": pa.string(), "float64": pa.float64(),
             "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS])


def export(store: Store, out: Path, since: float | None = None,
           progress: Callable[[int, int], None] | None = None) -> list[tuple[Path, int]]:
    """Write the months of values at or after ``since`` (all by default); each file is
    written beside its place and renamed over it, so a reader never sees half a month.
    Returns (file, rows) per file written."""
    pa, pq = _pyarrow()
    schema = _schema(pa)
    months = store.value_months(since)
    written = []
    for i, (system, month) in enumerate(months):
        start, end = month_bounds(month)
        rows = store.values_between(system, start, end)
        columns = list(zip(*rows)) if rows else [[] for _ in COLUMNS]
        arrays = []
        for (name, kind), values in zip(COLUMNS, columns):
            if kind == "timestamp":
                values = [int(round(t * 1e6)) for t in values]
            arrays.append(pa.array(values, type=schema.field(name).type))
        table = pa.Table.from_arrays(arrays, schema=schema)
        target = out / f"system={system}" / f"month={month}" / "values.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".values.parquet.{os.getpid()}")  # hidden: engines skip it
        pq.write_table(table, partial, compression="zstd")
        partial.replace(target)
        written.append((target, table.num_rows))
        if progress is not None:
            progress(i + 1, len(months))
    return written  # nothing else under DIR: engines read every file there as Parquet

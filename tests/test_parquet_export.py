"""``fabreg export parquet``: the store as Parquet files per system and month, read back by
a real engine (Arrow's dataset reader, as DuckDB/Spark/Trino read Hive partitions)."""

from __future__ import annotations

import sqlite3

import pyarrow.dataset as ds
from conftest import fabreg

from fabreg.review.synthetic import generate


def _store(tmp_path):
    data = generate(tmp_path / "logs", sessions=70, transports=("tcp",), nodes=(2,), seed=2)
    db = tmp_path / "store.db"
    fabreg("ingest", str(data.root), db=db, check=True)
    return db


def test_every_value_is_in_its_month_and_read_back(tmp_path):
    db = _store(tmp_path)
    out = tmp_path / "parquet"
    proc = fabreg("export", "parquet", "--out", str(out), db=db)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet"))
    assert files == [f"system=bench/month=2025-0{m}/values.parquet" for m in (1, 2, 3)]
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT COUNT(*), SUM(value) FROM long").fetchone()
        first = conn.execute("SELECT test, perfvar, time, value, unit, jobid FROM long "
                             "ORDER BY time, test, perfvar LIMIT 1").fetchone()
    assert table.num_rows == stored[0] == int(proc.stdout.split(": ")[1].split()[0])
    assert abs(sum(table.column("value").to_pylist()) - stored[1]) < 1e-6 * stored[1]
    rows = sorted(table.to_pylist(), key=lambda r: (r["time"], r["test"], r["perfvar"]))
    got = rows[0]
    assert (got["test"], got["perfvar"], got["time"].timestamp(), got["value"], got["unit"],
            got["jobid"]) == first
    assert got["month"] == "2025-01" and got["system"] == "bench" and got["session"]


def test_since_rewrites_only_the_months_from_then_on(tmp_path):
    db = _store(tmp_path)
    out = tmp_path / "parquet"
    fabreg("export", "parquet", "--out", str(out), db=db, check=True)
    january = out / "system=bench" / "month=2025-01" / "values.parquet"
    march = out / "system=bench" / "month=2025-03" / "values.parquet"
    before = january.stat().st_mtime_ns, march.stat().st_mtime_ns
    march.unlink()
    proc = fabreg("export", "parquet", "--out", str(out), "--since", "2025-03-01", db=db)
    assert proc.returncode == 0 and "wrote 1 file(s)" in proc.stdout, proc.stderr
    assert january.stat().st_mtime_ns == before[0] and march.exists()


def test_bad_out_and_since_are_one_line_errors(tmp_path):
    db = _store(tmp_path)
    (tmp_path / "file").write_text("x")
    for args, says in ((["--out", str(tmp_path / "file")], "a file is in the way"),
                       (["--out", str(tmp_path / "no" / "dir")], "no directory"),
                       (["--out", str(tmp_path / "p"), "--since", "yesterday-ish"], "--since")):
        proc = fabreg("export", "parquet", *args, db=db)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1

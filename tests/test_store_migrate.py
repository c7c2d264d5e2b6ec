"""`fabreg migrate`: stores of the older layouts, written by earlier releases from real
perflogs, sweeps and run reports (tests/data/stores/README.md), rewritten with nothing lost."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SCHEMA1 = DATA / "stores" / "schema1.db"
SCHEMA2 = DATA / "stores" / "schema2.db"


def long_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT * FROM long ORDER BY test, params, system, partition, "
                            "environ, perfvar, time, jobid").fetchall()


@pytest.fixture(params=[SCHEMA1, SCHEMA2], ids=["schema1", "schema2"])
def old_store(tmp_path: Path, request) -> Path:
    db = tmp_path / "fabreg.db"
    shutil.copy(request.param, db)
    return db


@pytest.fixture
def second_layout_store(tmp_path: Path) -> Path:
    db = tmp_path / "fabreg.db"
    shutil.copy(SCHEMA2, db)
    return db


def test_a_store_of_an_older_layout_is_refused_in_one_line_naming_migrate(old_store, run_fabreg):
    proc = run_fabreg("trends", db=old_store)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "fabreg migrate --db" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_migrate_keeps_every_table_of_the_second_layout(second_layout_store, run_fabreg):
    db = second_layout_store
    tables = ("series", "sources", "runs", "bands", "sessions", "run_sessions", "files")

    def content(path: Path) -> dict[str, list[tuple]]:
        with sqlite3.connect(path) as conn:
            out = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                   for t in tables}
            own_time = any(c[1] == "time" for c in conn.execute("PRAGMA table_info(samples)"))
            out["samples"] = conn.execute(
                f"SELECT v.series_id, {'v' if own_time else 'r'}.time, v.run_id, v.value, "
                "v.band_id FROM samples v JOIN runs r ON r.id = v.run_id "
                "ORDER BY 1, 2, 3").fetchall()
            out["meta"] = conn.execute("SELECT * FROM meta WHERE key != 'schema_version' "
                                       "ORDER BY key").fetchall()
        return out

    before, rows = content(db), long_rows(db)
    proc = run_fabreg("migrate", db=db, check=True)
    assert f"migrated {db}: {len(before['samples'])} value(s)" in proc.stdout
    backup = Path(f"{db}.schema2")
    assert content(backup) == before  # the old file, untouched
    assert content(db) == before and long_rows(db) == rows
    with sqlite3.connect(db) as conn:
        # in day order, each series' newest day and every day named
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == ("3",)
        days = conn.execute("SELECT v.day, r.time FROM samples v "  # in the table's order
                            "CROSS JOIN runs r ON r.id = v.run_id").fetchall()
        assert [d for d, _ in days] == sorted(d for d, _ in days)
        assert all(d == int(t // 86400) for d, t in days)
        assert conn.execute("SELECT day FROM days ORDER BY day").fetchall() == sorted(
            {(d,) for d, _ in days})
        newest = conn.execute("SELECT series_id, day FROM newest_day ORDER BY 1").fetchall()
        assert newest == conn.execute("SELECT series_id, MAX(day) FROM samples "
                                      "GROUP BY series_id ORDER BY 1").fetchall()
        assert len(newest) == len(before["series"])
    again = run_fabreg("migrate", db=db)
    assert again.returncode == 2 and "already has the current layout" in again.stderr


def test_migrate_keeps_every_value_run_and_session_of_the_first_layout(
        run_fabreg, tmp_path: Path):
    old_store = tmp_path / "fabreg.db"
    shutil.copy(SCHEMA1, old_store)
    before = long_rows(old_store)
    with sqlite3.connect(old_store) as conn:
        old_files = conn.execute("SELECT * FROM files ORDER BY path").fetchall()
        old_runs = conn.execute("SELECT id, run_key, time, jobid, nodelist, session, "
                                "from_results_db, source, attrs FROM runs ORDER BY id").fetchall()
    proc = run_fabreg("migrate", db=old_store, check=True)
    assert f"migrated {old_store}: {len(before)} value(s)" in proc.stdout
    backup = Path(f"{old_store}.schema1")
    assert backup.is_file() and long_rows(backup) == before  # the old file, untouched
    after = long_rows(old_store)
    assert [row[:17] + row[18:] for row in after] == [row[:17] + row[18:] for row in before]
    with sqlite3.connect(old_store) as conn:
        assert conn.execute("SELECT * FROM files ORDER BY path").fetchall() == old_files
        runs = conn.execute("SELECT r.id, r.run_key, r.time, r.jobid, r.nodelist, r.session, "
                            "r.from_results_db, f.path, r.attrs FROM runs r "
                            "JOIN sources f ON f.id = r.source_id ORDER BY r.id").fetchall()
    assert [r[:8] for r in runs] == [r[:8] for r in old_runs]
    sweeps = 0
    for new, old in zip(runs, old_runs):
        new_attrs, old_attrs = json.loads(new[8]), json.loads(old[8])
        table = old_attrs.pop("pair_table", None)
        if table is None:
            assert new_attrs == old_attrs
            continue
        # A sweep's pair table (its figures are the link series) became its pair rounds.
        sweeps += 1
        kept = json.loads(new_attrs.pop("pair_rounds"))
        assert new_attrs == old_attrs
        fields = json.loads(table)["fields"]
        rows = [dict(zip(fields, row)) for row in json.loads(table)["rows"]]
        expected = {(r["node_a"], r["node_b"]): r["round"] for r in rows
                    if r["node_a"] != r["node_b"]}
        names = kept["nodes"]
        got = {(names[p[i]], names[p[i + 1]]): int(k)
               for k, p in kept["rounds"].items() for i in range(0, len(p), 2)}
        assert got == expected and len(got) == 12  # 4 nodes: every ordered pair
    assert sweeps == 4  # the four sweep logs of tests/data/sweep
    with sqlite3.connect(old_store) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='values'").fetchone() == (
            str(len(before)),)
    again = run_fabreg("migrate", db=old_store)
    assert again.returncode == 2 and "already has the current layout" in again.stderr


def test_a_migrated_store_gives_the_verdicts_of_a_fresh_ingest_and_stores_nothing_twice(
        old_store, run_fabreg, tmp_path: Path):
    run_fabreg("migrate", db=old_store, check=True)
    # The same inputs as the old store was made from, read the same way into a new store.
    inputs = tmp_path / "inputs"
    shutil.copytree(DATA / "real" / "perflogs", inputs / "history")
    shutil.copytree(DATA / "sweep", inputs / "sweep")
    fresh = tmp_path / "fresh.db"
    run_fabreg("ingest", "history", "sweep", db=fresh, cwd=inputs)
    fresh_rows = long_rows(fresh)
    migrated = [row[:-1] + (row[-1].replace("/srv/perflogs", str(inputs)),)
                                for row in long_rows(old_store)]
    assert len(fresh_rows) == len(migrated)
    for got, want in zip(fresh_rows, migrated):
        assert got == want
    for args in (("trends", "--format", "json"), ("isolate", "--format", "json")):
        ours = run_fabreg(*args, db=old_store)
        theirs = run_fabreg(*args, db=fresh)
        assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout)
    # Reading the inputs again into the migrated store finds every run it holds.
    again = run_fabreg("ingest", "history", "sweep", db=old_store, cwd=inputs)
    assert " 0 new value(s)" in again.stdout
    assert long_rows(old_store)[0][:13] == long_rows(fresh)[0][:13]


def test_migrate_refuses_what_is_not_an_old_store(tmp_path: Path, run_fabreg):
    missing = run_fabreg("migrate", db=tmp_path / "none.db")
    assert missing.returncode == 2 and "no store at" in missing.stderr
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite at all\n" * 100)
    proc = run_fabreg("migrate", db=junk)
    assert proc.returncode == 2 and "not a fabreg store" in proc.stderr
    assert junk.read_text().startswith("not sqlite")

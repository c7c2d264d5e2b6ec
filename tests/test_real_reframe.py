"""End to end on perflogs and a results DB written by a real ReFrame run.

Runs ReFrame (this project's reframe-config.py, FABREG_PERFLOG_DIR pointing to a
temporary directory) on tests/data/checks/scaled_perflog.py: two sessions with
different session extras, the second 30 % slower; then a third session after the
check gained a column, so ReFrame rotates the old file to ``.log.h0``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, assert_days_indexed, fabreg, reframe_binary

CHECK = REPO / "tests" / "data" / "checks" / "scaled_perflog.py"
pytestmark = pytest.mark.slow


def reframe(tmp: Path, check: Path, *args: str) -> None:
    binary = reframe_binary()
    if binary is None:
        pytest.skip("ReFrame not installed (pip install 'reframe-hpc==4.10.4')")
    env = dict(os.environ, FABREG_PERFLOG_DIR=str(tmp / "perflogs"))
    proc = subprocess.run([binary, "-C", str(REPO / "reframe-config.py"), "-c", str(check),
                           "-r", "-p", "openmpi", "--prefix", str(tmp / "rfm"),
                           "--report-file", str(tmp / "rfm" / "report.json"), *args],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp)
    # A performance failure (the slower session) still writes its perflog lines.
    assert "Ran " in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Keep each session's JSON run report, as ~/.reframe/reports/ does.
    reports = tmp / "reports"
    reports.mkdir(exist_ok=True)
    kept = reports / f"run-report-{len(list(reports.iterdir()))}.json"
    (tmp / "rfm" / "report.json").rename(kept)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("rfm")
    reframe(tmp, CHECK, "--session-extras", "change=fw-2.0", "--reruns", "3")
    # --repeat is what the acceptance mode uses: repeats in one session, same test names.
    reframe(tmp, CHECK, "--session-extras", "change=fw-2.1", "--repeat", "4", "-S", "scale=1.3")
    grown = tmp / "checks" / "scaled_perflog.py"
    grown.parent.mkdir()
    grown.write_text(CHECK.read_text().replace(
        "    executable = 'printf'",
        "    provider = variable(str, value='probes', loggable=True)\n"
        "    executable = 'printf'"))
    reframe(tmp, grown, "--session-extras", "change=fw-2.2")
    return tmp


def test_rotated_header_files_and_results_db_are_ingested_once(real_run: Path):
    logs = sorted(p.name for p in (real_run / "perflogs").rglob("ScaledPerflogLatency.log*"))
    assert logs == ["ScaledPerflogLatency.log", "ScaledPerflogLatency.log.h0"]
    db = real_run / "fabreg.db"
    proc = fabreg("ingest", str(real_run / "perflogs"), db=db, check=True)
    # 2 transports x 3 perf variables; 8 runs in the .h0 file, 1 in the new one.
    lines = sum(len(p.read_text().splitlines()) - 1
                for p in (real_run / "perflogs").rglob("ScaledPerflogLatency.log*"))
    assert lines == 2 * (4 + 4 + 1)
    assert f"{lines * 3} new value(s)" in proc.stdout
    again = fabreg("ingest", str(real_run / "perflogs"), db=db, check=True)
    assert "0 new value(s)" in again.stdout
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == lines * 3
        extras = {json.loads(x)["change"] for (x,) in conn.execute("SELECT extras FROM sessions")}
        assert extras == {"fw-2.0", "fw-2.1", "fw-2.2"}
        unsessioned = conn.execute("SELECT COUNT(*) FROM long WHERE session IS NULL").fetchone()
        assert unsessioned[0] == 0  # every perflog line joined to its ReFrame session
        statuses = {json.loads(a).get("ref_status") for (a,) in conn.execute(
            "SELECT attrs FROM runs")}
        assert statuses == {"ok", "fail"}  # kept per run, not part of the series key


def test_results_db_alone_then_perflogs_gives_the_same_store(real_run: Path, tmp_path: Path):
    db = tmp_path / "f.db"
    fabreg("ingest", str(real_run / "perflogs" / "results.db"), db=db, check=True)
    fabreg("ingest", str(real_run / "perflogs"), db=db, check=True)
    with sqlite3.connect(db) as conn:
        n = conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        series = conn.execute("SELECT COUNT(*) FROM series").fetchone()[0]
    assert n == 2 * 9 * 3
    assert series == 2 * 3 * 2  # shm/tcp x 3 variables x (without/with provider)
    assert_days_indexed(db)  # the results DB's series lost their values to the perflogs'


def test_compare_trends_report_export_on_real_perflogs(real_run: Path, tmp_path: Path):
    db = real_run / "fabreg.db"
    fabreg("ingest", "-q", str(real_run / "perflogs"), db=db)
    cmp = fabreg("compare", "change=fw-2.0", "change=fw-2.1", db=db)
    assert cmp.returncode == 1, cmp.stdout + cmp.stderr
    rows = [line for line in cmp.stdout.splitlines() if line.startswith("regression")]
    assert len(rows) == 6  # every variable of both transports is 30 % worse
    assert all("+30.0%" in r or "-23.1%" in r for r in rows), rows
    tr = fabreg("trends", "--format", "json", db=db)
    assert tr.returncode == 1
    changes = json.loads(tr.stdout)
    assert len(changes) == 6 and {c["verdict"] for c in changes} == {"regression"}
    assert {c["series"]["parameters"]["transport"] for c in changes} == {"shm", "tcp"}
    assert all(abs(abs(c["shift_pct"]) - 30) < 8 for c in changes)
    rep = fabreg("report", "--out", str(tmp_path / "report"), "--baseline", "change=fw-2.0",
                 "--candidate", "change=fw-2.1", db=db, check=True)
    assert "6 with changes" in rep.stdout
    assert (tmp_path / "report" / "index.html").exists()
    exp = fabreg("export", "prometheus", "--out", str(tmp_path / "f.prom"), db=db, check=True)
    assert "wrote" in exp.stdout
    text = (tmp_path / "f.prom").read_text()
    lat8 = [line for line in text.splitlines() if line.startswith("fabreg_latency_us{")
            and 'test="ScaledPerflogLatency"' in line and 'perfvar="latency_8B"' in line]
    # One sample per series: 2 transports x 2 (without/with the provider column).
    assert len(lat8) == 4 and all('benchmark="osu_latency"' in line and 'size="8"' in line
                                  for line in lat8), lat8


def test_json_run_reports_alone_give_the_results_dbs_values_and_with_perflogs_none_twice(
        real_run: Path, tmp_path: Path):
    reports = sorted((real_run / "reports").glob("run-report-*.json"))
    assert len(reports) == 3
    alone = tmp_path / "reports.db"
    proc = fabreg("ingest", *map(str, reports), db=alone, check=True)
    # The same 9 runs x 2 transports x 3 variables as the results DB holds.
    assert f"{2 * 9 * 3} new value(s)" in proc.stdout
    assert "JSON run report, data_version 4." in proc.stderr
    db_only = tmp_path / "db.db"
    fabreg("ingest", str(real_run / "perflogs" / "results.db"), db=db_only, check=True)
    query = "SELECT test, params, perfvar, time, value FROM long ORDER BY 1, 2, 3, 4"
    with sqlite3.connect(alone) as a, sqlite3.connect(db_only) as b:
        assert a.execute(query).fetchall() == b.execute(query).fetchall()
    both = tmp_path / "both.db"
    fabreg("ingest", str(real_run / "perflogs"), db=both, check=True)
    again = fabreg("ingest", *map(str, reports), db=both, check=True)
    assert "0 new value(s)" in again.stdout  # a run seen in a perflog is stored once

"""Compare two sessions: selectors, direction, significance, severity order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fabreg.errors import FabregError
from fabreg.review import compare
from fabreg.review.perflog import Run, Sample, Session
from fabreg.review.store import Store

DAY = 86400.0


def build_store(path: Path) -> Store:
    """Two sessions of 5 repeats each: latency +20 % (tcp), bandwidth +20 % (shm)."""
    rng = np.random.default_rng(0)
    store = Store(path)
    sessions = [Session("aaaa-1111", 0.0, 100.0, {"change": "fw-2.0"}),
                Session("bbbb-2222", DAY, DAY + 100, {"change": "fw-2.1"})]
    samples = []
    for s, session in enumerate(sessions):
        for rep in range(5):
            for transport in ("shm", "tcp"):
                run = Run(session.start + rep * 10, "OsuLatency", {"transport": transport},
                          "sys", "part", "openmpi", jobid=f"{s}{rep}{transport}",
                          session=session.uuid)
                lat = 2.0 * (1.2 if (s and transport == "tcp") else 1.0)
                bw = 1000.0 * (1.2 if (s and transport == "shm") else 1.0)
                samples.append(Sample(run, "latency_8B", lat * rng.normal(1, 0.01), "us"))
                samples.append(Sample(run, "bandwidth_1MB", bw * rng.normal(1, 0.01), "MB/s"))
    store.add(samples, sessions)
    return store


def test_compare_by_session_extras(tmp_path: Path):
    with build_store(tmp_path / "f.db") as store:
        series = store.load()
        sessions = compare.list_sessions(series, store.sessions())
    base = compare.resolve("change=fw-2.0", sessions)
    cand = compare.resolve("change=fw-2.1", sessions)
    diffs = compare.compare(series, base, cand)
    assert [d.verdict for d in diffs] == ["regression", "improvement", "same", "same"]
    reg = diffs[0]
    assert reg.series.key.perfvar == "latency_8B" and reg.series.key.param["transport"] == "tcp"
    assert reg.shift_pct == pytest.approx(20, abs=2) and reg.pvalue < 0.001
    assert (reg.n_baseline, reg.n_candidate) == (5, 5)
    imp = diffs[1]
    assert imp.series.key.perfvar == "bandwidth_1MB" and imp.worse_pct < -15


def test_selectors(tmp_path: Path):
    with build_store(tmp_path / "f.db") as store:
        series = store.load()
        sessions = compare.list_sessions(series, store.sessions())
    assert compare.resolve("latest", sessions).sessions == {"bbbb-2222"}
    assert compare.resolve("latest~1", sessions).sessions == {"aaaa-1111"}
    assert compare.resolve("aaaa", sessions).sessions == {"aaaa-1111"}
    rng = compare.resolve("1970-01-02..", sessions)
    assert rng.mask(series[0]).sum() == 5
    for bad, message in (("zzz", "no session"), ("change=none", "no session has extras"),
                         ("latest~9", "only 2 session"), ("nope..", "not ISO 8601")):
        with pytest.raises(FabregError, match=message):
            compare.resolve(bad, sessions)


def test_cli_compare_table_and_exit_status(tmp_path: Path, run_fabreg):
    build_store(tmp_path / "f.db").close()
    proc = run_fabreg("compare", "change=fw-2.0", "change=fw-2.1", db=tmp_path / "f.db")
    assert proc.returncode == 1  # a regression
    lines = proc.stdout.splitlines()
    assert lines[2].startswith("regression") and "transport=tcp" in lines[2]
    assert lines[3].startswith("improvement")
    same = run_fabreg("compare", "change=fw-2.0", "change=fw-2.0", db=tmp_path / "f.db")
    assert same.returncode == 0
    bad = run_fabreg("compare", "nope", "latest", db=tmp_path / "f.db")
    assert bad.returncode == 2 and bad.stderr.startswith("fabreg: error: no session 'nope'")


def test_missing_in_candidate_is_reported(tmp_path: Path):
    with build_store(tmp_path / "f.db") as store:
        run = Run(5.0, "OnlyOld", {}, "sys", "part", "openmpi", jobid="x", session="aaaa-1111")
        store.add([Sample(run, "latency_8B", 1.0, "us")])
        series = store.load()
        sessions = compare.list_sessions(series, store.sessions())
    diffs = compare.compare(series, compare.resolve("latest~1", sessions),
                            compare.resolve("latest", sessions))
    assert [d.series.key.test for d in diffs if d.verdict == compare.MISSING] == ["OnlyOld"]


# -- one run per side: the series' history gives the noise (issue 12) -----------------------

def _night(i: int, last: int | None = None) -> str:
    """A time-range selector for generated nights i..last (each night's runs take < 1 h)."""
    from datetime import datetime, timezone

    from fabreg.review.synthetic import DAY, EPOCH

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    end = EPOCH + (i if last is None else last) * DAY + 6 * 3600
    return f"{iso(EPOCH + i * DAY - 3600)}..{iso(end)}"


def _verdicts(proc) -> dict[tuple, dict]:
    import json

    out = {}
    for row in json.loads(proc.stdout):
        s = row["series"]
        out[(s["test"], s["perfvar"], s["environ"], s["parameters"]["transport"],
             s["parameters"]["num_nodes"], s["partition"])] = row
    return out


@pytest.fixture(scope="module")
def year(tmp_path_factory):
    """60 generated nights of 1,000 series (1-3 % noise, 1 % lone outliers, a quarter with
    one shift of 20-30 %), ingested by the real CLI."""
    from conftest import fabreg

    from fabreg.review.synthetic import generate

    root = tmp_path_factory.mktemp("year")
    data = generate(root / "perflogs", sessions=60, seed=12, min_shift=0.2)
    fabreg("ingest", "-q", str(root / "perflogs"), db=root / "f.db", check=True)
    return data, root / "f.db"


def _key(t) -> tuple:
    return (t.check, t.perfvar, t.mpi, t.transport, str(t.nodes), t.partition)


def test_two_ordinary_nights_with_one_run_each_list_no_regression(year, run_fabreg):
    data, db = year
    proc = run_fabreg("compare", "latest~1", "latest", "--format", "json", db=db)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    rows = _verdicts(proc)
    assert len(rows) == 1000
    assert not [k for k, r in rows.items() if r["verdict"] == "regression"]
    assert {r["noise"] for r in rows.values() if r["n_baseline"] and r["n_candidate"]} == {
        "history"}  # the others are gaps: missing or new in the candidate
    # What is flagged is a lone outlier in the last night, never ordinary noise.
    truth = {_key(t): t for t in data.series}
    for key, row in rows.items():
        if row["verdict"] in ("suspect", "improvement"):
            values = truth[key].values
            level = np.nanmedian(values[-12:-2])
            odd = [abs(v / level - 1) > 0.12 for v in values[-2:]]
            assert any(odd), (key, row, values[-12:])
    flagged = sum(r["verdict"] != "same" for r in rows.values())
    assert flagged <= 30  # 1 % outliers x 2 nights x 1,000 series is ~20
    text = run_fabreg("compare", "latest~1", "latest", db=db)
    assert text.returncode == 0 and "noise from each series' stored runs" in text.stdout
    assert run_fabreg("compare", "latest~1", "latest", "--fail-on", "suspect",
                      db=db).returncode == (1 if any(r["verdict"] == "suspect"
                                                     for r in rows.values()) else 0)


def test_a_real_shift_is_still_found_with_one_run_and_confirmed_by_three(year, run_fabreg):
    data, db = year
    counts: dict[int, int] = {}
    for t in data.series:
        if t.shift:
            counts[t.shift_session] = counts.get(t.shift_session, 0) + 1
    k = max((s for s in counts if 1 <= s <= 56), key=lambda s: counts[s])
    shifted = {_key(t): t for t in data.series if t.shift and t.shift_session == k}
    still = {_key(t) for t in data.series if not t.shift or not 0 < t.shift_session - k <= 3
             and t.shift_session != k}
    one = _verdicts(run_fabreg("compare", _night(k - 1), _night(k), "--format", "json",
                               db=db))
    expect = {key: ("suspect" if (t.shift > 0) == t.lower_is_better else "improvement")
              for key, t in shifted.items()}
    found = [key for key in shifted if key in one and one[key]["verdict"] == expect[key]]
    assert len(found) >= 0.8 * len(shifted) and len(shifted) >= 3, (k, len(found), shifted)
    assert not [key for key, r in one.items() if r["verdict"] == "regression"]
    three = _verdicts(run_fabreg("compare", _night(k - 1), _night(k, k + 2), "--format",
                                 "json", db=db))
    worse = [key for key, t in shifted.items() if (t.shift > 0) == t.lower_is_better]
    confirmed = [key for key in worse if three[key]["verdict"] == "regression"]
    assert len(confirmed) >= 0.8 * len(worse), (len(confirmed), len(worse))
    noise = [key for key in still if key in three and three[key]["verdict"] == "regression"]
    assert noise == []


def test_without_history_a_single_run_cannot_be_judged(tmp_path, run_fabreg):
    from fabreg.review.synthetic import generate

    generate(tmp_path / "perflogs", sessions=2, seed=13, shifted=0.0,
             transports=("tcp",), nodes=(1, 2))
    run_fabreg("ingest", "-q", str(tmp_path / "perflogs"), db=tmp_path / "f.db", check=True)
    proc = run_fabreg("compare", "latest~1", "latest", "--threshold", "0.5", "--all",
                      db=tmp_path / "f.db")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdicts = {line.split()[0] for line in proc.stdout.splitlines()[2:-1]}
    assert "regression" not in verdicts and "cannot" in verdicts
    assert "one run on a side and 2 stored: noise unknown" in proc.stdout


def test_an_empty_selection_is_an_error_not_a_pass(year, run_fabreg):
    _, db = year
    proc = run_fabreg("compare", "2030-01-01..2031-01-01", "latest", db=db)
    assert proc.returncode == 2
    assert proc.stderr.startswith("fabreg: error: selector '2030-01-01..2031-01-01' matches "
                                  "no runs (the store holds runs from 2025-01-01T")
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    proc = run_fabreg("compare", "latest", "20261121..", db=db)
    assert proc.returncode == 2 and "'20261121' is a number outside Unix seconds" in proc.stderr

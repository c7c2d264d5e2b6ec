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

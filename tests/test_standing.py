"""The store's readers (report, export, serve-metrics) read the verdicts as they stand: the
ones the nightly `trends --incremental` kept while no run came after it, else judged from the
windows without moving the nightly state; the report draws the series it plots whole."""

from __future__ import annotations

import math
import random
import re
import shutil
from pathlib import Path

import pytest
from conftest import fabreg, synthetic_store
from prometheus_client.parser import text_string_to_metric_families

from fabreg.review import standing, trend_state, trends
from fabreg.review.perflog import Run, Sample
from fabreg.review.store import Store
from fabreg.review.sweeps import MAX_LINK_NODES, link_families, link_of

NIGHT = 86400.0
#: the xor sweep's rounds (a node and the one that differs in bit k) up to 512 nodes
ROUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@pytest.fixture(scope="module")
def long_store(tmp_path_factory) -> Path:
    """A store of 100 nightly sessions (longer than a trends window) with shifted series."""
    return synthetic_store(tmp_path_factory.mktemp("standing"), sessions=100, shifted=0.1,
                           seed=5, transports=("shm", "tcp"), nodes=(1, 2))


def _one_more_night(db: Path) -> None:
    """A run after everything in the store, of a series the store already has."""
    with Store(db) as store:
        series = store.load_newest()[0]
        k = series.key
        run = Run(float(series.time[-1]) + NIGHT, k.test, dict(k.params), k.system,
                  k.partition, k.environ, jobid="one-more")
        store.add([Sample(run, k.perfvar, float(series.value[-1]), series.unit)])


def _summary(db: Path, out: Path, *args: str) -> tuple[str, str]:
    proc = fabreg("report", "-q", "--out", str(out), *args, db=db, check=True)
    return proc.stdout, (out / "summary.md").read_text()


def test_the_report_says_the_same_from_the_kept_verdicts_as_judged_whole(long_store, tmp_path):
    db = tmp_path / "fabreg.db"
    shutil.copy(long_store, db)
    said, judged = _summary(db, tmp_path / "judged")
    assert standing.JUDGED in said
    # the nightly gate after one more night: windows, state and verdicts kept
    fabreg("trends", "--incremental", "-q", db=db)
    _one_more_night(db)
    fabreg("trends", "--incremental", "-q", db=db)
    with Store(db, create=False) as store:
        states = store.trend_states(trend_state.settings(trends.ALPHA, trends.MIN_SHIFT_PCT),
                                    reading=True)
        assert states and max(r[1] for r in states.values()) > 0  # windows cut the history
    said, kept = _summary(db, tmp_path / "kept")
    assert standing.STORED in said
    # the same store judged whole (a copy without the nightly state)
    whole_db = tmp_path / "whole.db"
    shutil.copy(long_store, whole_db)
    _one_more_night(whole_db)
    _, whole = _summary(whole_db, tmp_path / "whole")
    assert "| regression | open |" in kept
    assert kept == whole
    assert judged.count("| regression |") == whole.count("| regression |")


def test_plotted_series_are_drawn_over_their_whole_history(long_store, tmp_path):
    db = tmp_path / "fabreg.db"
    shutil.copy(long_store, db)
    fabreg("trends", "--incremental", "-q", db=db)
    with Store(db, create=False) as store:
        now = standing.read(store)
        assert now.source == standing.STORED
        moved = [v for v in now.verdicts if v.changes]
        assert moved and all(len(v.series) == 1 for v in now.verdicts)
        drawn = standing.whole(store, moved)
        full = {s.id: s for s in store.load()}
    for v in drawn:
        series = full[v.series.id]
        assert len(v.series) == len(series) > trend_state.WINDOW + trend_state.STEP
        for c in v.changes:
            assert v.series.time[c.index] == c.time  # each change at its first new run


def test_a_reader_neither_uses_stale_verdicts_nor_moves_the_nightly_state(long_store, tmp_path):
    db = tmp_path / "fabreg.db"
    shutil.copy(long_store, db)
    fabreg("trends", "--incremental", "-q", db=db)
    _one_more_night(db)
    fabreg("trends", "--incremental", "-q", db=db)
    settings = trend_state.settings(trends.ALPHA, trends.MIN_SHIFT_PCT)
    with Store(db, create=False) as store:
        before = store.trend_states(settings, reading=True)
    _one_more_night(db)  # ingested after the nightly run: its verdicts no longer stand
    with Store(db, create=False) as store:
        assert store.trend_verdicts(settings) is None
        assert standing.read(store).source == standing.JUDGED
    # other settings: judged whole, the nightly state left as it was
    said, _ = _summary(db, tmp_path / "other", "--alpha", "0.01")
    assert standing.JUDGED in said
    with Store(db, create=False) as store:
        assert store.trend_states(settings, reading=True) == before


def _sweep_night(store: Store, n: int, night: int, slow: tuple[int, int] | None,
                 rng: random.Random) -> None:
    when = 1.75e9 + night * NIGHT
    samples = []
    for k in ROUNDS:
        for a in range(n):
            b = a ^ k
            if b >= n:
                continue
            value = 12000 * math.exp(rng.gauss(0, 0.02))
            if slow and {a, b} == set(slow):
                value /= 2
            run = Run(when, "Sweep", {"transport": "ucx_rc", "node_a": f"nid{a:05d}",
                                      "node_b": f"nid{b:05d}"}, "big", "compute", "openmpi",
                      jobid=f"sweep-{night}")
            samples.append(Sample(run, "link_bandwidth", value, "MB/s"))
    check = Run(when, "OSU", {"transport": "ucx_rc"}, "big", "compute", "openmpi",
                jobid=f"osu-{night}")
    samples.append(Sample(check, "latency_8B", 1.8 * math.exp(rng.gauss(0, 0.01)), "us"))
    store.add(samples)


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory) -> Path:
    """14 nights of a sweep above MAX_LINK_NODES, the link nid00001 <-> nid00003 at half
    speed from the 9th, and one check's series; the nightly trends run."""
    db = tmp_path_factory.mktemp("sweep") / "fabreg.db"
    rng = random.Random(3)
    with Store(db) as store:
        for night in range(14):
            _sweep_night(store, SWEEP_NODES, night, (1, 3) if night >= 8 else None, rng)
    fabreg("trends", "--incremental", "-q", db=db)
    return db


SWEEP_NODES = MAX_LINK_NODES + 44
CAPPED = {("nid00001", "nid00003"), ("nid00003", "nid00001")}


def test_the_gauges_of_a_large_sweep_keep_only_the_links_whose_trend_is_wrong(sweep_store,
                                                                             tmp_path):
    """Above MAX_LINK_NODES a sweep's links get no per-series gauge (the sweep's own gauges
    summarise them per node and round) unless their trend is a regression or a suspect."""
    db, n = sweep_store, SWEEP_NODES
    prom = tmp_path / "fabreg.prom"
    fabreg("export", "prometheus", "--out", str(prom), db=db, check=True)
    samples = [s for family in text_string_to_metric_families(prom.read_text())
               for s in family.samples]
    links = {(s.labels["node_a"], s.labels["node_b"]) for s in samples
             if s.name == "fabreg_value" and s.labels.get("node_a")}
    wrong = {(s.labels["node_a"], s.labels["node_b"]) for s in samples
             if s.name in ("fabreg_regression_open", "fabreg_regression_suspect")
             and s.labels.get("node_a") and s.value == 1}
    # the capped link in both directions, and only links whose trend is wrong (a few series
    # of pure noise are among them at 14 runs: the trend of one link is not the sweep's verdict)
    assert CAPPED <= links == wrong
    assert len(links) < 0.05 * sum(1 for k in ROUNDS for a in range(n) if a ^ k < n)
    assert any(s.name == "fabreg_latency_us" and s.labels["test"] == "OSU" for s in samples)
    nodes = [s for s in samples if s.name == "fabreg_node_slow_pairs_ratio"]
    assert len(nodes) == n


def test_the_report_of_a_large_sweep_plots_only_its_slow_links(sweep_store, tmp_path):
    """Of a sweep shown per node and round, the report's series are the links slow in the
    newest sweep, drawn whole; the links whose trend alone moved are counted, not drawn."""
    out = tmp_path / "report"
    said = fabreg("report", "-q", "--out", str(out), db=sweep_store, check=True).stdout
    assert re.search(r"(\d+) links of sweeps shown per node and round are not report series "
                     r"\(not slow in the newest sweep\); [1-9]\d* of them with a trend change",
                     said), said
    md = (out / "summary.md").read_text()
    drawn = {tuple(m) for m in re.findall(
        r"Sweep node_a=(nid\d+) node_b=(nid\d+) transport=ucx_rc [^\n]*\(plots/series-", md)}
    assert drawn == CAPPED
    assert (out / "isolation.html").exists()


def test_the_gate_opens_on_the_capped_link_alone_nightly_or_read_whole(sweep_store):
    """The links of the sweep are judged as one family (``trends.family_wise``), in the
    nightly's windows and in a full read alike: the capped link is the only open regression."""
    with Store(sweep_store, create=False) as store:
        every = store.load()
    families = link_families((s.id, s.key) for s in every)
    family = [v for v in trends.analyse(every, families=families) if v.open_regression]
    assert {link_of(v.series.key)[1:] for v in family} == CAPPED
    for args in (["--incremental"], []):
        said = fabreg("trends", "-q", *args, db=sweep_store)
        assert said.returncode == 1, said.stdout + said.stderr
        opened = re.findall(r"^REGRESSION +Sweep node_a=(nid\d+) node_b=(nid\d+)", said.stdout,
                            re.M)
        assert set(opened) == CAPPED, said.stdout
        assert "2 open regression(s)" in said.stdout

"""The sweep's perflogs on the review side: per-link series, `fabreg isolate`, gauges, heat map.

tests/data/sweep/*.log are real perflogs of the Sweep check, written by real ReFrame runs on
minicluster with 4 nodes (ci/bench/isolation_bench.py; README.md there): healthy, node3 capped
at a third of the healthy pair bandwidth, the link node1<->node3 capped the same way.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from conftest import REPO, fabreg

from fabreg import isolation
from fabreg.review.isolation_metrics import render
from fabreg.review.isolation_plot import write
from fabreg.review.perflog import read_perflog_file
from fabreg.review.store import Store
from fabreg.review.sweeps import MAX_LINK_NODES, Sweep, latest_sweeps, newest_values

DATA = REPO / "tests" / "data" / "sweep"
NODES = ["node1", "node2", "node3", "node4"]


def _store(tmp_path: Path, case: str) -> Path:
    db = tmp_path / f"{case}.db"
    proc = fabreg("ingest", str(DATA / f"{case}.log"), db=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return db


def _sweeps(db: Path):
    with Store(db, create=False) as store:
        return latest_sweeps(store.newest_link_values(), attributes=store.run_attributes)


def test_every_pair_and_control_is_its_own_series():
    samples, problems, _ = read_perflog_file(DATA / "node.log")
    assert problems == []
    links = [s for s in samples if s.perfvar == "link_bandwidth"]
    lines = {s.run.jobid for s in samples if s.perfvar == "pair_bandwidth"}
    assert len(links) == 12 * len(lines)
    pairs = {(s.params["node_a"], s.params["node_b"]) for s in links}
    assert pairs == {(a, b) for a in NODES for b in NODES if a != b}
    assert all(s.unit == "MB/s" and s.value > 0 for s in links)
    controls = {(s.params["node_a"], s.perfvar) for s in samples
                if s.params.get("node_a") and s.params["node_a"] == s.params["node_b"]}
    assert controls >= {(n, "loopback_bandwidth") for n in NODES} | {
        (n, "memory_bandwidth") for n in NODES}
    # the check's own line keeps its series; the links share its run (job, time)
    own = [s for s in samples if s.perfvar == "suspects"]
    assert own and all("node_a" not in s.params for s in own)
    assert {s.run.key for s in links} == {s.run.key for s in own}


@pytest.mark.parametrize("case, expected", [
    ("healthy", set()),
    ("node", {("node", ("node3",))}),
    ("link", {("link", ("node1", "node3"))}),
])
def test_the_stored_sweep_names_what_was_capped(tmp_path, case, expected):
    sweeps = _sweeps(_store(tmp_path, case))
    assert sweeps
    for sweep in sweeps:
        assert sweep.nodes == NODES and sweep.system == "minicluster"
        bandwidth = next(loc for loc in sweep.localise() if loc.metric == "bandwidth")
        assert {(s.kind, s.nodes) for s in bandwidth.suspects} == expected


def test_the_whole_store_and_the_newest_links_give_the_same_sweeps(tmp_path):
    """report/export read the whole store, isolate only each link's newest value."""
    with Store(_store(tmp_path, "node"), create=False) as store:
        whole = latest_sweeps(newest_values(store.load()), attributes=store.run_attributes)
        newest = latest_sweeps(store.newest_link_values(), attributes=store.run_attributes)
    assert [(w.jobid, w.time, w.pairs, w.controls) for w in whole] == [
        (w.jobid, w.time, w.pairs, w.controls) for w in newest]
    assert any(p.round > 0 for w in whole for p in w.pairs["bandwidth"])


def test_isolate_prints_json_and_exits_1_on_a_suspect(tmp_path):
    proc = fabreg("isolate", "--format", "json", db=_store(tmp_path, "node"))
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    node = [s for s in doc["suspects"] if s["metric"] == "bandwidth"]
    assert node and all(s["kind"] == "node" and s["nodes"] == ["node3"] for s in node)
    assert all(s["deficit_pct"] > 30 and len(s["pairs"]) > 3 and s["measured"] == 6
               for s in node)
    assert set(node[0]) >= {"kind", "nodes", "metric", "deficit_pct", "pairs"}
    text = fabreg("isolate", db=tmp_path / "node.db")
    assert text.returncode == 1
    assert "SUSPECT node node3: bandwidth" in text.stdout
    assert "controls of node3 (no network path): loopback_bandwidth" in text.stdout


def test_suspects_of_a_disturbed_sweep_are_inconclusive(tmp_path):
    """Measured while other work took the CPUs: the check said inconclusive, so does isolate."""
    proc = fabreg("isolate", "--format", "json", db=_store(tmp_path, "node-inconclusive"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["suspects"] and all(s["inconclusive"].startswith("inconclusive (other work took")
                                   for s in doc["suspects"])
    text = fabreg("isolate", db=tmp_path / "node-inconclusive.db")
    assert "its suspects are not confirmed" in text.stdout and "0 suspect(s)" in text.stdout


def test_a_suspect_the_confirming_sweep_did_not_name_again_is_not_confirmed(tmp_path):
    """The check logs confirmed suspects first, then ``flaky (...)`` and those named once: the
    review side confirms only the first (the real node3 run, its log line as the check writes
    it when the confirming sweep named another suspect and not node3)."""
    header, line = (DATA / "node.log").read_text().splitlines()
    column = header.split("|").index("suspects_named")
    fields = line.split("|")
    fields[column] = (f"link node1 <-> node2: bandwidth 40% below the run's healthy pairs, "
                      f"slow in 1 of 1 pairs; flaky (not named again by the confirming sweep): "
                      f"{fields[column]}")
    log = tmp_path / "minicluster" / "node.log"
    log.parent.mkdir()
    log.write_text(f"{header}\n{'|'.join(fields)}\n")
    db = tmp_path / "mixed.db"
    assert fabreg("ingest", str(log), db=db).returncode == 0
    proc = fabreg("isolate", "--format", "json", db=db)
    assert proc.returncode == 0, proc.stdout  # node3 named once: not a confirmed suspect
    (node3,) = json.loads(proc.stdout)["suspects"]
    assert node3["nodes"] == ["node3"]
    assert node3["inconclusive"] == "flaky (not named again by the confirming sweep)"
    text = fabreg("isolate", db=db).stdout
    assert "suspect (flaky) node node3: bandwidth" in text and "SUSPECT" not in text
    assert "0 suspect(s), 1 not confirmed" in text
    (sweep,) = _sweeps(db)
    gauges = [m for m in render([sweep]).splitlines()
              if m.startswith("fabreg_node_suspect{") and 'node="node3"' in m]
    assert gauges and all(m.endswith(" 0.0") for m in gauges), gauges


def test_isolate_without_a_sweep_says_so(tmp_path):
    db = tmp_path / "empty.db"
    Store(db).close()
    proc = fabreg("isolate", db=db)
    assert proc.returncode == 2
    assert "no sweep in the store" in proc.stderr


def test_gauges_name_the_node_and_heat_map_draws_the_matrix(tmp_path):
    sweeps = _sweeps(_store(tmp_path, "node"))
    text = render(sweeps)
    assert 'fabreg_node_suspect{environ="openmpi",metric="bandwidth",node="node3",' in text
    line = next(ln for ln in text.splitlines()
                if ln.startswith('fabreg_node_suspect{environ="openmpi",metric="bandwidth",'
                                 'node="node3"'))
    assert line.endswith(" 1.0")
    assert 'fabreg_node_suspect{environ="openmpi",metric="bandwidth",node="node1",' in text
    page = write(sweeps, tmp_path / "report")
    html = page.read_text()
    assert "node node3: bandwidth" in html and html.count("data:image/png;base64,") >= 2
    pngs = sorted((tmp_path / "report").glob("sweep-*-bandwidth.png"))
    assert pngs and pngs[0].read_bytes()[:4] == b"\x89PNG"
    assert render([]) == "" and write([], tmp_path / "none") is None


def _large_sweep(n: int, slow: tuple[int, int]) -> Sweep:
    """An xor sweep of n nodes (ceil(log2 n) rounds), 2 % noise, one link at half speed."""
    rng = random.Random(7)
    names = [f"nid{i:05d}" for i in range(n)]
    rounds = [k for k in range(1, n) if k & (k - 1) == 0]  # 1, 2, 4, ...: log2 n rounds
    pairs = [isolation.PairValue(names[a], names[a ^ k], 12000 * math.exp(rng.gauss(0, 0.02))
                                 * (0.5 if {a, a ^ k} == set(slow) else 1.0), r)
             for r, k in enumerate(rounds, start=1) for a in range(n) if a ^ k < n]
    return Sweep("Sweep", (("transport", "ucx_rc"),), "big", "compute", "openmpi", 1.0e9, "7",
                 pairs={"bandwidth": pairs})


def test_a_large_sweep_is_shown_per_node_and_per_round(tmp_path):
    """Above MAX_LINK_NODES: per-link gauges only for the slow pairs, every node and round
    summarised, no matrix drawn but the worst nodes and the rounds as tables."""
    sweep = _large_sweep(MAX_LINK_NODES + 44, slow=(1, 3))
    assert sweep.summarised and len(sweep.nodes) == MAX_LINK_NODES + 44
    (loc,) = sweep.localise()
    assert [(s.kind, s.nodes) for s in loc.suspects] == [("link", ("nid00001", "nid00003"))]
    text = render([sweep])
    links = [ln for ln in text.splitlines() if ln.startswith("fabreg_link_value{")]
    assert len(links) == 2 and all('node_a="nid00001"' in ln or 'node_a="nid00003"' in ln
                                   for ln in links)
    nodes = [ln for ln in text.splitlines() if ln.startswith("fabreg_node_slow_pairs_ratio{")]
    assert len(nodes) == len(sweep.nodes)
    rounds = {r.round: r for r in sweep.round_summary(loc)}
    assert len(rounds) == 9 and rounds[2].slow == 2 and sum(r.slow for r in rounds.values()) == 2
    assert 'fabreg_round_slow_pairs{environ="openmpi",metric="bandwidth",partition="compute",' \
           'round="2",system="big"} 2.0' in text
    worst = sweep.node_summary(loc)[:2]
    assert {w.node for w in worst} == {"nid00001", "nid00003"} and worst[0].slow == 2
    page = write([sweep], tmp_path / "report").read_text()
    assert "no matrix drawn" in page and "data:image/png" not in page
    table = page[page.index('<table class="nodes">'):page.index('<table class="rounds">')]
    assert table.count("<tr><td>") == 20 and table.index("<td>nid00001</td>") < 300
    assert f"the 20 worst of {len(sweep.nodes)} nodes" in table
    assert "link nid00001 &lt;-&gt; nid00003" in page and '<table class="rounds">' in page
    small = _large_sweep(16, slow=(1, 3))
    assert not small.summarised
    assert sum(ln.startswith("fabreg_link_value{") for ln in render([small]).splitlines()) \
        == len(small.pairs["bandwidth"])

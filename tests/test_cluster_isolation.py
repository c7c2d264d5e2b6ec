"""The sweep through real Slurm on an emulated 4-node cluster: the bad node, the bad link.

Brings up ``minicluster`` with 4 nodes, runs the sweep (``--tag sweep``, real ReFrame, one
rank per node over the bridge) healthy, with one node capped at a third of the healthy pair
bandwidth, and with one node pair capped the same way (``degrade --peer``); ``fabreg isolate``
must name nobody, exactly that node, exactly that link. The caps are removed after each case
and the cluster is taken down by the fixture, also when an assertion fails.
ci/bench/isolation_bench.py repeats the same cases and prints how often each is named right.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CHECKS, REPO
from test_cluster import Cluster, brought_up

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

#: OpenMPI only, to keep the test short: the sweep and its verdicts are the same with MPICH,
#: whose finalize hang after the table (docs/cluster.md, "Known issues") the sweep's launch
#: ends (tests/test_launch.py).
SWEEP = ["--tag", "sweep", "-p", "openmpi"]


@pytest.fixture(scope="module")
def cluster4(tmp_path_factory):
    with brought_up(tmp_path_factory, 4) as cl:
        yield cl


def _fabreg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabreg.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def _sweep(cl: Cluster, work: Path) -> tuple[subprocess.CompletedProcess[str], dict, int]:
    """One sweep session; (reframe, `fabreg isolate --format json`, its exit status)."""
    proc = cl.reframe(work, *SWEEP, checks=CHECKS / "sweep.py", timeout=900)
    db = work / "fabreg.db"
    ingest = _fabreg("ingest", str(work / "perflogs"), "--db", str(db))
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr + proc.stdout[-4000:]
    iso = _fabreg("isolate", "--format", "json", "--db", str(db))
    assert iso.returncode in (0, 1), iso.stderr + proc.stdout[-4000:]
    return proc, {**json.loads(iso.stdout), "db": str(db)}, iso.returncode


def _conclusive(cl: Cluster, work: Path, tries: int = 3):
    """The first sweep that other work did not disturb (its suspects are confirmed, as the
    check says); a host that is never quiet enough leaves the case untested, said as a skip."""
    notes = []
    for k in range(tries):
        proc, report, rc = _sweep(cl, work / f"try{k}")
        note = report["sweeps"][0]["inconclusive"]
        if not note:
            return proc, report, rc
        notes.append(note)
    pytest.skip(f"every sweep was disturbed by other work on this host: {'; '.join(notes)}")


def _named(report: dict) -> set[tuple[str, tuple[str, ...]]]:
    """The suspects the check confirmed (named by both sweeps of the job): its verdict. One
    only the first sweep named is logged as ``flaky`` and passes (the scheduler starving a
    rank for one round names a link now and then: docs/isolation.md); it must say why."""
    unconfirmed = [s for s in report["suspects"] if s["inconclusive"]]
    for s in unconfirmed:
        assert s["inconclusive"].startswith(("flaky", "inconclusive")), s
        print(f"not confirmed, so not a failure: {s['kind']} {s['nodes']} "
              f"{s['deficit_pct']}% ({s['inconclusive']})")
    return {(s["kind"], tuple(s["nodes"])) for s in report["suspects"]
            if not s["inconclusive"]}


def test_sweep_names_nobody_then_the_bad_node_then_the_bad_link(cluster4, tmp_path):
    start = time.monotonic()
    proc, healthy, rc = _conclusive(cluster4, tmp_path / "healthy")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    (sweep,) = healthy["sweeps"]
    assert sweep["system"] == "minicluster" and sweep["nodes"] == [
        "node1", "node2", "node3", "node4"]
    assert len(sweep["metrics"]["bandwidth"]["slow"]) == 0, healthy
    assert (rc, _named(healthy)) == (0, set()), healthy
    # every node's controls (no network path) were measured and logged
    assert set(sweep["controls"]) == {"node1", "node2", "node3", "node4"}
    level = sweep["metrics"]["bandwidth"]["level"]
    rate = f"{max(1, int(level * 8 / 3))}mbit"  # a third of the healthy pair bandwidth
    print(f"healthy sweep {time.monotonic() - start:.0f} s, pairs at {level:.0f} MB/s; "
          f"caps at {rate}")

    deg = cluster4.fabreg("degrade", "node3", "--rate", rate)
    assert deg.returncode == 0, deg.stderr
    try:
        proc, node_fault, rc = _conclusive(cluster4, tmp_path / "node")
    finally:
        assert cluster4.fabreg("restore").returncode == 0
    assert (rc, _named(node_fault)) == (1, {("node", ("node3",))}), node_fault
    (suspect,) = [s for s in node_fault["suspects"] if not s["inconclusive"]]
    assert suspect["metric"] == "bandwidth" and suspect["deficit_pct"] >= 30
    assert suspect["measured"] == 6 and len(suspect["pairs"]) > 3
    assert all("node3" in (p["node_a"], p["node_b"]) for p in suspect["pairs"])
    # the check failed naming it, or said that other work took the CPUs while it measured
    node_db = Path(node_fault["db"])
    log = (node_db.parent / "perflogs" / "minicluster" / "compute" / "Sweep.log").read_text()
    assert "node node3: bandwidth" in log
    # named by the first sweep, then again by the confirming sweep the job ran for it
    # (a failed test keeps its stage directory, a passing one its output directory)
    (again,) = node_db.parent.rglob("sweep-confirmation.out")
    assert "# fabreg_sweep v1" in again.read_text()
    # ... and confirmed: the failure names it first, ahead of any suspect named only once
    assert "suspects: node node3" in proc.stdout
    assert "node node3" in log.splitlines()[-1].split("flaky (")[0]
    # Prometheus gauges and the report's heat map of the same run
    prom = tmp_path / "sweep.prom"
    exported = _fabreg("export", "prometheus", "--out", str(prom), "--db", str(node_db))
    assert exported.returncode == 0, exported.stderr
    text = prom.read_text()
    assert ('fabreg_node_suspect{environ="openmpi",metric="bandwidth",node="node3",'
            'partition="compute",system="minicluster"} 1.0') in text
    assert ('fabreg_link_suspect{environ="openmpi",metric="bandwidth",node_a="node1",'
            'node_b="node3",partition="compute",system="minicluster"} 0.0') in text
    report = _fabreg("report", "--out", str(tmp_path / "report"), "-q", "--db", str(node_db))
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "report" / "isolation.html").read_text()
    assert "node node3: bandwidth" in page and "data:image/png;base64," in page
    # the trend report links it under its title
    assert '<a href="isolation.html">' in (tmp_path / "report" / "index.html").read_text()

    deg = cluster4.fabreg("degrade", "node1", "--peer", "node3", "--rate", rate)
    assert deg.returncode == 0, deg.stderr
    try:
        proc, link_fault, rc = _conclusive(cluster4, tmp_path / "link")
    finally:
        assert cluster4.fabreg("restore").returncode == 0
    assert (rc, _named(link_fault)) == (1, {("link", ("node1", "node3"))}), link_fault
    status = cluster4.fabreg("status")
    assert "DEGRADED" not in status.stdout, status.stdout

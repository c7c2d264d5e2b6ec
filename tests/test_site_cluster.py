"""Day one on a cluster the suite has never seen: `fabreg site init`, then the quick subset.

The emulated cluster plays a site: its own name (so the `minicluster` system does not describe
it), two partitions whose nodes differ in CPUs and features, one node drained by an admin.
`fabreg site init` reads Slurm and probes one idle node per partition; ReFrame then runs the
quick subset with the generated site.py and no hand edit. (Jobs run as root here: the
emulated cluster's Slurm runs as root; a normal user's run is not covered.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REFRAME, REPO
from test_cluster import FAST, _require_machine, _rows, _skip_without_namespaces

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CLUSTER = [sys.executable, "-m", "fabreg.cli", "cluster"]
PARTITIONS = ["--partition", "cpu:node[1-2]:cpus=1:features=cpu",
              "--partition", "big:node[3-4]:cpus=2:features=big,fat"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    _require_machine()
    state = tmp_path_factory.mktemp("site-cluster")
    up = subprocess.run([*CLUSTER, "--state-dir", str(state), "up", "--nodes", "4", "--name",
                         "unseen", *PARTITIONS], capture_output=True, text=True, timeout=300)
    try:
        _skip_without_namespaces(up)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "cluster up: unseen, 4 node(s), partitions cpu (node1,node2), big " in up.stdout
        drain = subprocess.run([*CLUSTER, "--state-dir", str(state), "drain", "node2",
                                "--reason", "recabled switch 7"], capture_output=True,
                               text=True, timeout=60)
        assert drain.returncode == 0, drain.stderr
        yield {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        down = subprocess.run([*CLUSTER, "--state-dir", str(state), "down"],
                              capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr


def site_init(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabreg.cli", "site", "init", *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def test_the_minicluster_system_does_not_describe_a_named_cluster(site, tmp_path):
    env = {**site, "FABREG_CLUSTER_DIR": str(Path(site["SLURM_CONF"]).parent)}
    shown = subprocess.run([str(REFRAME), "-C", str(REPO / "reframe-config.py"), "--system",
                            "minicluster", "--show-config", "systems"], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path, env=env)
    assert "plays the site 'unseen' (`fabreg cluster up --name`)" in shown.stdout + shown.stderr


def test_site_init_then_the_quick_subset_passes_with_no_hand_edit(site, tmp_path):
    out = tmp_path / "site.py"
    init = site_init(site, "--system", "unseen", "--out", str(out), cwd=tmp_path)
    assert init.returncode == 0, init.stdout + init.stderr
    said = init.stdout
    assert "cpu: 2 node(s), 1 CPUs; probed node1:" in said
    assert "big: 2 node(s), 2 CPUs; probed node3:" in said
    assert "finding: not usable now: node2 (IDLE+DRAIN: recabled switch 7" in said
    assert "heterogeneous" not in said  # the nodes of a partition offer the same UCX
    text = out.read_text()
    assert "features big,fat" in text and "'num_cpus': 1" in text and "'num_cpus': 2" in text
    assert "max_nodes=1, scheduler='squeue'" in text  # cpu: node2 drained, no accounting
    assert "'tcp_interfaces': ['fab0']" in text
    assert "os.environ.setdefault('SQUEUE_STATES', 'all')" in text  # squeue sees finished jobs
    refused = site_init(site, "--out", str(out), cwd=tmp_path)
    assert refused.returncode == 2 and "exists: not overwritten" in refused.stderr
    run = subprocess.run([str(REFRAME), "-C", str(REPO / "reframe-config.py"), "-C", str(out),
                          "-c", str(REPO / "checks"), "--system", "unseen", "--prefix",
                          str(tmp_path), "-r", "--tag", "quick", *FAST],
                         capture_output=True, text=True, timeout=2400, cwd=tmp_path,
                         env={**site, "FABREG_PERFLOG_DIR": str(tmp_path / "perflogs")})
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    # 2 ranks on a 1-CPU node of `cpu`: skipped with why, not refused by sbatch
    assert "2 ranks per node need 2 CPUs; the nodes of unseen:cpu have 1" in log
    rows = _rows(tmp_path / "perflogs" / "unseen" / "big" / "OsuLatency.log")
    crossing = [r for r in rows if r["num_nodes"] == "2"]
    assert {r["environ"] for r in crossing} == {"openmpi", "mpich"}
    assert all(r["job_nodelist"] == "node3,node4" for r in crossing), crossing
    assert all(r["transport_used"] == "tcp" and r["result"] == "pass" for r in crossing)

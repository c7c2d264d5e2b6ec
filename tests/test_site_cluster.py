"""Day one on a cluster the suite has never seen: `fabreg site init`, then a first check.

The emulated cluster plays a site: its own name (so the `minicluster` system does not describe
it), two partitions whose nodes differ in CPUs and features, one node drained by an admin.
A normal user, with a virtualenv of their own, runs `fabreg site init` (Slurm plus one probe
job per partition) and the quick subset's latency check with the generated site.py and no
hand edit: the jobs are that user's. Latency alone: every case it takes part in is asserted
(both MPIs across the nodes, the skip on too few CPUs); the quick subset's other checks run
through Slurm in tests/test_cluster.py, and each would add minutes here, not an assertion.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
from conftest import REFRAME, REPO
from test_cluster import FAST, _require_machine, _rows, _skip_without_namespaces

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CLUSTER = [sys.executable, "-m", "fabreg.cli", "cluster"]
PARTITIONS = ["--partition", "cpu:node[1-2]:cpus=1:features=cpu",
              "--partition", "big:node[3-4]:cpus=2:features=big,fat"]


USER = "fabreg-site-user"


def _failure_info(log: str) -> str:
    """ReFrame's failure reports in a session's output (one per failed attempt)."""
    start = log.find("FAILURE INFO")
    return log[start:start + 4000] if start >= 0 else "(no failure report)"


@pytest.fixture(scope="module")
def user():
    """A normal user of the machine (created for the test, removed after it)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a normal user and bring the cluster up")
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        done = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            pytest.skip(f"cannot create a normal user: {done.stderr.strip()}")
        created = True
    yield USER
    if created:
        subprocess.run(["userdel", "--remove", USER], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def workdir(user):
    """A folder the user owns and can reach (pytest's own tmp is root's alone), with a
    virtualenv of the system Python holding ReFrame and fabreg, as a user would make it."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 for the user's virtualenv")
    root = Path(tempfile.mkdtemp(prefix="fabreg-site-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    venv = root / "venv"
    made = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True,
                          timeout=300)
    if made.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"the system python3 cannot make a venv: {made.stderr.strip()[-200:]}")
    # The user's own checkout (a copy: the one under test may sit where they cannot read).
    checkout = root / "fabreg"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(
        ".venv", ".git", "stage", "output", "perflogs", "__pycache__", ".hypothesis",
        ".pytest_cache", ".ruff_cache", "*.egg-info"))
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-e",
                          f"{checkout}[checks]"], capture_output=True, text=True, timeout=900)
    if pip.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"cannot install fabreg and ReFrame for the user: {pip.stderr[-300:]}")
    home = root / "home"
    home.mkdir()
    shutil.chown(home, user, user)
    for path in [checkout / "checks" / "references",
                 *(checkout / "checks" / "references").rglob("*")]:
        shutil.chown(path, user, user)  # where the user records their baselines
    yield root
    shutil.rmtree(root, ignore_errors=True)


def as_user(user: str, argv: list[str], env: dict[str, str], cwd: Path,
            timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in
                           env.items()), *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.fixture(scope="module")
def site():
    _require_machine()
    # Where a normal user can read slurm.conf and reach munge's socket (pytest's tmp is
    # root's alone).
    state = Path(tempfile.mkdtemp(prefix="fabreg-site-cluster-", dir="/var/tmp"))
    os.chmod(state, 0o755)
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
        down = subprocess.run([*CLUSTER, "--state-dir", str(state), "down", "--purge"],
                              capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr


def test_the_minicluster_system_does_not_describe_a_named_cluster(site, tmp_path):
    env = {**site, "FABREG_CLUSTER_DIR": str(Path(site["SLURM_CONF"]).parent)}
    shown = subprocess.run([str(REFRAME), "-C", str(REPO / "reframe-config.py"), "--system",
                            "minicluster", "--show-config", "systems"], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path, env=env)
    assert "plays the site 'unseen' (`fabreg cluster up --name`)" in shown.stdout + shown.stderr


def test_site_init_names_the_partitions_slurm_has_when_asked_for_another(site, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fabreg.cli", "site", "init", "--partitions",
                           "gpu", "--out", str(tmp_path / "site.py")], capture_output=True,
                          text=True, timeout=120, env=site, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "fabreg: error: no partition gpu in Slurm (have: big, cpu)"
    assert not (tmp_path / "site.py").exists()


def test_a_normal_user_runs_site_init_then_a_quick_check_with_no_hand_edit(site, user,
                                                                            workdir):
    home = workdir / "home"
    env = {"SLURM_CONF": site["SLURM_CONF"], "HOME": str(home), "PATH":
           f"{workdir / 'venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin",
           "FABREG_PERFLOG_DIR": str(home / "perflogs")}
    out = home / "site.py"
    init = as_user(user, ["fabreg", "site", "init", "--system", "unseen", "--out", str(out)],
                   env, home)
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
    refused = as_user(user, ["fabreg", "site", "init", "--out", str(out)], env, home)
    assert refused.returncode == 2 and "exists: not overwritten" in refused.stderr
    checkout = workdir / "fabreg"
    run = as_user(user, ["reframe", "-C", str(checkout / "reframe-config.py"), "-C", str(out),
                         "-c", str(checkout / "checks"), "--system", "unseen", "--prefix",
                         str(home / "rfm"), "-r", "--tag", "quick", "-n", "OsuLatency",
                         *FAST], env, home, timeout=2400)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    # 2 ranks on a 1-CPU node of `cpu`: skipped with why, not refused by sbatch
    assert "2 ranks per node need 2 CPUs; the nodes of unseen:cpu have 1" in log
    rows = _rows(home / "perflogs" / "unseen" / "big" / "OsuLatency.log")
    crossing = [r for r in rows if r["num_nodes"] == "2"]
    assert {r["environ"] for r in crossing} == {"openmpi", "mpich"}
    assert all(r["job_nodelist"] == "node3,node4" for r in crossing), crossing
    # FAST lets ReFrame retry a failed case once; the perflog keeps every attempt, in order.
    final = {r["environ"]: r for r in crossing}
    assert all(r["transport_used"] == "tcp" and r["result"] == "pass"
               for r in final.values()), (crossing, _failure_info(log))
    if len(crossing) > len(final):  # a retried pass: say what the first attempt met
        warnings.warn(f"a case passed on its retry: {crossing} {_failure_info(log)}",
                      stacklevel=1)
    jobs = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%u"], capture_output=True,
                          text=True, timeout=30, env=site).stdout.split()
    assert jobs and set(jobs) == {user}  # every job was the user's, none root's
    # The first nights: values are missing, and the warning names the command that records
    # the partition's baseline; the user records it from what they ingested.
    assert ("record one with fabreg references calibrate --system unseen --partition big"
            in log)
    db = home / "fabreg.db"
    ingest = as_user(user, ["fabreg", "ingest", "-q", "--db", str(db), str(home / "perflogs")],
                     env, home)
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr
    calibrate = as_user(user, ["fabreg", "references", "calibrate", "--system", "unseen",
                               "--partition", "big", "--min-runs", "1", "--db", str(db),
                               "--checks", str(checkout / "checks")], env, home)
    baseline = checkout / "checks" / "references" / "unseen" / "partition-big.yaml"
    assert f"wrote {baseline}" in calibrate.stdout, calibrate.stdout + calibrate.stderr
    assert "# Baseline of partition big for the `unseen` system" in baseline.read_text()

"""The suite through real Slurm on an emulated 2-node cluster (network namespaces, bridge).

Brings a cluster up in a temporary state directory, runs the quick subset on two nodes with
MPI traffic crossing the bridge, calibrates this host's baseline, caps one link at half its
calibrated bandwidth and sees the crossing bandwidth check fail (confirmed), restores it, then
checks a hung job and a node that dies mid-run. The cluster is taken down by the fixture even
when a test fails, and the teardown asserts that nothing is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from conftest import CHECKS, CLUSTER_BRIDGE, REPO, fabreg, run_reframe

from fabreg.run import gpu, procfs
from fabreg.run.site_init import slurm_config
from fabreg.schema import CONTENDED_SHARE
from fabreg.testlib.prompt_squeue import completion_log

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FABREG = [sys.executable, "-m", "fabreg.cli", "cluster"]
BRIDGE = CLUSTER_BRIDGE
QUICK_CHECKS = ("OsuLatency", "OsuBandwidth", "OsuAllreduce")
# Fewer iterations for the bandwidth-heavy checks keep a run to minutes on 2 shared cores;
# a hung MPI job costs 3 minutes, not 10. One measurement a value: these runs prove the
# checks run through Slurm, not how many measurements a verdict takes (tests/
# test_verdicts_reframe.py); two more launches of each curve doubled the quick subset's time.
# One retry: MPICH 4.0 over UCX 1.13 TCP sometimes hangs in MPI_Finalize after a complete
# run (docs/cluster.md, "Known issues"); a check that fails twice still fails the test.
FAST = ["--max-retries=1", "-S", "OsuBandwidth.iterations=20", "-S", "OsuBandwidth.warmup=2",
        "-S", "OsuAllreduce.iterations=20", "-S", "OsuAllreduce.warmup=2",
        "-S", "repeats=1", "-S", "time_limit=3m"]
FAULT_CHECKS = REPO / "tests" / "cluster_checks"


class Cluster:
    """A running emulated cluster and the commands that act on it."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.env = {"FABREG_CLUSTER_DIR": str(state_dir)}

    def fabreg(self, *args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*FABREG, "--state-dir", str(self.state_dir), *args],
                              capture_output=True, text=True, timeout=timeout, cwd=REPO)

    def slurm(self, *argv: str) -> str:
        env = {**os.environ, "SLURM_CONF": str(self.state_dir / "slurm.conf"),
               "SQUEUE_STATES": "all"}
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                              env=env, check=False).stdout

    def reframe(self, tmp: Path, *args: str, checks: Path | Sequence[Path] = CHECKS,
                timeout: int = 1800) -> subprocess.CompletedProcess[str]:
        tmp.mkdir(parents=True, exist_ok=True)
        return run_reframe("--system", "minicluster", "-r", *args, checks=checks,
                           perflog_dir=tmp / "perflogs", cwd=tmp, env=self.env, timeout=timeout)


def _leftovers() -> list[str]:
    found = []
    netns = Path("/run/netns")
    if netns.is_dir():
        found += [p.name for p in netns.iterdir() if p.name.startswith("fabreg-node")]
    found += [p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("fabreg")]
    return found


def _pid_alive(pid: int) -> bool:
    return procfs.alive(pid)


def _require_machine() -> None:
    """Skip with the reason when this machine cannot host the emulated cluster now."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the emulated cluster creates network namespaces and starts "
                    "Slurm daemons")
    missing = [t for t in ("slurmctld", "slurmd", "munged", "sbatch") if not shutil.which(t)]
    if missing:
        pytest.skip(f"Slurm/munge not installed ({', '.join(missing)}); "
                    "apt-get install slurm-wlm munge")
    if BRIDGE.exists():
        reason = ("a fabreg cluster is already up on this machine (bridge fabregbr0); "
                  "this test brings up its own: `fabreg cluster down` first")
        if os.environ.get("CI"):  # a CI run that skipped every cluster test would pass
            pytest.fail(reason)
        pytest.skip(reason)


def _skip_without_namespaces(up: subprocess.CompletedProcess[str]) -> None:
    if up.returncode != 0 and "cannot create network namespaces" in up.stderr:
        pytest.skip(up.stderr.strip())


def test_down_cleans_up_a_half_started_cluster_without_its_state_file(tmp_path):
    """`up` killed half way, then its state file lost: `down` still finds and removes it all."""
    _require_machine()
    cl = Cluster(tmp_path)
    up = subprocess.Popen([*FABREG, "--state-dir", str(tmp_path), "up", "--nodes", "2"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        lines = []
        for line in up.stdout:
            lines.append(line)
            if line.startswith("started slurmctld"):
                up.kill()  # interrupted before the nodes' slurmd start
                break
        up.wait(timeout=60)
        text = "".join(lines)
        if "cannot create network namespaces" in text:
            pytest.skip(text.strip())
        assert any(ln.startswith("started slurmctld") for ln in lines), text
        assert BRIDGE.exists() and len(_leftovers()) >= 3
        (tmp_path / "cluster.json").unlink()
    finally:
        if up.poll() is None:
            up.kill()
        down = cl.fabreg("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped unrecorded slurmctld" in down.stdout
    assert "stopped unrecorded munged" in down.stdout
    assert "removed network namespace fabreg-node2" in down.stdout
    assert _leftovers() == []
    again = cl.fabreg("down")
    assert again.returncode == 0, again.stderr


@contextlib.contextmanager
def brought_up(tmp_path_factory, nodes: int) -> Iterator[Cluster]:
    """A cluster of ``nodes`` nodes for a test module; taken down afterwards, also when a test
    fails, and checked to leave no namespace, link, qdisc or daemon behind."""
    _require_machine()
    state_dir = tmp_path_factory.mktemp(f"cluster{nodes}")
    cl = Cluster(state_dir)
    up = cl.fabreg("up", "--nodes", str(nodes))
    try:
        _skip_without_namespaces(up)
        assert up.returncode == 0, up.stdout + up.stderr
        names = ", ".join(f"node{i} idle" for i in range(1, nodes + 1))
        assert f"nodes ready: {names}" in up.stdout, up.stdout
        yield cl
    finally:
        state = state_dir / "cluster.json"
        pids = ([d["pid"] for d in json.loads(state.read_text())["daemons"].values()]
                if state.exists() else [])
        down = cl.fabreg("down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert "no namespace, link, qdisc or daemon left" in down.stdout
        assert _leftovers() == []
        time.sleep(0.5)
        assert [p for p in pids if _pid_alive(p)] == []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with brought_up(tmp_path_factory, 2) as cl:
        yield cl


def _rows(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"))) for line in lines[1:]]


def test_up_is_idempotent_and_status_is_healthy(cluster):
    again = cluster.fabreg("up", "--nodes", "2")
    assert again.returncode == 0, again.stderr
    assert "started" not in again.stdout
    other = cluster.fabreg("up", "--nodes", "3")
    assert other.returncode == 2
    assert "a cluster with 2 node(s)" in other.stderr and "already up" in other.stderr
    status = cluster.fabreg("status")
    assert status.returncode == 0, status.stdout
    assert "node1: 10.88.0.11 netns fabreg-node1, slurm idle, link full speed" in status.stdout


def test_a_second_state_directory_neither_takes_nor_tears_down_the_running_cluster(
        cluster, tmp_path):
    """The node namespaces, links and bridge have one set of names per machine: `up` of
    another state directory refuses them, and its `down` leaves them (it removed them by
    name, killing the running cluster's slurmd, when a benchmark's `up` had failed on the
    controller's port and its cleanup ran `down`). Another port: the namespaces refuse it."""
    other = Cluster(tmp_path / "other")
    up = other.fabreg("up", "--nodes", "2", "--ctld-port", "16899")
    assert up.returncode == 2, up.stdout + up.stderr
    assert up.stderr.startswith(
        f"fabreg: error: the emulated cluster of another state directory, "
        f"{cluster.state_dir}, is up (its slurmd pid "), up.stderr
    assert len(up.stderr.strip().splitlines()) == 1, up.stderr
    assert not (tmp_path / "other" / "slurm.conf").exists()
    # Its fault commands would act on the running cluster's links and daemons by name.
    for fault in (["degrade", "node2", "--rate", "100mbit"], ["restore"], ["kill", "node2"]):
        refused = other.fabreg(*fault)
        assert refused.returncode == 2, (fault, refused.stdout + refused.stderr)
        assert f"no cluster is up (no state in {tmp_path / 'other'})" in refused.stderr, fault
    down = other.fabreg("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "its network namespaces, links and bridge are left as they are" in down.stdout
    assert "removed" not in down.stdout and "stopped" not in down.stdout, down.stdout
    status = cluster.fabreg("status")
    assert status.returncode == 0, status.stdout
    ran = subprocess.run(["srun", "-N", "2", "-n", "2", "hostname"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "SLURM_CONF": str(
                             cluster.state_dir / "slurm.conf")})
    assert sorted(ran.stdout.split()) == ["node1", "node2"], ran.stdout + ran.stderr


def test_the_clusters_squeue_backend_finds_its_job_completion_log(cluster, monkeypatch):
    """fabreg_squeue sees a job end by the log the cluster's Slurm keeps, as Slurm tells it."""
    monkeypatch.setenv("SLURM_CONF", str(cluster.state_dir / "slurm.conf"))
    assert completion_log(slurm_config()) == cluster.state_dir / "logs" / "jobcomp.log"


def test_quick_subset_runs_through_slurm_on_two_nodes(cluster, tmp_path):
    proc = cluster.reframe(tmp_path, "--tag", "quick", "-n", "%transport=tcp%nodes=2", *FAST,
                           checks=CHECKS / "osu.py")  # every check tagged quick is in osu.py
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    seen_mpis = set()
    for name in QUICK_CHECKS:
        rows = _rows(tmp_path / "perflogs" / "minicluster" / "compute" / f"{name}.log")
        assert rows, name
        last = {}
        for row in rows:
            last[row["environ"]] = row
            assert row["system"] == "minicluster" and row["partition"] == "compute"
            assert row["num_nodes"] == "2" and row["nodes"] == "2", row
            assert row["num_tasks_per_node"] == "1"
            # Slurm placed the ranks on both namespaces.
            assert row["job_nodelist"] == "node1,node2", row
            assert row["jobid"].isdigit()
        for row in last.values():
            seen_mpis.add(row["mpi"])
            assert row["result"] == "pass", row
            # Their MPI's own logs showed the traffic on TCP, from both hosts.
            assert row["transport_used"] == "tcp", row
    assert {"openmpi", "mpich"} <= seen_mpis


WORKLOAD_CASES = ("UcxPerftestLatency%nodes=2%ucx_test=tag_lat%transport=tcp%buffer=host",
                  "Streams%transport=tcp%nodes=2%layout=cross",
                  "TailLatency%transport=tcp%nodes=2%case=allreduce:default%environment=high_tail",
                  "Matmul%transport=tcp%nodes=2%mode=nonblocking%matrix_size=512%ranks=2")


def test_more_ranks_on_a_node_than_its_cpus_run_overcommitted(cluster, tmp_path):
    """4 ranks on one emulated node that declares 2 CPUs: the partition says its nodes share
    the machine's cores (``oversubscribe``), so the job asks Slurm to overcommit instead of
    being refused by sbatch ("CPU count per node can not be satisfied")."""
    proc = cluster.reframe(tmp_path, "-n", "Matmul%transport=shm%nodes=1%mode=blocking"
                           "%matrix_size=512%ranks=4", "-p", "openmpi", "-S", "repeats=1",
                           "-S", "time_limit=3m", checks=CHECKS / "matmul.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    (row,) = _rows(tmp_path / "perflogs" / "minicluster" / "compute" / "Matmul.log")
    assert row["result"] == "pass" and row["ranks"] == "4" and row["nodes"] == "1", row
    cpus = os.cpu_count() or 1
    if cpus < 4:  # its answer is checked; its phases, the scheduler's time slices, are not
        assert row["ref_notes"].startswith(f"not judged: 4 ranks on {cpus} CPUs: "), row
    (script,) = list((tmp_path / "output").rglob("Matmul_*/rfm_job.sh"))
    assert "#SBATCH --overcommit" in script.read_text()


def test_busy_polling_ranks_of_nodes_that_share_the_cores_skip_their_collective(
        cluster, tmp_path):
    """As many ranks on each of two emulated nodes as the machine has cores: twice as many
    ranks as the cores they share. MPICH's, which busy-poll, would time the scheduler's
    slices, so its collective across the nodes is skipped before its job, saying so; on one
    node (a rank per core) it is not, nor is Open MPI's (which yields). A dry run: nothing is
    measured, only what would run is decided."""
    cpus = os.cpu_count() or 1  # what each emulated node declares
    proc = run_reframe("--system", "minicluster", "--dry-run", "-p", "openmpi|mpich",
                       "-n", "OsuAllreduce%transport=tcp%nodes=2", "-n",
                       "OsuAllreduce%transport=shm%nodes=1", "-S", f"ranks_per_node={cpus}",
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path, env=cluster.env,
                       checks=CHECKS / "osu.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    skipped = re.findall(r"SKIP.*\] \(.*\) OsuAllreduce %transport=(\w+) .*\+(\w+) \[(.*)\]",
                         out)
    assert skipped == [("tcp", "mpich", f"{2 * cpus} ranks on {cpus} CPUs (2 nodes on one "
                        "machine's cores): MPICH's ch4:ucx device polls for messages without "
                        "yielding the CPU, so the collective's time would be the OS scheduler's "
                        "time slices, not the fabric's; run it on nodes with cores of their "
                        "own")], skipped
    ok = re.findall(r"OK.*\] \(.*\) OsuAllreduce %transport=(\w+) .*\+(\w+)$", out, re.M)
    assert sorted(ok) == [("shm", "mpich"), ("shm", "openmpi"), ("tcp", "openmpi")], ok


def test_a_gpu_collective_on_nodes_that_share_the_cores_says_first_what_the_host_lacks(
        cluster, tmp_path):
    """The same placement for the CUDA allreduce on a host with no GPU: its skip says that
    (all the host lacks for device buffers), not that the ranks would time the scheduler,
    which the collective's own hook, run before the GPU plugin's, said before."""
    if gpu.no_gpu_reason() is None:
        pytest.skip("this host has a GPU: the CUDA collective is not skipped for the lack of one")
    cpus = os.cpu_count() or 1
    proc = run_reframe("--system", "minicluster", "--dry-run", "-p", "openmpi|mpich",
                       "-n", "GpuOsuAllreduce%buffer=cuda%transport=tcp%nodes=2",
                       "-S", f"ranks_per_node={cpus}", perflog_dir=tmp_path / "perflogs",
                       cwd=tmp_path, env=cluster.env, checks=CHECKS / "gpu_buffers.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    skipped = re.findall(r"SKIP.*\] \(.*\) GpuOsuAllreduce .*\+(\w+) \[(.*)\]", out)
    assert sorted(mpi for mpi, _ in skipped) == ["mpich", "openmpi"], out[-6000:]
    for _, reason in skipped:
        assert reason.startswith("no GPU: this host has no NVIDIA GPU"), reason
        assert "time slices" not in reason, reason


def test_workload_checks_run_across_two_nodes(cluster, tmp_path):
    """ucx_perftest and streams between nodes, tail latency with the background on the same
    links, and the distributed matmul, through Slurm on both namespaces, judged against the
    host's minicluster baseline where it has one.

    Open MPI only: MPICH 4.0.2 with UCX 1.13 over TCP hangs in MPI_Finalize in some of these
    jobs after printing complete results (docs/cluster.md, "Known issues"), which would make
    this test fail for a reason outside the suite.
    """
    selection = [arg for case in WORKLOAD_CASES for arg in ("-n", case)]
    # one measured run a case: how many a verdict takes is not what this test asserts
    proc = cluster.reframe(tmp_path, *selection, "-p", "openmpi|builtin", "-S", "repeats=1",
                           "-S", "time_limit=3m", checks=[
                               CHECKS / f for f in ("ucx_perftest.py", "streams.py",
                                                    "tail_latency.py", "matmul.py")])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    perflogs = tmp_path / "perflogs" / "minicluster" / "compute"
    for name in ("UcxPerftestLatency", "Streams", "TailLatency", "Matmul"):
        (row,) = _rows(perflogs / f"{name}.log")
        assert row["environ"] == ("builtin" if name.startswith("Ucx") else "openmpi"), row
        assert row["nodes"] == "2", row
        assert row["job_nodelist"] == "node1,node2", row
        # no baseline of this host in a fresh clone: missing, never a failure (a loaded tail
        # environment's figures are not judged against a baseline at all)
        judged = ("",) if name == "TailLatency" else ("ok", "warn", "missing")
        assert row["result"] == "pass" and row["ref_status"] in judged, row
        # other work was metered on both nodes, each by a sampler of its own
        metered = json.loads(row["interference"])
        assert set(metered["nodes"]) == {"node1", "node2"}, metered
        assert metered["other_share"] == max(metered["nodes"].values()), metered
    (ucx,) = _rows(perflogs / "UcxPerftestLatency.log")
    assert ucx["transport_used"] == "tcp" and float(ucx["latency_8B_value"]) > 0, ucx
    (streams,) = _rows(perflogs / "Streams.log")
    assert float(streams["loss_rate_value"]) == 0 and float(streams["rate_min_value"]) > 0.3
    (tail,) = _rows(perflogs / "TailLatency.log")
    # The background was calibrated towards the high-tail target on these links: it reached
    # it, or the run says why not (a busy host, a target out of reach), with the figures.
    assert tail["environment"] == "high_tail" and float(tail["tail_target"]) == 3.0, tail
    assert json.loads(tail["tail_background"])["steps"], tail["tail_background"]
    reached = float(tail["tail_reached"])
    assert reached == float(tail["p99_over_p50_value"]), tail
    if not tail["tail_verdict"]:
        assert abs(reached - 3.0) <= 0.75, tail
    else:
        assert tail["tail_verdict"].startswith("inconclusive: "), tail["tail_verdict"]
    (matmul,) = _rows(perflogs / "Matmul.log")
    assert 0 < float(matmul["comm_fraction_value"]) < 1


@contextlib.contextmanager
def host_running_slow(cluster: Cluster) -> Iterator[None]:
    """A job measured while its host ran slow on the value's path: node1's own TCP loopback
    (the host control's figure on a TCP value's path) capped in its namespace, and node2's
    link with it, as a slow placement of a VM's vCPUs slows both."""
    lo = ["ip", "netns", "exec", "fabreg-node1", "tc", "qdisc"]
    subprocess.run([*lo, "replace", "dev", "lo", "root", "tbf", "rate", "4gbit", "burst",
                    "256kb", "latency", "50ms"], check=True, capture_output=True, timeout=30)
    try:
        deg = cluster.fabreg("degrade", "node2", "--rate", "8gbit")
        assert deg.returncode == 0, deg.stderr
        yield
    finally:
        subprocess.run([*lo, "del", "dev", "lo", "root"], capture_output=True, timeout=30)
        assert cluster.fabreg("restore").returncode == 0


def test_a_link_capped_at_half_its_calibrated_bandwidth_fails_then_restore_passes(
        cluster, tmp_path):
    """The smallest fault users need caught, as a site would meet it: calibrate this host's
    minicluster baseline from its own runs, cap one node's link at half the calibrated
    bandwidth, see the crossing bandwidth check fail (confirmed), restore it, see it pass.

    Best of 5 per job and 8 calibration jobs: on this 2-core VM one healthy job in about
    twenty runs ~25 % slow in all its repeats (ranks and the network's softirqs sharing
    cores), and the baseline's band follows its worst healthy job. Where one ran -33 % (a
    CI run on a slow day) the band reached 50 %: calibrate says so, and the test does what
    it tells a site, calibrating again from new runs (``--since``). A job measured while the
    host itself ran slow (its control's TCP loopback beyond that control's own band) is left
    out of the first calibration, and the band does not follow it."""
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(CHECKS / "osu.py", checks)
    (checks / "references").mkdir()
    # (the 1 MiB value alone is judged: the curve below it is neither run nor validated)
    bandwidth = ["-n", "OsuBandwidth%transport=tcp%nodes=2", "-p", "openmpi",
                 "-S", "perf_sizes=1048576", "-S", "min_size=1048576", "-S", "iterations=20",
                 "-S", "warmup=2", "-S", "repeats=5", "-S", "time_limit=5m"]
    db = tmp_path / "fabreg.db"
    began = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    with host_running_slow(cluster):  # (one measurement: slow however many there are)
        slowed = cluster.reframe(tmp_path / "slow-host", *bandwidth, "-S", "repeats=1",
                                 checks=checks)
    assert slowed.returncode == 0, (slowed.stdout + slowed.stderr)[-4000:]
    (slow_row,) = _rows(tmp_path / "slow-host" / "perflogs" / "minicluster" / "compute"
                        / "OsuBandwidth.log")
    fabreg("ingest", "-q", str(tmp_path / "slow-host" / "perflogs"), db=db, check=True)
    for attempt in ("calibrate", "recalibrate"):
        if attempt == "recalibrate":
            began = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
        calibration = cluster.reframe(tmp_path / attempt, *bandwidth, "--repeat", "8",
                                      checks=checks)
        assert calibration.returncode == 0, (calibration.stdout + calibration.stderr)[-4000:]
        fabreg("ingest", "-q", str(tmp_path / attempt / "perflogs"), db=db, check=True)
        calibrated = fabreg("references", "calibrate", "--system", "minicluster", "--checks",
                            str(checks), "--force", "--since", began, db=db, check=True)
        (baseline,) = (checks / "references" / "minicluster").glob("*.yaml")
        rows = yaml.safe_load(baseline.read_text())["references"]
        (row,) = [r for r in rows if r["metric"] == "bandwidth"]
        if attempt == "calibrate":  # the slow host's job is among the runs, and left out
            (loopback,) = [r for r in rows if r["metric"] == "tcp_loopback"]
            slow_control = json.loads(slow_row["host_control"])
            assert slow_control["on_path"] == ["tcp_loopback"]  # what calibration goes by
            slow_loopback = slow_control["tcp_loopback"]
            assert slow_loopback < loopback["value"] * (1 - loopback["fail"]), (
                slow_loopback, loopback)
            # (a healthy job in a slow spell of the VM that its control saw would be too)
            assert re.search(r"left out \d+ value\(s\) of \d+ run\(s\) measured while the "
                             r"host itself ran slow", calibrated.stdout), calibrated.stdout
        blind = "cannot catch a link at half speed" in calibrated.stderr
        assert blind == (row["fail"] >= 0.5), (row, calibrated.stderr)
        if not blind:
            break
    assert row["fail"] < 0.5, f"two calibrations cannot catch a half-speed link: {row}"
    # the host control that will judge the capped run: its TCP figure, on the value's path
    assert {r["metric"] for r in rows if r["benchmark"] == "host_control"} >= {"tcp_loopback"}
    half = f"{int(row['value'] * 8 / 2)}mbit"  # OSU's MB/s are 10^6 B/s, tc's mbit 10^6 bit/s

    deg = cluster.fabreg("degrade", "node2", "--rate", half)
    assert deg.returncode == 0, deg.stderr
    try:
        assert f"DEGRADED to {half}" in cluster.fabreg("status").stdout
        # The cap lasts: every confirmation run fails however many there are and however
        # they are spread, so three over 10 s tell it as well as the nightly's ten over a
        # minute (what the count and the spread are for: test_verdicts_reframe.py).
        slow = cluster.reframe(tmp_path / "slow", *bandwidth, "-S", "confirm_span=10",
                               "-S", "confirm_runs=3", checks=checks)
        out = slow.stdout + slow.stderr
        assert slow.returncode != 0, out[-4000:]
        assert "failed to meet reference" in out and "bandwidth_1MB" in out, out[-4000:]
        (capped,) = _rows(tmp_path / "slow" / "perflogs" / "minicluster" / "compute"
                          / "OsuBandwidth.log")
        assert capped["ref_status"] == "fail" and json.loads(capped["confirmation"])
    finally:
        restored = cluster.fabreg("restore")
    assert restored.returncode == 0
    assert "restored full speed on node2" in restored.stdout
    tc = subprocess.run(["tc", "qdisc", "show", "dev", "fabreg-h2"], capture_output=True,
                        text=True).stdout
    assert "tbf" not in tc
    fast = cluster.reframe(tmp_path / "fast", *bandwidth, checks=checks)
    # (a healthy run that fails says what it measured: every measurement, and the control;
    # its stage folder, kept for a failure, has its driver's result)
    assert fast.returncode == 0, ((fast.stdout + fast.stderr)[-3000:], [
        {k: v for k, v in json.loads(m.read_text()).items()
         if k in ("values", "host_control", "interference")}
        for m in (tmp_path / "fast").rglob("measure.json")])


#: A reference no link can meet: every crossing osu_bw value fails its band.
UNREACHABLE_BANDWIDTH = """system: minicluster
references:
  - {benchmark: osu_bw, metric: bandwidth, size: 1048576, value: 1000000000, unit: MB/s, fail: 0.5}
"""


def test_another_job_on_the_same_node_makes_a_failing_value_inconclusive(cluster, tmp_path):
    """Two jobs on one node: a CPU-bound job of another user shares node1 (the partition
    oversubscribes) while the bandwidth check measures. Its failing value is not a
    regression: `inconclusive`, with Slurm's `exclusive: no` and the other job named."""
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(CHECKS / "osu.py", checks)
    (checks / "references").mkdir()
    (checks / "references" / "minicluster.yaml").write_text(UNREACHABLE_BANDWIDTH)
    submitted = cluster.slurm("sbatch", "--parsable", "-w", "node1", "-n", "1",
                              "-J", "other-user", "-o", "/dev/null",
                              "--wrap", "exec sha256sum /dev/zero")
    job = submitted.strip().split(";")[0]
    assert job.isdigit(), submitted
    try:
        for _ in range(100):  # until the other job runs
            if cluster.slurm("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING":
                break
            time.sleep(0.2)
        proc = cluster.reframe(tmp_path / "run", "-n", "OsuBandwidth%transport=tcp%nodes=2",
                               "-p", "openmpi", "-S", "perf_sizes=1048576",
                               "-S", "min_size=1048576", "-S", "iterations=20",
                               "-S", "warmup=2", "-S", "quiet_wait=5",
                               # the other job runs all along: no confirmation run is quiet,
                               # three short ones tell it as well as the default ten, and
                               # one first measurement as well as three
                               "-S", "repeats=1", "-S", "confirm_runs=3", "-S", "confirm_span=4",
                               # no host-control row judges it: its samples 0.5 s apart
                               "-S", "control_gap=0.5", checks=checks)
    finally:
        cluster.slurm("scancel", job)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    (row,) = _rows(tmp_path / "run" / "perflogs" / "minicluster" / "compute"
                   / "OsuBandwidth.log")
    assert row["ref_status"] == "inconclusive", row
    assert set(json.loads(row["verdicts"]).values()) == {"inconclusive"}, row["verdicts"]
    metered = json.loads(row["interference"])
    assert row["exclusive"] == "no" and metered["other_share"] > 0.1, (row["exclusive"], metered)
    assert "sha256sum" in metered["top_other"], metered
    assert "inconclusive (other work took" in out and "sha256sum" in out, out[-4000:]


@pytest.mark.skipif(not shutil.which("mpicc.mpich"), reason="MPICH is not installed")
def test_a_one_node_mpich_jobs_confirmation_runs_count_its_ranks_as_its_own(cluster, tmp_path):
    """MPICH's shared-memory bandwidth on one node against a value no host reaches: its
    failing value is measured again, each run a fraction of a second of two busy-polling
    ranks. Hydra starts them itself (``HYDRA_LAUNCHER=fork``), so the meter of each run counts
    them as the job's own: on a quiet host the runs read quiet. Started through ``srun``
    instead, the step daemon waited for the ranks, a run ended between two samples, and 9 of
    10 such runs read 0.67-0.76 of the host as other work while the job read 0.5 %."""
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(CHECKS / "osu.py", checks)
    (checks / "references").mkdir()
    (checks / "references" / "minicluster.yaml").write_text(UNREACHABLE_BANDWIDTH)
    proc = cluster.reframe(tmp_path / "run", "-n", "OsuBandwidth%transport=shm%nodes=1",
                           "-p", "mpich", "-S", "perf_sizes=1048576", "-S", "min_size=1048576",
                           "-S", "iterations=20", "-S", "warmup=2", "-S", "repeats=1",
                           "-S", "confirm_runs=3", "-S", "confirm_span=0",
                           "-S", "control_gap=0.5", checks=checks)
    out = proc.stdout + proc.stderr
    (row,) = _rows(tmp_path / "run" / "perflogs" / "minicluster" / "compute"
                   / "OsuBandwidth.log")
    assert json.loads(row["confirmation"]), row  # it failed and was measured again
    # confirmed on a quiet host (srun-started ranks read busy: inconclusive)
    assert row["ref_status"] == "fail", (row["ref_status"], row["ref_notes"])
    # a failed check stays in its stage directory
    (measured,) = [json.loads(p.read_text())
                   for p in (tmp_path / "run" / "stage").rglob("measure.json")]
    shares = measured["confirmation_other_shares"]
    assert len(shares) == 3, (shares, out[-3000:])
    assert sum(share <= CONTENDED_SHARE for share in shares) >= 2, shares


def _iperf_mbits(server_ns: str | None, server_ip: str, client_ns: str) -> float:
    """Megabits per second from ``client_ns`` to an iperf3 server at ``server_ip``."""
    prefix = ["ip", "netns", "exec", server_ns] if server_ns else []
    tried = []
    for _ in range(5):  # a one-off server ends after one attempt, good or not
        server = subprocess.Popen([*prefix, "iperf3", "-s", "-1", "-B", server_ip, "-p", "5399"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(50):
                client = subprocess.run(["ip", "netns", "exec", client_ns, "iperf3", "-c",
                                         server_ip, "-p", "5399", "-t", "2", "-J"],
                                        capture_output=True, text=True, timeout=60)
                if "unable to connect" not in client.stdout + client.stderr:
                    break
                time.sleep(0.1)
            try:
                received = json.loads(client.stdout)["end"]["sum_received"]
                return received["bits_per_second"] / 1e6
            except (ValueError, KeyError):
                tried.append(client.stdout[-500:] + client.stderr[-500:])
        finally:
            server.kill()
            server.wait()
    raise AssertionError("\n".join(tried))


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed")
def test_a_link_cap_shapes_only_the_traffic_between_its_two_nodes(cluster):
    deg = cluster.fabreg("degrade", "node1", "--peer", "node2", "--rate", "200mbit")
    assert deg.returncode == 0, deg.stderr
    try:
        assert "link node1<->node2: DEGRADED to 200mbit" in cluster.fabreg("status").stdout
        for ns in ("fabreg-node1", "fabreg-node2"):
            shown = subprocess.run(["ip", "netns", "exec", ns, "tc", "class", "show", "dev",
                                    "fab0"], capture_output=True, text=True).stdout
            assert "rate 200Mbit" in shown, shown
        capped = _iperf_mbits("fabreg-node2", "10.88.0.12", "fabreg-node1")
        back = _iperf_mbits("fabreg-node1", "10.88.0.11", "fabreg-node2")
        to_bridge = _iperf_mbits(None, "10.88.0.1", "fabreg-node1")  # not the peer: unshaped
        assert capped < 220 and back < 220, (capped, back)
        assert to_bridge > 2 * 220, to_bridge
        again = cluster.fabreg("degrade", "node2", "--rate", "100mbit")
        assert again.returncode == 2 and "a node cap and a link cap do not combine" in again.stderr
    finally:
        restored = cluster.fabreg("restore", "node2")
    assert restored.returncode == 0 and "node1" in restored.stdout  # the link's other end too
    assert "DEGRADED" not in cluster.fabreg("status").stdout
    assert _iperf_mbits("fabreg-node2", "10.88.0.12", "fabreg-node1") > 2 * 220


def test_reservation_pins_the_run_to_the_reserved_node(cluster, tmp_path):
    """An acceptance run pinned with FABREG_RESERVATION lands on the reserved node only."""
    made = cluster.slurm("scontrol", "create", "reservation", "reservationname=fabric-change",
                         "nodes=node2", "starttime=now", "duration=30", "users=root",
                         "flags=ignore_jobs")
    assert "Reservation created: fabric-change" in made, made
    try:
        cluster.env["FABREG_RESERVATION"] = "fabric-change"
        proc = cluster.reframe(tmp_path, "-n", "OsuLatency%transport=shm%nodes=1",
                               "-p", "openmpi", "-S", "time_limit=3m",
                               checks=CHECKS / "osu.py")
    finally:
        cluster.env.pop("FABREG_RESERVATION")
        cluster.slurm("scontrol", "delete", "reservationname=fabric-change")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    rows = _rows(tmp_path / "perflogs" / "minicluster" / "compute" / "OsuLatency.log")
    assert [r["job_nodelist"] for r in rows] == ["node2"]


#: One real check of each family that never finishes (iterations no time limit allows).
ENDLESS = {
    # MpiCheck (OSU, and the workload probes on the same base)
    ("osu.py", "OsuLatency%transport=tcp%nodes=2", "openmpi"):
        "OsuLatency.iterations=1000000000",
    # ClientServerCheck (ucx_perftest, and perftest on the same base)
    ("ucx_perftest.py", "UcxPerftestLatency%nodes=2%ucx_test=tag_lat%transport=tcp%buffer=host",
     "builtin"): "UcxPerftestLatency.iterations=2000000000",
}


def test_every_check_family_is_killed_at_its_time_limit_and_says_so(cluster, tmp_path):
    """A real check that Slurm kills at its time limit says so, not "rows missing", and
    leaves no job running. The families run in two sessions at once (the partition runs one
    job at a time per session): Slurm kills a job only at whole minutes past its start, so
    two waits in a row would double the test's time for no further assertion."""
    def killed(case: tuple[str, str, str], endless: str) -> str:
        file, selection, environ = case
        proc = cluster.reframe(tmp_path / environ, "-n", selection, "-p", environ,
                               "-S", endless, "-S", "time_limit=30s", checks=CHECKS / file,
                               timeout=600)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        return out
    with ThreadPoolExecutor(len(ENDLESS)) as pool:
        outputs = list(pool.map(killed, ENDLESS, ENDLESS.values()))
    for out in outputs:
        assert "killed at its time limit (30.0 s) (scheduler state TIMEOUT)" in out, out[-3000:]
        assert "due to time limit" in out, out[-3000:]
    running = cluster.slurm("squeue", "-h", "-t", "running", "-o", "%j")
    assert not any(case.split("%")[0] in running for _, case, _ in ENDLESS), running


def test_node_dying_mid_run_fails_its_job_and_the_run_goes_on(cluster, tmp_path):
    args = [str(Path(sys.executable).parent / "reframe"), "-C", str(REPO / "reframe-config.py"),
            "-c", str(FAULT_CHECKS), "-n", "NodeLoss", "--exec-order=name", "--system",
            "minicluster", "-r", "--prefix", str(tmp_path)]
    env = {**os.environ, **cluster.env, "FABREG_PERFLOG_DIR": str(tmp_path / "perflogs")}
    log = open(tmp_path / "reframe.out", "w+")
    run = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            running = cluster.slurm("squeue", "-h", "-t", "running", "-o", "%j")
            if "NodeLossStep2Dies" in running:
                break
            assert run.poll() is None, log.seek(0) or log.read()
            time.sleep(1)
        else:
            pytest.fail("the two-node job never started")
        time.sleep(3)
        killed = cluster.fabreg("kill", "node2")
        assert killed.returncode == 0, killed.stderr
        run.wait(timeout=600)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=60)
    log.seek(0)
    out = log.read()
    assert run.returncode != 0
    assert "ended by a node failure (scheduler state NODE_FAIL)" in out, out[-4000:]
    assert "due to node failure" in out
    assert "1 failure(s)" in out
    for step in ("NodeLossStep1Before", "NodeLossStep3After"):
        rows = _rows(tmp_path / "perflogs" / "minicluster" / "compute" / f"{step}.log")
        assert [r["result"] for r in rows] == ["pass"], step
        assert rows[0]["figure_value"] == "42"
    assert "down" in cluster.slurm("sinfo", "-h", "-n", "node2", "-o", "%T")
    # `up` brings the dead node back.
    revived = cluster.fabreg("up", "--nodes", "2")
    assert revived.returncode == 0, revived.stdout + revived.stderr
    assert "started slurmd-node2" in revived.stdout
    assert cluster.fabreg("status").returncode == 0


"""The emulated cluster's generated files and its command line, without starting anything."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from fabreg.cluster import slurmconf
from fabreg.cluster.layout import Layout, Paths
from fabreg.cluster.state import ClusterState, load, save
from fabreg.errors import FabregError

FABREG = [sys.executable, "-m", "fabreg.cli"]


def fabreg(*args: str, env: dict[str, str] | None = None,
           user: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [*FABREG, *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=REPO)


def conf_lines(text: str) -> dict[str, str]:
    """slurm.conf as key -> value of its single-valued lines."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "=" in line and " " not in line:
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_slurm_conf_names_every_node_with_its_address(tmp_path):
    layout = Layout(nodes=4, controller="ctl", cpus_per_node=2)
    text = slurmconf.render(layout, Paths(tmp_path))
    nodes = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert nodes == [
        f"NodeName=node{i} NodeAddr=10.88.0.{10 + i} CPUs=2 State=UNKNOWN" for i in range(1, 5)
    ]
    assert "PartitionName=compute Nodes=node[1-4] Default=YES" in text


def test_slurm_conf_controller_ports_and_paths(tmp_path):
    layout = Layout(nodes=2, subnet="10.77.5.0/24", ctld_port=20001, slurmd_port=20002,
                    controller="ctl", cpus_per_node=8)
    conf = conf_lines(slurmconf.render(layout, Paths(tmp_path)))
    # The name must equal the controller's `hostname`; the address is the bridge's.
    assert conf["SlurmctldHost"] == "ctl(10.77.5.1)"
    assert conf["SlurmctldPort"] == "20001"
    assert conf["SlurmdPort"] == "20002"
    assert conf["AuthInfo"] == f"socket={tmp_path}/munge/munge.socket"
    assert conf["SlurmdSpoolDir"] == f"{tmp_path}/spool/%n"
    assert conf["StateSaveLocation"] == f"{tmp_path}/ctld-state"
    # What makes namespaces work as nodes, and faults visible quickly.
    assert conf["ProctrackType"] == "proctrack/linuxproc"
    assert conf["TaskPlugin"] == "task/none"
    assert conf["JobRequeue"] == "0"
    assert int(conf["SlurmdTimeout"]) <= 30
    for key in ("SlurmctldLogFile", "SlurmdLogFile", "SlurmdPidFile", "JobCompLoc"):
        assert conf[key].startswith(str(tmp_path)), key


def test_single_node_list_is_not_a_range(tmp_path):
    text = slurmconf.render(Layout(nodes=1, controller="c", cpus_per_node=1), Paths(tmp_path))
    assert "Nodes=node1 " in text


def test_hosts_file_puts_cluster_names_before_the_machines_own(tmp_path):
    layout = Layout(nodes=2, controller="vm", cpus_per_node=1)
    text = slurmconf.hosts_file(layout, "127.0.0.1 localhost\n127.0.0.1 vm\n")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines[:3] == ["10.88.0.1\tvm", "10.88.0.11\tnode1", "10.88.0.12\tnode2"]
    assert "127.0.0.1 vm" in lines  # kept, but after ours: the first match wins


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"nodes": 0}, "--nodes must be between 1 and 16, got 0"),
    ({"nodes": 17}, "--nodes must be between 1 and 16, got 17"),
    ({"subnet": "10.88.0.0/30"}, "too small"),
    ({"subnet": "8.8.8.0/24"}, "not a private network range"),
    ({"subnet": "banana"}, "is not an IPv4 network"),
    ({"ctld_port": 80}, "--ctld-port must be between 1024 and 65535"),
    ({"ctld_port": 20000, "slurmd_port": 20000}, "must differ"),
])
def test_layout_rejects_bad_choices(kwargs, message):
    with pytest.raises(FabregError, match=message):
        Layout(**kwargs)


def test_node_names_and_numbers_are_both_accepted():
    layout = Layout(nodes=3, controller="c", cpus_per_node=1)
    assert layout.node_index("node3") == 3
    assert layout.node_index("2") == 2
    with pytest.raises(FabregError, match="unknown node 'node4': this cluster has node1, node2"):
        layout.node_index("node4")


def test_state_file_round_trip_and_unreadable_state(tmp_path):
    paths = Paths(tmp_path)
    assert load(paths) is None
    st = ClusterState(Layout(nodes=3, controller="c", cpus_per_node=2), degraded={"node2": "1gbit"})
    save(paths, st)
    again = load(paths)
    assert again is not None and again.layout == st.layout and again.degraded == st.degraded
    paths.state_file.write_text("{not json")
    with pytest.raises(FabregError, match="cluster.json: unreadable cluster state"):
        load(paths)


@pytest.mark.parametrize(("args", "message"), [
    (["cluster", "up", "--nodes", "0"], "--nodes must be between 1 and 16, got 0"),
    (["cluster", "up", "--subnet", "1.2.3.0/24"], "--subnet 1.2.3.0/24 is not a private"),
    (["cluster", "degrade", "node2", "--rate", "fast"], "--rate 'fast' is not a tc rate"),
])
def test_bad_arguments_are_one_line_errors(args, message):
    proc = fabreg(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith("fabreg: error: ")
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_argument_is_reported_by_argparse():
    proc = fabreg("cluster", "degrade", "node2")
    assert proc.returncode == 2
    assert "--rate" in proc.stderr


def test_fault_commands_without_a_cluster_say_so(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the fault commands check root first; this test needs root")
    proc = fabreg("cluster", "--state-dir", str(tmp_path), "kill", "node2")
    assert proc.returncode == 2
    assert f"no cluster is up (no state in {tmp_path})" in proc.stderr


def test_status_without_a_cluster(tmp_path):
    proc = fabreg("cluster", "--state-dir", str(tmp_path), "status")
    assert proc.returncode == 1
    assert f"state directory: {tmp_path}" in proc.stdout
    assert "cluster: not started" in proc.stdout


def _non_root_user() -> str | None:
    if os.geteuid() != 0:
        return None
    return "nobody" if shutil.which("setpriv") else None


def test_up_as_non_root_is_refused(tmp_path):
    """Run as a real unprivileged user (root drops to nobody with setpriv)."""
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to drop root for this test")
    if os.geteuid() == 0 and not os.access(sys.executable, os.X_OK):
        pytest.skip("the virtualenv is not usable by other users")
    tmp_path.chmod(0o777)
    proc = fabreg("cluster", "--state-dir", str(tmp_path), "up", user=_non_root_user())
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "`fabreg cluster up` must run as root" in proc.stderr
    assert not (tmp_path / "cluster.json").exists()


def _root_with_slurm() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (the check comes after the root check)")


def test_up_without_slurm_names_the_missing_tools(tmp_path):
    _root_with_slurm()
    proc = fabreg("cluster", "--state-dir", str(tmp_path), "up", env={"PATH": str(tmp_path)})
    assert proc.returncode == 2
    assert "fabreg: error: Slurm is not installed (slurmctld, slurmd" in proc.stderr
    assert "apt-get install slurm-wlm munge" in proc.stderr


def test_up_with_the_controller_port_taken_touches_nothing(tmp_path):
    _root_with_slurm()
    if not shutil.which("slurmctld") or not shutil.which("munged"):
        pytest.skip("Slurm/munge not installed (the tool check comes first)")
    if Path("/sys/class/net/fabregbr0").exists():
        pytest.skip("a fabreg cluster is up on this machine; this test must not disturb it")
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = fabreg("cluster", "--state-dir", str(tmp_path), "up", "--ctld-port", str(port))
    assert proc.returncode == 2
    assert f"TCP port {port} (slurmctld) is already in use" in proc.stderr
    assert not Path("/sys/class/net/fabregbr0").exists()
    assert not (tmp_path / "cluster.json").exists()


def test_up_without_network_privileges_says_what_is_missing(tmp_path):
    """Root inside a user namespace (no CAP_NET_ADMIN on this machine's network) is refused."""
    if not shutil.which("unshare") or not shutil.which("slurmctld"):
        pytest.skip("needs unshare (util-linux) and Slurm installed")
    if Path("/sys/class/net/fabregbr0").exists():
        pytest.skip("a fabreg cluster is up on this machine; this test must not disturb it")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces unavailable here: {probe.stderr.strip()}")
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", *FABREG, "cluster", "--state-dir",
         str(tmp_path), "up"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("fabreg: error: cannot create network devices on this machine")
    assert "needs root with CAP_NET_ADMIN" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not Path("/sys/class/net/fabregbr0").exists()

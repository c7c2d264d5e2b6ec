"""Slurm partitions in the ReFrame configuration: minicluster, the site template, pinning."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import REFRAME, REPO

from fabreg.cluster import reframe_system
from fabreg.cluster.layout import Layout, Paths
from fabreg.cluster.state import ClusterState, save
from fabreg.run import siteconfig
from fabreg.run.siteconfig import access_options, slurm_partition
from fabreg.testlib.jobs import scheduler_ending, slurm_cancel_line

SITE_EXAMPLE = REPO / "docs" / "site-config-example.py"


def show_config(*args: str, env: dict[str, str] | None = None,
                configs: tuple[Path, ...] = (REPO / "reframe-config.py",),
                ) -> subprocess.CompletedProcess[str]:
    cmd = [str(REFRAME)]
    for conf in configs:
        cmd += ["-C", str(conf)]
    full_env = {**os.environ, **(env or {})}
    full_env.pop("RFM_CONFIG_FILES", None)
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120,
                          env=full_env, cwd=REPO)


def last_json(text: str):
    """The JSON document ReFrame's --show-config prints last."""
    start = min(i for i in (text.find("{"), text.find("[")) if i >= 0)
    return json.loads(text[start:])


def test_access_options_in_slurm_syntax():
    opts = access_options(partition="batch", account="ops", reservation="maint",
                          exclusive=True, constraint="ib&hdr", qos="high", environ={})
    assert opts == ["--partition=batch", "--account=ops", "--qos=high",
                    "--reservation=maint", "--exclusive", "--constraint=ib&hdr"]


def test_environment_pins_a_run_without_editing_the_config():
    env = {"FABREG_RESERVATION": "change-4711", "FABREG_NODELIST": "nid[0012-0013]",
           "FABREG_EXCLUDE": "nid0007"}
    opts = access_options(partition="batch", reservation="nightly", environ=env)
    assert "--reservation=change-4711" in opts and "--reservation=nightly" not in opts
    assert "--nodelist=nid[0012-0013]" in opts
    assert "--exclude=nid0007" in opts


def test_slurm_partition_entry():
    part = slurm_partition("compute", environs=["openmpi"], max_nodes=4, account="ops",
                           environ={"FABREG_RESERVATION": "r1"})
    assert part["scheduler"] == "slurm" and part["launcher"] == "srun"
    assert part["extras"]["max_nodes"] == 4
    assert "--exclusive" in part["access"]  # benchmarks do not share nodes by default
    assert "(pinned: --reservation=r1)" in part["descr"]
    with pytest.raises(ValueError, match="max_nodes must be >= 1"):
        slurm_partition("x", environs=[], max_nodes=0)


@pytest.mark.parametrize(("argv", "env", "expected"), [
    (["reframe", "--system", "minicluster", "-r"], {}, True),
    (["reframe", "--system=minicluster:compute"], {}, True),
    (["reframe", "-r"], {"RFM_SYSTEM": "minicluster"}, True),
    (["reframe", "-r"], {}, False),
    (["reframe", "--system", "local"], {"RFM_SYSTEM": "minicluster"}, False),
])
def test_minicluster_is_selected_only_by_name(argv, env, expected):
    assert reframe_system.selected(argv, env) is expected


def test_minicluster_partition_follows_the_recorded_node_count(tmp_path):
    save(Paths(tmp_path), ClusterState(Layout(nodes=3, controller="c", cpus_per_node=2)))
    proc = show_config("--system", "minicluster", "--show-config", "systems/0",
                       env={"FABREG_CLUSTER_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    system = last_json(proc.stdout)
    assert system["name"] == "minicluster"
    part = system["partitions"][0]
    # ReFrame's squeue backend, polling from a job's first moment (fabreg.testlib.prompt_squeue)
    assert part["scheduler"] == "fabreg_squeue"
    assert part["extras"]["max_nodes"] == 3
    assert part["extras"]["tcp_interfaces"] == ["fab0"]
    # The CPUs each slurmd declares, and that more ranks than that on a node is intended.
    assert part["processor"]["num_cpus"] == 2 and part["extras"]["oversubscribe"] is True


def test_minicluster_node_variants_follow_the_cluster(tmp_path):
    """`fabreg cluster up --nodes 4` gives 1-, 2- and 4-node variants of the checks."""
    save(Paths(tmp_path), ClusterState(Layout(nodes=4, controller="c", cpus_per_node=2)))
    proc = show_config("-c", str(REPO / "checks"), "--system", "minicluster", "-l",
                       "-n", "OsuAllreduce", env={"FABREG_CLUSTER_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = [ln for ln in proc.stdout.splitlines() if ln.startswith("- OsuAllreduce")]
    nodes = {ln.split("%nodes=")[1].split()[0] for ln in listed}
    assert nodes == {"1", "2", "4"}


def test_minicluster_environments_launch_inside_the_job(tmp_path):
    save(Paths(tmp_path), ClusterState(Layout(nodes=2, controller="c", cpus_per_node=2)))
    proc = show_config("--system", "minicluster", "--show-config", "environments",
                       env={"FABREG_CLUSTER_DIR": str(tmp_path)})
    envs = {e["name"]: e for e in last_json(proc.stdout)
            if "minicluster" in e.get("target_systems", [])}
    assert envs["openmpi"]["extras"]["launcher"][1:5] == [
        "--bind-to", "none", "--npernode", "{num_tasks_per_node}"]
    assert envs["mpich"]["extras"]["launcher"][1:3] == ["-ppn", "{num_tasks_per_node}"]
    assert envs["mpich"]["extras"]["launcher"][0].startswith("mpiexec")
    # The emulated nodes share the machine's cores: a waiting rank must yield its core.
    assert ["OMPI_MCA_mpi_yield_when_idle", "1"] in envs["openmpi"]["env_vars"]
    assert ["OMPI_ALLOW_RUN_AS_ROOT", "1"] in envs["openmpi"]["env_vars"]


def test_local_stays_the_default_with_a_cluster_recorded(tmp_path):
    save(Paths(tmp_path), ClusterState(Layout(nodes=2, controller="c", cpus_per_node=2)))
    proc = show_config("--show-config", "systems/0/name",
                       env={"FABREG_CLUSTER_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert '"local"' in proc.stdout


def test_minicluster_without_a_cluster_is_one_clear_error(tmp_path):
    proc = show_config("--system", "minicluster", "--show-config", "systems/0",
                       env={"FABREG_CLUSTER_DIR": str(tmp_path / "none")})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "--system minicluster: no emulated cluster is up" in out
    assert "fabreg cluster up" in out
    assert "Traceback" not in out


def test_site_template_is_valid_reframe_config_and_pins_from_the_environment(tmp_path):
    text = SITE_EXAMPLE.read_text()
    code = text.split('"""')[2]
    body = [ln for ln in code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    # This machine has no Lmod; everything else of the template is loaded as written.
    site = tmp_path / "site.py"
    site.write_text(text.replace("'modules_system': 'lmod'", "'modules_system': 'nomod'"))
    proc = show_config("--system", "examplesite:batch", "--show-config", "systems/0",
                       configs=(REPO / "reframe-config.py", site),
                       env={"FABREG_RESERVATION": "fabric-change-42"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    system = last_json(proc.stdout)
    part = {p["name"]: p for p in system["partitions"]}["batch"]
    assert "--reservation=fabric-change-42" in part["access"]
    assert "--account=hpc-ops" in part["access"]
    assert "--exclusive" in part["access"]
    assert part["extras"]["max_nodes"] >= 2
    assert len(body) <= 30, "docs/site.md promises a site system in under 30 lines"


# Slurm's notices as this machine's Slurm 22.05 wrote them into jobs' stderr.
TIME_LIMIT = ("slurmstepd-node1: error: *** JOB 3 ON node1 CANCELLED AT 2026-11-21T06:07:37 "
              "DUE TO TIME LIMIT ***")
NODE_FAILURE = ("slurmstepd-node1: error: *** JOB 6 ON node1 CANCELLED AT 2026-11-21T06:09:13 "
                "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")


def test_slurm_cancel_notices_are_read():
    assert slurm_cancel_line(TIME_LIMIT) == (
        "Slurm: cancelled on node1 at 2026-11-21T06:07:37 due to time limit")
    assert slurm_cancel_line(NODE_FAILURE) == (
        "Slurm: cancelled on node1 at 2026-11-21T06:09:13 due to node failure")
    assert slurm_cancel_line("mpirun: Forwarding signal 18 to job") is None


def test_scheduler_endings_name_state_and_reason(tmp_path):
    err = tmp_path / "rfm_job.err"
    err.write_text(f"{NODE_FAILURE}\n")
    assert scheduler_ending("NODE_FAIL", 6, 600, err) == (
        "job 6 ended by a node failure (scheduler state NODE_FAIL); "
        "Slurm: cancelled on node1 at 2026-11-21T06:09:13 due to node failure")
    err.write_text("")
    assert scheduler_ending("TIMEOUT", 3, 20, err) == (
        "job 3 killed at its time limit (20 s) (scheduler state TIMEOUT)")
    assert scheduler_ending("COMPLETED", 1, 20, err) is None
    assert scheduler_ending("FAILED", 1, 20, err) is None  # the benchmark's own failure
    assert scheduler_ending(None, None, None, None) is None


@pytest.mark.parametrize("expression, count", [
    ("node2", 1), ("node[1-3,7],gpu2", 5), ("node[01-16]", 16), ("a[1-2]b[1-3]", 6),
])
def test_a_host_list_is_counted_as_slurm_expands_it(expression, count):
    assert siteconfig.hostlist_count(expression) == count


@pytest.mark.parametrize("expression", ["node[1-", "node[3-1]", "node[a-b]"])
def test_a_bad_host_list_is_an_error(expression):
    with pytest.raises(ValueError):
        siteconfig.hostlist_count(expression)


def test_the_sweep_covers_the_pinned_nodes():
    assert siteconfig.pinned_node_count({}) is None
    assert siteconfig.pinned_node_count({"FABREG_NODELIST": "node[2-4]"}) == 3
    # the node list wins over a reservation (no Slurm call then)
    assert siteconfig.pinned_node_count({"FABREG_NODELIST": "n1,n2",
                                         "FABREG_RESERVATION": "nosuch"}) == 2


def test_the_single_host_systems_poll_their_jobs_often_and_a_site_keeps_reframes_rate(
        tmp_path):
    """One job at a time on one host: a slow poll is time the run waits (poll_rate_min):
    10 a second on `local` (a waitpid) and on `minicluster` (a look at Slurm's job
    completion log, an `squeue` only when a job ended or a second passed)."""
    save(Paths(tmp_path), ClusterState(Layout(nodes=2, controller="c", cpus_per_node=2)))
    env = {"FABREG_CLUSTER_DIR": str(tmp_path)}
    for system, rate in (("local", "10"), ("minicluster", "10")):
        proc = show_config("--system", system, "--show-config", "general/0/poll_rate_min",
                           env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == rate, (system, proc.stdout)
    site = tmp_path / "site.py"
    site.write_text(
        "site_configuration = {'systems': [{'name': 'othersite', 'hostnames': ['.*'],\n"
        "  'partitions': [{'name': 'batch', 'scheduler': 'squeue', 'launcher': 'srun',\n"
        "                  'environs': ['builtin']}]}]}\n")
    proc = show_config("--system", "othersite", "--show-config", "general/0/poll_rate_min",
                       env=env, configs=(REPO / "reframe-config.py", site))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "0.1"

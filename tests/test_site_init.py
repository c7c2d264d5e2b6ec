"""`fabreg site init` where it must refuse: no Slurm, an existing site.py, a bad partition.

Its real run, on the emulated cluster read as a site the suite has never seen, is in
tests/test_cluster.py (it needs the running cluster).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

from fabreg.run.parsers.slurm import parse_nodes, parse_partitions

FABREG = [sys.executable, "-m", "fabreg.cli", "site", "init"]


def site_init(*args: str, env: dict[str, str] | None = None,
              cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FABREG, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def test_without_slurm_one_clear_line_and_nothing_written(tmp_path: Path):
    env = dict(os.environ, PATH=str(tmp_path))  # no scontrol, no srun
    proc = site_init("--out", str(tmp_path / "site.py"), env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "no Slurm here: scontrol and srun are not on PATH" in proc.stderr
    assert not (tmp_path / "site.py").exists()


def test_an_existing_site_py_is_refused_before_anything_runs(tmp_path: Path):
    out = tmp_path / "site.py"
    out.write_text("# the site's own, edited by hand\n")
    env = dict(os.environ, PATH=str(tmp_path))  # it must refuse before it looks for Slurm
    proc = site_init("--out", str(out), env=env)
    assert proc.returncode == 2
    assert f"{out} exists: not overwritten (--force replaces it)" in proc.stderr
    assert out.read_text() == "# the site's own, edited by hand\n"


# What Slurm 22.05's `scontrol show ... --oneliner` prints on the emulated cluster, one
# partition and a drained node (recorded from `fabreg cluster up --nodes 2`).
PARTITIONS = ("PartitionName=compute AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL "
              "AllocNodes=ALL Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO "
              "ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED "
              "MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=node[1-2] PriorityJobFactor=1 "
              "PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE "
              "PreemptMode=OFF State=UP TotalCPUs=4 TotalNodes=2 SelectTypeParameters=NONE "
              "JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED\n")
NODES = ("NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
         "CPULoad=0.31 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) "
         "NodeAddr=10.88.0.11 NodeHostName=node1 Version=22.05.8 State=IDLE "
         "ThreadsPerCore=1 Partitions=compute\n"
         "NodeName=node2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
         "CPULoad=0.31 AvailableFeatures=big,ib ActiveFeatures=big,ib Gres=gpu:a100:4 "
         "NodeAddr=10.88.0.12 NodeHostName=node2 Version=22.05.8 State=IDLE+DRAIN "
         "ThreadsPerCore=1 Partitions=compute Reason=recabled switch 7 [root@2026-11-25]\n")


def test_scontrol_oneliners_parse_into_partitions_and_nodes():
    (part,) = parse_partitions(PARTITIONS)
    assert (part.name, part.nodes, part.total_nodes, part.max_nodes, part.default) == (
        "compute", "node[1-2]", 2, None, True)
    node1, node2 = parse_nodes(NODES)
    assert (node1.cpus, node1.features, node1.gres, node1.idle) == (2, (), (), True)
    assert (node2.features, node2.gres) == (("big", "ib"), ("gpu:a100:4",))
    assert not node2.usable and not node2.idle
    assert node2.reason == "recabled switch 7 [root@2026-11-25]"

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
from fabreg.run.site_init import render, survey

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


def test_a_partition_with_no_idle_node_is_written_from_slurm_and_says_why():
    """No probe job can run where every node is drained: the partition is still described,
    from Slurm's own words, and the reason printed (recorded outputs of a real cluster)."""
    real = REPO / "tests" / "data" / "real" / "slurm"
    partitions = parse_partitions(
        (real / "fabreg-cluster-4nodes-2partitions-scontrol-show-partition.txt").read_text())
    nodes = [n for n in parse_nodes(
        (real / "fabreg-cluster-4nodes-drained-node2-scontrol-show-node.txt").read_text())
        if n.name == "node2"]
    (cpu,) = survey(partitions, nodes, ["cpu"], run=_no_job_may_run)
    assert cpu.probe is None
    assert cpu.unprobed == "no idle node to probe (node2 IDLE+DRAIN)"
    assert cpu.findings == [
        f"not usable now: node2 (IDLE+DRAIN: {nodes[0].reason})"]
    text = render("unseen", [cpu], "login1")
    assert "# not probed: no idle node to probe (node2 IDLE+DRAIN)" in text
    compile(text, "site.py", "exec")  # a file ReFrame can load


def _no_job_may_run(argv, timeout):
    raise AssertionError(f"no job may run here: {argv}")

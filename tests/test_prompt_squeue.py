"""Where the emulated cluster's squeue backend learns that a job ended (its slurm.conf)."""

from __future__ import annotations

from pathlib import Path

from fabreg.cluster.layout import Layout, Paths
from fabreg.cluster.slurmconf import render
from fabreg.testlib.prompt_squeue import completion_log


def test_the_emulated_clusters_completion_log_is_found_in_its_slurm_conf(tmp_path):
    paths = Paths(tmp_path)
    conf = tmp_path / "slurm.conf"
    conf.write_text(render(Layout(nodes=2, controller="c", cpus_per_node=2), paths))
    assert completion_log(str(conf)) == paths.logs / "jobcomp.log"


def test_without_a_completion_log_file_it_polls_as_reframes_own(tmp_path: Path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=site  # a comment\nJobCompType=jobcomp/none\n")
    assert completion_log(str(conf)) is None
    conf.write_text("JobCompType = jobcomp/elasticsearch\nJobCompLoc=http://host:9200\n")
    assert completion_log(str(conf)) is None
    assert completion_log(str(tmp_path / "missing.conf")) is None
    assert completion_log(None) is None

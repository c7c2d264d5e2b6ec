"""The repeated-probe driver (``python -m fabreg.run.repeat_probe``) on the real matrix
multiply probe with real MPI ranks: repeats, best-of, confirmation of a failing figure,
a failed first run, bad plans."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from test_workload_probes import OMPI_ROOT, make_probe

from fabreg.run import repeat_probe as rp
from fabreg.run.parsers.probes import parse_matmul

FIGURES = {"total": True, "distribute": True, "compute": True, "gather": True,
           "comm_fraction": True, "gflops": False}


@pytest.fixture(scope="module")
def matmul(tmp_path_factory):
    if not shutil.which("mpicc.openmpi") or not shutil.which("mpirun.openmpi"):
        pytest.skip("OpenMPI is not installed (mpicc.openmpi / mpirun.openmpi)")
    return make_probe(tmp_path_factory.mktemp("matmul-probe"), "fabreg_matmul")


def _drive(tmp_path, probe, *options: str, **plan_fields):
    plan = rp.Plan(command=["mpirun.openmpi", "--oversubscribe", "-np", "2", str(probe)],
                   options=["-n", "256", *options], probe="fabreg_matmul", figures=FIGURES,
                   **plan_fields)
    plan.save(tmp_path / rp.PLAN)
    proc = subprocess.run([sys.executable, "-m", "fabreg.run.repeat_probe", rp.PLAN],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **OMPI_ROOT})
    path = tmp_path / rp.RESULT
    return proc, json.loads(path.read_text()) if path.is_file() else None


@pytest.mark.slow
def test_each_figure_is_the_best_of_the_repeats_and_the_first_run_is_the_jobs_output(
        matmul, tmp_path):
    proc, result = _drive(tmp_path, matmul, repeats=3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(result["launches"]) == 3
    for name, lower in FIGURES.items():
        values = result["values"][name]
        assert len(values) == 3
        assert result["best"][name] == (min(values) if lower else max(values))
        assert result["spread"][name] >= 0
    assert result["confirmation"] == {} and result["quiet_confirmations"] == {}
    # sanity reads the job's stdout: the first run's complete block, as the probe printed it
    assert parse_matmul(proc.stdout).figures() == parse_matmul(
        (tmp_path / rp.run_output(1)).read_text()).figures()
    assert result["exclusive"] == "local" and "other_share" in result["interference"]


@pytest.mark.slow
def test_a_figure_beyond_its_limit_is_measured_again_until_the_runs_are_spent(matmul, tmp_path):
    # No 256x256 multiply on two ranks reaches 1e6 GFLOP/s: every confirmation run fails.
    proc, result = _drive(tmp_path, matmul, repeats=3, fail_limits={"gflops": 1e6},
                          confirm_runs=3, confirm_span_s=2.0, quiet_wait_s=5.0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(result["launches"]) == 6
    assert len(result["values"]["gflops"]) == 6 and len(result["values"]["total"]) == 3
    first_best = max(result["values"]["gflops"][:3])
    assert result["confirmation"] == {"gflops": first_best}
    assert 0 <= result["quiet_confirmations"].get("gflops", 0) <= 3
    assert [f"meter-confirm{i}" for i in (1, 2, 3)] == sorted(
        p.name for p in tmp_path.glob("meter-confirm*"))


@pytest.mark.slow
def test_a_figure_within_its_limit_is_not_confirmed(matmul, tmp_path):
    proc, result = _drive(tmp_path, matmul, repeats=3, fail_limits={"gflops": 1e-6,
                                                                     "total": 1e6})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(result["launches"]) == 3 and result["confirmation"] == {}


@pytest.mark.slow
def test_a_failed_first_run_is_not_repeated_and_its_status_is_the_jobs(matmul, tmp_path):
    proc, result = _drive(tmp_path, matmul, "--corrupt", repeats=3, fail_limits={"gflops": 1e6})
    assert proc.returncode != 0
    assert len(result["launches"]) == 1
    assert "verify=fail" in proc.stdout  # sanity names the wrong answer from the job's output


def test_an_unknown_probe_is_a_one_line_error(tmp_path):
    rp.Plan(command=["true"], options=[], probe="fabreg_nosuch").save(tmp_path / rp.PLAN)
    proc = subprocess.run([sys.executable, "-m", "fabreg.run.repeat_probe", rp.PLAN],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("fabreg: no figures known for probe 'fabreg_nosuch' "
                                   "(one of: fabreg_matmul, fabreg_streams)")

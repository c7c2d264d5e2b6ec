"""The repeated-probe driver (``python -m fabreg.run.repeat_probe``) on the real matrix
multiply and streams probes with real MPI ranks: repeats, best-of, confirmation of a failing
figure, a failed first run, a baseline launch before every run, bad plans."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from test_workload_probes import OMPI_ROOT, make_probe

from fabreg.run import launch
from fabreg.run import repeat_probe as rp
from fabreg.run.parsers.probes import parse_matmul, parse_streams

FIGURES = {"total": True, "distribute": True, "compute": True, "gather": True,
           "comm_fraction": True, "gflops": False}
FANIN_FIGURES = {"rate_min": False, "loss_rate": True, "single_rate": False}


def warning_limits(figures: dict[str, bool], settled: bool) -> dict[str, float]:
    """Warning limits every value of these probes lies inside (``settled``: one run is
    enough), or none does (every figure is measured ``repeats`` times)."""
    inside, beyond = (1e12, -1.0) if settled else (-1.0, 1e12)
    return {name: inside if lower else beyond for name, lower in figures.items()}


NEVER_SETTLED = warning_limits(FIGURES, settled=False)


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
    proc, result = _drive(tmp_path, matmul, repeats=3, warn_limits=NEVER_SETTLED)
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
                          warn_limits=NEVER_SETTLED, confirm_runs=3, confirm_span_s=2.0,
                          quiet_wait_s=5.0, control_gap_s=0.5)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(result["launches"]) == 6
    assert len(result["values"]["gflops"]) == 6 and len(result["values"]["total"]) == 3
    first_best = max(result["values"]["gflops"][:3])
    assert result["confirmation"] == {"gflops": first_best}
    assert 0 <= result["quiet_confirmations"].get("gflops", 0) <= 3
    assert [f"meter-confirm{i}" for i in (1, 2, 3)] == sorted(
        p.name for p in tmp_path.glob("meter-confirm*"))


@pytest.mark.slow
def test_figures_inside_their_warning_bands_are_measured_once_and_not_confirmed(matmul,
                                                                                 tmp_path):
    proc, result = _drive(tmp_path, matmul, repeats=3, fail_limits={"gflops": 1e-6,
                                                                     "total": 1e6},
                          warn_limits=warning_limits(FIGURES, settled=True))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(result["launches"]) == 1 and result["confirmation"] == {}
    assert result["measurements"] == dict.fromkeys(FIGURES, 1)


@pytest.mark.slow
def test_figures_without_a_reference_are_measured_repeats_times(matmul, tmp_path):
    proc, result = _drive(tmp_path, matmul, repeats=3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(result["launches"]) == 3
    assert result["measurements"] == dict.fromkeys(FIGURES, 3)


@pytest.mark.slow
def test_a_failed_first_run_is_not_repeated_and_its_status_is_the_jobs(matmul, tmp_path):
    proc, result = _drive(tmp_path, matmul, "--corrupt", repeats=3, fail_limits={"gflops": 1e6})
    assert proc.returncode != 0
    assert len(result["launches"]) == 1
    assert "verify=fail" in proc.stdout  # sanity names the wrong answer from the job's output


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    if not shutil.which("mpicc.openmpi") or not shutil.which("mpirun.openmpi"):
        pytest.skip("OpenMPI is not installed (mpicc.openmpi / mpirun.openmpi)")
    return make_probe(tmp_path_factory.mktemp("streams-probe"), "fabreg_streams")


def _drive_fanin(tmp_path, probe, **plan_fields):
    """The fan-in (3 ranks, 2 -> 1) with one stream alone as the baseline of every run."""
    mpirun = ["mpirun.openmpi", "--oversubscribe", "-np"]
    plan = rp.Plan(command=[*mpirun, "3", str(probe)], options=["-p", "fanin", "-n", "300"],
                   probe="fabreg_streams",
                   figures=FANIN_FIGURES, warn_limits=warning_limits(FANIN_FIGURES, False),
                   baseline=[*mpirun, "2", str(probe), "-p", "pairs", "-n", "300"],
                   baseline_figures={"rate_min": "single_rate"}, **plan_fields)
    plan.save(tmp_path / rp.PLAN)
    proc = subprocess.run([sys.executable, "-m", "fabreg.run.repeat_probe", rp.PLAN],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **OMPI_ROOT})
    return proc, json.loads((tmp_path / rp.RESULT).read_text())


@pytest.mark.slow
def test_a_baseline_launch_runs_before_every_run_and_its_figure_is_a_best_of_its_own(
        streams, tmp_path):
    proc, result = _drive_fanin(tmp_path, streams, repeats=3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(result["launches"]) == 3  # the baselines are not the job's runs
    for run in (1, 2, 3):
        base = parse_streams((tmp_path / rp.baseline_output(run)).read_text())
        fanin = parse_streams((tmp_path / rp.run_output(run)).read_text())
        assert base.placement == "pairs" and len(base.streams) == 1
        assert fanin.placement == "fanin" and len(fanin.streams) == 2
        assert result["values"]["single_rate"][run - 1] == base.min_rate_gbps
        assert result["values"]["rate_min"][run - 1] == fanin.min_rate_gbps
    assert result["best"]["single_rate"] == max(result["values"]["single_rate"])
    # sanity reads the job's stdout: the first fan-in run, not a baseline
    assert parse_streams(proc.stdout).placement == "fanin"


@pytest.mark.slow
def test_a_confirmation_of_a_fan_in_figure_runs_no_baseline(streams, tmp_path):
    # No stream on this host reaches 1e6 Gbit/s: rate_min is confirmed until the runs are spent.
    proc, result = _drive_fanin(tmp_path, streams, repeats=3, fail_limits={"rate_min": 1e6},
                                confirm_runs=2, confirm_span_s=1.0, quiet_wait_s=3.0,
                                control_gap_s=0.5)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(result["launches"]) == 5 and len(result["values"]["rate_min"]) == 5
    assert len(result["values"]["single_rate"]) == 3
    assert sorted(p.name for p in tmp_path.glob("probe-run*-baseline.out")) == [
        rp.baseline_output(run) for run in (1, 2, 3)]


def test_an_unknown_probe_is_a_one_line_error(tmp_path):
    rp.Plan(command=["true"], options=[], probe="fabreg_nosuch").save(tmp_path / rp.PLAN)
    proc = subprocess.run([sys.executable, "-m", "fabreg.run.repeat_probe", rp.PLAN],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("fabreg: no figures known for probe 'fabreg_nosuch' "
                                   "(one of: fabreg_matmul, fabreg_streams)")


@pytest.mark.slow
def test_a_baseline_that_hung_after_its_results_shortens_the_runs_grace(streams, tmp_path):
    """MPICH's finalize hang, first seen in a baseline launch: the runs after it wait less."""
    mpirun = ["mpirun.openmpi", "--oversubscribe", "-np"]
    outputs = {}
    for placement, ranks in (("pairs", "2"), ("fanin", "3")):
        proc = subprocess.run([*mpirun, ranks, str(streams), "-p", placement, "-n", "300"],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, **OMPI_ROOT})
        assert proc.returncode == 0, proc.stderr
        outputs[placement] = tmp_path / f"{placement}.out"
        outputs[placement].write_text(proc.stdout)
    # the real outputs, each followed by a process that never exits (a hang in MPI_Finalize)
    hang = ["sh", "-c", 'cat "$0"; exec sleep 600']
    note = tmp_path / "stage" / ".fabreg-hangs-run" / "tcp"

    def job(name: str, repeats: int) -> dict:
        work = tmp_path / name
        work.mkdir()
        rp.Plan(command=[*hang, str(outputs["fanin"])], options=[], probe="fabreg_streams",
                figures={"rate_min": False, "single_rate": False}, repeats=repeats, grace_s=5,
                baseline=[*hang, str(outputs["pairs"])],
                baseline_figures={"rate_min": "single_rate"},
                hang_note=str(note)).save(work / rp.PLAN)
        proc = subprocess.run([sys.executable, "-m", "fabreg.run.repeat_probe", rp.PLAN],
                              cwd=work, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads((work / rp.RESULT).read_text())

    result = job("job", repeats=2)
    waited = [x["seconds"] for x in result["launches"]]
    assert all(x["hung_after_results"] for x in result["launches"])
    # the first baseline's hang was waited out in full; no run waited as long after it
    assert all(launch.KNOWN_HANG_GRACE_S <= w < 5 for w in waited), waited
    assert result["best"]["single_rate"] > 0 and result["best"]["rate_min"] > 0
    # the hang was noted for the run: a later job launching the same way waits less from
    # its first launch on (its baseline's), and still keeps every value
    assert json.loads(note.read_text())["output"] == rp.baseline_output(1)
    assert [x["seconds"] >= 5 for x in result["baseline_launches"]] == [True, False]
    later = job("later", repeats=1)  # its first launch, a baseline's, tells it
    waited = [x["seconds"] for x in later["baseline_launches"] + later["launches"]]
    assert all(launch.KNOWN_HANG_GRACE_S <= w < 5 for w in waited), waited
    assert later["best"]["single_rate"] > 0 and later["best"]["rate_min"] > 0

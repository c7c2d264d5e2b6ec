"""The suite as users run it: real ReFrame on the repository's config and checks."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import CHECKS, have, run_reframe
from test_workload_checks import undeclared_metrics

from fabreg import schema

OSU_CHECKS = ["OsuLatency", "OsuBandwidth", "OsuBiBandwidth", "OsuAllreduce", "OsuBcast",
              "OsuAlltoall", "OsuReduce", "OsuAllgather"]


def _perflog_rows(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"))) for line in lines[1:]]


def test_listing_shows_every_osu_check_and_announces_mvapich2_skip(tmp_path):
    proc = run_reframe("-l", perflog_dir=tmp_path / "perflogs", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    for name in OSU_CHECKS:
        assert f"- {name}" in out
    if not have("mpicc.mvapich2"):
        assert "environment 'mvapich2' will be skipped: MPI 'mvapich2' is not installed" in out
        assert "spack install mvapich2" in out


def test_quick_tag_is_a_small_subset(tmp_path):
    proc = run_reframe("-l", "--tag", "quick", perflog_dir=tmp_path / "p", cwd=tmp_path)
    listed = [line for line in proc.stdout.splitlines() if line.startswith("- ")]
    assert sorted(line.split()[1] for line in listed) == [
        "OsuAllreduce", "OsuBandwidth", "OsuLatency"]


def test_a_min_size_off_the_curve_skips_the_check_saying_why(tmp_path):
    """A curve must start at a power of two that reaches every judged size: 3 B would start
    OSU's doubling off the powers of two, 128 KiB would never measure the 64 KiB figure."""
    for bad in ("3", "131072"):
        proc = run_reframe("-l", "-n", "OsuBandwidth", "-S", f"OsuBandwidth.min_size={bad}",
                           checks=CHECKS / "osu.py", perflog_dir=tmp_path / "p", cwd=tmp_path)
        out = proc.stdout + proc.stderr
        assert (f"osu_bw: min_size={bad} must be a power of two no larger than the smallest "
                "perf size (65536)") in out, out[-2000:]
        assert "Found 0 check(s)" in out and "Traceback" not in out, out[-2000:]


def test_unknown_system_is_one_clear_error(tmp_path):
    proc = run_reframe("--system", "nosuchsystem", "-l", perflog_dir=tmp_path / "p",
                       cwd=tmp_path)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "nosuchsystem" in out
    assert "Traceback" not in out


OSU_7_5_OPENMPI = Path.home() / ".cache" / "fabreg" / "osu-7.5-openmpi"


@pytest.mark.slow
@pytest.mark.skipif(not (OSU_7_5_OPENMPI / "libexec").is_dir(),
                    reason=f"no OSU 7.5 built against OpenMPI at {OSU_7_5_OPENMPI} "
                           "(ci/build-osu.sh SRC openmpi PREFIX, see docs/osu.md)")
def test_osu_7_5_logs_the_int_datatype_it_reduces(tmp_path):
    """OSU 7.5 reduces MPI_INT where the probes and OSU 7.2 reduce MPI_CHAR: another series."""
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "-n", "OsuAllreduce", "-p", "openmpi", perflog_dir=perflogs,
                       cwd=tmp_path, env={"FABREG_OSU_PREFIX_OPENMPI": str(OSU_7_5_OPENMPI)},
                       checks=CHECKS / "osu.py")
    out = proc.stdout + proc.stderr
    assert not re.findall(r"\* Failing phase: (?!performance)", out), out[-4000:]
    (row,) = _perflog_rows(perflogs / "local" / "default" / "OsuAllreduce.log")
    assert row["provider"] == "osu-prefix" and row["datatype"] == "MPI_INT"
    curve = next(tmp_path.glob("output/local/default/openmpi/OsuAllreduce*/osu_curve.tsv"))
    assert curve.read_text().splitlines()[1].startswith("4\t")  # one MPI_INT: 4 B


@pytest.mark.slow
def test_broken_reference_file_fails_with_file_and_key(tmp_path):
    checks = tmp_path / "checks"
    shutil.copytree(CHECKS / "references", checks / "references")
    shutil.copy(CHECKS / "osu.py", checks)
    (checks / "references" / "local.yaml").write_text(
        "references:\n  - {benchmark: osu_latency, metric: latency, size: 8, vlaue: 1, unit: us}\n")
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "openmpi", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "local.yaml: references[0]: unknown key(s) vlaue" in out


@pytest.mark.slow
def test_quick_run_writes_perflogs_with_values_units_and_references(tmp_path):
    """The README's `make run` path, restricted to the quick tag.

    Every case must get through sanity (complete tables, validation, transport) and
    reach the performance stage. Whether a figure meets its reference depends on how
    busy this shared host is, so that is not asserted; what is asserted is that each
    perflog line's verdict agrees with its value, reference and thresholds. Each value is
    measured once (``repeats=1``): how many measurements a value takes is asserted in
    ``test_measure.py``, not here.
    """
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "--tag", "quick", "-S", "repeats=1", perflog_dir=perflogs,
                       cwd=tmp_path,
                       checks=CHECKS / "osu.py")  # every check tagged quick is in osu.py
    out = proc.stdout + proc.stderr
    phases = re.findall(r"\* Failing phase: (\S+)", out)
    assert set(phases) <= {"performance"}, out[-4000:]
    assert (proc.returncode == 0) == (not phases), out[-4000:]
    if not have("mpicc.mvapich2"):
        assert "SKIP" in out and "MPI 'mvapich2' is not installed here" in out
    seen = set()
    for name, var, unit in [("OsuLatency", "latency_8B", "us"),
                            ("OsuBandwidth", "bandwidth_1MB", "MB/s"),
                            ("OsuAllreduce", "latency_64KB", "us")]:
        rows = _perflog_rows(perflogs / "local" / "default" / f"{name}.log")
        assert rows, name
        for row in rows:
            seen.add(row["environ"])
            value, ref = float(row[f"{var}_value"]), float(row[f"{var}_ref"])
            assert value > 0
            assert row[f"{var}_unit"] == unit
            # judged by this host's baseline; a host without one is missing, never failed
            assert (ref > 0) == (row["ref_status"] != "missing"), row["ref_notes"]
            assert row[f"{var}_result"] == ("pass" if _within(row, var) else "fail")
            if row["ref_status"] == "inconclusive":  # failing, but the host was busy
                assert row[f"{var}_result"] == "pass"
            assert row["provider"] in ("fabreg-probes", "osu-prefix")
            if row["provider"] == "fabreg-probes":  # MPI_CHAR, as OSU 7.2: the series of
                assert row["datatype"] == ""       # a store without the column go on
            assert row["mpi"] == row["environ"]
            assert row["num_nodes"] == "1"
            assert row["job_completion_time"][-6] in "+-"  # RFC 3339 with UTC offset
            assert undeclared_metrics(row) == []
            assert json.loads(row["verdicts"])[var] in schema.VERDICTS
            assert json.loads(row["interference"])["seconds"] > 0
    assert {"openmpi", "mpich"} <= seen
    assert (perflogs / "results.db").is_file()


def _within(row: dict[str, str], var: str) -> bool:
    """ReFrame's rule: thresholds are fractions of the reference; None is unbounded."""
    value, ref = float(row[f"{var}_value"]), float(row[f"{var}_ref"])
    lower, upper = row[f"{var}_lower_thres"], row[f"{var}_upper_thres"]
    low_ok = lower in ("None", "null") or value >= ref * (1 + float(lower))
    high_ok = upper in ("None", "null") or value <= ref * (1 + float(upper))
    return low_ok and high_ok

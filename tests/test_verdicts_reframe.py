"""Verdicts in real ReFrame runs of the real OSU check: a failing value measured while other
work took the host's CPUs is inconclusive, never a regression; on a quiet host it is
measured again and fails only if it reproduces."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import CHECKS, REPO, fabreg, run_reframe

from fabreg.run import tail_environment
from fabreg.run.parsers.osu import parse_osu
from fabreg.run.references import host_key
from fabreg.schema import HOST_CONTROL_FIGURES, MEASUREMENT_METHOD

pytestmark = pytest.mark.slow

#: A reference no host can meet: every osu_bw value fails its band.
UNREACHABLE = """system: local
references:
  - {benchmark: osu_bw, metric: bandwidth, size: 65536, value: 1000000000, unit: MB/s, fail: 0.5}
  - {benchmark: osu_bw, metric: bandwidth, size: 1048576, value: 1000000000, unit: MB/s, fail: 0.5}
  - {benchmark: osu_bw, metric: bandwidth, size: 4194304, value: 1000000000, unit: MB/s, fail: 0.5}
"""
#: Short curves, and the host control of a failing job sampled 0.5 s apart instead of 3: its
#: judgement is what these tests assert, against the static rows below or none.
SHORT_CONTROL = ["-S", "control_gap=0.5"]
SMALL = ["-S", "OsuBandwidth.iterations=20", "-S", "OsuBandwidth.warmup=2", *SHORT_CONTROL]
#: Host control rows (``fabreg.run.host_control``) that every host meets; that none meets,
#: by far more than UNREACHABLE's values miss theirs (so the control explains them); and that
#: none meets, by far less (a slow host that cannot explain them).
CONTROL_MET = """\
  - {benchmark: host_control, metric: round_trip, value: 1000, unit: us, fail: 0.25}
  - {benchmark: host_control, metric: copy_bandwidth, value: 0.001, unit: GB/s, fail: 0.25}
  - {benchmark: host_control, metric: tcp_loopback, value: 0.001, unit: GB/s, fail: 0.25}
"""
CONTROL_UNMET = """\
  - {benchmark: host_control, metric: round_trip, value: 1.0e-12, unit: us, fail: 0.25}
  - {benchmark: host_control, metric: copy_bandwidth, value: 1.0e+15, unit: GB/s, fail: 0.25}
  - {benchmark: host_control, metric: tcp_loopback, value: 1.0e+15, unit: GB/s, fail: 0.25}
"""
CONTROL_MILDLY_UNMET = """\
  - {benchmark: host_control, metric: round_trip, value: 0.01, unit: us, fail: 0.25}
  - {benchmark: host_control, metric: copy_bandwidth, value: 1000, unit: GB/s, fail: 0.25}
  - {benchmark: host_control, metric: tcp_loopback, value: 1000, unit: GB/s, fail: 0.25}
"""


def _checks(tmp_path: Path) -> Path:
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(CHECKS / "osu.py", checks)
    (checks / "references").mkdir()
    (checks / "references" / "local.yaml").write_text(UNREACHABLE)
    return checks


def _rows(perflogs: Path, test: str) -> list[dict[str, str]]:
    header, *lines = (perflogs / "local" / "default" / f"{test}.log").read_text().splitlines()
    return [dict(zip(header.split("|"), line.split("|"))) for line in lines]


def _row(perflogs: Path) -> dict[str, str]:
    return _rows(perflogs, "OsuBandwidth")[-1]


def _tail_latency(tmp_path: Path, cases: str, iterations: int, *options: str,
                  checks: Path = CHECKS / "tail_latency.py") -> tuple[str, list[dict[str, str]]]:
    """Run the ``TailLatency`` cases matching ``cases`` (Open MPI, short runs): the run
    output and the perflog rows."""
    proc = run_reframe("-r", "-p", "openmpi", "-n", f"TailLatency%.*{cases}",
                       "-S", f"TailLatency.iterations={iterations}", "-S", "TailLatency.blocks=4",
                       *options, perflog_dir=tmp_path / "perflogs", cwd=tmp_path, checks=checks)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out, _rows(tmp_path / "perflogs", "TailLatency")


def _judged_tail(tmp_path: Path, references: str, cases: str, *options: str
                 ) -> tuple[str, list[dict[str, str]]]:
    """:func:`_tail_latency` for the quiet cases matching ``cases`` (300 iterations), from a
    copy of the check judged by a reference file of ``references``."""
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    shutil.copy(CHECKS / "tail_latency.py", checks)
    (checks / "references" / "local.yaml").write_text(references)
    return _tail_latency(tmp_path, f"{cases}%environment=quiet", 300, *options, checks=checks)


@contextlib.contextmanager
def cpu_hogs(n: int):
    """``n`` busy loops beside the suite, ended by PID when the block ends."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_a_failing_value_under_a_cpu_hog_is_inconclusive(tmp_path):
    # The hogs run all along: no confirmation run finds a quiet host, however many there are
    # and however long each waits, so three short ones tell the same as the default ten.
    with cpu_hogs(2):
        proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL,
                           "-S", "confirm_runs=3", "-S", "confirm_span=4",
                           "-S", "quiet_wait=4", checks=_checks(tmp_path),
                           perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "inconclusive (other work took" in out
    row = _row(tmp_path / "perflogs")
    assert row["ref_status"] == "inconclusive"
    assert set(json.loads(row["verdicts"]).values()) == {"inconclusive"}
    assert json.loads(row["interference"])["other_share"] > 0.1
    assert row["bandwidth_1MB_result"] == "pass" and float(row["bandwidth_1MB_value"]) > 0


def test_a_failure_confirmed_on_a_quiet_host_fails_though_the_job_was_busy(tmp_path):
    """CPU hogs take the host while the value is first measured and end before it is
    confirmed: the confirmation runs wait for a quiet host, are metered by themselves, and
    their failure is a failure although the job as a whole was contended. The confirmation
    runs follow at once (``confirm_span=0``): spread over a quiet minute they would dilute the
    job's share of other work below the contended mark, and the job would not be contended."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]

    def first_run_complete() -> bool:  # its table's last row, 4 MiB, printed
        return any("4194304" in out.read_text(errors="replace")
                   for out in (tmp_path / "stage").rglob("measure-0.out"))

    def end_hogs_once_the_first_run_is_complete() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not first_run_complete():
            time.sleep(0.2)
        for hog in hogs:
            hog.kill()
            hog.wait()
    watcher = threading.Thread(target=end_hogs_once_the_first_run_is_complete)
    watcher.start()
    try:
        proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL,
                           "-S", "confirm_span=0", "-S", "confirm_runs=3",
                           checks=_checks(tmp_path),
                           perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    finally:
        for hog in hogs:
            hog.kill()
        watcher.join()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    row = _row(tmp_path / "perflogs")
    assert row["ref_status"] == "fail", row["ref_notes"]
    assert json.loads(row["interference"])["other_share"] > 0.1, row["interference"]
    assert "confirmed by 3 run(s) on a quiet host" in row["ref_notes"], row["ref_notes"]
    measured = json.loads(next((tmp_path / "stage").rglob("measure.json")).read_text())
    assert set(measured["quiet_confirmations"].values()) == {3}


def test_failures_on_one_path_in_a_run_are_confirmed_together(tmp_path):
    """Two jobs of one run fail on the same path (here the same case, ``--repeat 2``): the
    first confirms its failure over the span, the second joins it with one quiet run."""
    proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL, "--repeat", "2",
                       "-S", "confirm_span=3", "-S", "confirm_runs=3",
                       "-S", "contended_share=1.0", checks=_checks(tmp_path),
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    rows = _rows(tmp_path / "perflogs", "OsuBandwidth")
    assert [r["ref_status"] for r in rows] == ["fail", "fail"], [r["ref_notes"] for r in rows]
    first, second = (json.loads(r["measurements"]) for r in rows)
    # one first run each (a failing value is not repeated before its confirmation); the
    # first job adds 3 confirmation runs, the second one
    assert set(first.values()) == {4} and set(second.values()) == {2}, (first, second)
    assert out.count("joined the lasting failure job") == 1, out[-4000:]
    assert "one run on a quiet host confirmed it, instead of up to 3 over 3 s" in out


def test_a_failure_the_host_control_read_slow_is_not_joined(tmp_path):
    """The same two jobs on a host whose control reads beyond its baseline (a baseline no
    host meets): the first job's failure may be the host's, so it notes no lasting failure,
    and the second job confirms its own in full (in a healthy session on the 2-vCPU VM, seven
    cases that joined such a failure failed while their own controls read normal)."""
    checks = _checks(tmp_path)
    (checks / "references" / "local.yaml").write_text(UNREACHABLE + CONTROL_UNMET)
    proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL, "--repeat", "2",
                       "-S", "confirm_span=3", "-S", "confirm_runs=3",
                       "-S", "contended_share=1.0", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    rows = _rows(tmp_path / "perflogs", "OsuBandwidth")
    assert [r["ref_status"] for r in rows] == ["inconclusive"] * 2, [r["ref_notes"] for r in rows]
    assert all(set(json.loads(r["measurements"]).values()) == {4} for r in rows), [
        r["measurements"] for r in rows]
    assert "joined the lasting failure" not in out, out[-4000:]
    assert out.count("is not noted as the lasting failure of these nodes") == 2, out[-4000:]
    for path in tmp_path.rglob("measure.json"):
        assert json.loads(path.read_text())["lasting_failure_withheld"].startswith(
            "copy_bandwidth "), path


def test_values_measured_fewer_times_than_asked_say_why(tmp_path):
    # A repeat budget the whole-curve run alone spends: each size is measured once, and
    # the run says so instead of judging one value as if it were the best of three. (No
    # reference: each value needs all three.)
    checks = _checks(tmp_path)
    (checks / "references" / "local.yaml").write_text("system: local\nreferences: []\n")
    proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL,
                       "-S", "repeat_budget=0.00001", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "some sizes measured 1 of up to 3 times" in out, out
    assert "the repeat budget (0 s) was spent" in out, out
    measured = json.loads(next((tmp_path / "output").rglob("measure.json")).read_text())
    assert [len(v) for v in measured["values"].values()] == [1, 1, 1]
    assert len(measured["launches"]) == 1


def test_a_curve_from_min_size_runs_validates_and_keeps_only_its_own_sizes(tmp_path):
    # what a check that judges only 1 MiB needs (the capped-link tests): every launch, the
    # validation run and the kept curve start at min_size, and the value is judged as ever
    checks = _checks(tmp_path)
    (checks / "references" / "local.yaml").write_text(
        UNREACHABLE.replace("value: 1000000000", "value: 1"))
    proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL,
                       "-S", "OsuBandwidth.perf_sizes=1048576",
                       "-S", "OsuBandwidth.min_size=524288",
                       checks=checks, perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    row = _row(tmp_path / "perflogs")
    assert row["ref_status"] == "ok" and float(row["bandwidth_1MB_value"]) > 0, row
    measured = json.loads(next((tmp_path / "output").rglob("measure.json")).read_text())
    assert [x["options"][:2] for x in measured["launches"]] == [["-m", "524288:1048576"]]
    kept = next((tmp_path / "output").rglob("measure-validation.out")).parent
    validated = parse_osu((kept / "measure-validation.out").read_text())
    assert sorted(validated.rows) == [524288, 1048576] and validated.has_validation
    assert not validated.validation_failures
    curve = (kept / "osu_curve.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in curve[1:]] == ["524288", "1048576"]


def test_values_inside_their_warning_bands_are_measured_once_and_the_perflog_says_so(
        tmp_path):
    checks = _checks(tmp_path)
    (checks / "references" / "local.yaml").write_text(
        UNREACHABLE.replace("value: 1000000000", "value: 1"))
    proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL, checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    row = _row(tmp_path / "perflogs")
    assert row["ref_status"] == "ok", row["ref_notes"]
    assert set(json.loads(row["measurements"]).values()) == {1}, row["measurements"]
    assert len(json.loads(row["measurements"])) == 3
    measured = json.loads(next((tmp_path / "output").rglob("measure.json")).read_text())
    assert len(measured["launches"]) == 1


def test_a_curve_that_would_outrun_its_time_runs_fewer_iterations_and_says_so(tmp_path):
    # osu_latency's own 10,000 iterations per size cannot fit 5 ms (over shared memory they
    # take 50-100 ms here): the pilot costs the curve, every run of the job uses the count
    # that fits, and the run output says so
    checks = _checks(tmp_path)
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "openmpi", "-S", "curve_seconds=0.005",
                       checks=checks, perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    measured = json.loads(next((tmp_path / "output").rglob("measure.json")).read_text())
    costed = measured["pilot"]
    assert costed["iterations"] is not None, costed
    assert costed["default_s"] > 0.005 and 10 <= costed["iterations"] < 10000
    assert (f"{costed['iterations']} iterations per size (warm-up {costed['warmup']}): OSU's "
            f"own counts would take") in out
    assert all(x["options"][-4:] == costed["options"] for x in measured["launches"])
    # every run of a value is measured the same way: only the sizes differ (no reference
    # here: 3 runs); none validates (validation moves some figures 2x), a short run of its
    # own does, with the pilot's counts
    ways = {tuple(x["options"][2:]) for x in measured["launches"]}
    assert len(measured["launches"]) == 3 and len(ways) == 1 and "-c" not in ways.pop()
    assert measured["validation"]["returncode"] == 0, measured
    # (when its table was complete: a hang after it is what a bench counts as waited out)
    short = (measured["validation"], costed)
    assert all(0 < x["results_s"] <= x["seconds"] for x in short), short
    checked = next((tmp_path / "output").rglob("measure-validation.out")).read_text()
    assert "Validation" in checked and "Fail" not in checked
    # where a hang after the results would be noted for the run's later jobs that launch the
    # same way: beside the job's stage directory, one note per run and transport (every node
    # count's jobs share it)
    plan_path = next((tmp_path / "output").rglob("measure-plan.json"))
    note = Path(json.loads(plan_path.read_text())["hang_note"])
    stage = tmp_path / "stage" / plan_path.relative_to(tmp_path / "output").parent
    assert note.parent.parent == stage.parent, (note, stage)
    assert note.parent.name.startswith(".fabreg-hangs-") and note.name == "shm"
    assert not note.exists()  # Open MPI on one node does not hang


def test_data_that_fails_validation_fails_the_check_though_no_measured_run_validates(
        tmp_path):
    # OSU built so that the sender writes another pattern than the receiver checks (as
    # test_probes does): only the short validation run can see it, and the check fails
    prefix, src = tmp_path / "osu-corrupt", tmp_path / "src"
    shutil.copytree(REPO / "src" / "probes", src)
    code = (src / "probe_common.c").read_text()
    needle = "p[k] = probe_pattern(from, to, k, iter);"
    assert code.count(needle) == 1, "probe_fill changed; update this test"
    (src / "probe_common.c").write_text(code.replace(
        needle, "p[k] = probe_pattern(from, to, k, iter + 1);"))
    (tmp_path / "build").mkdir()
    subprocess.run(["make", "-f", str(src / "Makefile"), "CC=mpicc.openmpi", "install",
                    f"PREFIX={prefix}"], cwd=tmp_path / "build", check=True,
                   capture_output=True, timeout=600)
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "openmpi", "-S", "curve_seconds=0.005",
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path,
                       env={"FABREG_OSU_PREFIX_OPENMPI": str(prefix),
                            "FABREG_PROVIDER": "auto"}, checks=CHECKS / "osu.py")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "Failing phase: sanity" in out, out[-4000:]
    assert ("the validation run (-c, measure-validation.out): osu_latency: validation failed "
            "at size(s) 1" in out), out[-4000:]
    # a failing check's files stay in its stage directory
    measured = json.loads(next((tmp_path / "stage").rglob("measure.json")).read_text())
    assert measured["launches"] and all("-c" not in x["options"] for x in measured["launches"])


def _failing_on_a_quiet_host(tmp_path: Path, control_rows: str, confirm_runs: int,
                             ) -> tuple[subprocess.CompletedProcess[str], str]:
    """OsuBandwidth against UNREACHABLE plus ``control_rows``, contention not judged; the
    confirmation runs are spread over 4 s, not a minute (what the spread is for is tested by
    the client-server confirmation below)."""
    checks = _checks(tmp_path)
    (checks / "references" / "local.yaml").write_text(UNREACHABLE + control_rows)
    proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL,
                       "-S", "contended_share=1.0", "-S", f"confirm_runs={confirm_runs}",
                       "-S", "confirm_span=4", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    return proc, proc.stdout + proc.stderr


def test_a_failure_that_reproduces_fails_with_both_measurements(tmp_path):
    # Contention is not judged here (share 1.0): the value is confirmed and fails; the host
    # control, measured after the confirmation, is within its baseline: the failure stands.
    proc, out = _failing_on_a_quiet_host(tmp_path, CONTROL_MET, confirm_runs=3)
    assert proc.returncode != 0, out[-4000:]
    assert "Failing phase: performance" in out
    row = _row(tmp_path / "perflogs")
    assert row["ref_status"] == "fail"
    confirmation = json.loads(row["confirmation"])
    assert set(confirmation) == {"bandwidth_64KB", "bandwidth_1MB", "bandwidth_4MB"}
    assert float(row["bandwidth_1MB_value"]) >= confirmation["bandwidth_1MB"]  # best of both
    # a failed test stays in its stage directory
    measured = json.loads(next((tmp_path / "stage").rglob("measure.json")).read_text())
    # the first run, then the 3 confirmation runs (no plain repeat of a failing value)
    assert all(len(v) == 4 for v in measured["values"].values())
    control = json.loads(row["host_control"])
    assert "other_share" in control  # values still failed: it waited for a quiet host first
    # the figures on the value's path (shared memory on `local`), as a calibration reads
    # them, and only those were measured (no TCP stream, no round trip)
    assert control["on_path"] == ["copy_bandwidth", "handoff_bandwidth", "shared_compute"]
    assert {k for k in control if k in HOST_CONTROL_FIGURES} == set(control["on_path"])
    assert all(control[k] > 0 for k in control["on_path"]), control


def test_a_confirmed_failure_on_a_host_slower_than_its_control_is_inconclusive(tmp_path):
    """The failure reproduces, but the host control measured right after it lies beyond its
    own limit (here a baseline no host meets; in the field a VM whose cores moved): the host
    ran slow, not the fabric. Inconclusive with the control's figure, never a regression."""
    proc, out = _failing_on_a_quiet_host(tmp_path, CONTROL_UNMET, confirm_runs=1)
    assert proc.returncode == 0, out[-4000:]
    rows = _rows(tmp_path / "perflogs", "OsuBandwidth")
    assert rows  # shared memory here; the cluster test judges TCP values (test_cluster.py)
    for row in rows:
        assert row["ref_status"] == "inconclusive", row
        assert set(json.loads(row["verdicts"]).values()) == {"inconclusive"}
        assert json.loads(row["confirmation"])  # it was confirmed before the control judged
        # each transport is judged by the figures on its own path (shared memory: the copy,
        # the handoff and the shared compute; this baseline has a row for the copy alone)
        path = "TCP loopback stream" if row["transport"].startswith("tcp") else \
            "1 MiB memory copy"
        assert f"the host itself ran slow: {path}" in row["ref_notes"], row["ref_notes"]
        assert "enough to explain the value" in row["ref_notes"]


def test_a_host_slow_by_less_than_the_drop_does_not_excuse_it(tmp_path):
    """The control lies beyond its limit, but by far less than the values miss theirs: a
    host that slow cannot have caused them (session 14: a round trip that doubled excused a
    link at half speed). The failure stands, and says what the control saw."""
    proc, out = _failing_on_a_quiet_host(tmp_path, CONTROL_MILDLY_UNMET, confirm_runs=1)
    assert proc.returncode != 0, out[-4000:]
    for row in _rows(tmp_path / "perflogs", "OsuBandwidth"):
        assert row["ref_status"] == "fail", row
        assert "the host control ran slow too" in row["ref_notes"], row["ref_notes"]
        assert "slower cannot explain" in row["ref_notes"]


def test_a_new_host_is_missing_until_calibrated_then_judged_by_its_baseline(tmp_path):
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(CHECKS / "osu.py", checks)
    shutil.copytree(CHECKS / "references", checks / "references")
    latency = ["-n", "OsuLatency", "-p", "openmpi", "-S", "OsuLatency.iterations=2000"]
    # 12 runs: calibrate needs 5 of a key, and leaves out a run whose host control read slow
    # (on a 2-vCPU AMD VM one run in 5 read its handoff at a third of the usual rate; on
    # another a third to a half of them, and 8 runs once left a key with 4).
    first = run_reframe("-r", *latency, "--repeat", "12", checks=checks,
                        perflog_dir=tmp_path / "p1", cwd=tmp_path)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-4000:]
    assert "fabreg references calibrate --system local" in out  # the WARNING says how
    lines = (tmp_path / "p1" / "local" / "default" / "OsuLatency.log").read_text().splitlines()
    rows = [dict(zip(lines[0].split("|"), line.split("|"))) for line in lines[1:]]
    assert len(rows) == 12 and {r["ref_status"] for r in rows} == {"missing"}
    assert {r["host_key"] for r in rows} == {host_key()}
    assert {r["method"] for r in rows} == {str(MEASUREMENT_METHOD)}  # what calibrate keeps

    db = tmp_path / "fabreg.db"
    fabreg("ingest", "-q", str(tmp_path / "p1"), db=db, check=True)
    made = fabreg("references", "calibrate", "--system", "local", "--checks", str(checks),
                  db=db, check=True)
    baseline = checks / "references" / "local" / f"{host_key()}.yaml"
    assert f"wrote {baseline}" in made.stdout
    text = baseline.read_text()
    assert "benchmark: osu_latency" in text and "size: 8," in text and "mpi: openmpi" in text
    # the host control's rows: one per figure on the runs' paths (each job measured those)
    controls = {r["metric"] for r in yaml.safe_load(text)["references"]
                if r["benchmark"] == "host_control"}
    assert controls == {f for r in rows for f in json.loads(r["host_control"])["on_path"]}
    assert "round_trip" not in controls  # on no transport's path: no job measured it
    again = fabreg("references", "calibrate", "--system", "local", "--checks", str(checks),
                   db=db)
    assert again.returncode == 2 and "use --force" in again.stderr

    def judged(name: str) -> tuple[str, dict[str, str]]:
        """One run of the check: its output and its perflog row."""
        proc = run_reframe("-r", *latency, checks=checks, perflog_dir=tmp_path / name,
                           cwd=tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-4000:]
        logged = (tmp_path / name / "local" / "default" / "OsuLatency.log").read_text()
        header, *_, last = logged.splitlines()
        return out, dict(zip(header.split("|"), last.split("|")))

    _, row = judged("p2")
    assert float(row["latency_8B_ref"]) > 0 and float(row["latency_1KB_ref"]) > 0
    assert row["ref_status"] != "missing"

    # The same baseline as a suite of an older measurement generation wrote it (no
    # `method`): its values were measured another way, so it is set aside, and the run
    # says how to record it again instead of judging by it.
    baseline.write_text(text.replace(f"\nmethod: {MEASUREMENT_METHOD}\n", "\n"))
    assert "method:" not in baseline.read_text()
    out, row = judged("p3")
    assert row["ref_status"] == "missing", row["ref_notes"]
    assert (f"rests on the suite's measurement generation 1, not {MEASUREMENT_METHOD}"
            in row["ref_notes"]), row["ref_notes"]
    assert ("record it again from runs of this generation with fabreg references calibrate "
            "--system local --force" in " ".join(out.split())), out[-4000:]


def test_tail_latency_on_a_busy_host_is_inconclusive_never_a_sanity_failure(tmp_path):
    """Four CPU hogs on two cores raise the quiet tail as much as the background does: the
    check cannot judge the background's effect, says so, and does not fail."""
    with cpu_hogs(4):
        out, rows = _tail_latency(tmp_path, "case=alltoall:default%environment=high_tail", 200)
    row = rows[-1]
    assert json.loads(row["interference"])["other_share"] > 0.1, row["interference"]
    # Whether the environment was reached anyway is up to the scheduler; if it was not, the
    # check says why, with the figures, and passes: judged under the other work, or (the hogs
    # already past the target in the quiet calibration step) known out of reach at once.
    verdict = row["tail_verdict"]
    if verdict:
        assert verdict.startswith("inconclusive: "), verdict
        assert (verdict.startswith("inconclusive: p99/p50 ") and "other work took" in verdict
                ) or ("environment out of reach" in verdict
                      and "calibration stopped there" in verdict), verdict
        assert verdict in out


def test_each_tail_latency_algorithm_has_its_own_reference_row_and_its_job_is_its_own(
        tmp_path):
    """Two allreduce algorithms in the quiet environment: each looks up a row of its own (one
    row once pooled every algorithm's tail), and the short job's metered CPU time is its own,
    the job script included (it was read as 13-38 % other work on a quiet host). Their runs
    are held to 1 ms each: after the first, they run the fewest iterations, and say so."""
    out, rows = _tail_latency(
        tmp_path, "case=allreduce:(ring|recursive_doubling)%environment=quiet", 300,
        "-S", "TailLatency.run_seconds=0.001")
    assert out.count(f"{tail_environment.MIN_RUN_ITERATIONS} iterations per phase: 300 would "
                     "take") == 2, out[-4000:]
    benchmarks = {json.loads(r["ref_keys"])["p50"]["benchmark"] for r in rows}
    assert benchmarks == {"fabreg_tail_latency_allreduce_ring_quiet",
                          "fabreg_tail_latency_allreduce_recursive_doubling_quiet"}
    for r in rows:
        figure = json.loads(r["interference"])
        # (the hypervisor's steal is in the host's busy time, but no process's: in a CI run on
        # a 2-vCPU AMD VM, 0.9 of 2.75 CPU-s that no process took, when steal was not logged)
        assert figure["own_cpu_s"] > 0.5 * (figure["busy_cpu_s"] - figure["steal_cpu_s"]), figure


#: The quiet figures judged here: 2 ranks that take every CPU of a 2-CPU host leave none for
#: the OS and the harness, so their tail (p99, p99/p50) is logged, not judged.
QUIET_JUDGED = ("p50",) if (os.cpu_count() or 1) <= 2 else ("p50", "p99", "p99_over_p50")
TAIL_NOT_JUDGED = ("p99, p99_over_p50 not judged: {n} ranks on {n} CPUs leave no CPU for the "
                   "OS and the harness, so the tail would be their time slices, not the "
                   "fabric's; judge it where the ranks leave a CPU free")

#: Quiet allreduce tail rows no host misses: every figure lies inside its warning band.
TAIL_INSIDE = "system: local\nreferences:\n" + "".join(
    f"  - {{benchmark: fabreg_tail_latency_allreduce_default_quiet, metric: {m}, "
    f"size: 65536, value: 1.0e+9, unit: {u}}}\n"
    for m, u in (("p50", "us"), ("p99", "us"), ("p99_over_p50", "ratio")))


def test_a_quiet_tail_inside_its_warning_bands_is_measured_once_as_every_value_is(tmp_path):
    """The quiet environment's figures are judged as every other value is: a first run
    inside its warning bands is a pass with margin, the job's only run, and the perflog says
    how many runs each figure rests on. Without a reference (the second case) the figures
    are what a baseline is calibrated from: ``repeats`` runs."""
    _, logged = _judged_tail(tmp_path, TAIL_INSIDE, "case=allreduce:(default|ring)")
    rows = {r["algorithm"]: r for r in logged}
    inside, unreferenced = rows["default"], rows["ring"]
    assert json.loads(inside["verdicts"]) == dict.fromkeys(QUIET_JUDGED, "ok"), inside
    assert json.loads(inside["measurements"]) == dict.fromkeys(
        ("p50", "p99", "max", "p99_over_p50"), 1), inside["measurements"]
    assert json.loads(unreferenced["measurements"])["p50"] == 3, unreferenced["measurements"]
    assert unreferenced["ref_status"] == "missing", unreferenced["ref_status"]
    kept = {path.parent: json.loads(path.read_text())["runs"]
            for path in (tmp_path / "output").rglob("tail-environment.json")}
    assert sorted(map(len, kept.values())) == [1, 3], kept  # the runs the figures rest on
    assert all((d / name).is_file() for d, runs in kept.items() for name in runs), kept


#: Quiet allreduce tail rows no host meets.
TAIL_UNREACHABLE = "system: local\nreferences:\n" + "".join(
    f"  - {{benchmark: fabreg_tail_latency_allreduce_default_quiet, metric: {m}, "
    f"size: 65536, value: 1.0e-6, unit: us, fail: 0.25}}\n" for m in ("p50", "p99"))


def test_a_confirmed_quiet_tail_failure_on_a_host_slower_than_its_control_is_inconclusive(
        tmp_path):
    """As for the OSU values above: the quiet tail's failure reproduces, the host control
    measured after it lies beyond its baseline by enough to explain it (here a baseline no
    host meets), so the host ran slow, not the fabric: inconclusive, with the control's
    figure in the perflog."""
    _, (row,) = _judged_tail(tmp_path, TAIL_UNREACHABLE + CONTROL_UNMET,
                             "case=allreduce:default",
                             "-S", "TailLatency.confirm_runs=1", "-S", "TailLatency.confirm_span=0",
                             "-S", "TailLatency.control_gap=0.5",
                             "-S", "TailLatency.contended_share=1.0")
    assert row["ref_status"] == "inconclusive", row
    assert json.loads(row["verdicts"]) == dict.fromkeys(
        [n for n in QUIET_JUDGED if n != "p99_over_p50"], "inconclusive"), row["verdicts"]
    assert json.loads(row["confirmation"]), row  # confirmed before the control judged
    assert "the host itself ran slow: 1 MiB memory copy" in row["ref_notes"], row["ref_notes"]
    control = json.loads(row["host_control"])
    assert control["copy_bandwidth"] > 0, control
    assert control["on_path"] == ["copy_bandwidth", "handoff_bandwidth", "shared_compute"]


#: A quiet allreduce p50 row no host misses, and p99 and p99/p50 rows no host meets.
TAIL_P50_ONLY_MET = "system: local\nreferences:\n" + "".join(
    f"  - {{benchmark: fabreg_tail_latency_allreduce_default_quiet, metric: {m}, "
    f"size: 65536, value: {v}, unit: {u}, fail: 0.25}}\n"
    for m, v, u in (("p50", "1.0e+9", "us"), ("p99", "1.0e-6", "us"),
                    ("p99_over_p50", "1.0e-6", "ratio")))


def test_a_quiet_tail_whose_ranks_take_every_cpu_is_judged_by_its_p50_alone(tmp_path):
    """As many ranks as the host has CPUs leave none for the OS, ReFrame and the meter: each
    of their wake-ups takes a rank's CPU while its peer waits, so the p99 is theirs. Against
    rows that fail any p99 and pass any p50, the case passes on its p50, measured once (no
    unjudged figure asks for repeats), logs its tail with no reference key (no baseline is
    drawn from it) and says why it judged only the p50."""
    cpus = os.cpu_count() or 1
    _, (row,) = _judged_tail(tmp_path, TAIL_P50_ONLY_MET, "case=allreduce:default",
                             "-S", f"TailLatency.measured_ranks={cpus}")
    assert row["ref_status"] == "ok", row["ref_notes"]
    assert json.loads(row["verdicts"]) == {"p50": "ok"}, row["verdicts"]
    assert set(json.loads(row["ref_keys"])) == {"p50"}, row["ref_keys"]
    assert set(json.loads(row["measurements"]).values()) == {1}, row["measurements"]
    assert row["ref_notes"] == TAIL_NOT_JUDGED.format(n=cpus), row["ref_notes"]
    assert float(row["p99_value"]) >= float(row["p50_value"]) > 0, row


@pytest.mark.skipif(not shutil.which("ucx_perftest"), reason="ucx_perftest is not installed")
def test_a_client_server_failure_is_confirmed_in_the_job_spread_in_time(tmp_path):
    """ucx_perftest through ReFrame against a latency no host meets: the failing figure is
    measured again in the job, spread over the span, and fails with its first value logged."""
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    shutil.copy(CHECKS / "ucx_perftest.py", checks)
    (checks / "references" / "local.yaml").write_text(
        "system: local\nreferences:\n  - {benchmark: ucx_perftest_tag_lat, metric: latency, "
        "size: 8, transport: tcp, nodes: 1, value: 0.001, unit: us, fail: 0.5}\n")
    proc = run_reframe("-r", "-n", "UcxPerftestLatency%nodes=1%ucx_test=tag_lat%transport=tcp"
                       "%buffer=host",
                       "-S", "UcxPerftestLatency.iterations=2000", "-S", "confirm_span=4",
                       "-S", "confirm_runs=3", *SHORT_CONTROL,
                       "-S", "contended_share=1.0", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Failing phase: performance" in out, out[-4000:]
    lines = (tmp_path / "perflogs" / "local" / "default" / "UcxPerftestLatency.log"
             ).read_text().splitlines()
    row = dict(zip(lines[0].split("|"), lines[-1].split("|")))
    assert row["ref_status"] == "fail"
    assert set(json.loads(row["confirmation"])) == {"latency_8B"}
    measured = json.loads(next((tmp_path / "stage").rglob("client-server.json")).read_text())
    started = [r["started"] for r in measured["runs"]]
    assert len(started) == 6, measured["runs"]  # 3 runs, then 3 confirmation runs
    assert started[5] - started[3] >= 3.5  # spread over the span
    assert float(row["latency_8B_value"]) == min(measured["values"]["latency_8B"])


@pytest.mark.skipif(not shutil.which("mpicc.openmpi"), reason="OpenMPI is not installed")
def test_a_matmul_failure_is_the_best_of_its_repeats_confirmed_in_the_job(tmp_path):
    """The matrix multiply through ReFrame against a GFLOP/s no host reaches: every figure is
    the best of the job's repeated runs, and the failing one is measured again, spread in
    time, before the test fails; the figures within their references are not."""
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    shutil.copy(CHECKS / "matmul.py", checks)
    (checks / "references" / "local.yaml").write_text(
        "system: local\nreferences:\n"
        "  - {benchmark: fabreg_matmul_blocking_2ranks, metric: gflops, size: 512, "
        "transport: shm, nodes: 1, value: 1000000, unit: GFLOP/s, fail: 0.5}\n"
        "  - {benchmark: fabreg_matmul_blocking_2ranks, metric: total, size: 512, "
        "transport: shm, nodes: 1, "
        "value: 1000, unit: s, fail: 0.5}\n")
    proc = run_reframe("-r", "-p", "openmpi", "-n",
                       "Matmul%transport=shm%nodes=1%mode=blocking%matrix_size=512%ranks=2",
                       "-S", "confirm_span=4", "-S", "confirm_runs=3", *SHORT_CONTROL,
                       "-S", "contended_share=1.0", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Failing phase: performance" in out, out[-4000:]
    assert "gflops=" in out and "total=" not in out.split("Failing phase: performance")[1]
    lines = (tmp_path / "perflogs" / "local" / "default" / "Matmul.log").read_text().splitlines()
    row = dict(zip(lines[0].split("|"), lines[-1].split("|")))
    verdicts = json.loads(row["verdicts"])
    assert verdicts["gflops"] == "fail" and verdicts["total"] == "ok", verdicts
    assert set(json.loads(row["confirmation"])) == {"gflops"}
    measured = json.loads(next((tmp_path / "stage").rglob("repeat-probe.json")).read_text())
    started = [run["started"] for run in measured["launches"]]
    assert len(started) == 6, measured["launches"]  # 3 runs, then 3 confirmation runs
    assert started[5] - started[3] >= 3.5  # spread over the span
    assert float(row["gflops_value"]) == max(measured["values"]["gflops"])
    assert float(row["total_value"]) == min(measured["values"]["total"])
    assert set(json.loads(row["spread"])) == set(measured["values"])
    # the whole multiply's rate is mostly arithmetic: its confirmed failure leaves the path
    # no lasting failure for later jobs to join
    notes = [p for p in tmp_path.rglob(".fabreg-lasting-*/*") if p.name != "confirmation-seconds"]
    assert measured["quiet_confirmations"] and not notes, notes


#: A matrix multiply's compute phase no host meets, by far (the control below explains it).
COMPUTE_UNREACHABLE = """system: local
references:
  - {benchmark: fabreg_matmul_blocking_2ranks, metric: compute, size: 512, transport: shm,
     nodes: 1, value: 1.0e-9, unit: s, fail: 0.5}
"""


@pytest.mark.parametrize("control_rows, verdict, why", [
    # the copy and the handoff ran slow, the arithmetic did not: they cannot excuse it
    (CONTROL_UNMET + "  - {benchmark: host_control, metric: shared_compute, value: 1000000, "
                     "unit: ms, fail: 0.25}\n", "fail", None),
    # the arithmetic beside a neighbour ran slow: the host, not the job
    (CONTROL_MET + "  - {benchmark: host_control, metric: shared_compute, value: 1.0e-12, "
                   "unit: ms, fail: 0.25}\n", "inconclusive",
     "the host itself ran slow: compute beside a computing neighbour"),
])
def test_a_matmul_compute_phase_is_judged_by_the_cpu_control_alone(tmp_path, control_rows,
                                                                    verdict, why):
    """The compute phase is the CPU's arithmetic: the control of the shared compute judges
    it, not the copy or the stream of the job's path (a TCP job's compute once ran 1.66x
    slow while its loopback read normal, and a slow copy says nothing of the arithmetic)."""
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    shutil.copy(CHECKS / "matmul.py", checks)
    (checks / "references" / "local.yaml").write_text(COMPUTE_UNREACHABLE + control_rows)
    proc = run_reframe("-r", "-p", "openmpi", "-n",
                       "Matmul%transport=shm%nodes=1%mode=blocking%matrix_size=512%ranks=2",
                       "-S", "confirm_span=0", "-S", "confirm_runs=1", *SHORT_CONTROL,
                       "-S", "contended_share=1.0", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert (proc.returncode != 0) == (verdict == "fail"), out[-4000:]
    (row,) = _rows(tmp_path / "perflogs", "Matmul")
    assert json.loads(row["verdicts"])["compute"] == verdict, row
    assert json.loads(row["confirmation"]) == {"compute": pytest.approx(
        json.loads(row["confirmation"])["compute"])}  # confirmed before the control judged
    control = json.loads(row["host_control"])
    assert control["shared_compute"] > 0 and control["copy_bandwidth"] > 0, control
    if why:
        assert why in row["ref_notes"], row["ref_notes"]
    else:
        assert "memory copy" not in row["ref_notes"], row["ref_notes"]


@pytest.mark.skipif(not shutil.which("mpicc.mpich"), reason="MPICH is not installed")
def test_a_matmul_row_judges_its_own_rank_count_and_time_slices_none(tmp_path):
    """One row per mode and rank count: a 4-rank row no host meets judges neither the
    2-rank case (4 ranks compute half its rows) nor, on a host of fewer than 4 CPUs, the
    4-rank case itself, whose phases are the scheduler's time slices there: it runs once,
    its answer checked and its figures logged, and says why it is not judged."""
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    shutil.copy(CHECKS / "matmul.py", checks)
    (checks / "references" / "local.yaml").write_text(
        "system: local\nreferences:\n"
        "  - {benchmark: fabreg_matmul_blocking_4ranks, metric: compute, size: 512, "
        "transport: shm, nodes: 1, value: 1.0e-9, unit: s, fail: 0.5}\n")
    proc = run_reframe("-r", "-p", "mpich", "-n",
                       "Matmul%transport=shm%nodes=1%mode=blocking%matrix_size=512",
                       "-S", "confirm_span=0", "-S", "confirm_runs=1", *SHORT_CONTROL,
                       "-S", "contended_share=1.0", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    rows = {row["ranks"]: row for row in _rows(tmp_path / "perflogs", "Matmul")}
    assert set(rows) == {"2", "4"}, out[-4000:]
    two, four = rows["2"], rows["4"]
    assert two["result"] == "pass" and "compute" not in json.loads(two["verdicts"]), two
    assert json.loads(two["ref_keys"])["compute"]["benchmark"] == \
        "fabreg_matmul_blocking_2ranks", two
    cpus = os.cpu_count() or 1
    if cpus < 4:
        assert proc.returncode == 0, out[-4000:]
        assert four["result"] == "pass" and four["ref_status"] == "", four
        assert json.loads(four["ref_keys"]) == {} and json.loads(four["verdicts"]) == {}, four
        assert four["ref_notes"].startswith(f"not judged: 4 ranks on {cpus} CPUs: "), four
        assert "the multiply's phases would be the OS scheduler's time slices" in \
            four["ref_notes"], four
        assert set(json.loads(four["measurements"]).values()) == {1}, four
    else:
        assert proc.returncode != 0, out[-4000:]
        assert json.loads(four["verdicts"])["compute"] == "fail", four

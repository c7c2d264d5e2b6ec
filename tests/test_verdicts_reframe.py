"""Verdicts in real ReFrame runs of the real OSU check: a failing value measured while other
work took the host's CPUs is inconclusive, never a regression; on a quiet host it is
measured again and fails only if it reproduces."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_reframe

pytestmark = pytest.mark.slow

#: A reference no host can meet: every osu_bw value fails its band.
UNREACHABLE = """system: local
references:
  - {benchmark: osu_bw, metric: bandwidth, size: 65536, value: 1000000000, unit: MB/s, fail: 0.5}
  - {benchmark: osu_bw, metric: bandwidth, size: 1048576, value: 1000000000, unit: MB/s, fail: 0.5}
  - {benchmark: osu_bw, metric: bandwidth, size: 4194304, value: 1000000000, unit: MB/s, fail: 0.5}
"""
SMALL = ["-S", "OsuBandwidth.iterations=20", "-S", "OsuBandwidth.warmup=2"]


def _checks(tmp_path: Path) -> Path:
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(REPO / "checks" / "osu.py", checks)
    (checks / "references").mkdir()
    (checks / "references" / "local.yaml").write_text(UNREACHABLE)
    return checks


def _row(perflogs: Path) -> dict[str, str]:
    lines = (perflogs / "local" / "default" / "OsuBandwidth.log").read_text().splitlines()
    return dict(zip(lines[0].split("|"), lines[-1].split("|")))


def test_a_failing_value_under_a_cpu_hog_is_inconclusive(tmp_path):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL,
                           checks=_checks(tmp_path), perflog_dir=tmp_path / "perflogs",
                           cwd=tmp_path)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "inconclusive (other work took" in out
    row = _row(tmp_path / "perflogs")
    assert row["ref_status"] == "inconclusive"
    assert set(json.loads(row["verdicts"]).values()) == {"inconclusive"}
    assert json.loads(row["interference"])["other_share"] > 0.1
    assert row["bandwidth_1MB_result"] == "pass" and float(row["bandwidth_1MB_value"]) > 0


def test_a_failure_that_reproduces_fails_with_both_measurements(tmp_path):
    # Contention is not judged here (share 1.0): the value is confirmed and fails.
    proc = run_reframe("-r", "-n", "OsuBandwidth", "-p", "openmpi", *SMALL,
                       "-S", "contended_share=1.0", checks=_checks(tmp_path),
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "Failing phase: performance" in out
    row = _row(tmp_path / "perflogs")
    assert row["ref_status"] == "fail"
    confirmation = json.loads(row["confirmation"])
    assert set(confirmation) == {"bandwidth_64KB", "bandwidth_1MB", "bandwidth_4MB"}
    assert float(row["bandwidth_1MB_value"]) >= confirmation["bandwidth_1MB"]  # best of both
    # a failed test stays in its stage directory
    measured = json.loads(next((tmp_path / "stage").rglob("measure.json")).read_text())
    assert all(len(v) == 6 for v in measured["values"].values())

"""A build never runs beside a measured job on a single-host partition (real ReFrame).

Session 12 found the suite disturbing itself on ``local``: ReFrame compiled one check's
probes while another check measured, so that value was ``inconclusive`` in every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, run_reframe

from fabreg.testlib.base import runs_on_reframe_host

pytestmark = pytest.mark.slow  # real ReFrame sessions

CHECKS = REPO / "tests" / "build_checks" / "overlap.py"


def _overlap(tag: str, tmp_path: Path) -> float:
    """Seconds the slow build and the job ran at the same time, in one real session."""
    timeline = tmp_path / f"{tag}.timeline"
    proc = run_reframe("-t", tag, "-r", "--system", "local", checks=CHECKS,
                       perflog_dir=tmp_path / f"perflogs-{tag}", cwd=tmp_path,
                       env={"FABREG_TEST_TIMELINE": str(timeline)}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    spans = {}
    for line in timeline.read_text().splitlines():
        what, start, end = line.split()
        spans[what] = (float(start), float(end))
    assert set(spans) == {"build", "job"}, spans
    (b0, b1), (j0, j1) = spans["build"], spans["job"]
    return max(0.0, min(b1, j1) - max(b0, j0))


def test_the_suites_builds_wait_for_the_measured_job_and_reframes_default_does_not(tmp_path):
    # The control: ReFrame's default build runs beside the job (else this test proves nothing).
    assert _overlap("plain", tmp_path) > 1.0
    assert _overlap("apart", tmp_path) == 0.0


class _Scheduler:
    def __init__(self, name: str) -> None:
        self.registered_name = name


class _Partition:
    def __init__(self, scheduler: str) -> None:
        self.scheduler, self.extras, self.fullname = _Scheduler(scheduler), {}, "sys:part"


@pytest.mark.parametrize(("scheduler", "shared"), [
    ("local", True),     # the jobs run on the ReFrame host, through the same scheduler
    ("slurm", False),    # a cluster: the login node builds while compute nodes measure
    ("squeue", False),   # the emulated cluster: a Slurm scheduler cannot poll a local build
])
def test_which_partitions_count_builds_as_their_jobs(scheduler, shared):
    assert runs_on_reframe_host(_Partition(scheduler)) is shared

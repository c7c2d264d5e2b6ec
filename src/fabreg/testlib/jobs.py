"""Why a job ended badly, in the scheduler's words, so a failed test says what happened.

A job killed at its time limit or by a node failure leaves a truncated (or no)
benchmark table; reporting "row missing" would hide the cause. The scheduler's
final job state (Slurm's, or ReFrame's local scheduler's TIMEOUT) and Slurm's own
``*** JOB ... CANCELLED ... DUE TO ... ***`` line name it.
"""

from __future__ import annotations

import re
from pathlib import Path

import reframe as rfm
from reframe.core.builtins import run_before
from reframe.core.exceptions import SanityError

#: Final job states that mean the scheduler, not the benchmark, ended the job.
SCHEDULER_ENDINGS = {
    "TIMEOUT": "killed at its time limit",
    "NODE_FAIL": "ended by a node failure",
    "BOOT_FAIL": "could not start: node boot failure",
    "CANCELLED": "cancelled",
    "DEADLINE": "ended at its deadline",
    "OUT_OF_MEMORY": "killed: out of memory",
    "PREEMPTED": "preempted",
}

_SLURM_CANCEL = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON (\S+) CANCELLED AT (\S+)"
                           r"(?: DUE TO ([A-Z][A-Z ]*[A-Z]))?[^*]*\*\*\*")


def slurm_cancel_line(text: str) -> str | None:
    """Slurm's cancellation notice in a job's stderr, shortened to what and why."""
    match = _SLURM_CANCEL.search(text)
    if not match:
        return None
    node, when, why = match.groups()
    return f"Slurm: cancelled on {node} at {when}" + (f" due to {why.lower()}" if why else "")


def scheduler_ending(state: str | None, jobid: object, time_limit: object,
                     stderr: Path | None) -> str | None:
    """A one-line reason when the scheduler ended the job, else None (the benchmark did)."""
    states = [s for s in (state or "").split(",") if s]
    bad = [s for s in states if s in SCHEDULER_ENDINGS]
    if not bad:
        return None
    what = SCHEDULER_ENDINGS[bad[0]]
    if bad[0] == "TIMEOUT" and time_limit:
        what += f" ({time_limit} s)"
    message = f"job {jobid} {what} (scheduler state {','.join(bad)})"
    if stderr is not None:
        try:
            notice = slurm_cancel_line(stderr.read_text(errors="replace"))
        except OSError:
            notice = None
        if notice:
            message += f"; {notice}"
    return message


class SchedulerEndingMixin(rfm.RegressionTestPlugin):
    """Fail a test whose job the scheduler ended (time limit, node failure) with that reason.

    Runs before any other sanity code, so a truncated benchmark table is never
    reported instead of the cause.
    """

    @run_before("sanity")
    def fail_with_scheduler_reason(self) -> None:
        reason = scheduler_ending(self.job.state, self.job.jobid, self.job.time_limit,
                                  Path(self.stagedir, str(self.stderr.evaluate())))
        if reason:
            raise SanityError(reason)

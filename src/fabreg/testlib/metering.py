"""MeteredJob: the job meters other work's CPU time while it runs, and a failure measured
under that interference is ``inconclusive``, never a regression.

For checks that run their benchmark as it is (the workload probes): a sampler
(``python -m fabreg.run.interference``) runs in the background from the job's first command
to its last; every process of the job carries ``FABREG_MEASURE_TOKEN`` and counts as the
job's own. See docs/references.md, "How a value is judged".
"""

from __future__ import annotations

import shlex
import sys
import uuid
from typing import Any

import reframe as rfm
from reframe.core.builtins import run_before, variable

from fabreg.run.interference import (
    CONTENDED_SHARE,
    HARNESS_VARIABLE,
    TOKEN_VARIABLE,
    contention_text,
    process_identity,
)
from fabreg.run.references import Assessment
from fabreg.testlib.base import stage_json

FIGURE = "interference.json"
STOP = "interference.stop"


class MeteredJob(rfm.RegressionTestPlugin):
    """Mixin: meter the whole job; qualify failures measured under interference."""

    #: Other work's share of the host's CPU time above which a failure is ``inconclusive``.
    #:
    #: :type: ``float``
    #: :default: ``fabreg.run.interference.CONTENDED_SHARE`` (0.10)
    contended_share = variable(float, value=CONTENDED_SHARE, loggable=False)
    #: Other work's CPU time while the job ran (perflog: ``other_share`` of the host's CPU
    #: capacity, CPU-seconds, wall seconds, CPUs, ``exclusive``).
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    interference = variable(dict, value={}, loggable=True)

    @run_before("run")
    def meter_the_job(self) -> None:
        self.env_vars[TOKEN_VARIABLE] = uuid.uuid4().hex
        self.env_vars[HARNESS_VARIABLE] = process_identity()
        sampler = " ".join(shlex.quote(a) for a in (
            sys.executable, "-m", "fabreg.run.interference", FIGURE, STOP))
        self.prerun_cmds = [f"rm -f {STOP}; {sampler} &", *self.prerun_cmds]
        self.postrun_cmds = [*self.postrun_cmds, f"touch {STOP}; wait"]
        self.keep_files = [*self.keep_files, FIGURE]

    def metered(self) -> dict[str, Any] | None:
        return stage_json(self.stagedir, FIGURE)

    def contended(self) -> bool:
        """Did other work take more than ``contended_share`` of the CPU during the job?"""
        figure = self.metered()
        return bool(figure) and figure["other_share"] > self.contended_share

    def contention_note(self) -> str:
        return contention_text(self.metered() or {})

    @run_before("performance")
    def log_interference(self) -> None:
        self.interference = self.metered() or {}

    def qualify(self, assessments: list[Assessment]) -> dict[str, tuple[str, str]]:
        if not self.contended():
            return {}
        note = self.contention_note() + " while it measured"
        return {a.name: ("inconclusive", note) for a in assessments if a.verdict == "fail"}

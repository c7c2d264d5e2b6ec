"""Where the emulated cluster's squeue backend learns that a job ended."""

from __future__ import annotations

from fabreg.testlib.prompt_squeue import completion_log


def test_the_completion_log_is_slurms_file_of_ended_jobs_or_none():
    shown = {"JobCompType": "jobcomp/filetxt", "JobCompLoc": "/state/logs/jobcomp.log"}
    assert str(completion_log(shown)) == "/state/logs/jobcomp.log"
    assert completion_log({"JobCompType": "jobcomp/none", "JobCompLoc": ""}) is None
    assert completion_log({"JobCompType": "jobcomp/elasticsearch",
                           "JobCompLoc": "http://host:9200"}) is None
    assert completion_log({}) is None  # scontrol failed: ReFrame's own polling

"""ReFrame's ``squeue`` scheduler, prompt on a Slurm that runs beside it (the emulated cluster).

Two waits of ReFrame's ``squeue`` backend cost the emulated cluster's jobs time and nothing
else, since its ``slurmctld`` runs on the host ReFrame runs on:

- it polls no job until 2 s after the newest submission (``SQUEUE_DELAY``: a busy controller
  of a real cluster may not list a job at once); this one lists it as soon as ``sbatch``
  returns, and ReFrame's poll controller, behind its rate after that wait, then made up for
  it with about ten ``squeue`` calls in a tenth of a second;
- an ``squeue`` call a poll is too dear for more than about one a second on a host whose
  cores measure, so a job's end was seen up to a second late. This Slurm writes each ended
  job to a file (``JobCompType=jobcomp/filetxt``): a poll looks at the file's size, which
  costs a ``stat``, and calls ``squeue`` when the file has grown, else at most once every
  :data:`SQUEUE_EVERY_S` (which is how a pending job's state and reasons stay current).

A site's partitions keep ReFrame's own backends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from reframe.core.backends import register_scheduler
from reframe.core.schedulers.slurm import SqueueJobScheduler

from fabreg.run.site_init import slurm_config

#: The name the ``minicluster`` partition gives as its scheduler (reframe-config.py).
NAME = "fabreg_squeue"
#: Seconds between ``squeue`` calls while no job has ended.
SQUEUE_EVERY_S = 1.0


def completion_log(config: Mapping[str, str]) -> Path | None:
    """The file Slurm writes each ended job to, by its configuration (``scontrol show
    config``, :func:`fabreg.run.site_init.slurm_config`), or None (not a file, or not set)."""
    location = config.get("JobCompLoc", "")
    if config.get("JobCompType") != "jobcomp/filetxt" or not location:
        return None
    return Path(location)


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


@register_scheduler(NAME)
class PromptSqueueScheduler(SqueueJobScheduler):
    """``squeue`` polling from the first poll after a submission, and at once after a job ended."""

    SQUEUE_DELAY = 0

    def __init__(self) -> None:
        super().__init__()
        self._completions = completion_log(slurm_config())
        self._size_seen = -2
        self._last_squeue = float("-inf")

    def poll(self, *jobs):
        if self._completions is not None:
            size = _size(self._completions)
            recent = time.monotonic() - self._last_squeue < SQUEUE_EVERY_S
            known = all(job.state is not None for job in jobs if job is not None)
            if size == self._size_seen and recent and known:
                return  # no job ended since the last squeue, which told each job's state
            self._size_seen = size
        self._last_squeue = time.monotonic()
        super().poll(*jobs)

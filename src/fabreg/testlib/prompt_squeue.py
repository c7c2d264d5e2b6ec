"""ReFrame's ``squeue`` scheduler without its wait after a submission, for the emulated cluster.

ReFrame's ``squeue`` backend polls no job until 2 s after the newest submission
(``SqueueJobScheduler.SQUEUE_DELAY``): a busy controller of a real cluster may not list a job
at once. The emulated cluster's ``slurmctld`` runs beside ReFrame on the same host and lists a
job as soon as ``sbatch`` returns, so each job waited up to 2 s for nothing, and ReFrame's poll
controller, behind its rate after that wait, then made up for it with about ten ``squeue``
calls in a tenth of a second. A site's partitions keep ReFrame's own backends.
"""

from __future__ import annotations

from reframe.core.backends import register_scheduler
from reframe.core.schedulers.slurm import SqueueJobScheduler

#: The name the ``minicluster`` partition gives as its scheduler (reframe-config.py).
NAME = "fabreg_squeue"


@register_scheduler(NAME)
class PromptSqueueScheduler(SqueueJobScheduler):
    """``squeue`` polling from the first poll after a submission."""

    SQUEUE_DELAY = 0

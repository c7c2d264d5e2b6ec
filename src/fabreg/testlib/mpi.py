"""MPI environments in ReFrame: availability, and launching ranks with the environment's launcher.

ReFrame ties the launcher to a partition, but on one host every MPI brings its
own (``mpirun.openmpi``, ``mpiexec.mpich``). An environment may therefore name
its launcher in ``extras['launcher']`` (argv with ``{num_tasks}``,
``{num_tasks_per_node}``, ``{num_nodes}`` placeholders); checks use it instead
of the partition's. Without it, the partition launcher (e.g. ``srun``) is kept.
"""

from __future__ import annotations

import shutil
from typing import Any

import reframe as rfm
import reframe.core.runtime as rt
from reframe.core.builtins import run_after, run_before, variable
from reframe.core.launchers import JobLauncher
from reframe.core.logging import getlogger

from fabreg.testlib.jobs import SchedulerEndingMixin

_warned: set[str] = set()

_DEFAULT_HINT = (
    "install it (e.g. with Spack: spack install {mpi}, see docs/spack.md) and point the "
    "environment in reframe-config.py at it"
)


def mpi_name(environ: Any) -> str:
    return str(environ.extras.get("mpi", environ.name))


def unavailable_reason(environ: Any) -> str | None:
    """Why this environment's MPI cannot run here, or None.

    Environments that load modules are trusted: their tools appear only inside the job.
    """
    if environ.modules:
        return None
    mpi = mpi_name(environ)
    launcher = list(environ.extras.get("launcher") or [])
    missing = [tool for tool in [environ.cc, *launcher[:1]] if tool and not shutil.which(tool)]
    if not missing:
        return None
    hint = environ.extras.get("install_hint") or _DEFAULT_HINT.format(mpi=mpi)
    return (f"MPI {mpi!r} is not installed here (not found: {', '.join(missing)}); {hint}")


def warn_unavailable_environments(valid_prog_environs: list[str]) -> None:
    """Say once per session, while checks load, which MPI environments will be skipped."""
    try:
        system = rt.runtime().system
    except Exception:  # not inside a ReFrame session (e.g. imported by a unit test)
        return
    for part in system.partitions:
        for env in part.environs:
            if env.name in _warned or "mpi" not in env.features:
                continue
            _warned.add(env.name)
            reason = unavailable_reason(env)
            if reason:
                getlogger().warning(f"environment {env.name!r} will be skipped: {reason}")


class ArgvLauncher(JobLauncher):
    """A launcher given as an argv template by the environment."""

    def __init__(self, argv: list[str]) -> None:
        super().__init__()
        self._argv = list(argv)

    def command(self, job: Any) -> list[str]:
        per_node = job.num_tasks_per_node or job.num_tasks
        nodes = max(1, -(-job.num_tasks // per_node))
        fields = {"num_tasks": job.num_tasks, "num_tasks_per_node": per_node, "num_nodes": nodes}
        return [arg.format(**fields) for arg in self._argv]


class MpiCheck(rfm.RunOnlyRegressionTest, SchedulerEndingMixin):
    """Base of every check that launches MPI ranks."""

    valid_systems = ["*"]
    valid_prog_environs = ["+mpi"]

    #: MPI implementation, from the environment (perflog column).
    mpi = variable(str, value="", loggable=True)

    #: Number of nodes the job spans (perflog column).
    num_nodes = variable(int, value=1, loggable=True)

    #: Extra launcher arguments (e.g. transport selection), placed before the executable.
    launch_options = variable(list, value=[], loggable=False)

    @run_after("init")
    def announce_unavailable_environments(self) -> None:
        warn_unavailable_environments(self.valid_prog_environs)

    @run_after("setup")
    def skip_unavailable_mpi(self) -> None:
        self.skip_if(bool(reason := unavailable_reason(self.current_environ)), reason or "")
        self.mpi = mpi_name(self.current_environ)

    @run_before("run")
    def use_environment_launcher(self) -> None:
        argv = self.current_environ.extras.get("launcher")
        if argv:
            self.job.launcher = ArgvLauncher(argv)
        self.job.launcher.options += list(self.launch_options)

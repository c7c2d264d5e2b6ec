"""MPI environments in ReFrame: availability, and launching ranks with the environment's launcher.

ReFrame ties the launcher to a partition, but on one host every MPI brings its
own (``mpirun.openmpi``, ``mpiexec.mpich``). An environment may therefore name
its launcher in ``extras['launcher']`` (argv with ``{num_tasks}``,
``{num_tasks_per_node}``, ``{num_nodes}`` placeholders); checks use it instead
of the partition's. Without it, the partition launcher (e.g. ``srun``) is kept.

Every MPI check runs the matrix MPI x transport x node count (docs/transports.md):
``mpi`` comes from the environment, ``transport`` and ``nodes`` are parameters.
``nodes`` is generated when the checks load, from the largest ``max_nodes`` in
the partitions' ``extras`` (1, 2, 4, ... and that maximum), and every test case
is restricted at init to what can exist: partitions offering that many nodes,
environments whose MPI can select the transport, and only transports whose
scope fits the node count (``shm`` on one node, inter-node ones on two or more).
Impossible combinations are therefore never generated; possible ones that this
partition cannot run (no RDMA device, MPI build without the channel) are skipped
at setup with the reason from ``fabreg.run.transport.availability_problem``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import reframe.core.runtime as rt
import reframe.utility.typecheck as typ
from reframe.core.builtins import parameter, run_after, run_before, variable
from reframe.core.exceptions import SanityError
from reframe.core.launchers import JobLauncher
from reframe.core.logging import getlogger

from fabreg.run import transport as tx
from fabreg.run.parsers.transport_log import mvapich2_no_hca
from fabreg.testlib.base import (
    RUN_ID,
    FabregCheck,
    max_nodes,
    node_counts,
    partitions,
    reframe_errors,
)

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



class MpiCheck(FabregCheck):
    """Base of every check that launches MPI ranks."""

    valid_prog_environs = ["+mpi"]

    #: MPI implementation, from the environment (perflog column).
    #:
    #: :type: ``str``
    #: :default: ``""``
    mpi = variable(str, value="", loggable=True)

    #: Number of nodes the job spans (perflog column).
    #:
    #: :type: ``int``
    #: :default: ``1``
    num_nodes = variable(int, value=1, loggable=True)

    #: Extra launcher arguments (e.g. transport selection), placed before the executable.
    #:
    #: :type: ``list``
    #: :default: ``[]``
    launch_options = variable(list, value=[], loggable=False)

    #: What carries the traffic (``fabreg.run.transport.TRANSPORTS``); the perflog's ``transport``.
    #:
    #: :type: parameter
    #: :default: values ``list(tx.TRANSPORTS)``
    transport = parameter(list(tx.TRANSPORTS))

    #: Nodes the run spans: 1, 2, 4, ... up to the partitions' ``max_nodes``.
    #:
    #: :type: parameter
    #: :default: values ``node_counts()``
    nodes = parameter(node_counts())

    #: Ranks per node; 0 lets the check decide (``placement``).
    #:
    #: :type: ``int``
    #: :default: ``0``
    ranks_per_node = variable(int, value=0, loggable=False)

    #: Prove from the MPI's own logs which transport ran, and fail on a mismatch.
    #:
    #: :type: ``bool``
    #: :default: ``True``
    verify_transport = variable(typ.Bool, value=True, loggable=False)

    #: The transport the run's logs show (``tcp``, ``tcp+shm``); perflog column.
    #:
    #: :type: ``str``
    #: :default: ``""``
    transport_used = variable(str, value="", loggable=True)

    def hang_note(self) -> str:
        """Where this run's jobs of this partition, MPI and transport note that a launch
        hung after its results (``fabreg.run.launch.note_hang``): the stage directory's
        parent (the partition and environment's), which the job can write.

        One note for every node count: MPICH over UCX's TCP hangs on 2 nodes and on 4, and
        the short grace it gives ends nothing else (a healthy launch exits within 0.25 s of
        its complete table: every one of the 582 of a complete 4-node run), so a 4-node job
        need not wait out in full a hang its 2-node jobs already showed."""
        return str(Path(self.stagedir).parent / f".fabreg-hangs-{RUN_ID}" / self.transport)

    @run_after("init")
    def announce_unavailable_environments(self) -> None:
        warn_unavailable_environments(self.valid_prog_environs)

    @run_after("init")
    def restrict_to_valid_combinations(self) -> None:
        """Keep only partitions and environments where this (transport, nodes) can exist.

        Narrows what ``valid_systems``/``valid_prog_environs`` already allow (so
        ``-S valid_prog_environs=mpich`` still selects), never widens it.
        """
        scope = tx.TRANSPORTS[self.transport]
        if (scope == tx.INTRA_NODE) != (self.nodes == 1):
            self.valid_systems = []
            return
        if not partitions():
            return
        allowed = rt.valid_sysenv_comb(self.valid_systems, self.valid_prog_environs)
        parts = [p for p in allowed if max_nodes(p) >= self.nodes]
        self.valid_systems = [p.fullname for p in parts]
        self.valid_prog_environs = sorted({
            env.name for p in parts for env in allowed[p]
            if "mpi" in env.features and self.transport in tx.SUPPORTED.get(mpi_name(env), ())
        })

    @run_after("setup")
    def skip_unavailable_mpi(self) -> None:
        self.skip_if(bool(reason := unavailable_reason(self.current_environ)), reason or "")
        self.mpi = mpi_name(self.current_environ)

    def placement(self) -> tuple[int, int]:
        """(nodes, ranks per node) of this run.

        ``ranks_per_node`` if set, else the partition's ``extras['ranks_per_node']``,
        else 2 on one node and 1 across nodes. Point-to-point checks override this.
        """
        rpn = self.ranks_per_node or int(self.current_partition.extras.get("ranks_per_node", 0))
        return self.nodes, rpn or (2 if self.nodes == 1 else 1)

    def launch_spec(self) -> tx.LaunchSpec:
        """How this run selects its transport (``fabreg.run.transport``), or a skip with why."""
        part = self.current_partition
        with reframe_errors():
            net = tx.NetConfig.from_extras(part.extras, f"partition {part.fullname}")
        inventory = self.inventory()
        problem = tx.availability_problem(self.mpi, self.transport, inventory, net)
        self.skip_if(bool(problem), f"{self.transport} is unavailable for {self.mpi} on "
                                    f"{part.fullname}: {problem}")
        nodes, rpn = self.placement()
        with reframe_errors():
            # GPU variants (checks/gpu_buffers.py) add a ``buffer`` parameter.
            return tx.launch_spec(self.mpi, self.transport, nodes=nodes, ranks_per_node=rpn,
                                  net=net, inventory=inventory, verify=self.verify_transport,
                                  buffer=getattr(self, "buffer", "host"))

    def inventory(self) -> tx.Inventory:
        """What this partition's MPI build and hosts offer (probed once per session)."""
        return tx.detect(self.mpi, self.current_environ.extras.get("launcher"),
                         declared=self.current_partition.extras.get("transports"))

    def node_cpus(self) -> int:
        """CPUs of one node of the job: this host's on a local partition, else what the
        partition declares (``processor.num_cpus``; 0 when it declares none)."""
        if self.is_local():
            return os.cpu_count() or 1
        return self.current_partition.processor.num_cpus or 0

    def ranks_sharing_cpus(self) -> tuple[int, int, int]:
        """(ranks, the CPUs they share, nodes on one machine's cores or 0): one node's ranks
        share its CPUs; where the nodes share one machine's cores (``extras['oversubscribe']``,
        the emulated cluster) all the job's ranks do. CPUs 0: the partition declares none."""
        nodes, per_node = self.placement()
        shared = nodes > 1 and bool(self.current_partition.extras.get("oversubscribe"))
        return (nodes * per_node if shared else per_node), self.node_cpus(), \
            (nodes if shared else 0)

    def time_slices_reason(self, figure: str, yielding_too: bool = False) -> str:
        """Why this job's ``figure`` would be the OS scheduler's time slices rather than the
        fabric's, or '' where it would not: its ranks outnumber the CPUs they share
        (:meth:`ranks_sharing_cpus`) and its MPI's waiting ranks keep their CPU
        (``transport.busy_polls``), so a rank waits for its peer's time slice at every step.
        ``yielding_too``: a figure that ranks which give their CPU away make the scheduler's
        as well (a tail: whenever every CPU is taken, a message waits for its receiver's next
        slice)."""
        ranks, cpus, shared = self.ranks_sharing_cpus()
        if not cpus or ranks <= cpus:
            return ""
        spins = tx.busy_polls(self.mpi, self.inventory())
        if not spins and yielding_too:
            spins = "a rank that gives its CPU away still waits for its peer's next time slice"
        if not spins:
            return ""
        where, instead = _where(ranks, shared)
        return (f"{ranks} ranks on {cpus} CPUs{where}: {spins}, so the {figure} would be the OS "
                f"scheduler's time slices, not the fabric's; run it on {instead}")

    def no_core_left_reason(self, figure: str) -> str:
        """Why this job's ``figure``, a tail, would be the rest of the host's time slices, or
        '' where its ranks leave a CPU free: ranks that take every CPU they share leave none
        for the OS, ReFrame, the meter and the job's own driver, so each of their wake-ups
        takes a rank's CPU from it while its peer waits (Slurm sites reserve cores for this:
        ``CoreSpecCount``)."""
        ranks, cpus, shared = self.ranks_sharing_cpus()
        if not cpus or ranks < cpus:
            return ""
        where, _ = _where(ranks, shared)
        return (f"{ranks} ranks on {cpus} CPUs{where} leave no CPU for the OS and the "
                f"harness, so the {figure} would be their time slices, not the fabric's; "
                f"judge it where the ranks leave a CPU free")

    def skip_if_time_slices(self, figure: str, yielding_too: bool = False) -> None:
        """Skip the case before its job, saying why, where its ``figure`` would be the OS
        scheduler's time slices (:meth:`time_slices_reason`)."""
        reason = self.time_slices_reason(figure, yielding_too)
        self.skip_if(bool(reason), reason)

    def launcher_style(self) -> str:
        argv = self.current_environ.extras.get("launcher") or [
            getattr(self.job.launcher, "registered_name", "")]
        return tx.launcher_style(self.mpi, argv)

    @run_after("setup")
    def select_transport(self) -> None:
        spec = self.launch_spec()
        self.num_nodes = spec.nodes
        self.num_tasks = spec.nodes * spec.ranks_per_node
        self.num_tasks_per_node = spec.ranks_per_node
        style = self.launcher_style()
        self.env_vars.update(spec.environment(style))
        self.launch_options = spec.options(style) + list(self.launch_options)

    @run_after("setup")
    def allow_oversubscription(self) -> None:
        """More ranks on a node than it has CPUs: intended on a local host (2-core CI
        machines) and on a partition that says so (``extras['oversubscribe']``: the emulated
        cluster, whose nodes share the machine's cores), where Slurm is told to overcommit;
        on another partition whose nodes declare fewer CPUs (``processor.num_cpus``) the
        case is skipped with why, not failed by ``sbatch``."""
        part = self.current_partition
        cpus = self.node_cpus()
        per_node = self.num_tasks_per_node or self.num_tasks
        if not cpus or per_node <= cpus:
            return
        if not self.is_local():
            self.skip_if(not part.extras.get("oversubscribe"),
                         f"{per_node} ranks per node need {per_node} CPUs; the nodes of "
                         f"{part.fullname} have {cpus} (processor.num_cpus)")
            # Slurm overcommits a job only without --ntasks-per-node: one node, all its tasks.
            self.skip_if(self.num_nodes > 1,
                         f"{per_node} ranks per node on {self.num_nodes} nodes of {cpus} CPUs: "
                         "Slurm overcommits only a one-node job")
            self.job.options = [*self.job.options, "--overcommit"]
            self.num_tasks_per_node = None
        if self.mpi == "openmpi" and "--oversubscribe" not in self.launch_options:
            self.launch_options = [*self.launch_options, "--oversubscribe"]
        if self.mpi == "mvapich2":
            # MVAPICH2's InfiniBand device pins one rank per core and stops in MPI_Init on
            # more ("MV2_ENABLE_AFFINITY: oversubscribed cores"), naming this switch.
            self.env_vars = {**self.env_vars, "MV2_ENABLE_AFFINITY": "0"}

    @run_before("sanity")
    def skip_without_hca(self) -> None:
        """An InfiniBand build of MVAPICH2 (``ch3:mrail``) that finds no HCA cannot start. On a
        partition that declares no RDMA device the case is skipped with MVAPICH2's own words;
        where the site declares HCAs (``extras['rdma_devices']``) a missing one is a fault."""
        if self.mpi != "mvapich2" or self.is_dry_run():
            return
        said = mvapich2_no_hca(self.job_output())
        if said and self.current_partition.extras.get("rdma_devices"):
            raise SanityError(f"MVAPICH2 found no HCA on a partition that declares "
                              f"{', '.join(self.current_partition.extras['rdma_devices'])}: {said}")
        self.skip_if(bool(said), f"MVAPICH2 found no InfiniBand HCA here: {said}")

    @run_after("sanity")
    def check_transport_used(self) -> None:
        """Fail unless the MPI's own logs show the transport asked for (docs/transports.md)."""
        if self.is_dry_run():  # nothing ran: no logs to read
            return
        if not self.verify_transport:
            self.transport_used = "unverified"
            return
        result = tx.verify(self.launch_spec(), self.job_output())
        self.transport_used = result.used or "none"
        if not result.ok:
            raise SanityError(f"transport verification failed: {result.problem}")

    @run_before("run")
    def use_environment_launcher(self) -> None:
        argv = self.current_environ.extras.get("launcher")
        if argv:
            self.job.launcher = ArgvLauncher(argv)
        self.job.launcher.options += list(self.launch_options)


def _where(ranks: int, shared: int) -> tuple[str, str]:
    """How a reason says where ``ranks`` run, and where to run them instead."""
    if shared:
        return f" ({shared} nodes on one machine's cores)", "nodes with cores of their own"
    return "", f"a node of {ranks} CPUs or more"

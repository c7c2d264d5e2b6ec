"""The ``minicluster`` ReFrame system: a Slurm partition over the running emulated cluster.

Read by reframe-config.py. The node count comes from the cluster's state file, so
the checks' node-count parameter follows whatever `fabreg cluster up --nodes N`
created (``extras['max_nodes']``). The system matches no host name: it is chosen
with ``--system minicluster`` only, so the ``local`` default is never taken over.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Sequence
from typing import Any

from fabreg.cluster.layout import NODE_IFACE, SLURM_PARTITION, Layout, Paths, state_dir
from fabreg.cluster.state import load
from fabreg.run.siteconfig import slurm_partition
from fabreg.run.transport import HYDRA_MPIS

SYSTEM = "minicluster"

#: What carries MPI traffic on the emulated cluster (names of fabreg.run.transport).
TRANSPORTS = ("tcp", "tcp_ob1", "shm")

#: MPI settings that make a waiting rank give its CPU away. Every emulated node shares the
#: machine's few cores, so a 4-node job runs 4 ranks on 2 cores; a rank that busy-polls for
#: a message holds a core the rank it waits for needs, and each step of a collective then
#: waits for a scheduler time slice: a 1 KiB allreduce over 4 nodes took 4,200 us with
#: Open MPI spinning and 51 us yielding (docs/cluster.md). A node of its own never notices:
#: with nothing else runnable, the yield returns at once.
YIELD_WHEN_IDLE: dict[str, dict[str, str]] = {
    "openmpi": {"OMPI_MCA_mpi_yield_when_idle": "1"},
}


def selected(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> bool:
    """Whether this ReFrame session runs on the minicluster (``--system minicluster``)."""
    argv = sys.argv if argv is None else argv
    env = os.environ if environ is None else environ
    chosen = env.get("RFM_SYSTEM", "")
    for i, arg in enumerate(argv):
        if arg == "--system" and i + 1 < len(argv):
            chosen = argv[i + 1]
        elif arg.startswith("--system="):
            chosen = arg.split("=", 1)[1]
    return chosen.split(":")[0] == SYSTEM


def running_layout(paths: Paths | None = None) -> Layout | None:
    """Layout of the cluster recorded in the state directory, if one was brought up."""
    paths = paths or Paths(state_dir())
    try:
        st = load(paths)
    except Exception:  # an unreadable state file must not break other systems' runs
        return None
    # A cluster brought up with --name plays a site: only its own site.py describes it.
    return st.layout if st and not st.layout.name else None


def use_cluster(paths: Paths | None = None) -> None:
    """Point this process's Slurm commands (sbatch, squeue, scancel) at the emulated cluster.

    Called by reframe-config.py only when ``--system minicluster`` was given.
    """
    paths = paths or Paths(state_dir())
    try:
        named = load(paths)
    except Exception:
        named = None
    if named and named.layout.name:
        raise SystemExit(
            f"fabreg: error: --system {SYSTEM}: the cluster in {paths.root} plays the site "
            f"{named.layout.name!r} (`fabreg cluster up --name`): describe it with `fabreg site "
            f"init --system {named.layout.name}` and run with -C site.py --system "
            f"{named.layout.name}")
    if running_layout(paths) is None:
        raise SystemExit(
            f"fabreg: error: --system {SYSTEM}: no emulated cluster is up (no state in "
            f"{paths.root}); start one with `sudo .venv/bin/fabreg cluster up --nodes 2`"
        )
    os.environ["SLURM_CONF"] = str(paths.slurm_conf)
    # ReFrame's `squeue` backend asks for its jobs by id; finished ones appear only
    # with all states requested, and then carry TIMEOUT / NODE_FAIL into job.state.
    os.environ["SQUEUE_STATES"] = "all"


def system(environs: Sequence[str], paths: Paths | None = None,
           scheduler: str = "squeue") -> dict[str, Any]:
    """The ``minicluster`` system entry; ``scheduler``: the ReFrame backend that polls its
    jobs (reframe-config.py names one that polls from the first moment)."""
    layout = running_layout(paths)
    nodes = layout.nodes if layout else 1
    descr = (f"emulated {nodes}-node Slurm cluster (network namespaces, `fabreg cluster up`)"
             if layout else "emulated Slurm cluster: not running (`fabreg cluster up`)")
    partition = slurm_partition(
        SLURM_PARTITION, environs=environs, max_nodes=nodes, exclusive=False,
        # No accounting database (slurmdbd) on the emulated cluster: poll with squeue.
        scheduler=scheduler, launcher="srun", max_jobs=1,
        descr=f"{nodes} emulated node(s), one slurmd per network namespace",
        extras={
            # The nodes' only fabric: TCP over the bridge, through their `fab0`.
            "tcp_interfaces": [NODE_IFACE],
            # Detection would run in the host's namespace (no fab0 there), so declare.
            "transports": list(TRANSPORTS),
            # All nodes share this one machine: its baseline, not another machine's.
            "references_by_host": True,
            # ... and its cores: more ranks on a node than it has CPUs is intended here.
            "oversubscribe": True,
        },
    )
    # What each node's slurmd declares (CPUs=): a check with more ranks per node asks Slurm
    # to overcommit (fabreg.testlib.workloads.ProbeCheck).
    partition["processor"] = {"num_cpus": layout.cpus_per_node if layout else 1}
    return {
        "name": SYSTEM,
        "descr": descr,
        # Never matched by host name: selected with --system minicluster only.
        "hostnames": [r"^$"],
        "modules_system": "nomod",
        "partitions": [partition],
    }


def environments(base: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The MPI environments of ``base`` adapted to ranks on different emulated nodes.

    The launchers run inside the Slurm job, on the first node, where the only
    interfaces are ``lo`` and ``fab0``: OpenMPI's ``mpirun`` starts its daemons on
    the other nodes with srun, MPICH's hydra ``mpiexec`` bootstraps through Slurm.
    OpenMPI also gets ``--bind-to none``: every emulated node reports the same
    cores, so binding would pile ranks of different "nodes" onto one core. Both place
    ``num_tasks_per_node`` ranks per node explicitly (``--npernode`` / ``-ppn``), and their
    ranks yield when idle (``YIELD_WHEN_IDLE``: the nodes share the machine's cores).
    Which transport carries the traffic is left to ``fabreg.run.transport``, told by the
    partition's ``tcp_interfaces`` / ``transports`` extras.
    """
    adapted = []
    for env in base:
        new = copy.deepcopy(env)
        new["target_systems"] = [SYSTEM]
        extras = new.setdefault("extras", {})
        launcher = list(extras.get("launcher") or [])
        mpi = extras.get("mpi", new["name"])
        if launcher and mpi == "openmpi":
            launcher[1:1] = ["--bind-to", "none", "--npernode", "{num_tasks_per_node}"]
        elif launcher and mpi in HYDRA_MPIS:
            launcher[1:1] = ["-ppn", "{num_tasks_per_node}"]
        extras["launcher"] = launcher
        new["env_vars"] = [*new.get("env_vars", []),
                           *([k, v] for k, v in YIELD_WHEN_IDLE.get(mpi, {}).items())]
        adapted.append(new)
    return adapted

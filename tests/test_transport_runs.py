"""Real MPI runs on this machine: the transport fabreg.run.transport selects is the one verified.

Two ranks on this host stand in for two nodes for the inter-node transports (TCP over
loopback): what is tested is the selection and its verification, not the network, so the
placement part of verification (evidence from as many hosts as nodes) is left out, except in
the test that shows it catching exactly this.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import have, mvapich2_prefix

from fabreg.run import transport as t

PING = Path(__file__).parent / "programs" / "mpi_ping.c"
MPIS = {
    "openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--bind-to", "none", "-np", "2"]),
    "mpich": ("mpicc.mpich", ["mpiexec.mpich", "-n", "2"]),
}
MVAPICH2 = mvapich2_prefix()
if MVAPICH2:
    MPIS["mvapich2"] = (str(MVAPICH2 / "bin" / "mpicc"),
                        [str(MVAPICH2 / "bin" / "mpiexec"), "-n", "2"])
pytestmark = pytest.mark.slow
MVAPICH2_MISSING = ("no MVAPICH2 build here: build one with ci/build-mvapich2.sh SRC and set "
                    "FABREG_MVAPICH2_PREFIX (docs/mpis.md)")


@pytest.fixture(scope="module")
def ping(tmp_path_factory):
    """mpi_ping built with each installed MPI: {mpi: path}."""
    out = {}
    for mpi, (cc, launcher) in MPIS.items():
        if have(cc) and have(launcher[0]):
            exe = tmp_path_factory.mktemp(mpi) / "mpi_ping"
            subprocess.run([cc, "-O2", "-o", str(exe), str(PING)], check=True, timeout=120)
            out[mpi] = exe
    return out


def _run(ping, mpi, transport, *, style=None, override=None):
    """Launch mpi_ping over ``transport``; return (spec, completed process)."""
    if mpi not in ping:
        pytest.skip(MVAPICH2_MISSING if mpi == "mvapich2" else f"{mpi} is not installed here")
    launcher = MPIS[mpi][1]
    inventory = t.detect(mpi, launcher)
    problem = t.availability_problem(mpi, transport, inventory)
    if problem:
        pytest.skip(problem)
    nodes, rpn = (1, 2) if transport == "shm" else (2, 1)
    spec = t.launch_spec(mpi, transport, nodes=nodes, ranks_per_node=rpn, inventory=inventory)
    style = style or t.launcher_style(mpi, launcher)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(spec.environment(style))
    env.update(override or {})
    proc = subprocess.run([*launcher, *spec.options(style), str(ping[mpi])], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ping-pong 4096 B x 200 between 2 ranks" in proc.stdout
    return spec, proc


@pytest.mark.parametrize("mpi,transport", [
    ("openmpi", "shm"), ("openmpi", "tcp"), ("openmpi", "tcp_ob1"),
    ("mpich", "shm"), ("mpich", "tcp"), ("mvapich2", "shm"), ("mvapich2", "tcp"),
])
def test_selected_transport_is_verified(ping, mpi, transport):
    spec, proc = _run(ping, mpi, transport)
    result = t.verify(spec, proc.stdout + proc.stderr, placement=False)
    assert result.ok, result.problem
    assert result.used == transport
    assert result.evidence


def test_openmpi_with_mca_in_the_environment_is_verified_too(ping):
    """What a site launching Open MPI through srun gets: OMPI_MCA_* instead of --mca."""
    spec, proc = _run(ping, "openmpi", "tcp_ob1", style=t.LAUNCHER_ENV)
    assert t.verify(spec, proc.stdout + proc.stderr, placement=False).used == "tcp_ob1"


def test_two_node_run_on_one_host_fails_placement(ping):
    spec, proc = _run(ping, "mpich", "tcp")
    result = t.verify(spec, proc.stdout + proc.stderr)
    assert result.used == "tcp"
    assert "not on 2 nodes: tcp was not exercised between nodes" in result.problem


def test_mpich_forced_onto_shared_memory_fails_verification(ping):
    spec, proc = _run(ping, "mpich", "tcp", override={"UCX_TLS": "sm,self"})
    result = t.verify(spec, proc.stdout + proc.stderr)
    assert not result.ok
    assert result.used == "shm"
    assert result.problem.startswith("asked for tcp but traffic went over shm (UCX tag lanes:")


def test_openmpi_forced_onto_ob1_fails_verification(ping):
    """Asked for UCX's TCP; the environment forces the ob1 PML (shared memory between ranks)."""
    spec, proc = _run(ping, "openmpi", "tcp", style=t.LAUNCHER_ENV,
                      override={"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "vader,self"})
    result = t.verify(spec, proc.stdout + proc.stderr)
    assert not result.ok
    assert result.problem == "asked for tcp but traffic went over shm (ob1 BTLs: vader, self)"


def test_openmpi_shm_forced_onto_tcp_fails_verification(ping):
    spec, proc = _run(ping, "openmpi", "shm", style=t.LAUNCHER_ENV,
                      override={"OMPI_MCA_btl": "tcp,self"})
    result = t.verify(spec, proc.stdout + proc.stderr)
    assert (result.ok, result.used) == (False, "tcp_ob1")

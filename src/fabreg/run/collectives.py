"""Collective algorithm selection: (MPI, collective, algorithm) -> launcher options / environment.

The tail-latency check compares algorithms under the same load, so the name of
an algorithm (``ring``, ``recursive_doubling``, ``rabenseifner``, ...) must map
to each MPI's own switch:

- Open MPI's ``coll_tuned`` component: ``--mca coll_tuned_use_dynamic_rules 1
  --mca coll_tuned_<coll>_algorithm N`` (numbers from ``ompi_info --all``);
- MPICH's control variables ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM=<name>``, with
  ``MPIR_CVAR_DEVICE_COLLECTIVES=none`` so the device layer does not override it.

``default`` leaves the MPI's own choice. A combination an MPI lacks is a
reason to skip, never an error at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT = "default"

#: Open MPI 4.x coll_tuned algorithm numbers.
OPENMPI: dict[str, dict[str, int]] = {
    "allreduce": {"basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3, "ring": 4,
                  "segmented_ring": 5, "rabenseifner": 6},
    "alltoall": {"linear": 1, "pairwise": 2, "bruck": 3, "linear_sync": 4},
}

#: MPICH 4.0 MPIR_CVAR_<COLL>_INTRA_ALGORITHM values (Rabenseifner is reduce-scatter + allgather).
MPICH: dict[str, dict[str, str]] = {
    "allreduce": {"recursive_doubling": "recursive_doubling",
                  "rabenseifner": "reduce_scatter_allgather", "smp": "smp"},
    "alltoall": {"pairwise": "pairwise", "bruck": "brucks", "scattered": "scattered"},
}


@dataclass(frozen=True)
class AlgorithmChoice:
    """Launcher options (Open MPI ``--mca``) and environment (MPICH) selecting an algorithm."""

    options: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def unsupported_reason(mpi: str, collective: str, algorithm: str) -> str | None:
    """Why ``mpi`` cannot be told to use ``algorithm`` for ``collective``, or None."""
    if algorithm == DEFAULT:
        return None
    table = {"openmpi": OPENMPI, "mpich": MPICH}.get(mpi)
    if table is None:
        return f"fabreg does not know how to select collective algorithms in {mpi}"
    known = table.get(collective)
    if known is None:
        return f"unknown collective {collective!r}"
    if algorithm not in known:
        return (f"{mpi} has no {algorithm!r} {collective} algorithm fabreg can select "
                f"(known: {', '.join(sorted(known))})")
    return None


def select(mpi: str, collective: str, algorithm: str) -> AlgorithmChoice:
    """The switches for ``algorithm``; check ``unsupported_reason`` first."""
    if algorithm == DEFAULT:
        return AlgorithmChoice()
    reason = unsupported_reason(mpi, collective, algorithm)
    if reason:
        raise ValueError(reason)
    if mpi == "openmpi":
        number = OPENMPI[collective][algorithm]
        return AlgorithmChoice(options=[
            "--mca", "coll_tuned_use_dynamic_rules", "1",
            "--mca", f"coll_tuned_{collective}_algorithm", str(number),
        ])
    return AlgorithmChoice(env={
        "MPIR_CVAR_DEVICE_COLLECTIVES": "none",
        f"MPIR_CVAR_{collective.upper()}_INTRA_ALGORITHM": MPICH[collective][algorithm],
    })

"""Collective algorithm selection per MPI."""

import pytest

from fabreg.run.collectives import select, unsupported_reason


def test_openmpi_uses_coll_tuned_mca():
    choice = select("openmpi", "allreduce", "ring")
    assert choice.options == ["--mca", "coll_tuned_use_dynamic_rules", "1",
                              "--mca", "coll_tuned_allreduce_algorithm", "4"]
    assert choice.env == {}
    assert select("openmpi", "alltoall", "pairwise").options[-1] == "2"


def test_mpich_uses_cvars():
    choice = select("mpich", "allreduce", "rabenseifner")
    assert choice.options == []
    assert choice.env == {"MPIR_CVAR_DEVICE_COLLECTIVES": "none",
                          "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "reduce_scatter_allgather"}


def test_default_changes_nothing():
    for mpi in ("openmpi", "mpich", "mvapich2"):
        assert unsupported_reason(mpi, "allreduce", "default") is None
        assert select(mpi, "allreduce", "default").options == []


def test_unsupported_combinations_have_reasons():
    assert "mpich has no 'ring' allreduce" in unsupported_reason("mpich", "allreduce", "ring")
    assert "does not know" in unsupported_reason("mvapich2", "allreduce", "ring")
    with pytest.raises(ValueError):
        select("mpich", "allreduce", "ring")

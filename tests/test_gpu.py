"""GPU-buffer availability: parsers on tool output, and the skip reasons on this host."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from fabreg.run import gpu
from fabreg.run.parsers.gpu_support import (
    mpich_cuda_support,
    ompi_cuda_support,
    ucx_cuda_transports,
    ucx_memory_types,
)


def test_host_buffers_always_allowed():
    assert gpu.device_buffer_problem("host", "openmpi") is None


def test_unknown_buffer_kind():
    assert "unknown buffer kind 'rocm'" in gpu.device_buffer_problem("rocm")


@pytest.mark.skipif(bool(gpu.nvidia_gpus()), reason="this host has an NVIDIA GPU")
def test_no_gpu_is_the_reason_here():
    reason = gpu.device_buffer_problem("cuda", "openmpi")
    assert reason and reason.startswith("no GPU")
    if shutil.which("ompi_info"):
        assert "; no CUDA-aware MPI: openmpi was built without CUDA support" in reason


@pytest.mark.skipif(not shutil.which("ompi_info"), reason="ompi_info not installed")
def test_real_ompi_info_says_no_cuda():
    text = subprocess.run(["ompi_info", "--parsable", "--all"], capture_output=True,
                          text=True).stdout
    assert ompi_cuda_support(text) is False
    assert gpu.mpi_cuda_problem("openmpi").startswith("no CUDA-aware MPI: openmpi")


@pytest.mark.skipif(not shutil.which("mpichversion"), reason="mpichversion not installed")
def test_real_mpichversion_says_no_cuda():
    text = subprocess.run(["mpichversion"], capture_output=True, text=True).stdout
    assert mpich_cuda_support(text) is False
    assert gpu.mpi_cuda_problem("mpich").startswith("no CUDA-aware MPI: mpich")


def test_parsers_on_cuda_builds():
    # Lines as the tools print them for CUDA-enabled builds.
    assert ompi_cuda_support("mca:mpi:base:param:mpi_built_with_cuda_support:value:true\n")
    assert mpich_cuda_support("MPICH configure: \t--prefix=/x --with-cuda=/usr/local/cuda\n")
    assert mpich_cuda_support("no configure line") is None
    assert ompi_cuda_support("nothing") is None


@pytest.mark.skipif(not shutil.which("ucx_perftest"), reason="ucx_perftest not installed")
def test_real_ucx_perftest_memory_types():
    text = subprocess.run(["ucx_perftest", "-h"], capture_output=True, text=True)
    types = ucx_memory_types(text.stdout + text.stderr)
    assert "host" in types
    assert "bcopy" not in types  # a data layout (-D), not a memory type


@pytest.mark.skipif(not shutil.which("ucx_info"), reason="ucx_info not installed")
def test_real_ucx_info_decides_ucx_cuda_support():
    text = subprocess.run(["ucx_info", "-d"], capture_output=True, text=True).stdout
    if "cuda_copy" not in ucx_cuda_transports(text):
        assert gpu.ucx_cuda_problem().startswith("UCX was built without CUDA (or cannot load it)")
    else:
        assert gpu.ucx_cuda_problem() is None
    assert gpu.ucx_cuda_problem("no-such-ucx_info").startswith("ucx_info not found")

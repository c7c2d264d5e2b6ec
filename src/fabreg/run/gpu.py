"""GPU (device) buffers: can this host run a benchmark on CUDA memory, and if not, why.

Three things must hold: an NVIDIA GPU is present, the MPI (or UCX) was built
CUDA-aware, and the benchmark binary supports device buffers. Each missing one
becomes a skip reason naming it.
"""

from __future__ import annotations

import glob
import shutil
import subprocess

from fabreg.run.parsers.gpu_support import (
    mpich_cuda_support,
    ompi_cuda_support,
    ucx_cuda_transports,
)

BUFFERS = ("host", "cuda")


def _output(argv: list[str]) -> str | None:
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout + proc.stderr


def nvidia_gpus(dev_glob: str = "/dev/nvidia[0-9]*") -> list[str]:
    """NVIDIA GPU device nodes of this host."""
    return sorted(glob.glob(dev_glob))


def no_gpu_reason(dev_glob: str = "/dev/nvidia[0-9]*") -> str | None:
    if nvidia_gpus(dev_glob):
        return None
    return "no GPU: this host has no NVIDIA GPU (no /dev/nvidia0, ...)"


def mpi_cuda_problem(mpi: str, tools_dir: str | None = None) -> str | None:
    """Why ``mpi`` cannot take CUDA buffers, or None when it reports CUDA support."""
    def tool(name: str) -> str:
        return f"{tools_dir}/{name}" if tools_dir else name

    if mpi == "openmpi":
        text = _output([tool("ompi_info"), "--parsable", "--all"])
        support = None if text is None else ompi_cuda_support(text)
        what = "ompi_info"
    elif mpi == "mpich":
        text = _output([tool("mpichversion")])
        support = None if text is None else mpich_cuda_support(text)
        what = "mpichversion"
    else:
        return f"fabreg cannot tell whether {mpi} is CUDA-aware"
    if support is None:
        return f"cannot tell whether {mpi} is CUDA-aware ({what} did not say)"
    if not support:
        return f"no CUDA-aware MPI: {mpi} was built without CUDA support ({what})"
    return None


def ucx_cuda_problem(ucx_info: str = "ucx_info") -> str | None:
    """Why UCX (ucx_perftest) cannot use CUDA memory, or None.

    Read from ``ucx_info -d`` (a ``cuda_copy`` transport), not from ``ucx_perftest
    -h``: since UCX 1.16 its help lists every memory type, built or not.
    """
    text = _output([ucx_info, "-d"])
    if text is None:
        return "ucx_info not found (install UCX's tools, e.g. ucx-utils)"
    cuda = ucx_cuda_transports(text)
    if "cuda_copy" not in cuda:
        return ("UCX was built without CUDA (or cannot load it): `ucx_info -d` lists no "
                "cuda_copy transport" + (f" (only {', '.join(cuda)})" if cuda else ""))
    return None


def device_buffer_problem(buffer: str, mpi: str | None = None) -> str | None:
    """The skip reason for running on ``buffer`` memory here (None: go ahead).

    Every missing piece is named (no GPU; MPI or UCX without CUDA), so one run
    tells a site all it lacks. ``mpi`` None means UCX directly (ucx_perftest).
    """
    if buffer == "host":
        return None
    if buffer != "cuda":
        return f"unknown buffer kind {buffer!r} (known: {', '.join(BUFFERS)})"
    problems = [no_gpu_reason(), ucx_cuda_problem() if mpi is None else mpi_cuda_problem(mpi)]
    found = [p for p in problems if p]
    return "; ".join(found) if found else None

"""Whether an MPI or UCX build can move GPU (CUDA) buffers, from the tools' own reports."""

from __future__ import annotations

import re

from fabreg.run.parsers.inventory import ucx_transports

_OMPI_CUDA = re.compile(r"^mca:\w+:base:param:(?:mpi|opal)_built_with_cuda_support:value:(\w+)",
                        re.MULTILINE)
_MEM_TYPES = re.compile(r"memory type of message[^\n]*\n(?P<body>(?:[ \t]{20,}\S[^\n]*\n)+)")
_MEM_NAME = re.compile(r"^\s+(?P<name>[\w-]+)\s+-\s")


def ompi_cuda_support(ompi_info_parsable: str) -> bool | None:
    """``ompi_info --parsable --all``: was Open MPI built with CUDA? None if not stated."""
    m = _OMPI_CUDA.search(ompi_info_parsable)
    return None if m is None else m.group(1) == "true"


def mpich_cuda_support(mpichversion: str) -> bool | None:
    """``mpichversion``: configured with CUDA (``--with-cuda``, not ``--without-cuda``)?"""
    if "MPICH configure:" not in mpichversion:
        return None
    return bool(re.search(r"--with-cuda(?:=|\s|$)", mpichversion))


def ucx_cuda_transports(ucx_info_devices: str) -> list[str]:
    """The CUDA transports ``ucx_info -d`` lists (``cuda_copy``, ``cuda_ipc``, ``gdr_copy``).

    UCX's own FAQ checks GPU support this way (``ucx_info -d | grep cuda``): the
    transports appear only when UCX was built with CUDA and could load it.
    """
    return [name for name in ucx_transports(ucx_info_devices)
            if name.startswith(("cuda", "gdr"))]


def ucx_memory_types(ucx_perftest_help: str) -> list[str]:
    """Memory types ``ucx_perftest -h`` offers for ``-m`` (``host``, ``cuda``, ...).

    Up to UCX 1.15 the list names only the types this build can allocate; from
    UCX 1.16 (openucx/ucx#9338) it names every type UCX knows, so it is no
    evidence of CUDA support: use ``ucx_cuda_transports``.
    """
    m = _MEM_TYPES.search(ucx_perftest_help)
    if not m:
        return []
    return [mm["name"] for line in m["body"].splitlines() if (mm := _MEM_NAME.match(line))]

"""Parse what a host's MPI and UCX installations offer (``ucx_info -d``, ``ompi_info``, hydra).

Used by ``fabreg.run.transport`` to decide, per partition, which transports can run
and to name what is missing when one cannot.
"""

from __future__ import annotations

import re

_UCX_TRANSPORT = re.compile(r"^#\s+Transport:\s*(?P<name>\S+)\s*$")
_UCX_DEVICE = re.compile(r"^#\s+Device:\s*(?P<name>\S+)\s*$")
_UCX_DOMAIN = re.compile(r"^#\s+(?:Memory domain|Connection manager|Component):")
_OMPI_COMPONENT = re.compile(r"^mca:(?P<framework>\w+):(?P<component>\w+):version:")
_OMPI_VERSION = re.compile(r"^ompi:version:full:(?P<version>\S+)\s*$", re.MULTILINE)
_HYDRA_DEVICE = re.compile(r"--with-device=(?P<device>[\w:]+)")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def ucx_transports(text: str) -> dict[str, list[str]]:
    """``ucx_info -d`` -> ``{transport: [device, ...]}``, e.g. ``{"tcp": ["lo", "eth0"]}``.

    UCX 1.10 and later print a ``Transport:`` line before every ``Device:``;
    older releases print one ``Transport:`` line and then each of its devices,
    and name some transports differently (``rc``, ``ud``, ``mm``): every device
    counts until the next transport or memory domain, and names stay as printed.
    """
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _UCX_TRANSPORT.match(line):
            current = m["name"]
            continue
        if _UCX_DOMAIN.match(line):
            current = None
            continue
        m = _UCX_DEVICE.match(line)
        if m and current is not None:
            devices = out.setdefault(current, [])
            if m["name"] not in devices:
                devices.append(m["name"])
    return out


def ompi_components(text: str) -> set[tuple[str, str]]:
    """``ompi_info --parsable`` -> ``{(framework, component)}``, e.g. ``("btl", "vader")``."""
    found = set()
    for line in text.splitlines():
        m = _OMPI_COMPONENT.match(line)
        if m:
            found.add((m["framework"], m["component"]))
    return found


def ompi_version(text: str) -> tuple[int, ...] | None:
    """The Open MPI version from ``ompi_info --parsable`` (``ompi:version:full:4.1.4``)."""
    m = _OMPI_VERSION.search(text)
    return parse_version(m["version"]) if m else None


def hydra_device(text: str) -> str | None:
    """The device an MPICH-family build was configured with (``--with-device=``), e.g. ``ch4:ucx``.

    Read from hydra's ``mpiexec -info`` or MVAPICH2's ``mpiname -a`` (its configure line).
    """
    m = _HYDRA_DEVICE.search(text)
    return m["device"] if m else None


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"4.1.4"`` -> ``(4, 1, 4)``; the first dotted number in ``text``."""
    m = _VERSION.search(text)
    if not m:
        return None
    return tuple(int(part) for part in m.groups() if part is not None)

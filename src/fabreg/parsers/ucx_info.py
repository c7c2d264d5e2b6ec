"""Parse ``ucx_info -d``: which UCX transports and devices this host offers.

Checks use it to skip transports (``rc``, ``ud``, ...) that need hardware the
host lacks, before starting any server.
"""

from __future__ import annotations

import re

_TRANSPORT = re.compile(r"^#\s*Transport:\s*(?P<tl>\S+)\s*$")
_DEVICE = re.compile(r"^#\s*Device:\s*(?P<dev>\S+)\s*$")


def transports(text: str) -> dict[str, list[str]]:
    """Transport name -> its devices, in the order ``ucx_info -d`` lists them."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _TRANSPORT.match(line):
            current = m["tl"]
            out.setdefault(current, [])
        elif current and (m := _DEVICE.match(line)):
            if m["dev"] not in out[current]:
                out[current].append(m["dev"])
    return out


def offers(available: dict[str, list[str]], transport: str) -> bool:
    """Whether a ``UCX_TLS`` name is backed by a listed transport.

    ``UCX_TLS`` accepts aliases: ``rc`` means any of ``rc_verbs``/``rc_mlx5``,
    ``ud`` any ``ud_*``, ``sm``/``shm`` any shared-memory transport.
    """
    if transport in available:
        return True
    if transport in ("sm", "shm"):
        return any(tl in available for tl in ("posix", "sysv", "cma", "knem", "xpmem"))
    return any(tl.startswith(transport + "_") for tl in available)

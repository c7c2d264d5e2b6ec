"""Checks made before `up` touches anything, each failing with one clear line."""

from __future__ import annotations

import errno
import os
import shutil
import socket

from fabreg.cluster import network, slurmclient
from fabreg.cluster.layout import Layout
from fabreg.errors import FabregError

SYSTEM_TOOLS = ("ip", "tc", "nsenter", "unshare", "mount")
MUNGE_TOOLS = ("munged",)


def require_root(command: str) -> None:
    if os.geteuid() != 0:
        raise FabregError(
            f"`fabreg cluster {command}` must run as root: it creates network namespaces "
            "and starts Slurm daemons (try: sudo .venv/bin/fabreg cluster ...)"
        )


def require_tools() -> None:
    missing = [t for t in slurmclient.TOOLS if not shutil.which(t)]
    if missing:
        raise FabregError(
            f"Slurm is not installed ({', '.join(missing)} not found on PATH); "
            "on Debian/Ubuntu: apt-get install slurm-wlm munge"
        )
    missing = [t for t in MUNGE_TOOLS if not shutil.which(t)]
    if missing:
        raise FabregError("munge is not installed (munged not found); apt-get install munge")
    missing = [t for t in SYSTEM_TOOLS if not shutil.which(t)]
    if missing:
        raise FabregError(
            f"{', '.join(missing)} not found on PATH; apt-get install iproute2 util-linux"
        )


def port_free(port: int) -> bool:
    """Whether nothing in this namespace listens on TCP ``port``.

    SO_REUSEADDR as the daemons use it: connections of a previous cluster in
    TIME_WAIT do not count as taken, a listening socket does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def require_port(layout: Layout) -> None:
    """slurmctld's port must be free (slurmd ports live in the node namespaces)."""
    if not port_free(layout.ctld_port):
        raise FabregError(
            f"TCP port {layout.ctld_port} (slurmctld) is already in use on this machine; "
            "stop whatever listens there or choose another with --ctld-port"
        )


def require_subnet(layout: Layout) -> None:
    route = network.overlapping_route(layout)
    if route:
        raise FabregError(
            f"subnet {layout.subnet} overlaps a network of this machine ({route}); "
            "choose another private range with --subnet"
        )

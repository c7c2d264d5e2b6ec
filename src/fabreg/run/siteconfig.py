"""Slurm partitions for ReFrame configurations: access options, and pinning a run to nodes.

A site describes its partitions once (account, reservation, ``--exclusive``,
constraint); an acceptance run after a fabric change is pinned to the nodes the
change touched through the environment, without editing any file:

- ``FABREG_RESERVATION=name``: submit into that Slurm reservation (replaces the
  configured one); the usual way to pin a run to a set of nodes;
- ``FABREG_NODELIST=node[12-13]``: ``--nodelist``: every job then runs on exactly
  these nodes (Slurm requires a job to include all of them), so pair it with the
  tests whose node count matches the list;
- ``FABREG_EXCLUDE=node7``: keep jobs off these nodes.

ReFrame's own ``-J OPTION`` (added to every job) works as well. See docs/site.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

NODELIST_ENV = "FABREG_NODELIST"
RESERVATION_ENV = "FABREG_RESERVATION"
EXCLUDE_ENV = "FABREG_EXCLUDE"


def access_options(
    *,
    partition: str | None = None,
    account: str | None = None,
    reservation: str | None = None,
    exclusive: bool = False,
    constraint: str | None = None,
    qos: str | None = None,
    extra: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """sbatch options for a partition, with the run's pinning from ``environ`` applied."""
    env = os.environ if environ is None else environ
    reservation = env.get(RESERVATION_ENV) or reservation
    options = []
    if partition:
        options.append(f"--partition={partition}")
    if account:
        options.append(f"--account={account}")
    if qos:
        options.append(f"--qos={qos}")
    if reservation:
        options.append(f"--reservation={reservation}")
    if exclusive:
        options.append("--exclusive")
    if constraint:
        options.append(f"--constraint={constraint}")
    if env.get(NODELIST_ENV):
        options.append(f"--nodelist={env[NODELIST_ENV]}")
    if env.get(EXCLUDE_ENV):
        options.append(f"--exclude={env[EXCLUDE_ENV]}")
    options.extend(extra)
    return options


def slurm_partition(
    name: str,
    *,
    environs: Sequence[str],
    max_nodes: int,
    slurm_partition: str | None = None,
    account: str | None = None,
    reservation: str | None = None,
    exclusive: bool = True,
    constraint: str | None = None,
    qos: str | None = None,
    launcher: str = "srun",
    scheduler: str = "slurm",
    max_jobs: int = 4,
    descr: str = "",
    extras: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ReFrame partition entry for a Slurm partition.

    ``max_nodes`` bounds the checks' node-count parameter (``extras['max_nodes']``).
    ``exclusive`` defaults to True: benchmarks must not share nodes with other jobs.
    """
    if max_nodes < 1:
        raise ValueError(f"partition {name!r}: max_nodes must be >= 1, got {max_nodes}")
    access = access_options(
        partition=slurm_partition or name, account=account, reservation=reservation,
        exclusive=exclusive, constraint=constraint, qos=qos, environ=environ,
    )
    pinned = [opt for opt in access if opt.startswith(("--reservation", "--nodelist",
                                                       "--exclude"))]
    text = descr or f"Slurm partition {slurm_partition or name}"
    if pinned:
        text += f" (pinned: {' '.join(pinned)})"
    return {
        "name": name,
        "descr": text,
        "scheduler": scheduler,
        "launcher": launcher,
        "access": access,
        "environs": list(environs),
        "max_jobs": max_jobs,
        "extras": {"max_nodes": max_nodes, **(extras or {})},
    }

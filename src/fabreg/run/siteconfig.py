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
import re
import subprocess
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


def hostlist_count(expression: str) -> int:
    """How many hosts a Slurm host list names: ``node[1-3,7],gpu2`` -> 5.

    Raises ValueError for a malformed list (unbalanced brackets, a bad range).
    """
    count, depth, start = 0, 0, 0
    parts = []
    for i, ch in enumerate(expression + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(expression[start:i].strip())
            start = i + 1
        if depth not in (0, 1):
            raise ValueError(f"bad host list {expression!r}")
    if depth:
        raise ValueError(f"bad host list {expression!r}")
    for part in filter(None, parts):
        hosts = 1
        for body in re.findall(r"\[([^\]]*)\]", part):
            n = 0
            for item in body.split(","):
                lo, _, hi = item.partition("-")
                if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()):
                    raise ValueError(f"bad range {item!r} in host list {expression!r}")
                span = int(hi) - int(lo) + 1 if hi else 1
                if span < 1:
                    raise ValueError(f"bad range {item!r} in host list {expression!r}")
                n += span
            hosts *= n
        count += hosts
    return count


def reservation_node_count(name: str) -> int | None:
    """Nodes of a Slurm reservation (``scontrol show reservation``), None if unknown."""
    try:
        out = subprocess.run(["scontrol", "show", "reservation", name], capture_output=True,
                             text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\bNodeCnt=(\d+)", out)
    return int(m.group(1)) if m else None


def pinned_node_count(environ: Mapping[str, str] | None = None) -> int | None:
    """Nodes a run is pinned to by ``FABREG_NODELIST`` or ``FABREG_RESERVATION``, else None.

    A sweep runs on all of them (``checks/sweep.py``); the node list wins when both are set.
    """
    env = os.environ if environ is None else environ
    if env.get(NODELIST_ENV):
        return hostlist_count(env[NODELIST_ENV])
    if env.get(RESERVATION_ENV):
        return reservation_node_count(env[RESERVATION_ENV])
    return None

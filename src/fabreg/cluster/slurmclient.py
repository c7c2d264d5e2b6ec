"""Slurm client commands pointed at the emulated cluster (``SLURM_CONF`` set)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from fabreg.cluster.layout import SLURM_PARTITION, Paths

TOOLS = ("slurmctld", "slurmd", "sinfo", "scontrol", "squeue", "sbatch", "salloc", "srun")


def env(paths: Paths) -> dict[str, str]:
    """The calling environment with ``SLURM_CONF`` naming the cluster's slurm.conf."""
    return {**os.environ, "SLURM_CONF": str(paths.slurm_conf)}


def run(paths: Paths, argv: Sequence[str], timeout: float = 15.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, check=False,
                              env=env(paths), timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]} timed out")


def controller_up(paths: Paths) -> bool:
    done = run(paths, ["scontrol", "ping"], timeout=10)
    return done.returncode == 0 and "UP" in done.stdout


def node_states(paths: Paths) -> dict[str, str]:
    """Slurm's state of each node (``idle``, ``down*``, ``unknown``...); empty if unreachable."""
    done = run(paths, ["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10)
    if done.returncode != 0:
        return {}
    states: dict[str, str] = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1].lower()
    return states


def node_reasons(paths: Paths) -> dict[str, str]:
    """Why Slurm considers nodes unavailable (``sinfo -R``), by node."""
    done = run(paths, ["sinfo", "-h", "-R", "-N", "-o", "%N|%E"], timeout=10)
    reasons: dict[str, str] = {}
    for line in done.stdout.splitlines():
        node, _, reason = line.partition("|")
        if node:
            reasons[node.strip()] = reason.strip()
    return reasons


def cancel_all(paths: Paths, partitions: Sequence[str] = (SLURM_PARTITION,)) -> None:
    """Cancel every job of the emulated cluster (all of them were submitted to it)."""
    for partition in partitions:
        run(paths, ["scancel", "--full", "--partition", partition], timeout=10)


def set_state(paths: Paths, node: str, state: str, reason: str = "") -> str:
    """``scontrol update nodename=NODE state=STATE [reason=...]``; Slurm's error, or ''."""
    argv = ["scontrol", "update", f"nodename={node}", f"state={state}"]
    if reason:
        argv.append(f"reason={reason}")
    done = run(paths, argv, timeout=10)
    return "" if done.returncode == 0 else (done.stderr or done.stdout).strip()


def resume(paths: Paths, node: str) -> None:
    """Return a node that Slurm marked DOWN to service once its slurmd is back."""
    run(paths, ["scontrol", "update", f"nodename={node}", "state=resume"], timeout=10)

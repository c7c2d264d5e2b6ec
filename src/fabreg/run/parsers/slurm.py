"""Slurm's own description of a cluster: ``scontrol show partition|node --oneliner``.

Pure and typed: text in, records out. One record per line; ``Key=Value`` pairs separated by
spaces (a value never holds one in these two commands, except ``Reason=``, which runs to the
end of the line and is kept whole).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PAIR = re.compile(r"(?:^|\s)(?P<key>[A-Za-z][\w/:.]*)=(?P<value>\S*)")


def _pairs(line: str) -> dict[str, str]:
    reason = ""
    if " Reason=" in line:
        line, _, reason = line.partition(" Reason=")
    out = {m.group("key"): m.group("value") for m in _PAIR.finditer(line)}
    if reason:
        out["Reason"] = reason.strip()
    return out


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: str  # Slurm's hostlist expression, e.g. node[1-2]
    total_nodes: int
    max_nodes: int | None  # None: UNLIMITED
    state: str
    default: bool


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    state: str  # e.g. IDLE, MIXED, IDLE+DRAIN, DOWN*
    features: tuple[str, ...]
    gres: tuple[str, ...]
    partitions: tuple[str, ...]
    reason: str = ""
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def usable(self) -> bool:
        """Up and taking jobs: not drained, draining, down, failing or in maintenance."""
        flags = set(re.split(r"[+*~#!%$@^-]", self.state.upper())) - {""}
        return not flags & {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING",
                            "MAINT", "RESERVED", "POWERED_DOWN", "POWERING_DOWN",
                            "NOT_RESPONDING", "FUTURE", "UNKNOWN"} and "*" not in self.state

    @property
    def idle(self) -> bool:
        return self.usable and self.state.upper().split("+")[0] == "IDLE"


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _list(text: str) -> tuple[str, ...]:
    if text in ("", "(null)", "none", "None"):
        return ()
    return tuple(part for part in text.split(",") if part)


def _records(text: str, key: str, command: str) -> list[dict[str, str]]:
    """One ``Key=Value`` mapping per non-empty line; ValueError naming a line without ``key``."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        pairs = _pairs(line)
        if key not in pairs:
            raise ValueError(f"{command}, line {lineno}: no {key}=")
        out.append(pairs)
    return out


def parse_partitions(text: str) -> list[Partition]:
    """``scontrol show partition --oneliner`` -> partitions; ValueError naming a bad line."""
    out = []
    for pairs in _records(text, "PartitionName", "scontrol show partition"):
        max_nodes = pairs.get("MaxNodes", "UNLIMITED")
        out.append(Partition(pairs["PartitionName"], pairs.get("Nodes", ""),
                             _int(pairs.get("TotalNodes", "0")),
                             None if max_nodes.upper() == "UNLIMITED" else _int(max_nodes),
                             pairs.get("State", ""), pairs.get("Default", "NO") == "YES"))
    return out


def parse_nodes(text: str) -> list[Node]:
    """``scontrol show node --oneliner`` -> nodes; ValueError naming a bad line."""
    return [Node(pairs["NodeName"], _int(pairs.get("CPUTot", "0")), pairs.get("State", ""),
                 _list(pairs.get("AvailableFeatures", pairs.get("Features", ""))),
                 _list(pairs.get("Gres", "")), _list(pairs.get("Partitions", "")),
                 pairs.get("Reason", ""), pairs)
            for pairs in _records(text, "NodeName", "scontrol show node")]

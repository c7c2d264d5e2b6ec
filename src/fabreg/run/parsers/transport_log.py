"""Parse what MPI and UCX say about the transport they chose (the evidence for verification).

Three sources, each switched on by ``fabreg.run.transport`` when it builds a launch:

- UCX at ``UCX_LOG_LEVEL=info`` prints one line per endpoint configuration with
  the lanes of each operation, e.g. (UCX 1.13)
  ``ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: tag(tcp/lo tcp/eth0) am(...)``
  and (UCX >= 1.14) ``ucp_context_0 inter-node cfg#2 tag(rc_mlx5/mlx5_0:1)``.
  MPI point-to-point and collectives use the ``tag`` lanes; ``am`` is the
  fallback when a line has no ``tag`` group. Every process also prints the
  configuration of its endpoint to itself (``self`` scope, or a ``self/...``
  lane, e.g. ``tag(self/memory0 knem/memory cuda_copy/cuda rc_mlx5/mlx5_0:1)``):
  those lanes carry nothing between ranks and are not evidence.
- OpenMPI's ob1 PML at ``btl_base_verbose 100`` prints, per peer,
  ``mca: bml: Using tcp btl for send to [[16619,1],0] on node vm``.
- MVAPICH2 at ``MV2_SHOW_ENV_INFO=2`` prints a ``MVAPICH2-<version> Parameters``
  block (``NAME : value`` lines) followed by ``MVAPICH2 All Parameters``.

These lines interleave with the benchmark's own output (UCX writes to stdout,
OpenMPI's verbose output to stderr); the parsers pick out only their lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "ep_cfg[1]: tag(...)" (UCX <= 1.13) or "<name> self|intra-node|inter-node cfg#2 tag(...)"
_UCX_EP_CONFIG = re.compile(
    r"UCX\s+INFO\s+.*?(?:ep_cfg\[\d+\]:|\b(?P<scope>self|intra-node|inter-node)\s+cfg#\d+)"
    r"\s*(?P<groups>.*)$"
)
_UCX_GROUP = re.compile(r"(?P<op>[a-z_]+)\((?P<lanes>[^)]*)\)")
_OB1_BTL = re.compile(r"mca: bml: Using (?P<btl>\w+) btl for send to \S+")
# "[1795239094.617139] [vm:11271:0]  ucp_worker.c..." (UCX) and "[vm:11289] mca: bml: ..." (ob1)
# (UCX pads the pid: "[node1:3025 :0]")
# (the last field is UCX's thread index, a letter past 9: "[host1:42:a]")
_UCX_HOST = re.compile(r"^\[[\d.]+\]\s+\[(?P<host>[^:\]\s]+):\s*\d+\s*:\s*\w+\s*\]")
_OB1_HOST = re.compile(r"^\[(?P<host>[^:\]\s]+):\d+\] mca: bml: Using (?!self btl)")
_MV2_HEADER = re.compile(r"^\s*MVAPICH2-(?P<version>\S+) Parameters\s*$")
_MV2_FIELD = re.compile(r"^\s+(?P<name>[A-Za-z0-9_ :]+?)\s*:\s*(?P<value>.*?)\s*$")


@dataclass(frozen=True)
class UcxLane:
    """One UCX lane: a transport (``tcp``, ``rc_mlx5``, ``sysv``) on a device (``eth0``)."""

    transport: str
    device: str

    def __str__(self) -> str:
        return f"{self.transport}/{self.device}"


def _peer_groups(line: str) -> dict[str, str] | None:
    """``{op: lanes}`` of a UCX endpoint line to another process; None for any other line.

    The endpoint a process opens to itself (``self`` scope, or a ``self``
    lane) is left out: its lanes (``self``, ``knem``, ``cuda_copy``, even a
    NIC) carry nothing between ranks.
    """
    m = _UCX_EP_CONFIG.search(line)
    if not m:
        return None
    groups = {g["op"]: g["lanes"] for g in _UCX_GROUP.finditer(m["groups"])}
    loopback = m["scope"] == "self" or any(
        token.partition("/")[0] == "self" for lanes in groups.values() for token in lanes.split())
    return None if loopback else groups


def ucx_lanes(text: str, ops: tuple[str, ...] = ("tag", "am")) -> list[UcxLane]:
    """The distinct lanes UCX selected for messages to other ranks, first appearance first.

    Per endpoint line, the lanes of the first of ``ops`` it lists: MPI traffic uses
    ``tag`` (``am`` as fallback); UCX tools doing RMA pass ``("rma", "rma_am")``.
    """
    seen: dict[UcxLane, None] = {}
    for line in text.splitlines():
        groups = _peer_groups(line)
        if groups is None:
            continue
        lanes = next((groups[op] for op in ops if op in groups), "")
        for token in lanes.split():
            transport, _, device = token.partition("/")
            seen.setdefault(UcxLane(transport, device), None)
    return list(seen)


def evidence_hosts(text: str) -> list[str]:
    """Hosts that printed UCX endpoint lines to a peer, or ob1 BTL lines (per rank, its host)."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        m = _OB1_HOST.match(line)
        if not m and _peer_groups(line) is not None:
            m = _UCX_HOST.match(line)
        if m:
            seen.setdefault(m["host"], None)
    return list(seen)


def ob1_btls(text: str) -> list[str]:
    """The BTLs OpenMPI's ob1 used to send to peers (``self`` included), first use first."""
    seen: dict[str, None] = {}
    for m in _OB1_BTL.finditer(text):
        seen.setdefault(m["btl"], None)
    return list(seen)


@dataclass(frozen=True)
class Mvapich2Report:
    """MVAPICH2's environment report (``MV2_SHOW_ENV_INFO``): its version and fields."""

    version: str
    fields: dict[str, str]

    @property
    def smp_only(self) -> bool:
        """MVAPICH2 prints the InfiniBand channel's settings only when it opened the HCA."""
        return "MV2_IBA_EAGER_THRESHOLD" not in self.fields

    def flag(self, name: str) -> bool | None:
        """A 0/1 parameter as bool; None when the report does not list it."""
        value = self.fields.get(name)
        return None if value is None else value.strip() not in ("", "0")


def mvapich2_report(text: str) -> Mvapich2Report | None:
    """The first MVAPICH2 environment report in ``text`` (rank 0 prints it), if any."""
    version = None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if version is None:
            m = _MV2_HEADER.match(line)
            if m:
                version = m["version"]
            continue
        if _MV2_HEADER.match(line):
            break
        m = _MV2_FIELD.match(line)
        if m:
            fields.setdefault(m["name"].strip(), m["value"])
    return Mvapich2Report(version, fields) if version else None

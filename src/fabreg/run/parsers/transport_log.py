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
- MVAPICH2 at ``MV2_SHOW_ENV_INFO=2`` prints (rank 0, stderr) a ``MVAPICH2-<version>
  Parameters`` block of ``NAME : value`` lines (``mv2_print_env_info``), then a
  ``MVAPICH2 All Parameters`` block (``mv2_show_all_params``), and with CUDA a
  ``MVAPICH2 GDR Parameters`` block; each ends with a rule. Only the first
  block tells the channel: the InfiniBand (mrail) channel adds its eager and
  fast-path settings there when it opened an HCA, the PSM channel (Omni-Path,
  TrueScale) prints ``HFI Eagersize``. The second block lists every tunable,
  ``MV2_IBA_EAGER_THRESHOLD`` included, whether or not an HCA was opened.

These lines interleave with the benchmark's own output (UCX writes to stdout,
OpenMPI's verbose output to stderr); the parsers pick out only their lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from fabreg.run.failure_line import first_line

# "ep_cfg[1]: tag(...)" (UCX <= 1.13) or "<name> self|intra-node|inter-node cfg#2 tag(...)"
_UCX_EP_CONFIG = re.compile(
    r"UCX\s+INFO\s+.*?(?:ep_cfg\[\d+\]:|\b(?P<scope>self|intra-node|inter-node)\s+cfg#\d+)"
    r"\s*(?P<groups>.*)$"
)
_UCX_GROUP = re.compile(r"(?P<op>[a-z_]+)\((?P<lanes>[^)]*)\)")
_OB1_BTL = re.compile(r"mca: bml: Using (?P<btl>\w+) btl for send to \S+")
# "[1795239094.617139] [vm:11271:0]  ucp_worker.c..." (UCX) and "[vm:11289] mca: bml: ..." (ob1)
#: The start of a UCX log line: ``[<time>] [<host>:<pid>:<thread>]``, the pid padded with
#: spaces by UCX (``[node1:3025 :0]``), the thread a number or a letter past 9 (``[host1:42:a]``).
UCX_LOG_START = re.compile(r"\[[\d.]+\]\s+\[(?P<host>[^:\]\s]+):\s*\d+\s*:\s*\w+\s*\]")
_OB1_HOST = re.compile(r"^\[(?P<host>[^:\]\s]+):\d+\] mca: bml: Using (?!self btl)")
_MV2_HEADER = re.compile(r"^\s*MVAPICH2-(?P<version>\S+) Parameters\s*$")
_MV2_BLOCK = re.compile(r"^\s*MVAPICH2 (?:All|GDR) Parameters\s*$")
_MV2_RULE = re.compile(r"^-{20,}\s*$")
# "\tHCA NAME      : MV2_HCA_MLX_CX_EDR", "\tTuning Table:    : MV2_ARCH_... MV2_HCA_..."
# (the label keeps its colon), MVAPICH2-X's " - MV2_USE_CMA_COLL_BCAST : 0" sub-items.
_MV2_FIELD = re.compile(
    r"^\s+(?:-\s+)?(?P<name>[A-Za-z0-9_][A-Za-z0-9_ ]*?):?\s+:\s*(?P<value>.*?)\s*$")


def benchmark_lines(text: str) -> Iterator[str]:
    """The lines of ``text`` as the benchmark wrote them.

    An MPI launcher forwards each rank's stdout in chunks of its own, so another rank's UCX
    log line (``UCX_LOG_LEVEL=info``) can land in the
    middle of one of the benchmark's lines; the rest of that line follows the log lines.
    Seen on MPICH ranks over UCX: after OSU's header (the rest empty), inside it before
    ``Validation`` (every row then had a column too many: the table was lost), after
    ``# Datatype: MPI_CHAR.`` (the datatype lost). Each such line is joined to its rest;
    whole log lines stay as they are (transport verification reads them).
    """
    held = ""  # the start of a line a log line interrupted
    for raw in text.splitlines():
        if UCX_LOG_START.match(raw):
            yield raw.rstrip()
            continue
        line = held + raw
        held = ""
        if m := UCX_LOG_START.search(line):
            held = line[:m.start()]
            continue
        yield line.rstrip()
    if held:
        yield held.rstrip()


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
            m = UCX_LOG_START.search(line)  # also where it was forwarded into another line
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
    """MVAPICH2's environment report (``MV2_SHOW_ENV_INFO``).

    ``fields`` is the ``Parameters`` block, ``all_params`` the ``All Parameters``
    and ``GDR Parameters`` blocks; ``version`` is None for an excerpt that starts
    below the header line.
    """

    version: str | None
    fields: dict[str, str]
    all_params: dict[str, str] = field(default_factory=dict)

    @property
    def channel(self) -> str | None:
        """``mrail`` (HCA opened), ``smp`` (no HCA), ``psm``; None without the Parameters block."""
        if "HFI Eagersize" in self.fields or "PSM2_MQ_RNDV_HFI_THRESH" in self.fields:
            return "psm"
        if "MV2_IBA_EAGER_THRESHOLD" in self.fields:
            return "mrail"
        return "smp" if "PROCESSOR ARCH NAME" in self.fields else None

    @property
    def smp_only(self) -> bool | None:
        """No network channel: the InfiniBand settings are absent from the Parameters block.

        None when the report has no Parameters block (an excerpt of ``All
        Parameters`` lists the InfiniBand tunables even on an SMP-only run).
        """
        channel = self.channel
        return None if channel is None else channel == "smp"

    def flag(self, name: str) -> bool | None:
        """A 0/1 parameter as bool; None when the report does not list it."""
        value = self.all_params.get(name, self.fields.get(name))
        return None if value is None else value.strip() not in ("", "0")


def mvapich2_report(text: str) -> Mvapich2Report | None:
    """The first MVAPICH2 environment report in ``text`` (rank 0 prints it), if any.

    Without a ``MVAPICH2-<version> Parameters`` header (a posted excerpt), the
    report starts at its first field, ``PROCESSOR ARCH NAME``, or at an ``All``/
    ``GDR Parameters`` line. A block ends at the rule under its fields; lines
    between blocks (the benchmark's own) are not the report's.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _MV2_HEADER.match(line)), None)
    version = None
    if start is not None:
        version = _MV2_HEADER.match(lines[start])["version"]
        start += 1
    else:
        start = next((i for i, line in enumerate(lines) if _MV2_BLOCK.match(line) or (
            (m := _MV2_FIELD.match(line)) and m["name"] == "PROCESSOR ARCH NAME")), None)
        if start is None:
            return None
    fields: dict[str, str] = {}
    all_params: dict[str, str] = {}
    block: dict[str, str] | None = fields
    listed = 0
    for line in lines[start:]:
        if _MV2_HEADER.match(line):
            break
        if _MV2_BLOCK.match(line):
            block, listed = all_params, 0
        elif _MV2_RULE.match(line):
            block = None if listed else block
        elif block is not None and (m := _MV2_FIELD.match(line)):
            block.setdefault(m["name"], m["value"])
            listed += 1
    return Mvapich2Report(version, fields, all_params)


#: What MVAPICH2's InfiniBand device (``ch3:mrail``) says when ``MPI_Init`` finds no usable HCA
#: (``rdma_iba_priv.c``): the host lacks what the build was made for.
_MV2_NO_HCA = re.compile(r"No HCAs found on the system|HCA not found on the system|"
                         r"No IB device found|No active HCAs found|No HCA on the node has an IP")


def mvapich2_no_hca(text: str) -> str | None:
    """MVAPICH2's own line saying it found no HCA, if ``text`` has one (else None)."""
    return first_line(text, _MV2_NO_HCA)

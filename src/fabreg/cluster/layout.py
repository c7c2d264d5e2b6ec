"""Names, addresses and ports of an emulated cluster, derived from a few choices.

Everything the cluster creates on the machine is named here, so that `up`,
`down`, the fault commands and the ReFrame configuration agree on it.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from fabreg.errors import FabregError

STATE_DIR_ENV = "FABREG_CLUSTER_DIR"
DEFAULT_STATE_DIR = "/var/tmp/fabreg-cluster"

MAX_NODES = 16
BRIDGE = "fabregbr0"
NAMESPACE_PREFIX = "fabreg-node"
HOST_VETH_PREFIX = "fabreg-h"
# The node end of every veth has this name inside its namespace, so that
# interface-based MPI/UCX settings are the same on every node.
NODE_IFACE = "fab0"
SLURM_PARTITION = "compute"
CLUSTER_NAME = "fabreg"


def state_dir() -> Path:
    """The cluster's state directory: ``$FABREG_CLUSTER_DIR`` or /var/tmp/fabreg-cluster."""
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR).resolve()


def short_hostname() -> str:
    """This machine's name as slurmctld compares it with ``SlurmctldHost``."""
    return socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class PartitionSpec:
    """One Slurm partition of a cluster that plays a site: ``cpu:node[1-2]:cpus=1:features=a,b``.

    Its nodes declare ``cpus`` CPUs (at most the machine's: the nodes share its cores) and
    the features, so that a site configuration drawn from Slurm sees partitions that differ.
    """

    name: str
    nodes: tuple[int, ...]
    cpus: int = 0  # 0: the machine's
    features: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, node_count: int) -> PartitionSpec:
        name, _, rest = text.partition(":")
        nodes_expr, *options = rest.split(":") if rest else [""]
        if not name or not nodes_expr:
            raise FabregError(f"--partition {text!r}: expected NAME:NODES[:cpus=N]"
                              "[:features=A,B], e.g. big:node[3-4]:cpus=2:features=big")
        cpus, features = 0, ()
        for option in options:
            key, _, value = option.partition("=")
            if key == "cpus" and value.isdigit() and int(value) > 0:
                cpus = int(value)
            elif key == "features" and value:
                features = tuple(f for f in value.split(",") if f)
            else:
                raise FabregError(f"--partition {text!r}: unknown option {option!r} (cpus=N, "
                                  "features=A,B)")
        machine = os.cpu_count() or 1
        if cpus > machine:
            raise FabregError(f"--partition {text!r}: cpus={cpus}, but the nodes share this "
                              f"machine's {machine} CPU(s)")
        indices = []
        for host in expand_hostlist(nodes_expr):
            number = host[4:] if host.startswith("node") else ""
            if not number.isdigit() or not 1 <= int(number) <= node_count:
                raise FabregError(f"--partition {text!r}: no node {host!r} among "
                                  f"node1..node{node_count}")
            indices.append(int(number))
        return cls(name, tuple(sorted(set(indices))), cpus, features)

    def hostlist(self) -> str:
        return ",".join(f"node{i}" for i in self.nodes)


def expand_hostlist(expression: str) -> list[str]:
    """``node[1-2],node4`` -> ``['node1', 'node2', 'node4']`` (Slurm's simple forms)."""
    hosts = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", expression):
        match = re.fullmatch(r"(.*)\[([^\]]*)\]", part)
        if not match:
            hosts.append(part)
            continue
        prefix, ranges = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise FabregError(f"bad host list {expression!r}")
            for n in range(int(low), int(high or low) + 1):
                hosts.append(f"{prefix}{n:0{len(low)}d}")
    return hosts


@dataclass(frozen=True)
class Layout:
    """The choices that define a cluster; everything else is derived from them."""

    nodes: int = 2
    subnet: str = "10.88.0.0/24"
    ctld_port: int = 16817
    slurmd_port: int = 16818
    controller: str = ""
    cpus_per_node: int = 0
    #: Slurm's ClusterName when the cluster plays a site the suite has never seen (``--name``);
    #: empty: the suite's own ``minicluster``.
    name: str = ""
    #: Its partitions (``--partition``); empty: one partition ``compute`` of every node.
    partitions: tuple[PartitionSpec, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= MAX_NODES:
            raise FabregError(f"--nodes must be between 1 and {MAX_NODES}, got {self.nodes}")
        try:
            net = ipaddress.IPv4Network(self.subnet)
        except ValueError as err:
            raise FabregError(f"--subnet {self.subnet!r} is not an IPv4 network: {err}") from None
        if not net.is_private:
            raise FabregError(f"--subnet {self.subnet} is not a private network range")
        if net.num_addresses < 16 + self.nodes:
            raise FabregError(f"--subnet {self.subnet} is too small for {self.nodes} nodes")
        for name, port in (("--ctld-port", self.ctld_port), ("--slurmd-port", self.slurmd_port)):
            if not 1024 <= port <= 65535:
                raise FabregError(f"{name} must be between 1024 and 65535, got {port}")
        if self.ctld_port == self.slurmd_port:
            raise FabregError("--ctld-port and --slurmd-port must differ")
        if not self.controller:
            object.__setattr__(self, "controller", short_hostname())
        if not self.cpus_per_node:
            object.__setattr__(self, "cpus_per_node", os.cpu_count() or 1)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def prefixlen(self) -> int:
        return self.network.prefixlen

    @property
    def bridge_ip(self) -> str:
        """The controller's address: slurmctld and client commands use the bridge."""
        return str(self.network.network_address + 1)

    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    def node_index(self, node: str) -> int:
        """1-based index of ``node`` (``node2`` or ``2``); a clear error otherwise."""
        text = node[4:] if node.startswith("node") else node
        if text.isdigit() and 1 <= int(text) <= self.nodes:
            return int(text)
        raise FabregError(
            f"unknown node {node!r}: this cluster has {', '.join(self.node_names())}"
        )

    def node_ip(self, index: int) -> str:
        return str(self.network.network_address + 10 + index)

    def namespace(self, index: int) -> str:
        return f"{NAMESPACE_PREFIX}{index}"

    def host_veth(self, index: int) -> str:
        """The bridge-side end of a node's link (where faults are injected)."""
        return f"{HOST_VETH_PREFIX}{index}"

    def nodelist(self) -> str:
        """The Slurm host list expression for all nodes, e.g. ``node[1-4]``."""
        return "node1" if self.nodes == 1 else f"node[1-{self.nodes}]"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def cluster_name(self) -> str:
        return self.name or CLUSTER_NAME

    def node_cpus(self, index: int) -> int:
        """The CPUs node ``index`` declares: its partition's, else the machine's."""
        for spec in self.partitions:
            if index in spec.nodes and spec.cpus:
                return spec.cpus
        return self.cpus_per_node

    def node_features(self, index: int) -> tuple[str, ...]:
        return tuple(f for spec in self.partitions if index in spec.nodes
                     for f in spec.features)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Layout:
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        fields["partitions"] = tuple(
            PartitionSpec(p["name"], tuple(p["nodes"]), p.get("cpus", 0),
                          tuple(p.get("features", ())))
            for p in fields.get("partitions") or ())  # type: ignore[union-attr]
        return cls(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Paths:
    """Files of a cluster under its state directory."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def slurm_conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def hosts_file(self) -> Path:
        """/etc/hosts as the nodes see it (bind-mounted in each node's mount namespace)."""
        return self.root / "hosts"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def ctld_state(self) -> Path:
        return self.root / "ctld-state"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munge.socket"

    def node_spool(self, node: str) -> Path:
        return self.spool / node

"""Faults injected into a running cluster: a slow node, a slow link, a dead node.

A node's whole link is capped in both directions (a tbf qdisc on the bridge-side veth
shapes traffic to the node, one on the node's own interface traffic from it), so a
bandwidth test sees the cap whichever rank sends. A *link* between two nodes is capped
alone: each node's interface gets an htb qdisc whose default class is unlimited and whose
class for the peer (a u32 filter on the peer's address) carries the rate, so traffic to
every other node keeps full speed. ``netem`` is not available on these machines; ``tbf``
and ``htb`` are.
"""

from __future__ import annotations

from fabreg.cluster import network, preflight, processes
from fabreg.cluster import state as statefile
from fabreg.cluster.layout import NODE_IFACE, Paths
from fabreg.cluster.state import ClusterState
from fabreg.errors import FabregError
from fabreg.run import procfs


def _running(paths: Paths, command: str) -> ClusterState:
    preflight.require_root(command)
    st = statefile.load(paths)
    if st is None:
        raise FabregError(f"no cluster is up (no state in {paths.root}); "
                          "start one with `fabreg cluster up`")
    return st


def degrade(paths: Paths, node: str, rate: str) -> str:
    """Cap ``node``'s link at ``rate`` both ways; returns the qdisc as tc shows it."""
    network.check_rate(rate)
    st = _running(paths, "degrade")
    index = st.layout.node_index(node)
    name = f"node{index}"
    host = st.layout.host_veth(index)
    if not network.link_exists(host):
        raise FabregError(f"{name} has no link ({host} missing); run `fabreg cluster up`")
    links = [k for k in st.degraded if "<->" in k and name in k.split("<->")]
    if links:
        raise FabregError(f"the link {links[0]} is capped; `fabreg cluster restore {name}` "
                          "first (a node cap and a link cap do not combine)")
    network.degrade(host, rate)
    network.run(
        network.in_namespace(st.layout.namespace(index),
                             ["tc", "qdisc", "replace", "dev", NODE_IFACE, "root", "tbf",
                              "rate", rate, "burst", "256kb", "latency", "50ms"]),
        f"limiting {name}'s {NODE_IFACE} to {rate}")
    st.degraded[name] = rate
    statefile.save(paths, st)
    return network.qdisc(host) or ""


#: The unlimited class of a node's htb: far above what a veth carries.
_UNLIMITED = "100gbit"


def link_key(a: str, b: str) -> str:
    """How the state file names the link between two nodes (order-free)."""
    return "<->".join(sorted((a, b)))


def degrade_link(paths: Paths, node: str, peer: str, rate: str) -> str:
    """Cap only the traffic between ``node`` and ``peer`` at ``rate``, both ways."""
    network.check_rate(rate)
    st = _running(paths, "degrade")
    ends = [st.layout.node_index(node), st.layout.node_index(peer)]
    if ends[0] == ends[1]:
        raise FabregError(f"--peer must be another node than {node}")
    names = [f"node{i}" for i in ends]
    for name in names:
        if name in st.degraded:
            raise FabregError(f"{name}'s whole link is capped; `fabreg cluster restore {name}` "
                              "first (a node cap and a link cap do not combine)")
    for here, there in (ends, ends[::-1]):
        ns = st.layout.namespace(here)
        if not network.qdisc_in(ns, NODE_IFACE, kind="htb"):
            network.run(network.in_namespace(ns, [
                "tc", "qdisc", "replace", "dev", NODE_IFACE, "root", "handle", "1:", "htb",
                "default", "1"]), f"shaping node{here}'s {NODE_IFACE}")
            network.run(network.in_namespace(ns, [
                "tc", "class", "replace", "dev", NODE_IFACE, "parent", "1:", "classid", "1:1",
                "htb", "rate", _UNLIMITED]), f"node{here}'s unlimited class")
        classid = f"1:{10 + there}"
        network.run(network.in_namespace(ns, [
            "tc", "class", "replace", "dev", NODE_IFACE, "parent", "1:", "classid", classid,
            "htb", "rate", rate, "ceil", rate]), f"node{here}'s class for node{there}")
        network.quiet(network.in_namespace(ns, [
            "tc", "filter", "del", "dev", NODE_IFACE, "parent", "1:", "prio", str(there)]))
        network.run(network.in_namespace(ns, [
            "tc", "filter", "add", "dev", NODE_IFACE, "parent", "1:", "protocol", "ip",
            "prio", str(there), "u32", "match", "ip", "dst", f"{st.layout.node_ip(there)}/32",
            "flowid", classid]), f"node{here}'s traffic to node{there}")
    st.degraded[link_key(*names)] = rate
    statefile.save(paths, st)
    return f"htb {rate} between {names[0]} and {names[1]}"


def restore(paths: Paths, node: str | None) -> list[str]:
    """Remove the caps of ``node`` and of the links it ends (all nodes when None); returns
    the nodes restored (a capped link's other end included)."""
    st = _running(paths, "restore")
    names = [f"node{st.layout.node_index(node)}"] if node else st.layout.node_names()
    for key in [k for k in st.degraded if "<->" in k]:
        ends = key.split("<->")
        if set(ends) & set(names):
            names += [e for e in ends if e not in names]
    restored = []
    for name in names:
        index = st.layout.node_index(name)
        ns = st.layout.namespace(index)
        removed = network.restore(st.layout.host_veth(index))
        if network.qdisc_in(ns, NODE_IFACE) or network.qdisc_in(ns, NODE_IFACE, kind="htb"):
            removed |= network.quiet(network.in_namespace(
                ns, ["tc", "qdisc", "del", "dev", NODE_IFACE, "root"]))
        links = [k for k in st.degraded if "<->" in k and name in k.split("<->")]
        if removed or name in st.degraded or links:
            restored.append(name)
        for key in [name, *links]:
            st.degraded.pop(key, None)
    statefile.save(paths, st)
    return restored


def kill(paths: Paths, node: str) -> list[int]:
    """Kill ``node`` as a power loss would: its link goes dark, then its processes die.

    The link goes down first, so no process on the node gets to close its
    connections: peers (and the MPI runtime) see silence, not a reset, exactly as
    with a crashed node. Slurm notices when the node stops answering
    (``SlurmdTimeout``), marks it DOWN and ends its jobs with NODE_FAIL.
    `fabreg cluster up` brings the node back.
    """
    st = _running(paths, "kill")
    index = st.layout.node_index(node)
    name = f"node{index}"
    host = st.layout.host_veth(index)
    if network.link_exists(host):
        network.run(["ip", "link", "set", host, "down"], f"cutting {name}'s link")
    killed = []
    daemon = st.daemons.get(f"slurmd-{name}")
    if daemon and daemon.alive():
        processes.kill(daemon.pid, daemon.started)
        killed.append(daemon.pid)
    for pid in network.namespace_pids(st.layout.namespace(index)):
        started = procfs.start_time(pid)
        if started is not None and processes.kill(pid, started):
            killed.append(pid)
    if not killed:
        raise FabregError(f"{name} is not running (no slurmd, no processes in its namespace)")
    return killed

"""Faults injected into a running cluster: a slow link, a dead node.

A node's link is capped in both directions (a tbf qdisc on the bridge-side veth
shapes traffic to the node, one on the node's own interface traffic from it), so a
bandwidth test sees the cap whichever rank sends. ``netem`` is not available on
these machines; ``tbf`` is.
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
    network.degrade(host, rate)
    network.run(
        network.in_namespace(st.layout.namespace(index),
                             ["tc", "qdisc", "replace", "dev", NODE_IFACE, "root", "tbf",
                              "rate", rate, "burst", "256kb", "latency", "50ms"]),
        f"limiting {name}'s {NODE_IFACE} to {rate}")
    st.degraded[name] = rate
    statefile.save(paths, st)
    return network.qdisc(host) or ""


def restore(paths: Paths, node: str | None) -> list[str]:
    """Remove the caps of ``node`` (all nodes when None); returns the nodes restored."""
    st = _running(paths, "restore")
    indices = [st.layout.node_index(node)] if node else range(1, st.layout.nodes + 1)
    restored = []
    for index in indices:
        name = f"node{index}"
        removed = network.restore(st.layout.host_veth(index))
        ns_cmd = network.in_namespace(st.layout.namespace(index),
                                      ["tc", "qdisc", "del", "dev", NODE_IFACE, "root"])
        if network.qdisc_in(st.layout.namespace(index), NODE_IFACE):
            removed |= network.quiet(ns_cmd)
        if removed or name in st.degraded:
            restored.append(name)
        st.degraded.pop(name, None)
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

"""`fabreg cluster ...`: a Slurm cluster of network namespaces on this machine."""

from __future__ import annotations

import argparse
import re
import sys

from fabreg.cluster import faults, lifecycle, slurmclient
from fabreg.cluster import state as statefile
from fabreg.cluster.layout import (
    DEFAULT_STATE_DIR,
    MAX_NODES,
    STATE_DIR_ENV,
    Layout,
    PartitionSpec,
    Paths,
)
from fabreg.cluster.layout import state_dir as default_state_dir
from fabreg.errors import FabregError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="emulated multi-node Slurm cluster (network namespaces) on this machine",
        description=(
            "Emulated Slurm cluster: one network namespace and slurmd per node, a bridge, "
            "munge and slurmctld. Needs root. State (slurm.conf, logs, spool, pids) lives in "
            f"${STATE_DIR_ENV} (default {DEFAULT_STATE_DIR})."
        ),
    )
    parser.add_argument("--state-dir", default=None,
                        help=f"state directory (default ${STATE_DIR_ENV} or {DEFAULT_STATE_DIR})")
    parser.set_defaults(func=lambda args: _help(parser))
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION")

    p = sub.add_parser("up", help="create the cluster (idempotent) and wait until nodes are idle")
    p.add_argument("--nodes", type=int, default=2, help=f"number of nodes, 1..{MAX_NODES} "
                   "(default 2)")
    p.add_argument("--subnet", default=Layout.subnet,
                   help=f"private IPv4 subnet of the bridge (default {Layout.subnet})")
    p.add_argument("--ctld-port", type=int, default=Layout.ctld_port,
                   help=f"slurmctld TCP port (default {Layout.ctld_port})")
    p.add_argument("--slurmd-port", type=int, default=Layout.slurmd_port,
                   help=f"slurmd TCP port inside the nodes (default {Layout.slurmd_port})")
    p.add_argument("--timeout", type=float, default=lifecycle.IDLE_TIMEOUT,
                   help="seconds to wait for all nodes to become idle")
    p.add_argument("--name", default="", help="play a site the suite has never seen: Slurm's "
                   "ClusterName; the `minicluster` system then does not describe it (use "
                   "`fabreg site init`)")
    p.add_argument("--partition", action="append", default=[], metavar="NAME:NODES[:OPTS]",
                   help="a partition, e.g. cpu:node[1-2]:cpus=1 or big:node[3-4]:features=big; "
                   "repeatable (default: one partition 'compute' of every node)")
    p.set_defaults(func=_up)

    p = sub.add_parser("drain", help="set a node DRAIN (no new jobs), as an admin would")
    p.add_argument("node", metavar="NODE")
    p.add_argument("--reason", default="drained by fabreg cluster drain")
    p.set_defaults(func=_drain)

    p = sub.add_parser("resume", help="return a drained or down node to service")
    p.add_argument("node", metavar="NODE")
    p.set_defaults(func=_resume)

    p = sub.add_parser("status", help="nodes, daemons, links and the state directory")
    p.set_defaults(func=_status)

    p = sub.add_parser("down", help="stop the daemons and remove namespaces, links, qdiscs")
    p.add_argument("--purge", action="store_true",
                   help="also delete the logs and the state directory")
    p.set_defaults(func=_down)

    p = sub.add_parser("degrade", help="cap one node's link, or the link between two nodes "
                                       "(--peer), both directions")
    p.add_argument("node", metavar="NODE", help="node name (node2) or number (2)")
    p.add_argument("--peer", metavar="NODE2",
                   help="cap only the traffic between NODE and NODE2 (htb, u32 filters)")
    p.add_argument("--rate", required=True, help="rate in tc syntax, e.g. 1gbit, 200mbit")
    p.set_defaults(func=_degrade)

    p = sub.add_parser("restore", help="remove link caps (of NODE, or of all nodes)")
    p.add_argument("node", metavar="NODE", nargs="?", default=None)
    p.set_defaults(func=_restore)

    p = sub.add_parser("kill", help="kill one node's slurmd and processes, as a crash would")
    p.add_argument("node", metavar="NODE")
    p.set_defaults(func=_kill)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _paths(args: argparse.Namespace) -> Paths:
    if args.state_dir:
        from pathlib import Path

        return Paths(Path(args.state_dir).resolve())
    return Paths(default_state_dir())


def _up(args: argparse.Namespace) -> int:
    if args.partition and not args.name:
        raise FabregError("--partition needs --name: partitions of their own make the cluster "
                          "a site (the minicluster system has one partition, compute)")
    if args.name and not re.fullmatch(r"[a-z][a-z0-9_-]{0,39}", args.name):
        raise FabregError(f"--name {args.name!r}: lower-case letters, digits, '-' and '_', "
                          "starting with a letter")
    partitions = tuple(PartitionSpec.parse(p, args.nodes) for p in args.partition)
    names = [p.name for p in partitions]
    if len(set(names)) != len(names):
        raise FabregError(f"--partition: a name given twice ({', '.join(names)})")
    layout = Layout(nodes=args.nodes, subnet=args.subnet, ctld_port=args.ctld_port,
                    slurmd_port=args.slurmd_port, name=args.name, partitions=partitions)
    paths = _paths(args)
    if args.timeout <= 0:
        raise FabregError(f"--timeout must be positive, got {args.timeout}")
    st = lifecycle.up(paths, layout, timeout=args.timeout)
    print(lifecycle.usage(paths, st))
    return 0


def _node_state(args: argparse.Namespace, state: str, reason: str = "") -> int:
    paths = _paths(args)
    st = statefile.load(paths)
    if st is None:
        raise FabregError(f"no cluster is up (no state in {paths.root})")
    node = st.layout.node_names()[st.layout.node_index(args.node) - 1]
    error = slurmclient.set_state(paths, node, state, reason)
    if error:
        raise FabregError(f"scontrol could not set {node} {state}: {error}")
    return 0


def _drain(args: argparse.Namespace) -> int:
    _node_state(args, "drain", args.reason)
    print(f"{args.node}: DRAIN ({args.reason}); `fabreg cluster resume {args.node}` undoes it")
    return 0


def _resume(args: argparse.Namespace) -> int:
    _node_state(args, "resume")
    print(f"{args.node}: back in service")
    return 0


def _status(args: argparse.Namespace) -> int:
    report, healthy = lifecycle.status(_paths(args))
    print(report)
    return 0 if healthy else 1


def _down(args: argparse.Namespace) -> int:
    paths = _paths(args)
    leftovers = lifecycle.down(paths, purge=args.purge)
    if leftovers:
        print(f"fabreg: error: could not remove: {', '.join(leftovers)}", file=sys.stderr)
        return 1
    print(f"cluster down: no namespace, link, qdisc or daemon left (logs kept in {paths.logs})"
          if not args.purge else f"cluster down: removed everything, including {paths.root}")
    return 0


def _degrade(args: argparse.Namespace) -> int:
    if args.peer:
        shown = faults.degrade_link(_paths(args), args.node, args.peer, args.rate)
        print(f"degraded the link {args.node}<->{args.peer} to {args.rate}: {shown}")
        return 0
    shown = faults.degrade(_paths(args), args.node, args.rate)
    print(f"degraded {args.node} to {args.rate}: {shown}")
    return 0


def _restore(args: argparse.Namespace) -> int:
    restored = faults.restore(_paths(args), args.node)
    print(f"restored full speed on {', '.join(restored)}" if restored else
          "no link was degraded")
    return 0


def _kill(args: argparse.Namespace) -> int:
    killed = faults.kill(_paths(args), args.node)
    print(f"killed {args.node} (pids {' '.join(map(str, killed))}); Slurm marks it DOWN "
          "within about 10-20 s; `fabreg cluster up` brings it back")
    return 0

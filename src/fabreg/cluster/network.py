"""The emulated fabric: a bridge, one network namespace and veth pair per node, qdiscs.

Traffic stays on this machine: the bridge has a private address, no route or
NAT leads anywhere else, and the nodes' only interfaces are ``lo`` and their veth.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from fabreg.cluster.layout import BRIDGE, NAMESPACE_PREFIX, NODE_IFACE, Layout
from fabreg.errors import FabregError

NETNS_DIR = Path("/run/netns")


def run(argv: Sequence[str], what: str) -> str:
    """Run a system command; a failure becomes one FabregError line saying ``what`` failed."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise FabregError(f"{what}: command {argv[0]!r} not found") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        reason = detail[-1] if detail else f"exit status {done.returncode}"
        raise FabregError(f"{what}: {' '.join(argv)}: {reason}")
    return done.stdout


def quiet(argv: Sequence[str]) -> bool:
    """Run a cleanup command whose failure only means there was nothing to remove."""
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    return done.returncode == 0


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def namespaces() -> list[str]:
    """Our node namespaces that exist now (by name, whether or not a state file knows them)."""
    if not NETNS_DIR.is_dir():
        return []
    found = [p.name for p in NETNS_DIR.iterdir() if p.name.startswith(NAMESPACE_PREFIX)]
    return sorted(found, key=lambda n: int(re.sub(r"\D", "", n) or 0))


def host_veths() -> list[str]:
    """Bridge-side veths of ours that exist now."""
    return sorted(
        p.name for p in Path("/sys/class/net").iterdir()
        if re.fullmatch(r"fabreg-h\d+", p.name)
    )


def overlapping_route(layout: Layout) -> str | None:
    """A route of this machine that overlaps our subnet (not our own bridge), if any."""
    ours = layout.network
    for line in run(["ip", "-4", "route", "show"], "listing routes").splitlines():
        words = line.split()
        if not words or words[0] == "default" or "dev" not in words:
            continue
        if words[words.index("dev") + 1] == BRIDGE:
            continue
        try:
            net = ipaddress.IPv4Network(words[0], strict=False)
        except ValueError:
            continue
        if net.overlaps(ours):
            return line.strip()
    return None


NO_PRIVILEGE_HINT = ("the emulated cluster needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN "
                     "(in a container: --privileged)")


def create_bridge(layout: Layout) -> None:
    if not link_exists(BRIDGE):
        try:
            run(["ip", "link", "add", BRIDGE, "type", "bridge"], "creating the bridge")
        except FabregError as err:
            raise FabregError(f"cannot create network devices on this machine ({err}); "
                              f"{NO_PRIVILEGE_HINT}") from None
    addr = f"{layout.bridge_ip}/{layout.prefixlen}"
    shown = run(["ip", "-4", "addr", "show", "dev", BRIDGE], "reading the bridge address")
    if addr not in shown:
        run(["ip", "addr", "add", addr, "dev", BRIDGE], "addressing the bridge")
    run(["ip", "link", "set", BRIDGE, "up"], "bringing the bridge up")


def create_namespace(name: str) -> None:
    """Make one network namespace; the error says clearly when the machine cannot."""
    if (NETNS_DIR / name).exists():
        return
    try:
        run(["ip", "netns", "add", name], f"creating network namespace {name}")
    except FabregError as err:
        raise FabregError(
            f"cannot create network namespaces on this machine ({err}); {NO_PRIVILEGE_HINT}"
        ) from None


def in_namespace(ns: str, argv: Sequence[str]) -> list[str]:
    """argv that runs ``argv`` inside namespace ``ns`` (nsenter: /sys stays as it is)."""
    return ["nsenter", f"--net={NETNS_DIR / ns}", *argv]


def connect_node(layout: Layout, index: int) -> None:
    """Link node ``index`` to the bridge and give it its address (idempotent)."""
    ns = layout.namespace(index)
    host = layout.host_veth(index)
    temp = f"fabreg-n{index}"
    node_has_iface = quiet(in_namespace(ns, ["ip", "link", "show", NODE_IFACE]))
    if not node_has_iface:
        if link_exists(host):
            run(["ip", "link", "del", host], f"removing stale link {host}")
        if link_exists(temp):
            run(["ip", "link", "del", temp], f"removing stale link {temp}")
        run(["ip", "link", "add", host, "type", "veth", "peer", "name", temp],
            f"creating the link of node{index}")
        run(["ip", "link", "set", temp, "netns", ns], f"moving the link into {ns}")
        run(in_namespace(ns, ["ip", "link", "set", temp, "name", NODE_IFACE]),
            f"renaming the link in {ns}")
    run(["ip", "link", "set", host, "master", BRIDGE], f"attaching {host} to the bridge")
    run(["ip", "link", "set", host, "up"], f"bringing {host} up")
    addr = f"{layout.node_ip(index)}/{layout.prefixlen}"
    shown = run(in_namespace(ns, ["ip", "-4", "addr", "show", "dev", NODE_IFACE]),
                f"reading the address of node{index}")
    if addr not in shown:
        run(in_namespace(ns, ["ip", "addr", "add", addr, "dev", NODE_IFACE]),
            f"addressing node{index}")
    run(in_namespace(ns, ["ip", "link", "set", NODE_IFACE, "up"]), f"bringing node{index} up")
    run(in_namespace(ns, ["ip", "link", "set", "lo", "up"]), f"bringing lo up in {ns}")


def namespace_pids(ns: str) -> list[int]:
    """Processes running inside namespace ``ns`` (started there by the node's slurmd)."""
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                          check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def remove_namespace(ns: str) -> bool:
    return quiet(["ip", "netns", "del", ns])


def remove_link(name: str) -> bool:
    return link_exists(name) and quiet(["ip", "link", "del", name])


# --- faults -------------------------------------------------------------------

RATE_RE = re.compile(r"^\d+(\.\d+)?([kmgt]?(bit|bps))$", re.IGNORECASE)


def check_rate(rate: str) -> str:
    """A tc rate such as ``1gbit`` or ``500mbit``; a clear error otherwise."""
    if not RATE_RE.match(rate):
        raise FabregError(
            f"--rate {rate!r} is not a tc rate: use a number and a unit such as "
            "1gbit, 500mbit, 100mbps"
        )
    return rate


def degrade(link: str, rate: str) -> None:
    """Cap ``link`` at ``rate`` with a token bucket (tbf) root qdisc (replacing any)."""
    run(["tc", "qdisc", "replace", "dev", link, "root", "tbf", "rate", check_rate(rate),
         "burst", "256kb", "latency", "50ms"], f"limiting {link} to {rate}")


def restore(link: str) -> bool:
    """Remove our qdisc from ``link``; False if it had none."""
    return qdisc(link) is not None and quiet(["tc", "qdisc", "del", "dev", link, "root"])


def qdisc(link: str) -> str | None:
    """The tbf qdisc on ``link`` (as tc shows it), or None."""
    return _tbf(["tc", "qdisc", "show", "dev", link])


def qdisc_in(ns: str, link: str, kind: str = "tbf") -> str | None:
    """The ``kind`` qdisc (tbf, htb) on ``link`` inside namespace ``ns``, or None."""
    return _tbf(in_namespace(ns, ["tc", "qdisc", "show", "dev", link]), kind)


def _tbf(argv: Sequence[str], kind: str = "tbf") -> str | None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(f"qdisc {kind}"):
            return line.strip()
    return None

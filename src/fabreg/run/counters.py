"""Fabric counters read before and after a test, and their deltas.

What a host exposes, and fabreg reads:

- RDMA port counters, ``/sys/class/infiniband/<dev>/ports/<port>/counters/``
  (symbol errors, link downed, receive errors, ...);
- RDMA hardware counters, ``.../ports/<port>/hw_counters/`` (ECN-marked packets,
  CNPs sent/handled, out-of-sequence, ...; names vary by driver);
- Ethernet pause-frame counters from ``ethtool -S <iface>`` for the interfaces
  behind RoCE devices and any interface named by the caller.

A source that does not exist is recorded as *unavailable* with the reason,
never as zeros: a zero delta means "read, and nothing happened".
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fabreg.errors import FabregError
from fabreg.run.parsers.ethtool import parse_ethtool_stats

SYSFS_INFINIBAND = Path("/sys/class/infiniband")
SYSFS_NET = Path("/sys/class/net")
#: The snapshots a job takes, in its directory: before its benchmark and after it.
BEFORE = "fabric-counters-before.json"
AFTER = "fabric-counters-after.json"
#: Set in a job whose in-job driver takes the snapshots in its own process (two interpreters
#: fewer a job than the job script's ``fabreg counters read``): the interfaces to read,
#: comma-separated, or empty (the host's own, :func:`read_counters`).
SNAPSHOTS_VARIABLE = "FABREG_COUNTER_SNAPSHOTS"

# Port counters (IB spec names, same on every driver) worth watching in a regression.
PORT_COUNTERS = (
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_wait",
)
# Hardware counters are driver-specific: pick them by what their name says.
HW_COUNTER_PATTERN = re.compile(
    r"ecn|cnp|out_of_sequence|seq_err|out_of_buffer|timeout|rnr_nak|duplicate_request"
)
PAUSE_PATTERN = re.compile(r"pause")


@dataclass
class CounterReading:
    """Counter values by key (``dev/port/name`` or ``iface/name``), plus what was missing."""

    values: dict[str, int] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"values": self.values, "unavailable": self.unavailable}, indent=1)

    @classmethod
    def from_json(cls, text: str, source: str = "counter reading") -> CounterReading:
        try:
            data = json.loads(text)
            return cls(values={str(k): int(v) for k, v in data["values"].items()},
                       unavailable=[str(u) for u in data["unavailable"]])
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise FabregError(f"{source}: not a fabreg counter reading ({err})") from err


@dataclass
class CounterDeltas:
    """after - before for every counter read both times; reasons for the rest."""

    deltas: dict[str, int] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)

    def nonzero(self) -> dict[str, int]:
        return {k: v for k, v in self.deltas.items() if v}

    def perflog_text(self) -> str:
        """One perflog field: ``key=delta,...`` or ``unavailable: reasons``.

        Never contains ``|`` (the perflog separator).
        """
        if not self.deltas:
            reasons = "; ".join(self.unavailable) or "no counters read"
            return ("unavailable: " + reasons).replace("|", "/")
        text = ",".join(f"{k}={v}" for k, v in sorted(self.deltas.items()))
        return text.replace("|", "/")


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def rdma_devices(ib_root: Path = SYSFS_INFINIBAND) -> list[str]:
    """RDMA device names the kernel lists (empty when there are none)."""
    if not ib_root.is_dir():
        return []
    return sorted(p.name for p in ib_root.iterdir())


def read_rdma(ib_root: Path = SYSFS_INFINIBAND) -> CounterReading:
    """Port and hardware counters of every RDMA device and port under ``ib_root``."""
    reading = CounterReading()
    devices = rdma_devices(ib_root)
    if not devices:
        reading.unavailable.append(f"no RDMA devices in {ib_root}")
        return reading
    for dev in devices:
        ports = ib_root / dev / "ports"
        port_dirs = sorted(ports.iterdir()) if ports.is_dir() else []
        if not port_dirs:
            reading.unavailable.append(f"{dev}: no ports in sysfs")
        for port in port_dirs:
            prefix = f"{dev}/{port.name}"
            found = False
            for name in PORT_COUNTERS:
                value = _read_int(port / "counters" / name)
                if value is not None:
                    reading.values[f"{prefix}/{name}"] = value
                    found = True
            hw = port / "hw_counters"
            if hw.is_dir():
                for entry in sorted(hw.iterdir()):
                    if HW_COUNTER_PATTERN.search(entry.name):
                        value = _read_int(entry)
                        if value is not None:
                            reading.values[f"{prefix}/{entry.name}"] = value
                            found = True
            else:
                reading.unavailable.append(f"{prefix}: no hw_counters (driver exposes none)")
            if not found:
                reading.unavailable.append(f"{prefix}: no readable port counters")
    return reading


def roce_interfaces(ib_root: Path = SYSFS_INFINIBAND) -> list[str]:
    """Ethernet interfaces behind RDMA devices (RoCE), from ``<dev>/device/net``."""
    out: list[str] = []
    for dev in rdma_devices(ib_root):
        net = ib_root / dev / "device" / "net"
        if net.is_dir():
            out.extend(sorted(p.name for p in net.iterdir()))
    return out


def physical_interfaces(net_root: Path = SYSFS_NET) -> list[str]:
    """Network interfaces backed by a device (not lo, bridges, veths, tunnels)."""
    if not net_root.is_dir():
        return []
    return sorted(p.name for p in net_root.iterdir() if (p / "device").exists())


def read_pause_frames(interfaces: Iterable[str], ethtool: str = "ethtool") -> CounterReading:
    """Pause-frame statistics of each interface, via ``ethtool -S``."""
    reading = CounterReading()
    names = list(dict.fromkeys(interfaces))
    if not names:
        reading.unavailable.append("no Ethernet interface to read pause frames from")
        return reading
    exe = shutil.which(ethtool)
    if exe is None:
        reading.unavailable.append(f"pause frames: {ethtool} not found")
        return reading
    for iface in names:
        try:
            proc = subprocess.run([exe, "-S", iface], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as err:
            reading.unavailable.append(f"{iface}: ethtool -S failed ({err})")
            continue
        stats = parse_ethtool_stats(proc.stdout) if proc.returncode == 0 else {}
        pause = {k: v for k, v in stats.items() if PAUSE_PATTERN.search(k)}
        if not pause:
            why = (proc.stderr or proc.stdout).strip().splitlines()
            detail = f" ({why[-1]})" if proc.returncode != 0 and why else ""
            reading.unavailable.append(f"{iface}: no pause-frame counters{detail}")
            continue
        for name, value in pause.items():
            reading.values[f"{iface}/{name}"] = value
    return reading


def read_counters(interfaces: Iterable[str] = (), ib_root: Path = SYSFS_INFINIBAND,
                  net_root: Path = SYSFS_NET, ethtool: str = "ethtool") -> CounterReading:
    """Everything this host exposes: RDMA counters, then pause frames.

    Pause frames are read for the RoCE interfaces plus ``interfaces``; when
    neither names one, for the host's physical interfaces.
    """
    rdma = read_rdma(ib_root)
    names = [*roce_interfaces(ib_root), *interfaces] or physical_interfaces(net_root)
    pause = read_pause_frames(names, ethtool)
    return CounterReading(values={**rdma.values, **pause.values},
                          unavailable=[*rdma.unavailable, *pause.unavailable])


def snapshot_interfaces(environ: Mapping[str, str]) -> list[str] | None:
    """The interfaces an in-job driver's snapshots read (:data:`SNAPSHOTS_VARIABLE`); None
    where the job script takes them."""
    named = environ.get(SNAPSHOTS_VARIABLE)
    return None if named is None else [i for i in named.split(",") if i]


def write_snapshot(path: Path, interfaces: Iterable[str]) -> None:
    """A reading written to ``path``; a reading that fails leaves no file (the check then
    says the snapshot is not usable) and never fails the job, as ``|| true`` in a job
    script."""
    try:
        path.write_text(read_counters(interfaces).to_json() + "\n")
    except (OSError, subprocess.SubprocessError, FabregError, ValueError):
        path.unlink(missing_ok=True)


def deltas(before: CounterReading, after: CounterReading) -> CounterDeltas:
    """after - before per counter; a counter that went down was reset, not negative."""
    out = CounterDeltas(unavailable=list(dict.fromkeys([*before.unavailable,
                                                        *after.unavailable])))
    for key in sorted(set(before.values) | set(after.values)):
        if key not in before.values or key not in after.values:
            when = "after" if key in after.values else "before"
            out.unavailable.append(f"{key}: read only {when} the test")
            continue
        diff = after.values[key] - before.values[key]
        if diff < 0:
            out.unavailable.append(f"{key}: counter reset during the test")
            continue
        out.deltas[key] = diff
    return out

"""``fabreg counters read|delta``: fabric counter snapshots around a test.

Checks run ``read`` inside the job (on the node that runs the benchmark) before
and after it, then compute the delta for the perflog.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fabreg.errors import FabregError
from fabreg.run.counters import SYSFS_INFINIBAND, SYSFS_NET, CounterReading, deltas, read_counters


def _read(args: argparse.Namespace) -> int:
    reading = read_counters(args.interface, ib_root=Path(args.sysfs), net_root=Path(args.net))
    text = reading.to_json()
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return 0


def _load(path: str) -> CounterReading:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise FabregError(f"cannot read counter snapshot {path}: {err.strerror}") from err
    return CounterReading.from_json(text, source=path)


def _delta(args: argparse.Namespace) -> int:
    print(deltas(_load(args.before), _load(args.after)).perflog_text())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("counters", help="read fabric counters, compute deltas")
    sub = parser.add_subparsers(dest="counters_command", metavar="ACTION", required=True)
    read = sub.add_parser("read", help="snapshot RDMA and pause-frame counters as JSON")
    read.add_argument("-i", "--interface", action="append", default=[],
                      help="also read pause frames of this Ethernet interface (repeatable)")
    read.add_argument("-o", "--output", help="write the JSON here instead of stdout")
    # Where sysfs lists RDMA devices and network interfaces (tests point these at a fake tree).
    read.add_argument("--sysfs", default=str(SYSFS_INFINIBAND), help=argparse.SUPPRESS)
    read.add_argument("--sysfs-net", dest="net", default=str(SYSFS_NET), help=argparse.SUPPRESS)
    read.set_defaults(func=_read)
    delta = sub.add_parser("delta", help="print after-before deltas of two snapshots")
    delta.add_argument("before")
    delta.add_argument("after")
    delta.set_defaults(func=_delta)

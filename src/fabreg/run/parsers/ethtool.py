"""Parse ``ethtool -S <iface>``: NIC statistics as ``name: value`` lines.

Some drivers print per-queue statistics as ``[0]: rx_bytes: 123`` (bnx2x); the
name keeps its queue prefix (``[0]: rx_bytes``), so no queue overwrites another.
"""

from __future__ import annotations

import re

_STAT = re.compile(r"^\s*(?P<name>.+?):\s*(?P<value>-?\d+)\s*$")


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """Statistic name -> value; an empty dict when the driver has none."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if m := _STAT.match(line):
            out[m["name"].strip()] = int(m["value"])
    return out

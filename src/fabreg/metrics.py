"""Names of performance variables, shared by the checks and the review side.

A fabreg performance variable is ``<metric>_<size>`` (``latency_8B``, ``bandwidth_1MB``,
``busbw_4MB``) or a bare ``<metric>``; sizes use binary multiples (1KB = 1024 B).
"""

from __future__ import annotations

import re

_UNITS = (("MB", 1 << 20), ("KB", 1 << 10), ("B", 1))
_SIZED = re.compile(r"^(?P<metric>.+)_(?P<num>\d+)(?P<unit>MB|KB|B)$")



def size_label(nbytes: int) -> str:
    """``8`` -> ``8B``, ``1024`` -> ``1KB``, ``4194304`` -> ``4MB``."""
    for suffix, factor in _UNITS:
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{suffix}"
    return f"{nbytes}B"


def perfvar_name(metric: str, nbytes: int | None) -> str:
    return metric if nbytes is None else f"{metric}_{size_label(nbytes)}"


def split_perfvar(name: str) -> tuple[str, int | None]:
    """``latency_1KB`` -> ``("latency", 1024)``; a name without a size -> ``(name, None)``."""
    m = _SIZED.match(name)
    if not m:
        return name, None
    factor = dict(_UNITS)[m["unit"]]
    return m["metric"], int(m["num"]) * factor

"""Names and directions of performance variables, shared by the checks and the review side.

A fabreg performance variable is ``<metric>_<size>`` (``latency_8B``, ``bandwidth_1MB``,
``busbw_4MB``) or a bare ``<metric>``; sizes use binary multiples (1KB = 1024 B).
"""

from __future__ import annotations

import re

_UNITS = (("MB", 1 << 20), ("KB", 1 << 10), ("B", 1))
_SIZED = re.compile(r"^(?P<metric>.+)_(?P<num>\d+)(?P<unit>MB|KB|B)$")

_LOWER_UNITS = {"us", "usec", "ms", "s", "ns", "%comm"}
_HIGHER_UNITS = {"MB/s", "GB/s", "Gbit/s", "Mbit/s", "msg/s", "Mmsg/s", "Mpps", "GFLOP/s"}
_LOWER_WORDS = ("latency", "lat", "time", "p50", "p99", "max", "overhead", "loss", "ratio")
_HIGHER_WORDS = ("bandwidth", "bw", "busbw", "rate", "throughput", "msgrate")


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


def lower_is_better(metric: str, unit: str | None = None) -> bool:
    """Direction of a metric: latency-like (lower is better) or bandwidth-like.

    The unit decides when it is known; otherwise words in the metric name do;
    unknown metrics count as lower-is-better only if they look like a time.
    """
    if unit in _LOWER_UNITS:
        return True
    if unit in _HIGHER_UNITS or (unit or "").endswith("/s"):
        return False
    words = set(re.split(r"[_\W]+", metric.lower()))
    if words & set(_HIGHER_WORDS):
        return False
    return bool(words & set(_LOWER_WORDS))

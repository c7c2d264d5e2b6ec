"""What a performance variable measures: its kind, message size and good direction.

fabreg checks name their variables ``<kind>_<size>`` (``latency_8B``,
``bandwidth_1MB``, ``busbw_1MB``); units are ReFrame's (``us``, ``MB/s``, ...).
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"_(\d+(?:\.\d+)?)([KMGT]?i?B)$", re.IGNORECASE)
_FACTOR = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

_LOWER_UNITS = {"ns", "us", "µs", "usec", "ms", "s", "sec", "seconds", "cycles"}
_HIGHER_UNIT = re.compile(r"(/s|bps)$|^(gbit|mbit|gbps|mbps|gflops?|tflops?|flops?)", re.I)
_LOWER_WORDS = ("latency", "lat", "time", "duration", "overhead", "jitter")
_HIGHER_WORDS = ("bandwidth", "bw", "busbw", "algbw", "rate", "throughput", "msg", "flops")


def lower_is_better(unit: str, name: str) -> bool:
    """The one rule for direction: is a smaller value better?

    Units decide first (time units: lower; anything per second: higher), then the
    variable's name (latency/time: lower; bandwidth/rate: higher). Unknown: lower,
    the safe side for times, the common case.
    """
    u = unit.strip()
    if u.lower() in _LOWER_UNITS:
        return True
    if _HIGHER_UNIT.search(u):
        return False
    words = re.split(r"[_\W]+", name.lower())
    if any(w in _HIGHER_WORDS for w in words):
        return False
    if any(w in _LOWER_WORDS for w in words):
        return True
    return True


def kind(name: str) -> str:
    """``latency_8B`` -> ``latency``; ``busbw_1MB`` -> ``busbw``; no size suffix -> the name."""
    match = _SIZE.search(name)
    return name[: match.start()] if match else name


def size_bytes(name: str) -> int | None:
    """Message size from the suffix (binary units): ``bandwidth_1MB`` -> 1048576."""
    match = _SIZE.search(name)
    if not match:
        return None
    prefix = match.group(2).upper().rstrip("B").rstrip("I")
    return int(float(match.group(1)) * _FACTOR[prefix])


def to_microseconds(value: float, unit: str) -> float | None:
    """A time in ``unit`` as microseconds; None if ``unit`` is not a time."""
    factor = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "usec": 1.0, "ms": 1e3, "s": 1e6,
              "sec": 1e6, "seconds": 1e6}.get(unit.strip())
    return None if factor is None else value * factor


def to_megabytes_per_second(value: float, unit: str) -> float | None:
    """A rate in ``unit`` as MB/s (10^6 bytes, as OSU prints); None if not a byte rate."""
    factor = {"B/s": 1e-6, "KB/s": 1e-3, "MB/s": 1.0, "GB/s": 1e3, "TB/s": 1e6,
              "MiB/s": 1.048576, "GiB/s": 1073.741824, "Gbit/s": 125.0, "Gb/s": 125.0,
              "Mbit/s": 0.125, "Mb/s": 0.125, "Gbps": 125.0, "Mbps": 0.125}.get(unit.strip())
    return None if factor is None else value * factor

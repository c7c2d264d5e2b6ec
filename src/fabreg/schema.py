"""What a logged column means: which columns identify a series, which describe one run,
and which way each metric is better.

One declaration read by the checks (``fabreg.testlib``), the references (``fabreg.run``) and
the review side (``fabreg.review``), so that the three never disagree about what a column is.
"""

from __future__ import annotations

import re

#: The fields a reference row can be keyed on (``checks/references/<system>.yaml``); every
#: logged value records its key under ``ref_keys``.
KEY_FIELDS: tuple[str, ...] = ("benchmark", "metric", "size", "mpi", "transport", "nodes")

#: Logged check attributes that do not identify a series: they describe one run (the
#: transport the MPI really used, the reference verdict...). Kept per run as attributes.
NOT_PARAMETERS: frozenset[str] = frozenset({
    "hashcode", "tags", "transport_used", "ref_status", "deviation", "ref_notes",
    # perf variable -> its reference lookup key (JSON), read by `fabreg references suggest`.
    "ref_keys",
    # A new Spack build is an event in a series, not a new series (docs/spack.md).
    "spack_spec", "spack_hash", "spack_lock",
    # What one run's fabric counters moved by: different on every run.
    "fabric_counters",
    # How far one run could be trusted (docs/references.md): per-value verdicts, the CPU time
    # other work took on the job's nodes, whether Slurm gave the nodes exclusively, the spread
    # of the repeated measurements and the first value of a re-measured failure.
    "verdicts", "interference", "exclusive", "spread", "confirmation",
})

#: What a judged value can be, worst news first where it matters to a reader:
#: ``fail`` (confirmed), ``flaky`` (a failure that did not reproduce), ``inconclusive`` (the host
#: interfered while it measured), ``missing`` (no reference yet), ``warn``, ``ok``.
VERDICTS: tuple[str, ...] = ("fail", "flaky", "inconclusive", "missing", "warn", "ok")

_LOWER_UNITS = {"us", "usec", "ms", "s", "ns", "%comm"}
_HIGHER_UNITS = {"MB/s", "GB/s", "Gbit/s", "Mbit/s", "msg/s", "Mmsg/s", "Mpps", "GFLOP/s"}
_LOWER_WORDS = ("latency", "lat", "time", "p50", "p99", "max", "overhead", "loss", "ratio")
_HIGHER_WORDS = ("bandwidth", "bw", "busbw", "rate", "throughput", "msgrate")


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

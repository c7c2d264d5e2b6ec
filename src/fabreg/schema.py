"""What a logged column means: which columns identify a series, which describe one run,
and which way each metric is better.

One declaration read by the checks (``fabreg.testlib``), the references (``fabreg.run``) and
the review side (``fabreg.review``), so that the three never disagree about what a column is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: Other work's share of the host's CPU time (``interference`` column: ``other_share``) above
#: which a measurement is contended: a failing value is ``inconclusive``, and no host
#: baseline rests on it. 10 % is a fifth of a core on a 2-core node, far above what daemons
#: and ReFrame's polling take.
CONTENDED_SHARE = 0.10

#: The fields a reference row can be keyed on (``checks/references/<system>.yaml``); every
#: logged value records its key under ``ref_keys``.
KEY_FIELDS: tuple[str, ...] = ("benchmark", "metric", "size", "mpi", "transport", "nodes")

#: The generation of the suite's measurements, raised when a change makes a value measured
#: before it incomparable with one measured after it. A baseline that `calibrate` writes
#: says which generation it rests on (its top-level ``method``); an older one is set aside.
#: Every run logs it (perflog column ``method``), and a baseline is drawn from runs of the
#: current generation only.
#: 2: every run of an OSU value validates as the whole-curve run does (before, only the
#: first did, and validation alone moves some figures 2x).
#: 3: no measured run of an OSU value validates; a short run of its own does.
MEASUREMENT_METHOD = 3

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
    # of the repeated measurements, the first value of a re-measured failure and the host
    # control measured at the end of the job (fabreg.run.host_control).
    "verdicts", "interference", "exclusive", "spread", "confirmation", "host_control",
    # How many measurements each value rests on (fabreg.run.confirm.settled).
    "measurements",
    # Which host's baseline judged the run (references by host: local, minicluster), and the
    # suite's measurement generation the values rest on (MEASUREMENT_METHOD).
    "host_key", "method",
    # The tail environment one run reached: its target, the p99/p50 reached, the background
    # the calibration chose (a calibrated setting, not a series parameter), and why the
    # environment could not be judged (a busy host, a target out of reach).
    "tail_target", "tail_reached", "tail_background", "tail_verdict",
    # The sweep (docs/isolation.md): its per-pair figures (read into per-link series, see
    # PAIR_TABLE) and the suspects it named.
    "pair_table", "suspects_named",
})

#: The sweep check's per-pair figures, logged as one run-only column: JSON
#: ``{"fields": PAIR_TABLE_FIELDS, "rows": [[...], ...]}``. The perflog reader turns each row
#: into one value per metric of a per-link series: the series' parameters gain ``node_a``
#: (sender) and ``node_b`` (receiver), so every link keeps its own history.
PAIR_TABLE = "pair_table"
PAIR_TABLE_FIELDS: tuple[str, ...] = ("round", "pattern", "node_a", "node_b", "bandwidth",
                                      "latency", "latency_p50")
#: What the store keeps of a sweep run's pair table once its figures are link series: which
#: round measured each pair, as JSON ``{"nodes": [name, ...], "rounds": {"<round>": [a, b,
#: a, b, ...]}}`` (indices into ``nodes``, sender first), a sixth of the table's size.
PAIR_ROUNDS = "pair_rounds"
#: The series parameters that name a link (a control of one host has node_a == node_b).
LINK_PARAMETERS: tuple[str, ...] = ("node_a", "node_b")
#: Pair-table metric -> unit; a row's perf variable is ``<kind>_<metric>``, kind ``link`` for a
#: pair of nodes, ``loopback`` or ``memory`` for a host's controls.
PAIR_METRIC_UNITS: dict[str, str] = {"bandwidth": "MB/s", "latency": "us", "latency_p50": "us"}
PAIR_CONTROL_KINDS: tuple[str, ...] = ("loopback", "memory")


def pair_perfvar(pattern: str, metric: str) -> str:
    """The per-link series' perf variable of a pair-table row: ``link_bandwidth``..."""
    kind = pattern if pattern in PAIR_CONTROL_KINDS else "link"
    return f"{kind}_{metric}"

#: What a judged value can be, worst news first where it matters to a reader:
#: ``fail`` (confirmed), ``flaky`` (a failure that did not reproduce), ``inconclusive`` (the host
#: interfered while it measured), ``missing`` (no reference yet), ``warn``, ``ok``.
VERDICTS: tuple[str, ...] = ("fail", "flaky", "inconclusive", "missing", "warn", "ok")

#: Logged parameters and settings of the suite's checks that identify a series: two runs
#: that differ in one of these are two series. (A column no check declares, from a site's
#: own check, counts as a series parameter too: splitting a series is safer than merging.)
SERIES_PARAMETERS: frozenset[str] = frozenset({
    # the matrix
    "mpi", "transport", "nodes", "num_nodes", "benchmark", "provider",
    # per family
    "buffer", "ucx_test", "ucx_tls", "message_size", "iterations", "completion", "qps",
    "post_list", "case", "collective", "algorithm", "environment", "mode", "matrix_size",
    "ranks", "layout", "fanin", "window", "count", "pairs", "blocks", "repeats",
    "measured_ranks", "background_pairs", "background_size", "background_window",
    "background_duty",
    # what OSU says it reduced or sent: OSU 7.5 reduces MPI_INT, 7.2 and the probes MPI_CHAR
    "datatype",
    # the sweep: which rounds it ran; per-link series add the link's two nodes
    "pattern", "max_rounds", "node_a", "node_b",
    # ReFrame's own, logged by every check
    "num_tasks", "num_tasks_per_node",
})

#: Which way each metric of the suite's checks is better, declared, never guessed: a rising
#: ``loss_rate`` or ``comm_fraction`` is a regression even though its name says "rate".
LOWER, HIGHER = "lower", "higher"
METRIC_DIRECTIONS: dict[str, str] = {
    # OSU, perftest, ucx_perftest
    "latency": LOWER, "latency_avg": LOWER, "latency_p99": LOWER, "overhead": LOWER,
    "overhead_avg": LOWER, "bandwidth": HIGHER, "busbw": HIGHER, "msgrate": HIGHER,
    # streams
    "rate_min": HIGHER, "rate_total": HIGHER, "loss_rate": LOWER, "fanin_share": HIGHER,
    # tail latency
    "p50": LOWER, "p99": LOWER, "max": LOWER, "p99_over_p50": LOWER, "loaded_p50": LOWER,
    "loaded_p99": LOWER, "loaded_p99_over_p50": LOWER,
    # matmul
    "total": LOWER, "distribute": LOWER, "compute": LOWER, "gather": LOWER,
    "comm_fraction": LOWER, "gflops": HIGHER,
    # sweep: the run (median over pairs, suspects named) and its per-link series
    "pair_bandwidth": HIGHER, "pair_latency": LOWER, "suspects": LOWER,
    "link_bandwidth": HIGHER, "link_latency": LOWER, "link_latency_p50": LOWER,
    "loopback_bandwidth": HIGHER, "loopback_latency_p50": LOWER,
    "loopback_latency": LOWER, "memory_bandwidth": HIGHER,
    # the host control of every in-job driver (HOST_CONTROL_FIGURES)
    "round_trip": LOWER, "copy_bandwidth": HIGHER, "tcp_loopback": HIGHER,
    "handoff_bandwidth": HIGHER, "shared_compute": LOWER,
}

#: The host control measured at the end of each judged job (``host_control`` column,
#: ``fabreg.run.host_control``): figure -> unit. A host's baseline keeps a row per figure,
#: keyed ``benchmark: HOST_CONTROL_BENCHMARK``, ``metric: <figure>``.
HOST_CONTROL_FIGURES: dict[str, str] = {"round_trip": "us", "copy_bandwidth": "GB/s",
                                        "tcp_loopback": "GB/s", "handoff_bandwidth": "GB/s",
                                        "shared_compute": "ms"}
HOST_CONTROL_BENCHMARK = "host_control"
#: Host control figures on each transport's software path (``fabreg.run.transport``): they
#: judge a value carried by it (``fabreg.run.host_control``), and a calibration sets aside a
#: value whose job read one of them slow (``fabreg.review.suggest``); a value of another
#: path, or of no transport, goes by all of them.
FIGURES_ON_PATH: dict[str, tuple[str, ...]] = {
    "ucx_rc": ("copy_bandwidth",),
    "ucx_ud": ("copy_bandwidth",),
    "ucx_dc": ("copy_bandwidth",),
    "tcp": ("tcp_loopback",),
    "tcp_ob1": ("tcp_loopback",),
    "shm": ("copy_bandwidth", "handoff_bandwidth", "shared_compute"),
}


def figures_on_path(transport: str | None) -> tuple[str, ...]:
    """The control figures that judge a value carried by ``transport`` (all: unknown)."""
    return FIGURES_ON_PATH.get(transport or "", tuple(HOST_CONTROL_FIGURES))


#: Key of a job's ``host_control`` column that names the control figures its verdict went by.
ON_PATH = "on_path"


def control_on_path(control: Mapping[str, Any], figures: Sequence[str]) -> dict[str, Any]:
    """A job's control as its perflog keeps it: its figures and those on its path (none
    measured: empty). The check knows its path (perftest's verbs are UCX rc's, whatever its
    reference key says), so a calibration reads it from here instead of guessing it."""
    return {**control, ON_PATH: list(figures)} if control else {}


def control_path(control: Mapping[str, Any], transport: str | None) -> tuple[str, ...]:
    """The figures on the path of a value whose job logged ``control``: the ones the job
    named (:func:`control_on_path`), else those of its reference key's ``transport`` (runs
    logged before jobs named them)."""
    named = control.get(ON_PATH)
    if (isinstance(named, list) and named
            and all(isinstance(n, str) and n in HOST_CONTROL_FIGURES for n in named)):
        return tuple(named)
    return figures_on_path(transport)


_LOWER_UNITS = {"us", "usec", "ms", "s", "ns", "%comm"}
_HIGHER_UNITS = {"MB/s", "GB/s", "Gbit/s", "Mbit/s", "msg/s", "Mmsg/s", "Mpps", "GFLOP/s"}
_LOWER_WORDS = ("latency", "lat", "time", "p50", "p99", "max", "overhead", "loss", "ratio")
_HIGHER_WORDS = ("bandwidth", "bw", "busbw", "rate", "throughput", "msgrate")


def declared_direction(metric: str) -> str | None:
    """``lower``/``higher`` for a metric the suite declares, else None."""
    return METRIC_DIRECTIONS.get(metric)


@functools.lru_cache(maxsize=4096)  # asked once a series: 450,000 times for a large sweep
def lower_is_better(metric: str, unit: str | None = None) -> bool:
    """Direction of a metric: latency-like (lower is better) or bandwidth-like.

    The suite's metrics are declared (``METRIC_DIRECTIONS``). For a site's own metric the
    unit decides when it is known; otherwise words in the metric name do; an unknown metric
    counts as lower-is-better only if it looks like a time.
    """
    declared = declared_direction(metric)
    if declared is not None:
        return declared == LOWER
    if unit in _LOWER_UNITS:
        return True
    if unit in _HIGHER_UNITS or (unit or "").endswith("/s"):
        return False
    words = set(re.split(r"[_\W]+", metric.lower()))
    if words & set(_HIGHER_WORDS):
        return False
    return bool(words & set(_LOWER_WORDS))

"""Generated perflogs with known answers, for the trends benchmark and the tests.

Writes ReFrame filelog perflogs exactly as reframe-config.py formats them, or in ReFrame's
own default format (``fmt="reframe"``: ``%(check_result)s|%(check_job_completion_time)s|
%(check_#ALL)s``, five columns per variable), one file per check and partition, an ``.h0``
file for an older header, for a year of nightly sessions. Every series gets multiplicative
noise and rare outliers; a chosen fraction get one level shift of known size at a known
session, another fraction two odd values at the very end (noise a gate must not fail on).
Real runs come from ReFrame itself (tests/data/checks); this module only provides scale
and ground truth.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

#: (check class, benchmark, perf variables as (name, unit))
CHECKS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("OsuLatency", "osu_latency", (("latency_8B", "us"), ("latency_1KB", "us"),
                                   ("latency_64KB", "us"), ("latency_1MB", "us"))),
    ("OsuBandwidth", "osu_bw", (("bandwidth_8B", "MB/s"), ("bandwidth_1KB", "MB/s"),
                                ("bandwidth_64KB", "MB/s"), ("bandwidth_1MB", "MB/s"))),
    ("OsuBiBandwidth", "osu_bibw", (("bandwidth_8B", "MB/s"), ("bandwidth_1KB", "MB/s"),
                                    ("bandwidth_64KB", "MB/s"), ("bandwidth_1MB", "MB/s"))),
    ("OsuAllreduce", "osu_allreduce", (("latency_8B", "us"), ("latency_1MB", "us"),
                                       ("busbw_64KB", "MB/s"), ("busbw_1MB", "MB/s"))),
    ("OsuAlltoall", "osu_alltoall", (("latency_8B", "us"), ("latency_1KB", "us"),
                                     ("latency_64KB", "us"), ("latency_1MB", "us"))),
)
MPIS = ("openmpi", "mpich")
TRANSPORTS = ("shm", "tcp", "ucx_rc", "ucx_ud", "ofi")
NODES = (1, 2, 4, 8, 16)
SERIES_PER_PARTITION = len(CHECKS) * 4 * len(MPIS) * len(TRANSPORTS) * len(NODES)  # 1000
EPOCH = datetime(2025, 1, 1, 2, 0, tzinfo=timezone.utc).timestamp()
DAY = 86400.0


@dataclass
class SeriesTruth:
    """What was injected into one series."""

    check: str
    perfvar: str
    unit: str
    mpi: str
    transport: str
    nodes: int
    partition: str
    noise: float  # sigma of the multiplicative noise
    shift: float = 0.0  # relative level change, e.g. +0.12; 0 = unchanged
    shift_session: int = -1  # index of the first session at the new level
    end_spike: float = 0.0  # relative excursion (worse) of the last two sessions; 0 = none
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))  # NaN = gap

    @property
    def lower_is_better(self) -> bool:
        return self.unit == "us"


@dataclass
class Dataset:
    root: Path
    session_times: np.ndarray  # start of each nightly session (unix)
    series: list[SeriesTruth]
    lines: int
    #: per file written: the byte offset where the last session's lines start
    last_session: dict[Path, int] = field(default_factory=dict)
    #: per file written: session index -> the byte offset where its lines start (a night
    #: after night replay: ``ci/bench/trends_bench.py --nightly``)
    session_offsets: dict[Path, dict[int, int]] = field(default_factory=dict)


def generate(root: Path, sessions: int = 365, partitions: int = 1, shifted: float = 0.25,
             noise: tuple[float, float] = (0.01, 0.03), min_shift: float = 0.10,
             max_shift: float = 0.30, outliers: float = 0.01, gaps: float = 0.002,
             seed: int = 1, system: str = "bench", transports: tuple[str, ...] = TRANSPORTS,
             nodes: tuple[int, ...] = NODES, fmt: str = "fabreg",
             end_spikes: float = 0.0) -> Dataset:
    """Write ``root/<system>/p<k>/<Check>.log`` (+ ``.log.h0``); return the truth.

    ``fmt`` is ``fabreg`` (reframe-config.py's format) or ``reframe`` (ReFrame's default);
    ``end_spikes`` is the fraction of unshifted series whose last two values are 20-50 %
    worse (a suspect at most, never an open regression).
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}")
    rng = np.random.default_rng(seed)
    session_times = EPOCH + DAY * np.arange(sessions)
    truths: list[SeriesTruth] = []
    nlines = 0
    last_session: dict[Path, int] = {}
    offsets: dict[Path, dict[int, int]] = {}
    for part in range(partitions):
        partition = f"p{part}"
        pdir = root / system / partition
        pdir.mkdir(parents=True, exist_ok=True)
        for c, (check, benchmark, perfvars) in enumerate(CHECKS):
            combos = [(m, t, n) for m in MPIS for t in transports for n in nodes]
            # values[combo, var, session]
            values = np.empty((len(combos), len(perfvars), sessions))
            for i, (mpi, transport, n_nodes) in enumerate(combos):
                for j, (var, unit) in enumerate(perfvars):
                    truth = SeriesTruth(check, var, unit, mpi, transport, n_nodes, partition,
                                        noise=float(rng.uniform(*noise)))
                    level = float(np.exp(rng.uniform(np.log(0.5), np.log(20000.0))))
                    x = level * np.exp(rng.normal(0.0, truth.noise, sessions))
                    if rng.random() < shifted:
                        truth.shift = float(rng.choice([-1, 1]) * rng.uniform(min_shift,
                                                                                max_shift))
                        first, last = min(10, sessions // 2), max(sessions - 3, 1)
                        truth.shift_session = int(rng.integers(first, last + 1))
                        x[truth.shift_session:] *= 1.0 + truth.shift
                    elif end_spikes and rng.random() < end_spikes / (1.0 - shifted):
                        truth.end_spike = float(rng.uniform(0.2, 0.5))
                        x[-2:] *= (1.0 + truth.end_spike if truth.lower_is_better
                                   else 1.0 / (1.0 + truth.end_spike))
                    spikes = rng.random(sessions) < outliers
                    if truth.lower_is_better:
                        x[spikes] *= 1.0 + rng.uniform(0.2, 1.0, spikes.sum())
                    else:
                        x[spikes] *= 1.0 - rng.uniform(0.15, 0.5, spikes.sum())
                    x[rng.random(sessions) < gaps] = np.nan
                    truth.values = x
                    values[i, j] = x
                    truths.append(truth)
            nlines += _write_check(pdir, check, benchmark, perfvars, combos, values,
                                   session_times, system, partition, c * 600.0, fmt,
                                   last_session, offsets)
    return Dataset(root, session_times, truths, nlines, last_session, offsets)


#: The perflog layouts :func:`generate` writes.
FORMATS = ("fabreg", "reframe")
#: ReFrame's default format: %(check_#ALL)s is every loggable attribute in alphabetical order,
#: the performance variables where ``perfvalues`` sorts (as ReFrame 4.10 writes it).
_REFRAME_BEFORE = ("result", "job_completion_time", "benchmark", "descr", "env_vars", "environ",
                   "exclusive_access", "extra_resources", "job_completion_time_unix",
                   "job_exitcode", "job_nodelist", "job_submit_time", "jobid", "modules", "mpi",
                   "name", "num_cpus_per_task", "num_gpus_per_node", "num_nodes", "num_tasks",
                   "num_tasks_per_core", "num_tasks_per_node", "num_tasks_per_socket",
                   "partition")
_REFRAME_AFTER = ("short_name", "system", "transport", "unique_name", "use_multithreading")


def _header(perfvars: tuple[tuple[str, str], ...], with_tags: bool, fmt: str = "fabreg") -> str:
    if fmt == "reframe":  # the older header lacks 'descr' (a run-only column)
        cols = [c for c in _REFRAME_BEFORE if with_tags or c != "descr"]
        for var, _ in perfvars:
            cols += [var + s for s in ("_value", "_unit", "_ref", "_lower_thres",
                                       "_upper_thres")]
        return "|".join(cols + list(_REFRAME_AFTER))
    cols = ["job_completion_time", "reframe version", "name", "system", "partition", "environ",
            "jobid", "job_nodelist", "result", "benchmark", "hashcode", "mpi", "num_nodes",
            "num_tasks", "num_tasks_per_node"] + (["tags"] if with_tags else []) + ["transport"]
    for var, _ in perfvars:
        cols += [var + s for s in ("_value", "_unit", "_ref", "_lower_thres", "_upper_thres",
                                   "_result")]
    return "|".join(cols)


def _write_check(pdir: Path, check: str, benchmark: str, perfvars, combos, values,
                 session_times: np.ndarray, system: str, partition: str,
                 offset: float, fmt: str = "fabreg",
                 last_session: dict[Path, int] | None = None,
                 offsets: dict[Path, dict[int, int]] | None = None) -> int:
    sessions = values.shape[2]
    refs = np.nanmedian(values[:, :, :10], axis=2)
    # The older header (no 'tags' column) covers the first third of the year.
    split = sessions // 3
    nlines = 0
    crc = f"{zlib.crc32(check.encode()):08x}"
    for name, first, last, tags in ((f"{check}.log.h0", 0, split, False),
                                    (f"{check}.log", split, sessions, True)):
        out = [_header(perfvars, tags, fmt)]
        size = len(out[0]) + 1
        for s in range(first, last):
            if s == sessions - 1 and last_session is not None:
                last_session[pdir / name] = size
            if offsets is not None:
                offsets.setdefault(pdir / name, {})[s] = size
            for i, (mpi, transport, nodes) in enumerate(combos):
                row = values[i, :, s]
                if np.isnan(row).all():
                    continue  # the test failed before its performance stage: a gap
                stamp = session_times[s] + offset + i * 3.0
                perf = []
                ok = True
                for j, (_var, unit) in enumerate(perfvars):
                    v, ref = row[j], refs[i, j]
                    lower_better = unit == "us"
                    lo, hi = (None, 0.1) if lower_better else (-0.1, None)
                    passed = bool(np.isnan(v)) or (v <= ref * 1.1 if lower_better
                                                   else v >= ref * 0.9)
                    ok &= passed
                    value = "" if np.isnan(v) else f"{v:.6g}"
                    perf += [value, unit, f"{ref:.6g}", str(lo), str(hi)]
                    if fmt == "fabreg":
                        perf.append("" if np.isnan(v) else "pass" if passed else "fail")
                name_col = f"{check} %transport={transport} %num_nodes={nodes}"
                if fmt == "reframe":
                    # job_completion_time as ReFrame's default logs it: local time, no offset
                    when = datetime.fromtimestamp(stamp, timezone.utc).strftime(
                        "%Y-%m-%dT%H:%M:%S")
                    fields = ["pass" if ok else "fail", when, benchmark]
                    fields += ([f"OSU {benchmark}"] if tags else [])
                    fields += ["{}", mpi, "false", "{}", f"{stamp:.6f}", "0",
                               f"n[0-{nodes - 1}]", f"{stamp - 30.0:.6f}",
                               str(100000 + s * 1000 + i), "", mpi, name_col, "null", "null",
                               str(nodes), str(2 * nodes), "null", "2", "null", partition]
                    fields += perf + [f"{check}_{crc}", system, transport, f"{check}_{i}",
                                      "null"]
                else:
                    when = datetime.fromtimestamp(stamp, timezone.utc).strftime(
                        "%Y-%m-%dT%H:%M:%S+00:00")
                    fields = [when, "reframe 4.10.4", name_col, system, partition, mpi,
                              str(100000 + s * 1000 + i), f"n[0-{nodes - 1}]"]
                    fields += ["pass" if ok else "fail", benchmark, crc, mpi, str(nodes),
                               str(2 * nodes), "null"]
                    fields += (["fabreg,nightly"] if tags else []) + [transport] + perf
                line = "|".join(fields)
                out.append(line)
                size += len(line.encode()) + 1
                nlines += 1
        (pdir / name).write_text("\n".join(out) + "\n", encoding="utf-8")
    return nlines

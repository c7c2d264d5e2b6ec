"""Read ReFrame's performance output: filelog perflogs and the results database.

This is the only module that knows the perflog layout (docs/perflog-format.md).
Everything downstream works on :class:`Sample` (one value of one performance
variable of one test run) and :class:`Session` records.

Reading never stops at a bad line: each problem is reported as a :class:`Problem`
(``file:line: reason``) and the good lines are kept. A performance variable
without a value (empty, ``None``, ``nan``) is a gap: it yields no sample.
Timestamps without a UTC offset are taken to be UTC.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import sqlite3
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fabreg.review import headerless_perflog, site_format
from fabreg.schema import (
    NOT_PARAMETERS,
    PAIR_METRIC_UNITS,
    PAIR_ROUNDS,
    PAIR_TABLE,
    SERIES_PARAMETERS,
    pair_perfvar,
)

#: Columns every fabreg perflog line starts with (reframe-config.py's format).
FIXED_COLUMNS: tuple[str, ...] = (
    "job_completion_time", "reframe version", "name", "system", "partition", "environ",
    "jobid", "job_nodelist", "result",
)
#: Columns without which a line cannot be placed in a series.
REQUIRED_COLUMNS: tuple[str, ...] = ("job_completion_time", "name", "system", "partition",
                                     "environ")
#: The six columns ReFrame writes per performance variable, in order.
PERFVAR_SUFFIXES: tuple[str, ...] = ("_value", "_unit", "_ref", "_lower_thres",
                                     "_upper_thres", "_result")
#: Built-in ReFrame test-case attributes found in the results DB; everything else a
#: test case carries there is a parameter or a check's own loggable variable.
REFRAME_TESTCASE_ATTRIBUTES: frozenset[str] = frozenset("""
build_jobid build_locally build_stderr build_stdout build_time_limit dependencies_actual
dependencies_conceptual descr display_name env_vars environ exclusive_access executable
executable_opts extra_resources fail_phase fail_reason fail_info filename fixture hashcode
job_completion_time job_completion_time_unix job_exitcode job_nodelist job_stderr job_stdout
job_submit_time jobid keep_files local maintainers max_pending_time modules name
num_cpus_per_task num_gpus_per_node num_tasks_per_core num_tasks_per_socket outputdir
partition perfvalues postbuild_cmds postrun_cmds prebuild_cmds prefix prerun_cmds
readonly_files result run_index scheduler session_uuid short_name sourcepath sourcesdir
stagedir strict_check system tags time_compile time_limit time_performance time_run
time_sanity time_setup time_total unique_name use_multithreading uuid valid_prog_environs
valid_systems variables build_system ci_extras perf_variables fail_severe
expected_failure xfail
""".split())
#: What ReFrame's logger adds to a perflog line besides the test's own attributes: who and
#: which ReFrame wrote it. They describe a run, never a series (a newer ReFrame, or the
#: test's hash inside ``info``, must not start a new series).
REFRAME_LOGGING_ATTRIBUTES: frozenset[str] = frozenset("""
asctime version reframe_version info check_info hostname osuser osgroup hash
unique_name
job_completion_time_unix perf_var perf_value perf_unit perf_ref perf_lower_thres
perf_upper_thres perf_result perfvalues
""".split())
#: Standard keys of a results-DB session; the rest are the user's session extras.
REFRAME_SESSION_KEYS: frozenset[str] = frozenset("""
data_version hostname uuid time_start time_start_unix time_end time_end_unix time_elapsed
cmdline config_files log_files prefix_output prefix_stage user version workdir num_cases
num_failures num_aborted num_skipped
""".split())

_NULLS = frozenset({"", "none", "null", "nan", "n/a"})


@dataclass(frozen=True)
class Problem:
    """A line (or file) that was skipped, and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.reason}"


class Run:
    """One test-case run: what a perflog line says besides its values."""

    __slots__ = ("time", "test", "params", "system", "partition", "environ", "jobid",
                 "nodelist", "display_name", "session", "source", "param_key", "key", "attrs",
                 "link")

    def __init__(self, time: float, test: str, params: dict[str, str], system: str,
                 partition: str, environ: str, jobid: str = "", nodelist: str = "",
                 display_name: str = "", session: str | None = None, source: str = "",
                 param_key: tuple[tuple[str, str], ...] | None = None,
                 attrs: dict[str, str] | None = None, key: str | None = None,
                 link: tuple[Run, str, str] | None = None) -> None:
        self.time = time  # unix seconds, UTC, truncated to the second
        self.test = test  # base name, without parameters
        self.params = params
        self.system = system
        self.partition = partition
        self.environ = environ
        self.jobid = jobid
        self.nodelist = nodelist
        self.display_name = display_name or test
        self.session = session
        self.source = source
        self.param_key = param_key if param_key is not None else tuple(sorted(params.items()))
        self.key = key if key is not None else run_key(
            self.display_name, system, partition, environ, jobid, time)
        self.attrs = attrs or {}  # non-identifying attributes of this run
        #: A link of a sweep run (:func:`link_samples`): that run and the link's two nodes,
        #: its parameters being the sweep's plus ``node_a``/``node_b``. The store builds the
        #: texts of a sweep's 150,000 links from the sweep's own, once.
        self.link = link

    def __repr__(self) -> str:
        return f"Run({self.key!r})"


class Sample:
    """One value of one performance variable of one run (a gap has no Sample)."""

    __slots__ = ("run", "perfvar", "value", "unit", "ref", "lower_thres", "upper_thres",
                 "result")

    def __init__(self, run: Run, perfvar: str, value: float, unit: str = "",
                 ref: float | None = None, lower_thres: float | None = None,
                 upper_thres: float | None = None, result: str = "") -> None:
        self.run = run
        self.perfvar = perfvar
        self.value = value
        self.unit = unit
        self.ref = ref
        self.lower_thres = lower_thres
        self.upper_thres = upper_thres
        self.result = result

    def __repr__(self) -> str:
        return f"Sample({self.run.key!r}, {self.perfvar!r}, {self.value!r}, {self.unit!r})"

    # Shortcuts to the run, for readers of single samples.
    @property
    def time(self) -> float:
        return self.run.time

    @property
    def params(self) -> dict[str, str]:
        return self.run.params

    @property
    def test(self) -> str:
        return self.run.test

    @property
    def session(self) -> str | None:
        return self.run.session


@dataclass
class Session:
    """A ReFrame session from the results database."""

    uuid: str
    start: float
    end: float
    extras: dict[str, str] = field(default_factory=dict)


@dataclass
class RunLink:
    """Ties one test-case run (found in perflogs by run key) to its session."""

    run_key: str
    session: str


def run_key(display_name: str, system: str, partition: str, environ: str, jobid: str,
            time: float) -> str:
    """The identity of one test-case run, computable from a perflog line and the results DB.

    Perflog times have second resolution, so the time is truncated to the second.
    """
    return f"{display_name}|{system}|{partition}|{environ}|{jobid}|{int(math.floor(time))}"


#: Where a ``%name=`` parameter starts in a display name; its value runs to the next one (a
#: value may hold spaces: ``%p={'nodes': 32, 'tasks': 128}``).
_PARAM_START = re.compile(r"(?:^|\s)%(?P<key>[\w.$]+)=")
#: The test's hash that ReFrame's ``info`` puts after the parameters.
_HASH = re.compile(r"\s+/[0-9a-f]{8}$")


def split_name(display_name: str) -> tuple[str, dict[str, str]]:
    """``'OsuLatency %transport=shm %mpi=x'`` -> ``('OsuLatency', {'transport': 'shm', ...})``."""
    parts = display_name.split()
    if not parts:
        return "", {}
    params: dict[str, str] = {}
    starts = list(_PARAM_START.finditer(display_name))
    for match, following in zip(starts, [*starts[1:], None]):
        key = match.group("key")
        end = following.start() if following else len(display_name)
        value = _HASH.sub("", display_name[match.end():end].strip())
        if not key.startswith((".", "$")):  # ReFrame-internal: '%.repeat_no=1'
            params[key.split(".")[-1]] = value
    return parts[0], params


#: Unix seconds a bare number must lie between to be taken as a time (2000-01-01 to
#: 2100-01-01 UTC); a perflog time outside is skipped as a bad line.
EARLIEST = 946684800.0
LATEST = 4102444800.0


def parse_time(text: str) -> float:
    """ISO 8601 / RFC 3339 (or Unix seconds of 2000-2100) -> Unix seconds; no offset = UTC."""
    text = text.strip()
    if not text:
        raise ValueError("empty timestamp")
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(number):
            raise ValueError(f"timestamp {text!r} is not finite")
        if not EARLIEST <= number < LATEST:
            # '20261121' is a date, not Unix seconds: never store it as 1970-08-23.
            raise ValueError(f"timestamp {text!r} is a number outside Unix seconds of "
                             "2000-2100; expected RFC 3339 (2026-11-21T02:00:00+00:00) "
                             "or Unix seconds")
        return number
    try:
        stamp = datetime.fromisoformat(text)  # the common case: '...+00:00'
    except ValueError:
        iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
        # Python < 3.11 does not accept '+0000': normalise it to '+00:00'.
        iso = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", iso)
        try:
            stamp = datetime.fromisoformat(iso)
        except ValueError:
            raise ValueError(f"timestamp {text!r} is not ISO 8601") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


_NULL_SPELLINGS = frozenset({"", "None", "null", "nan", "NaN", "N/A", "n/a"})


def _number(text: str) -> float | None:
    """A float, or None for ReFrame's spellings of 'no value'."""
    if text in _NULL_SPELLINGS:
        return None
    try:
        number = float(text)
    except ValueError:
        if text.strip().lower() in _NULLS:
            return None
        raise
    return number if math.isfinite(number) else None


def _param_value(text: object) -> str | None:
    """Normalise a logged attribute value so perflog text and results-DB JSON agree."""
    if text is None:
        return None
    if isinstance(text, bool):
        return "true" if text else "false"
    if isinstance(text, (list, tuple)):
        return ",".join(str(v) for v in text)
    if isinstance(text, dict):  # as ReFrame's perflog prints it: JSON
        return json.dumps(text)
    value = str(text).strip()
    return None if value in ("", "None", "null") else value  # how ReFrame prints unset


@dataclass
class _Header:
    columns: list[str]
    index: dict[str, int]
    perfvars: list[str]
    params: list[str]
    #: perf variable -> column of each PERFVAR_SUFFIXES entry, -1 where the format lacks it
    perfvar_columns: list[tuple[str, tuple[int, ...]]]
    param_columns: list[tuple[str, int]]
    attr_columns: list[tuple[str, int]]
    #: system and partition from the ``<system>/<partition>/`` path, for formats without them
    place: tuple[str, str] = ("", "")
    sep: str = "|"
    #: name -> (column, position, separators) of a combined column such as ``system:partition``
    derived: dict[str, tuple[int, int, tuple[str, ...]]] = field(default_factory=dict)
    #: the test name for a format without a name column: the file's (``OsuLatency.log``)
    file_test: str = ""
    #: how ingest names this layout (``header, '|'-separated, 12 columns``)
    layout: str = ""
    memo: dict = field(default_factory=dict)  # raw name+attributes -> parsed
    numbers: dict = field(default_factory=dict)  # raw ref+thresholds -> floats


#: The columns without which a line cannot be placed in a series, whatever the format: when
#: it finished and which test it was (system and partition may come from the path).
_WHEN = ("job_completion_time", "job_completion_time_unix")
_WHICH = ("name", "display_name")
#: ReFrame's test info (``Test %p=v /hash @sys:part+env``): the test where no name column is.
_INFO = ("info", "check_info")


#: The separators ReFrame's ``format`` can put between columns, in the order they are tried.
SEPARATORS: tuple[str, ...] = ("|", ",", ";", "\t")
_SEPARATOR_NAMES = {"|": "'|'", ",": "','", ";": "';'", "\t": "tab"}
#: Columns a site's format may log as one (``%(check_system)s:%(check_partition)s``).
_COMBINABLE = frozenset({"system", "partition", "environ"})


def header_separator(line: str) -> str | None:
    """The separator of a header line (one that names its columns), or None for a data line."""
    for sep in SEPARATORS:
        if any(c.strip() in _WHEN for c in line.split(sep, 8)[:8]):
            return sep
    return None


def _combined_columns(columns: list[str]) -> dict[str, tuple[int, int, tuple[str, ...]]]:
    derived = {}
    for i, column in enumerate(columns):
        parts = re.split(r"([:+@])", column)
        names, seps = parts[0::2], tuple(parts[1::2])
        if len(names) > 1 and all(n in _COMBINABLE for n in names):
            for position, name in enumerate(names):
                derived[name] = (i, position, seps)
    return derived


def _split_combined(value: str, position: int, seps: tuple[str, ...]) -> str:
    """``'daint:gpu+gnu'`` split by the column's own separators, the part at ``position``."""
    parts = []
    rest = value
    for sep in seps:
        head, found, rest = rest.partition(sep)
        parts.append(head)
        if not found:
            rest = ""
    parts.append(rest)
    return parts[position].strip() if position < len(parts) else ""


def test_from_file(source: str) -> str:
    """``.../OsuLatency.log.h1`` -> ``OsuLatency``: where the format logs no test name."""
    name = Path(source).name
    return re.sub(r"\.log(\.h\d+)?$", "", name)


def _parse_header(line: str, source: str = "") -> _Header:
    """Any ReFrame filelog header: fabreg's format, ReFrame's default, a site's own.

    Columns are recognised by name, in any order: the time, the test's name, system,
    partition and environment (system and partition from the ``<system>/<partition>/`` path
    where the format has none), and per performance variable at least ``V_value`` and
    ``V_unit``. ReFrame's own bookkeeping and ``fabreg.schema.NOT_PARAMETERS`` describe one
    run; every other column is a parameter of the series.
    """
    sep = header_separator(line) or "|"
    columns = [c.strip() for c in line.rstrip("\r\n").split(sep)]
    while columns and columns[-1] == "":
        columns.pop()
    index = {name: i for i, name in enumerate(columns)}
    derived = _combined_columns(columns)
    if not any(c in index for c in _WHEN):
        raise ValueError("header lacks column job_completion_time")
    file_test = ""
    if not any(c in index for c in (*_WHICH, *_INFO)):
        file_test = test_from_file(source)
        if not file_test:
            raise ValueError("header lacks column name (or display_name)")
    place = _place(source)
    lacking = [c for c, known in (("system", place[0]), ("partition", place[1]))
               if c not in index and c not in derived and not known]
    if lacking:
        raise ValueError(f"header lacks column(s) {', '.join(lacking)} and the file is not "
                         "under <system>/<partition>/")
    perfvars = [c[: -len("_value")] for c in columns
                if c.endswith("_value") and c[: -len("_value")] + "_unit" in index]
    taken = set(FIXED_COLUMNS) | set(_WHEN) | set(_WHICH)
    taken.update(columns[i] for i, _, _ in derived.values())
    for var in perfvars:
        taken.update(var + s for s in PERFVAR_SUFFIXES)
    run_only = (NOT_PARAMETERS | (REFRAME_TESTCASE_ATTRIBUTES - SERIES_PARAMETERS)
                | REFRAME_LOGGING_ATTRIBUTES)
    params = [c for c in columns if c not in taken and c not in run_only]
    perfvar_columns = [(v, tuple(index.get(v + suffix, -1) for suffix in PERFVAR_SUFFIXES))
                       for v in perfvars]
    attrs = [c for c in columns if c in NOT_PARAMETERS and c not in ("hashcode", "tags")]
    layout = (f"header, {_SEPARATOR_NAMES[sep]}-separated, {len(columns)} columns"
              + (", system and partition in one column" if derived else "")
              + (", test name from the file name" if file_test else ""))
    return _Header(columns, index, perfvars, params, perfvar_columns,
                   [(p, index[p]) for p in params], [(a, index[a]) for a in attrs], place,
                   sep=sep, derived=derived, file_test=file_test, layout=layout)


def _place(source: str) -> tuple[str, str]:
    """(system, partition) from a ``.../<system>/<partition>/<Check>.log`` path."""
    parts = Path(source).parts
    return (parts[-3], parts[-2]) if len(parts) >= 3 else ("", "")


def _is_header(line: str) -> bool:
    """A header names its columns; no data line has a field called job_completion_time."""
    return header_separator(line) is not None


def read_perflog_lines(lines: Iterable[str], source: str) -> tuple[list[Sample], list[Problem]]:
    """Parse the text of one perflog file (header first, possibly more headers later)."""
    chunk = read_perflog_chunk(lines, source)
    return chunk.samples, chunk.problems


@dataclass
class PerflogChunk:
    """What a run of lines of one perflog file held."""

    samples: list[Sample]
    problems: list[Problem]
    lines: int  # lines read
    header: str  # the header line in force after the last line ('' if none is)
    #: layout -> lines read in it (``headerless 'Test on sys:part using env', ...``)
    layouts: dict[str, int] = field(default_factory=dict)


#: Why a line that fits no layout was skipped.
NOT_A_PERFLOG_LINE = ("data line before any valid header line, and not a headerless "
                      "ReFrame line (no test info, jobid= or ref= field)")


def read_perflog_chunk(lines: Iterable[str], source: str, header_line: str = "",
                       first_line: int = 1,
                       site_formats: Sequence[site_format.SiteFormat] = ()) -> PerflogChunk:
    """Parse lines of one perflog file starting at line ``first_line``, under the header line
    ``header_line`` when they do not start with one (an ingest resuming mid-file).

    Each line is read in the layout it is written in: under a header, a line with the
    header's columns; otherwise a headerless ReFrame line (2.x/3.x default and its site
    variants, :mod:`fabreg.review.headerless_perflog`). A file that changes layout midway is
    read in both. ``site_formats`` (a site's own perflog formats, from its ReFrame
    configuration) are tried first on a line that fits no header.
    """
    samples: list[Sample] = []
    problems: list[Problem] = []
    layouts: dict[str, int] = {}
    header: _Header | None = None
    place = _place(source)
    if header_line:
        try:
            header = _parse_header(header_line, source)
        except ValueError:
            header_line = ""  # reported when it was read
    lineno = first_line - 1
    for lineno, raw in enumerate(lines, start=first_line):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if _is_header(line):
            try:
                header = _parse_header(line, source)
                header_line = line
            except ValueError as err:
                header, header_line = None, ""
                problems.append(Problem(source, lineno, f"bad header: {err}"))
            continue
        fields: list[str] = []
        if header is not None:
            fields = line.split(header.sep)
            ncols = len(header.columns)
            # ReFrame's perf-variable format ends in '|': tolerate trailing empty fields.
            while len(fields) > ncols and fields[-1] == "":
                fields.pop()
            if len(fields) == ncols:
                try:
                    samples.extend(_line_samples(header, fields, source))
                    layouts[header.layout] = layouts.get(header.layout, 0) + 1
                except ValueError as err:
                    problems.append(Problem(source, lineno, str(err)))
                continue
        by_site = next((parsed for parsed in (f.parse(line, place) for f in site_formats)
                        if parsed is not None), None)
        if by_site is not None:
            try:
                samples.extend(_headerless_samples(by_site, source))
                layouts[by_site.layout] = layouts.get(by_site.layout, 0) + 1
            except ValueError as err:
                problems.append(Problem(source, lineno, str(err)))
            continue
        if headerless_perflog.looks_headerless(line):
            try:
                try:
                    parts = [headerless_perflog.parse_line(line, place)]
                except ValueError as err:
                    if not str(err).startswith(headerless_perflog.RUN_TOGETHER):
                        raise
                    parts, lost = headerless_perflog.parse_run_together(line, place)
                    if lost:
                        problems.append(Problem(source, lineno, (
                            f"{headerless_perflog.RUN_TOGETHER}: {len(parts)} of its "
                            f"{len(parts) + lost} lines read, the one cut short left out")))
                for parsed in parts:
                    samples.extend(_headerless_samples(parsed, source))
                    layouts[parsed.layout] = layouts.get(parsed.layout, 0) + 1
            except ValueError as err:
                problems.append(Problem(source, lineno, str(err)))
        elif header is not None:
            hint = (f" (a list field with '{header.sep}' inside, in a "
                    f"'{header.sep}'-separated layout?)" if len(fields) > ncols else "")
            problems.append(Problem(source, lineno,
                                    f"{len(fields)} fields, header has {ncols}{hint}"))
        else:
            problems.append(Problem(source, lineno, NOT_A_PERFLOG_LINE))
    return PerflogChunk(samples, problems, lineno - first_line + 1, header_line, layouts)


def _run_time(text: str) -> float:
    """A line's completion time; ValueError outside 2000-2100."""
    time = parse_time(text)
    if not EARLIEST <= time < LATEST:
        raise ValueError(f"completion time {_utc(time)} is not in 2000-2100")
    return time


def _headerless_samples(line: headerless_perflog.HeaderlessLine, source: str) -> list[Sample]:
    time = _run_time(line.time_text)
    if not (line.system and line.partition):
        raise ValueError("no test info (Test on sys:part using env) and the file is not "
                         "under <system>/<partition>/")
    display = line.test_info or test_from_file(source)
    test, params = split_name(display)
    if not test:
        raise ValueError("empty test name")
    params.update(line.params)
    run = Run(float(math.floor(time)), test, params, line.system, line.partition,
              line.environ, line.jobid, line.nodelist, display, None, source,
              attrs=dict(line.attrs))
    if line.value is None:
        return []  # a gap, never a zero
    return [Sample(run, line.perfvar, line.value, line.unit, line.ref, line.lower,
                   line.upper, "")]


def read_perflog_bytes(data: bytes, source: str, header_line: str = "",
                       first_line: int = 1,
                       site_formats: Sequence[site_format.SiteFormat] = ()) -> PerflogChunk:
    """:func:`read_perflog_chunk` on complete lines as read from the file (UTF-8)."""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return read_perflog_chunk(lines, source, header_line, first_line, site_formats)


def _utc(stamp: float) -> str:
    try:
        return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{stamp:g} s"


def _field(fields: list[str], header: _Header, name: str, default: str = "") -> str:
    i = header.index.get(name)
    if i is not None:
        return fields[i].strip()
    combined = header.derived.get(name)
    if combined is not None:
        column, position, seps = combined
        return _split_combined(fields[column], position, seps) or default
    return default


def _info_name(info: str) -> str:
    """``'Test %p=v /1a2b3c4d @sys:part+env'`` -> ``'Test %p=v'`` (the display name)."""
    match = headerless_perflog.INFO_AT.match(info) or headerless_perflog.INFO_ON.match(info)
    return _HASH.sub("", match.group("name")) if match else ""


def _line_samples(header: _Header, fields: list[str], source: str) -> list[Sample]:
    # The exact unix time where the format logs it (ReFrame's default has no UTC offset in
    # job_completion_time); else the RFC 3339 time fabreg's format logs.
    unix = _field(fields, header, "job_completion_time_unix")
    time = _run_time(unix if unix not in _NULL_SPELLINGS else
                     _field(fields, header, "job_completion_time"))
    display = (_field(fields, header, "name") or _field(fields, header, "display_name")
               or _info_name(_field(fields, header, "info") or _field(fields, header,
                                                                      "check_info"))
               or header.file_test)
    system = _field(fields, header, "system", header.place[0])
    partition = _field(fields, header, "partition", header.place[1])
    # A site format without the environment logs one environment per series.
    environ = _field(fields, header, "environ", "-")
    if not (system and partition and environ):
        raise ValueError("empty system, partition or environ")
    # Runs of one series repeat the same name and attributes: parse them once.
    raw = (display, *[fields[i] for _, i in header.param_columns])
    cached = header.memo.get(raw)
    if cached is None:
        test, params = split_name(display)
        for name, i in header.param_columns:
            value = _param_value(fields[i])
            if value is not None:
                params[name] = value
        cached = header.memo[raw] = (test, params, tuple(sorted(params.items())))
    test, params, param_key = cached
    if not test:
        raise ValueError("empty test name")
    jobid = _field(fields, header, "jobid")
    nodes = _field(fields, header, "job_nodelist")
    attrs = {}
    for name, i in header.attr_columns:
        value = _param_value(fields[i])
        if value is not None:
            attrs[name] = value
    run = Run(float(math.floor(time)), test, params, system, partition, environ, jobid, nodes,
              display, None, source, param_key, attrs)
    numbers = header.numbers
    out = []
    for var, (iv, iu, *rest) in header.perfvar_columns:
        ref, lower, upper, result = (fields[i] if i >= 0 else "" for i in rest)
        try:
            value = float(fields[iv])
        except ValueError:
            try:
                value = _number(fields[iv])
            except ValueError:
                raise ValueError(f"{var}_value {fields[iv]!r} is not a number") from None
        if value is None or not math.isfinite(value):
            continue  # a gap, never a zero
        try:
            limits = numbers.get((ref, lower, upper))
            if limits is None:
                limits = numbers[(ref, lower, upper)] = (
                    _number(ref), _number(lower), _number(upper))
        except ValueError as err:
            raise ValueError(f"{var}: reference or threshold is not a number ({err})") from None
        out.append(Sample(run, var, value, fields[iu].strip(), *limits, result.strip()))
    return out + link_samples(run)


def demote_run_only(samples: Iterable[Sample], columns: Collection[str]) -> None:
    """Move the parameters a site declared run-only (``fabreg ingest --run-only COLUMN``: a
    build id, a queue name) from the series' identity to the run's attributes, in place."""
    if not columns:
        return
    seen: set[int] = set()
    for sample in samples:
        run = sample.run
        if id(run) in seen or not any(c in run.params for c in columns):
            continue
        seen.add(id(run))
        moved = {c: run.params[c] for c in columns if c in run.params}
        run.params = {k: v for k, v in run.params.items() if k not in moved}
        run.param_key = tuple(sorted(run.params.items()))
        run.attrs = {**run.attrs, **moved}
        run.link = None  # its parameters are no longer its sweep's plus two nodes


def _pair_rows(text: str) -> list[dict[str, object]]:
    """The rows of a pair table (``fabreg.schema.PAIR_TABLE``) as field -> value."""
    try:
        table = json.loads(text)
        fields = list(table["fields"])
        return [dict(zip(fields, row)) for row in table["rows"]]
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(f"{PAIR_TABLE} is not a pair table ({err})") from None


def pair_rounds(rows: list[dict[str, object]]) -> str:
    """Which round measured each pair of a pair table (``fabreg.schema.PAIR_ROUNDS``)."""
    nodes: dict[str, int] = {}
    rounds: dict[str, list[int]] = {}
    for row in rows:
        a, b = str(row.get("node_a", "")), str(row.get("node_b", ""))
        if a and b and a != b:
            rounds.setdefault(str(row.get("round") or 0), []).extend(
                (nodes.setdefault(a, len(nodes)), nodes.setdefault(b, len(nodes))))
    return json.dumps({"nodes": list(nodes), "rounds": rounds}, separators=(",", ":"))


def without_pair_table(attrs: dict[str, str], rows: list[dict[str, object]] | None = None
                       ) -> dict[str, str]:
    """A sweep run's attributes with its pair table replaced by the pair rounds: the table's
    figures are stored as the link series, only the rounds are the run's own. ``rows``: the
    table's rows when the caller has parsed them already."""
    if PAIR_TABLE not in attrs:
        return attrs
    kept = {k: v for k, v in attrs.items() if k != PAIR_TABLE}
    kept[PAIR_ROUNDS] = pair_rounds(_pair_rows(attrs[PAIR_TABLE]) if rows is None else rows)
    return kept


def _link_param_key(base: tuple[tuple[str, str], ...], a: str, b: str
                    ) -> tuple[tuple[str, str], ...]:
    """``tuple(sorted({**dict(base), "node_a": a, "node_b": b}.items()))`` of a sorted ``base``
    without either name, by placing the two pairs (a sweep's 150,000 links share ``base``)."""
    i = bisect.bisect_left(base, ("node_a",))
    j = bisect.bisect_left(base, ("node_b",), i)
    return (*base[:i], ("node_a", a), *base[i:j], ("node_b", b), *base[j:])


def link_samples(run: Run) -> list[Sample]:
    """The per-link values of a sweep run (``fabreg.schema.PAIR_TABLE``), one series per link.

    Each row becomes a run of the same job whose parameters add ``node_a``/``node_b``, so the
    store keeps one series per link and metric. The run and its links keep only which round
    measured each pair (:func:`without_pair_table`) instead of the whole table. A malformed
    table is an error of the line.
    """
    text = run.attrs.get(PAIR_TABLE)
    if not text:
        return []
    rows = _pair_rows(text)
    for row in rows:
        if not str(row.get("node_a", "")) or not str(row.get("node_b", "")):
            raise ValueError(f"{PAIR_TABLE} row without node_a/node_b: {row}")
    # One attributes dict for the run and its links: whichever the store keeps has the rounds.
    kept = run.attrs = without_pair_table(run.attrs, rows)
    base = run.param_key
    placed = "node_a" not in run.params and "node_b" not in run.params
    out: list[Sample] = []
    links: dict[tuple[str, str], Run] = {}
    perfvars: dict[str, list[tuple[str, str, str]]] = {}  # pattern -> (metric, perfvar, unit)
    finite = math.isfinite
    for row in rows:
        a, b = str(row["node_a"]), str(row["node_b"])
        link = links.get((a, b))
        if link is None:
            params = {**run.params, "node_a": a, "node_b": b}
            link = links[(a, b)] = Run(
                run.time, run.test, params, run.system, run.partition, run.environ, run.jobid,
                run.nodelist, run.display_name, run.session, run.source,
                param_key=_link_param_key(base, a, b) if placed else None, attrs=kept,
                key=run.key, link=(run, a, b) if placed else None)
        pattern = str(row.get("pattern", ""))
        names = perfvars.get(pattern)
        if names is None:
            names = perfvars[pattern] = [(metric, pair_perfvar(pattern, metric), unit)
                                         for metric, unit in PAIR_METRIC_UNITS.items()]
        for metric, perfvar, unit in names:
            value = row.get(metric)
            if isinstance(value, (int, float)) and finite(value):
                out.append(Sample(link, perfvar, float(value), unit))
    return out


def is_perflog_file(path: Path) -> bool:
    """``X.log``, ``X.log.h0``, ``X.log.h1``... (ReFrame's header-change renames)."""
    name = path.name
    return name.endswith(".log") or re.search(r"\.log\.h\d+$", name) is not None


def is_results_db(path: Path) -> bool:
    return path.suffix == ".db" and path.name != "fabreg.db"


@dataclass
class Inputs:
    """What ingest reads: perflogs, results databases and JSON run reports."""

    perflogs: list[Path] = field(default_factory=list)
    dbs: list[Path] = field(default_factory=list)
    reports: list[Path] = field(default_factory=list)


def is_run_report(path: Path) -> bool:
    """``run-report-*.json`` (ReFrame's name) or any ``.json`` under a directory given."""
    return path.suffix == ".json"


def find_inputs(paths: Iterable[str | os.PathLike[str]]) -> Inputs:
    """Expand files/directories into perflog files, results DBs and run reports, sorted for a
    stable order. A file named on the command line is read whatever its name.

    Raises FileNotFoundError naming the first path that does not exist.
    """
    found = Inputs()
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise FileNotFoundError(str(path))
        candidates = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for cand in candidates:
            if is_results_db(cand):
                found.dbs.append(cand)
            elif is_run_report(cand):
                found.reports.append(cand)
            elif is_perflog_file(cand) or not path.is_dir():
                found.perflogs.append(cand)
    return found


def read_perflog_file(path: Path) -> tuple[list[Sample], list[Problem], int]:
    """One perflog file -> (samples, problems, number of lines)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            lines = stream.readlines()
    except OSError as err:
        return [], [Problem(str(path), 0, f"cannot read: {err.strerror or err}")], 0
    samples, problems = read_perflog_lines(lines, str(path))
    return samples, problems, len(lines)


def read_results_db(path: Path, skip: Collection[str] = frozenset()
                    ) -> tuple[list[Session], list[RunLink], list[Sample], list[Problem]]:
    """ReFrame's results DB -> sessions, run links, and samples for every test case.

    The samples let a results DB stand on its own (no perflogs); when perflogs are
    ingested too, the store keeps one copy of each value (same series, time, job id).
    Sessions whose uuid is in ``skip`` (already in the store: ReFrame never changes a
    stored session) are not read.
    """
    problems: list[Problem] = []
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            wanted = [u for (u,) in conn.execute("SELECT uuid FROM sessions")
                      if u not in skip]
            rows = []
            for i in range(0, len(wanted), 500):
                chunk = wanted[i:i + 500]
                rows += conn.execute(
                    "SELECT uuid, session_start_unix, session_end_unix, json_blob FROM "
                    f"sessions WHERE uuid IN ({','.join('?' * len(chunk))})", chunk).fetchall()
            rows.sort(key=lambda r: (r[1] or 0, r[0]))
        finally:
            conn.close()
    except sqlite3.Error as err:
        return [], [], [], [Problem(str(path), 0, f"not a ReFrame results database ({err})")]
    sessions: list[Session] = []
    links: list[RunLink] = []
    samples: list[Sample] = []
    for uuid, start, end, blob in rows:
        try:
            report = json.loads(blob)
            info = report.get("session_info", {})
        except (TypeError, ValueError, AttributeError) as err:
            problems.append(Problem(str(path), 0, f"session {uuid}: unreadable report ({err})"))
            continue
        extras = {k: str(v) for k, v in info.items() if k not in REFRAME_SESSION_KEYS}
        sessions.append(Session(uuid=uuid, start=float(start or 0), end=float(end or 0),
                                extras=extras))
        for run in report.get("runs", []):
            for case in run.get("testcases", []):
                try:
                    case_samples = case_samples_of(case, uuid, str(path))
                except (TypeError, ValueError, KeyError) as err:
                    problems.append(Problem(str(path), 0,
                                            f"session {uuid}: test case skipped ({err})"))
                    continue
                if case_samples:
                    links.append(RunLink(case_samples[0].run.key, uuid))
                samples.extend(case_samples)
    return sessions, links, samples, problems


def classify_case_attributes(case: dict) -> tuple[dict[str, str], dict[str, str]]:
    """A test case's own attributes -> (series parameters, run attributes).

    ReFrame's bookkeeping identifies nothing; ``fabreg.schema.NOT_PARAMETERS`` describe one
    run; every other loggable variable or parameter names the series.
    """
    params: dict[str, str] = {}
    attrs: dict[str, str] = {}
    for key, value in case.items():
        if key in REFRAME_TESTCASE_ATTRIBUTES or key.startswith("_"):
            continue
        if isinstance(value, dict) and key not in NOT_PARAMETERS:
            continue  # a mapping identifies no series; run attributes keep theirs as JSON
        norm = _param_value(value)
        if norm is None:
            continue
        if key in NOT_PARAMETERS:
            attrs[key] = norm
        else:
            params[key] = norm
    return params, attrs


def param_text(value: object) -> str | None:
    """A parameter's value as the perflog prints it (dicts as JSON), None when unset."""
    return _param_value(value)


def number_or_gap(text: str) -> float | None:
    """A logged value as a float, None for ReFrame's spellings of 'no value'."""
    return _number(text)


def case_samples_of(case: dict, session: str, source: str) -> list[Sample]:
    """One ReFrame 4.x test case (results database or run report) -> its samples."""
    if case.get("job_completion_time_unix") is None or not case.get("perfvalues"):
        return []
    # The perflog's `name` column is the case's `name`; `display_name` may carry ReFrame's
    # internal parameters (`%.repeat_no=1` under --repeat) that identify nothing.
    display = case.get("name") or case["display_name"]
    test, params = split_name(display)
    extra, attrs = classify_case_attributes(case)
    params.update(extra)
    nodelist = case.get("job_nodelist") or ""
    if isinstance(nodelist, list):
        nodelist = ",".join(nodelist)
    # Perflog times have second resolution: truncate so both sources agree.
    run = Run(float(math.floor(case["job_completion_time_unix"])), test, params,
              case["system"], case["partition"], case["environ"], str(case.get("jobid") or ""),
              nodelist, display, session, source, attrs=attrs)
    out = []
    for key, perf in case["perfvalues"].items():
        var = key.split(":")[-1]
        value, ref, lower, upper, unit, result = (list(perf) + [None] * 6)[:6]
        value = _number(str(value)) if value is not None else None
        if value is None:
            continue
        out.append(Sample(run, var, value, unit or "",
                          None if ref is None else float(ref),
                          None if lower is None else float(lower),
                          None if upper is None else float(upper), result or ""))
    return out + link_samples(run)

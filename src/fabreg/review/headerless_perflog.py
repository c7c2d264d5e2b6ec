"""Read headerless ReFrame perflog lines: the 2.x/3.x default and the site layouts built on it.

ReFrame 2.x and 3.x wrote one line per performance variable with no header::

    2020-03-02T10:11:12+01:00|reframe 3.0|StreamTest on daint:gpu using PrgEnv-gnu|jobid=42|
    triad=51234.5|ref=50000 (l=-0.1, u=None)|MB/s

Sites changed that format freely (the unit before ``ref``, ``num_tasks=`` fields, tags after
the unit, ``ref=R|lower=L|upper=U``, ``variables={...}`` JSON, the 3.x/4.x ``Test @sys:part+env``
test info), so fields are recognised by what they hold, never by position: the time is the
first field, the test info is the field that reads ``X on S:P using E`` or ``X @S:P+E``, the
performance value is the ``name=number`` field that stands before the reference (or, without
one, the last such field), the unit is the first plain field after it. Other ``name=value``
fields are parameters of the series unless ReFrame uses them to describe one run
(:data:`RUN_ONLY_KEYS`), exactly as header perflogs classify their columns.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from fabreg.schema import NOT_PARAMETERS, SERIES_PARAMETERS

#: The test-info forms: ReFrame 2.x/3.x ``check_info`` and the 3.x/4.x one.
INFO_ON = re.compile(r"^(?P<name>\S.*?) on (?P<system>[^\s:]+):(?P<partition>\S+) "
                     r"using (?P<environ>\S+)$")
INFO_AT = re.compile(r"^(?P<name>\S.*?) @(?P<system>[^\s:]+):(?P<partition>[^\s+]+)"
                     r"\+(?P<environ>\S+)$")
#: A version field: ``reframe 3.0``, ``3.12.0``, ``4.4.0-dev.1 (rev: 1a2b3c)``.
VERSION = re.compile(r"^(?:reframe\s+)?v?\d+\.\d+(?:\.\d+)?(?:[-+.][\w.]+)*"
                     r"(?:\s*\(rev:\s*[^)]*\))?$", re.IGNORECASE)
KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z_][\w.:-]*)=(?P<value>.*)$", re.DOTALL)
#: ``ref=50000 (l=-0.1, u=None)`` as ReFrame 2.x/3.x format it.
REF_WITH_LIMITS = re.compile(r"^(?P<ref>\S+)\s*\(\s*l\s*=\s*(?P<lower>[^,]*?)\s*,\s*"
                             r"u\s*=\s*(?P<upper>[^)]*?)\s*\)$")
REF_KEYS = frozenset({"ref", "reference", "check_perf_ref"})
LOWER_KEYS = frozenset({"lower", "l", "lower_thres", "thres_lower", "check_perf_lower_thres"})
UPPER_KEYS = frozenset({"upper", "u", "upper_thres", "thres_upper", "check_perf_upper_thres"})
JOB_KEYS = frozenset({"jobid", "job_id", "check_jobid"})
NODELIST_KEYS = frozenset({"nodelist", "job_nodelist", "check_job_nodelist"})
#: ``name=value`` fields that describe one run, not a series: ReFrame's bookkeeping.
RUN_ONLY_KEYS: frozenset[str] = frozenset({
    "variables", "check_variables", "tags", "check_tags", "hashcode", "check_hashcode",
    "result", "check_result", "version", "check_version", "info", "check_info",
    "job_completion_time", "job_submit_time", "time_total", "time_run", "time_setup",
    "time_compile", "time_sanity", "time_performance", "exclusive_access", "descr",
    "maintainers", "modules", "env_vars", "executable", "executable_opts", "sourcesdir",
    "stagedir", "outputdir", "prefix", "uuid", "session_uuid", "unique_name",
    "short_name", "fixture", "perf_var", "check_perf_var",
}) | NOT_PARAMETERS | JOB_KEYS | NODELIST_KEYS
_NULLS = frozenset({"", "none", "null", "nan", "n/a"})
#: A line with two test infos or two job ids: one cut short (a full disk) and the next
#: appended to it. Read as one, it would date the second line's value by the first's time.
RUN_TOGETHER = "two lines run together (the first cut short?): two test infos or job ids"


@dataclass
class HeaderlessLine:
    """What one headerless perflog line says."""

    time_text: str
    test_info: str  # the test name with its ``%param=value`` parts, as logged
    system: str
    partition: str
    environ: str
    perfvar: str
    value: float | None  # None: the variable had no value (a gap)
    unit: str
    ref: float | None
    lower: float | None
    upper: float | None
    jobid: str
    nodelist: str
    params: dict[str, str]
    attrs: dict[str, str]
    layout: str  # which layout the line was recognised as, for ingest's per-file summary


def _number(text: str) -> float | None:
    text = text.strip()
    if text.lower() in _NULLS:
        return None
    number = float(text)
    return number if math.isfinite(number) else None


def _is_number(text: str) -> bool:
    try:
        _number(text)
    except ValueError:
        return False
    return True


#: ReFrame 2.0-2.12's default: ``[TIME] [reframe VER: ]INFO (jobid=N): value: V, reference:
#: (R, L, U)``, one value per line and no variable name (it is logged as ``value``).
BRACKETED = re.compile(
    r"^\[(?P<time>[^\]]+)\]\s+(?:reframe\s+(?P<version>[^:\s]+):\s+)?(?P<info>\S.*?)\s+"
    r"\(jobid=(?P<jobid>[^)]*)\):\s+value:\s+(?P<value>\S+?),\s+reference:\s+"
    r"\((?P<ref>[^,]*),\s*(?P<lower>[^,]*),\s*(?P<upper>[^)]*)\)\s*$")
#: The test info of those lines: ``X on S:P using E``, ``X@S:P using E`` or ``X`` alone.
BRACKETED_INFO = re.compile(r"^(?P<name>\S+?)(?:@| on )(?P<system>[^\s:]+):(?P<partition>\S+)"
                            r" using (?P<environ>\S+)$")


def looks_headerless(line: str, sep: str = "|") -> bool:
    """A line of this family: a test-info field, or ``jobid=``/``ref=`` beside a value."""
    if line.startswith("[") and BRACKETED.match(line):
        return True
    fields = line.split(sep)
    if len(fields) < 3:
        return False
    for field in fields[1:]:
        text = field.strip()
        if INFO_ON.match(text) or INFO_AT.match(text):
            return True
        if text.startswith(("jobid=", "ref=")):
            return True
    return False


def parse_line(line: str, place: tuple[str, str] = ("", ""), sep: str = "|") -> HeaderlessLine:
    """One headerless line -> its parts; ValueError with the reason if it is not one.

    ``place`` is the (system, partition) of the ``<system>/<partition>/`` path, used when
    the line has no test info.
    """
    bracketed = BRACKETED.match(line.rstrip("\r\n"))
    if bracketed:
        return _bracketed(bracketed, place)
    fields = [f.strip() for f in line.rstrip("\r\n").split(sep)]
    while fields and fields[-1] == "":
        fields.pop()
    if len(fields) < 3:
        raise ValueError(f"{len(fields)} field(s): not a perflog line")
    time_text = fields[0]
    info = None
    info_form = ""
    ref = lower = upper = None
    ref_index = -1
    ref_form = "no reference"
    jobid = nodelist = ""
    keyed: list[tuple[int, str, str]] = []  # (index, key, value) of the other name=value
    plain: list[tuple[int, str]] = []
    version = ""
    for i, text in enumerate(fields[1:], start=1):
        kv = KEY_VALUE.match(text)
        if kv is None:
            found, form = INFO_ON.match(text), "'Test on sys:part using env'"
            if found is None:
                found, form = INFO_AT.match(text), "'Test @sys:part+env'"
            if found is not None:
                if info is not None:
                    raise ValueError(RUN_TOGETHER)
                info, info_form = found, form
            elif not version and VERSION.match(text):
                version = text
            else:
                plain.append((i, text))
            continue
        key, value = kv.group("key"), kv.group("value").strip()
        lowered = key.lower()
        if lowered in REF_KEYS:
            ref_index = i
            limits = REF_WITH_LIMITS.match(value)
            try:
                if limits:
                    ref, lower, upper = (_number(limits.group(g))
                                         for g in ("ref", "lower", "upper"))
                    ref_form = "'ref=R (l=L, u=U)'"
                else:
                    ref = _number(value)
                    ref_form = "'ref=R'"
            except ValueError:
                raise ValueError(f"reference {value!r} is not a number") from None
        elif lowered in LOWER_KEYS or lowered in UPPER_KEYS:
            try:
                number = _number(value)
            except ValueError:
                raise ValueError(f"threshold {text!r} is not a number") from None
            if lowered in LOWER_KEYS:
                lower = number
            else:
                upper = number
            ref_form = "'ref=R|lower=L|upper=U'"
        elif lowered in JOB_KEYS:
            if jobid:
                raise ValueError(RUN_TOGETHER)
            jobid = value
        elif lowered in NODELIST_KEYS:
            nodelist = value
        else:
            keyed.append((i, key, value))
    candidates = [(i, k, v) for i, k, v in keyed
                  if k.lower() not in RUN_ONLY_KEYS and k not in SERIES_PARAMETERS
                  and _is_number(v)]
    if ref_index >= 0:
        before = [c for c in candidates if c[0] < ref_index]
        chosen = before[-1] if before else None
    else:
        chosen = candidates[-1] if candidates else None
    if chosen is None:
        raise ValueError("no performance value (a 'name=number' field) in the line")
    var_index, perfvar, raw_value = chosen
    value = _number(raw_value)
    unit_index, unit = next(((i, text) for i, text in plain if i > var_index), (-1, ""))
    # What follows the value's reference and unit is the test's tags ('|%(check_tags)s'),
    # whatever it looks like ('num_procs=3136,Al3x3'): their order must not split a series.
    tags_from = max(var_index, ref_index, unit_index) + 1
    if info is not None:
        test_info = info.group("name").strip()
        system, partition, environ = (info.group(g) for g in ("system", "partition", "environ"))
    else:
        system, partition = place
        environ = "-"
        test_info = ""
    params: dict[str, str] = {}
    attrs: dict[str, str] = {}
    for i, key, text in keyed:
        if i == var_index or i >= tags_from:
            continue
        if key.lower() in RUN_ONLY_KEYS:
            if key.lower() in ("variables", "check_variables"):
                _variables(text)  # a malformed JSON is a problem of the line
            continue
        params[key] = text
    if version:
        attrs["version"] = version
    layout = "headerless " + (info_form or "without test info") + ", " + ref_form
    return HeaderlessLine(time_text, test_info, system, partition, environ, perfvar, value,
                          unit, ref, lower, upper, jobid, nodelist, params, attrs, layout)


#: Where a second line starts inside a line: a timestamp followed by its field separator.
_LINE_START = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[^|]{0,12}\|(?:reframe |v?\d)")


def parse_run_together(line: str, place: tuple[str, str] = ("", ""),
                       sep: str = "|") -> tuple[list[HeaderlessLine], int]:
    """A line that holds two or more lines (the first cut short, or its line end lost).

    It is split where a timestamp starts the next line. A part that ends at or before its
    reference (the cut may have shortened the value or the reference) is not read: only a
    part whose value and reference are followed by another field is known whole. Raises
    ValueError when no part can be read.
    """
    starts = [m.start() for m in _LINE_START.finditer(line) if m.start() > 0]
    bounds = [0, *starts, len(line)]
    parts = [line[a:b] for a, b in zip(bounds, bounds[1:])]
    read: list[HeaderlessLine] = []
    for i, part in enumerate(parts):
        try:
            parsed = parse_line(part, place, sep)
        except ValueError:
            continue
        if i < len(parts) - 1 and not _whole_up_to_reference(part, parsed, sep):
            continue
        read.append(parsed)
    if not read:
        raise ValueError(RUN_TOGETHER)
    return read, len(parts) - len(read)


def _whole_up_to_reference(part: str, parsed: HeaderlessLine, sep: str) -> bool:
    fields = [f.strip() for f in part.split(sep)]
    last_needed = max(i for i, f in enumerate(fields)
                      if f.startswith(f"{parsed.perfvar}=") or f.startswith("ref="))
    return last_needed < len(fields) - 1


def _bracketed(match: re.Match[str], place: tuple[str, str]) -> HeaderlessLine:
    """A ReFrame 2.0-2.12 line (see :data:`BRACKETED`)."""
    info = BRACKETED_INFO.match(match.group("info"))
    if info:
        name, system, partition, environ = (info.group(g) for g in
                                            ("name", "system", "partition", "environ"))
        form = "'[TIME] Test on sys:part using env (jobid=N): value: V'"
    else:
        name, (system, partition), environ = match.group("info"), place, "-"
        form = "'[TIME] Test (jobid=N): value: V'"
    try:
        value, ref, lower, upper = (_number(match.group(g))
                                    for g in ("value", "ref", "lower", "upper"))
    except ValueError:
        raise ValueError("value or reference is not a number") from None
    attrs = {"version": match.group("version")} if match.group("version") else {}
    return HeaderlessLine(match.group("time"), name, system, partition, environ, "value",
                          value, "", ref, lower, upper, match.group("jobid"), "", {}, attrs,
                          "ReFrame 2.x bracketed " + form)


def _variables(text: str) -> dict:
    """The ``variables={...}`` field: JSON that a site logged; it describes the run only."""
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"variables field is not JSON: {text[:40]!r}") from None
    if not isinstance(value, dict):
        raise ValueError("variables field is not a JSON object")
    return value

"""Read ReFrame's JSON run reports (``~/.reframe/reports/run-report-*.json``), 3.x and 4.x.

A run report is the session a results database would hold, written after every ReFrame
session and kept by many CI pipelines. Reports of ReFrame 4.7 and later (``data_version``
4.x) hold the same test cases as the results database and are read by the same code
(:func:`fabreg.review.perflog.case_samples_of`), so a run seen in both, or in a perflog, is
stored once. Reports of ReFrame 3.0-4.6 (``data_version`` 1.x-3.x) name the partition as
``system:partition``, list ``perfvars`` and give no completion time per test case: their
values are dated at the session's end.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from fabreg.review import perflog
from fabreg.review.perflog import (
    REFRAME_SESSION_KEYS,
    Problem,
    Run,
    RunLink,
    Sample,
    Session,
    link_samples,
    parse_time,
    split_name,
)

#: The report layouts read: data_version major -> the ReFrame versions that wrote it.
DATA_VERSIONS: dict[int, str] = {1: "ReFrame 3.0-3.9", 2: "ReFrame 3.10-3.12",
                                 3: "ReFrame 4.0-4.6", 4: "ReFrame 4.7 and later"}


class Report:
    """What one run report held."""

    def __init__(self, layout: str = "") -> None:
        self.layout = layout
        #: its test cases carry no completion time (dated at the session's end)
        self.undated = False
        self.sessions: list[Session] = []
        self.links: list[RunLink] = []
        self.samples: list[Sample] = []
        self.problems: list[Problem] = []


def read_run_report(path: Path) -> Report:
    """One JSON file -> its sessions and samples, or one problem saying why it is not read."""
    source = str(path)
    try:
        with open(path, encoding="utf-8") as stream:
            data = json.load(stream)
    except OSError as err:
        return _failed(source, f"cannot read: {err.strerror or err}")
    except ValueError as err:
        return _failed(source, f"not JSON ({err}): not a ReFrame run report")
    if not isinstance(data, dict) or "session_info" not in data or "runs" not in data:
        return _failed(source, "a JSON file without session_info and runs: not a ReFrame "
                               "run report")
    info = data.get("session_info") or {}
    version = str(info.get("data_version", ""))
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = -1
    if major not in DATA_VERSIONS:
        known = ", ".join(f"{m}.x" for m in DATA_VERSIONS)
        return _failed(source, f"run report data_version {version or 'missing'!r} is not one "
                               f"this reads ({known})")
    report = Report(f"JSON run report, data_version {version} ({DATA_VERSIONS[major]})")
    report.undated = major < 4
    try:
        session = _session(info, source)
    except (TypeError, ValueError) as err:
        return _failed(source, f"session_info unreadable ({err})")
    report.sessions.append(session)
    for run in data.get("runs") or []:
        for case in (run or {}).get("testcases") or []:
            try:
                if "perfvalues" in case:
                    samples = perflog.case_samples_of(case, session.uuid, source)
                else:
                    samples = _case_samples_perfvars(case, session, source)
            except (TypeError, ValueError, KeyError, AttributeError) as err:
                name = case.get("name", "?") if isinstance(case, dict) else "?"
                report.problems.append(Problem(source, 0, f"test case {name} skipped ({err})"))
                continue
            if samples:
                report.links.append(RunLink(samples[0].run.key, session.uuid))
            report.samples.extend(samples)
    return report


def job_prefix(run: Run) -> str | None:
    """The run key without its time, for a run that has a job id (else None)."""
    if not run.jobid:
        return None
    return run.key[:run.key.rindex("|") + 1]


def drop_runs_stored_from_perflogs(report: Report, stored: dict[str, str]) -> int:
    """Leave out the report's undated runs that a perflog already gave the store (same test,
    place and job): link their perflog runs to the report's session instead. Returns the
    number of values left out."""
    kept, dropped, linked = [], 0, set()
    for sample in report.samples:
        prefix = job_prefix(sample.run) if sample.run.session else None
        perflog_run = stored.get(prefix) if prefix else None
        if perflog_run is None:
            kept.append(sample)
            continue
        dropped += 1
        if perflog_run not in linked:
            linked.add(perflog_run)
            report.links.append(RunLink(perflog_run, sample.run.session))
    kept_runs = {s.run.key for s in kept}
    report.links = [link for link in report.links
                    if link.run_key in linked or link.run_key in kept_runs]
    report.samples = kept
    return dropped


def _failed(source: str, reason: str) -> Report:
    report = Report()
    report.problems.append(Problem(source, 0, reason))
    return report


def _time(value: object) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    return parse_time(str(value))


def _session(info: dict, source: str) -> Session:
    start = _time(info.get("time_start_unix") or info["time_start"])
    end = _time(info.get("time_end_unix") or info.get("time_end") or start)
    uuid = info.get("uuid")
    if not uuid:
        # ReFrame 3.x reports carry no session id: one stable id per report's content.
        stamp = f"{info.get('hostname', '')}|{info.get('time_start', '')}|{info.get('cmdline', '')}"
        uuid = "report-" + hashlib.sha1(stamp.encode()).hexdigest()[:16]
    extras = {k: str(v) for k, v in info.items() if k not in REFRAME_SESSION_KEYS}
    return Session(uuid=str(uuid), start=start, end=end, extras=extras)


def _case_samples_perfvars(case: dict, session: Session, source: str) -> list[Sample]:
    """A ReFrame 3.0-4.6 test case: ``system`` is ``sys:part``, values in ``perfvars``."""
    perfvars = case.get("perfvars") or []
    if not perfvars:
        return []
    system, _, partition = str(case["system"]).partition(":")
    environ = case.get("environment") or case.get("environ") or "-"
    display = case.get("display_name") or case["name"]
    test, params = split_name(display)
    extra_params, attrs = perflog.classify_case_attributes(case.get("check_vars") or {})
    params.update(extra_params)
    # The parameters as the report holds them: a value with spaces (a dict) cannot be told
    # from the display name, which splits it.
    for key, value in (case.get("check_params") or {}).items():
        norm = perflog.param_text(value)
        if norm is None:
            params.pop(key, None)
        else:
            params[key] = norm
    nodelist = case.get("nodelist") or ""
    if isinstance(nodelist, list):
        nodelist = ",".join(str(n) for n in nodelist)
    run = Run(float(math.floor(session.end)), test, params, system, partition or "default",
              environ, str(case.get("jobid") or ""), nodelist, display, session.uuid, source,
              attrs=attrs)
    out = []
    for perf in perfvars:
        value = perf.get("value")
        number = None if value is None else perflog.number_or_gap(str(value))
        if number is None:
            continue
        out.append(Sample(run, str(perf["name"]), number, perf.get("unit") or "",
                          _optional(perf.get("reference")), _optional(perf.get("thres_lower")),
                          _optional(perf.get("thres_upper")), case.get("result") or ""))
    return out + link_samples(run)


def _optional(value: object) -> float | None:
    if value is None:
        return None
    return perflog.number_or_gap(str(value))

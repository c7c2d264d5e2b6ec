"""The perflog reader: format, bad input, gaps, header changes, property tests."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fabreg import schema
from fabreg.review import perflog

HEADER = ("job_completion_time|reframe version|name|system|partition|environ|jobid|"
          "job_nodelist|result|benchmark|hashcode|mpi|num_nodes|num_tasks|num_tasks_per_node|"
          "tags|transport|latency_8B_value|latency_8B_unit|latency_8B_ref|"
          "latency_8B_lower_thres|latency_8B_upper_thres|latency_8B_result|"
          "bandwidth_1MB_value|bandwidth_1MB_unit|bandwidth_1MB_ref|"
          "bandwidth_1MB_lower_thres|bandwidth_1MB_upper_thres|bandwidth_1MB_result")


def line(time="2026-11-21T05:53:57+00:00", name="OsuLatency %transport=shm", lat="1.5",
         bw="9000.0", result="pass", env="openmpi") -> str:
    return (f"{time}|reframe 4.10.4|{name}|local|default|{env}|5062|vm|{result}|osu_latency|"
            f"ae6cbeb7|{env}|1|2|null|quick|shm|{lat}|us|1.0|None|0.1|fail|"
            f"{bw}|MB/s|0|None|None|pass")


def test_reads_values_units_references_and_parameters():
    samples, problems = perflog.read_perflog_lines([HEADER, line()], "x.log")
    assert problems == []
    assert [(s.perfvar, s.value, s.unit) for s in samples] == [
        ("latency_8B", 1.5, "us"), ("bandwidth_1MB", 9000.0, "MB/s")]
    lat = samples[0]
    assert lat.ref == 1.0 and lat.lower_thres is None and lat.upper_thres == 0.1
    assert lat.result == "fail"  # the failed value is kept: it is the regression
    assert lat.test == "OsuLatency"
    assert lat.params == {"transport": "shm", "benchmark": "osu_latency", "mpi": "openmpi",
                          "num_nodes": "1", "num_tasks": "2"}  # no hashcode, tags, nulls
    assert lat.time == datetime(2026, 11, 21, 5, 53, 57, tzinfo=timezone.utc).timestamp()
    assert lat.run.jobid == "5062" and lat.run.nodelist == "vm"


def test_missing_value_is_a_gap_not_a_zero():
    samples, problems = perflog.read_perflog_lines([HEADER, line(lat=""), line(bw="None")],
                                                   "x.log")
    assert problems == []
    assert sorted(s.perfvar for s in samples) == ["bandwidth_1MB", "latency_8B"]
    assert all(s.value != 0 for s in samples)


def test_malformed_lines_are_skipped_with_file_line_and_reason_good_lines_kept():
    lines = [HEADER, line(), "garbage without separators", line(lat="fast"),
             line(time="yesterday"), line(name=""), line()[:-5], line(lat="2.0")]
    samples, problems = perflog.read_perflog_lines(lines, "p/x.log")
    assert [s.value for s in samples if s.perfvar == "latency_8B"] == [1.5, 2.0]
    assert [p.line for p in problems] == [3, 4, 5, 6, 7]
    texts = [str(p) for p in problems]
    assert texts[0].startswith("p/x.log:3: ") and "fields" in texts[0]
    assert "latency_8B_value 'fast' is not a number" in texts[1]
    assert "not ISO 8601" in texts[2]
    assert "empty test name" in texts[3]


def test_header_change_mid_file_switches_columns():
    other = HEADER.replace("|tags|", "|").replace("bandwidth_1MB", "busbw_1MB")
    short = line().replace("|quick|", "|")
    samples, problems = perflog.read_perflog_lines([HEADER, line(), other, short], "x.log")
    assert problems == []
    assert [s.perfvar for s in samples] == ["latency_8B", "bandwidth_1MB", "latency_8B",
                                            "busbw_1MB"]


def test_unknown_columns_are_parameters_and_missing_required_columns_are_reported():
    extra = HEADER.replace("|transport|", "|transport|provider|")
    with_provider = line().replace("|shm|1.5|", "|shm|probes|1.5|")
    samples, _ = perflog.read_perflog_lines([extra, with_provider], "x.log")
    assert samples[0].params["provider"] == "probes"
    broken = HEADER.replace("system|", "")
    samples, problems = perflog.read_perflog_lines([broken, line()], "y.log")
    assert samples == []
    assert "header lacks column(s) system" in str(problems[0])
    assert "before any valid header" in str(problems[1])


def test_run_attributes_do_not_split_series():
    header = HEADER.replace("|transport|", "|ref_status|transport|transport_used|")
    ok = line().replace("|shm|1.5|", "|ok|shm|shm|1.5|")
    bad = line(lat="3.0").replace("|shm|3.0|", "|fail|shm|tcp|3.0|")
    samples, problems = perflog.read_perflog_lines([header, ok, bad], "x.log")
    assert problems == []
    assert samples[0].params == samples[2].params
    assert "ref_status" not in samples[0].params
    assert samples[0].run.attrs == {"ref_status": "ok", "transport_used": "shm"}
    assert samples[2].run.attrs == {"ref_status": "fail", "transport_used": "tcp"}


def test_reference_keys_are_a_run_attribute_kept_as_logged():
    header = HEADER.replace("|transport|", "|ref_keys|transport|")
    keys = ('{"latency_8B": {"benchmark": "osu_latency", "metric": "latency", "size": 8, '
            '"mpi": "openmpi", "transport": "shm", "nodes": 1}}')
    samples, problems = perflog.read_perflog_lines(
        [header, line().replace("|shm|1.5|", f"|{keys}|shm|1.5|")], "x.log")
    assert problems == []
    assert "ref_keys" not in samples[0].params
    assert samples[0].run.attrs == {"ref_keys": keys}


def test_test_names_and_parameters():
    assert perflog.split_name("OsuAllreduce %transport=shm %nodes=2") == (
        "OsuAllreduce", {"transport": "shm", "nodes": "2"})
    # ReFrame's own '--repeat' parameter identifies nothing.
    assert perflog.split_name("A %transport=tcp %.repeat_no=3") == ("A", {"transport": "tcp"})


def test_timestamps_without_timezone_are_utc():
    assert perflog.parse_time("2026-01-02T03:04:05") == perflog.parse_time(
        "2026-01-02T03:04:05+00:00")
    assert perflog.parse_time("2026-01-02T03:04:05Z") == perflog.parse_time(
        "2026-01-02T03:04:05+0000")
    assert perflog.parse_time("2026-01-02T05:04:05+02:00") == perflog.parse_time(
        "2026-01-02T03:04:05")


def test_finds_rotated_header_files_and_results_db(tmp_path: Path):
    d = tmp_path / "local" / "default"
    d.mkdir(parents=True)
    for name in ("A.log", "A.log.h0", "A.log.h1", "notes.txt"):
        (d / name).write_text(HEADER + "\n")
    (tmp_path / "results.db").write_bytes(b"")
    (tmp_path / "fabreg.db").write_bytes(b"")
    (tmp_path / "run-report-1.json").write_text("{}")
    found = perflog.find_inputs([tmp_path])
    assert sorted(p.name for p in found.perflogs) == ["A.log", "A.log.h0", "A.log.h1"]
    assert [p.name for p in found.dbs] == ["results.db"]
    assert [p.name for p in found.reports] == ["run-report-1.json"]


def test_unreadable_results_db_is_a_problem_not_a_crash(tmp_path: Path):
    bad = tmp_path / "results.db"
    bad.write_text("this is not sqlite")
    sessions, links, samples, problems = perflog.read_results_db(bad)
    assert (sessions, links, samples) == ([], [], [])
    assert "not a ReFrame results database" in str(problems[0])


# -- property-based ---------------------------------------------------------------------

names = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_",
                min_size=1, max_size=12)
values = st.one_of(st.none(), st.floats(min_value=-1e12, max_value=1e12, allow_nan=False,
                                        allow_infinity=False))
words = st.text(alphabet=st.characters(blacklist_characters="|\r\n\x0b\x0c\x1c\x1d\x1e\x85"
                                       "\u2028\u2029", blacklist_categories=("Cs",)),
                max_size=10)


#: Column names the reader takes as describing one run (or the test itself), not a series.
RUN_ONLY_NAMES = (schema.NOT_PARAMETERS | perflog.REFRAME_LOGGING_ATTRIBUTES
                  | (perflog.REFRAME_TESTCASE_ATTRIBUTES - schema.SERIES_PARAMETERS)
                  | {"name", "display_name", "job_completion_time_unix"})


@st.composite
def perflog_text(draw):
    params = draw(st.dictionaries(names.filter(lambda n: not n.endswith("_value")
                                               and n not in perflog.FIXED_COLUMNS
                                               and n not in RUN_ONLY_NAMES),
                                  names, max_size=3))
    perfvars = draw(st.lists(names.map(lambda n: "v" + n), min_size=1, max_size=3,
                             unique=True))
    cols = list(perflog.FIXED_COLUMNS) + sorted(params)
    for v in perfvars:
        cols += [v + s for s in perflog.PERFVAR_SUFFIXES]
    rows = []
    for _ in range(draw(st.integers(1, 5))):
        stamp = draw(st.integers(946_684_800, 4_102_444_799))  # 2000-2100: a run's time
        vals = [draw(values) for _ in perfvars]
        test = draw(names)
        rows.append((stamp, test, vals))
    lines = ["|".join(cols)]
    for stamp, test, vals in rows:
        when = datetime.fromtimestamp(stamp, timezone.utc).isoformat()
        fields = [when, "reframe 4.10.4", test, "sys", "part", "env", "1", "n1", "pass"]
        fields += [params[k] for k in sorted(params)]
        for v in vals:
            fields += ["None" if v is None else repr(v), "us", "0", "None", "None", "pass"]
        lines.append("|".join(fields))
    return lines, params, perfvars, rows


@settings(max_examples=200, deadline=None)
@given(perflog_text())
def test_property_every_written_value_is_read_back_exactly(case):
    lines, params, perfvars, rows = case
    samples, problems = perflog.read_perflog_lines(lines, "gen.log")
    assert problems == []
    expected = [(float(stamp), test, var, v) for stamp, test, vals in rows
                for var, v in zip(perfvars, vals) if v is not None]
    assert [(s.time, s.test, s.perfvar, s.value) for s in samples] == expected
    written = {k: v for k, v in params.items() if v not in ("None", "null")}  # = unset
    for s in samples:
        assert s.params == written


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(words, st.lists(words, max_size=12).map("|".join)), max_size=8))
def test_property_garbage_never_crashes_and_every_line_is_accounted_for(garbage):
    lines = [HEADER, *garbage, line()]
    samples, problems = perflog.read_perflog_lines(lines, "fuzz.log")
    assert any(s.value == 1.5 for s in samples)  # the good last line survives
    for p in problems:
        assert 1 <= p.line <= len(lines) and p.reason
    for s in samples:
        assert math.isfinite(s.value) and s.test


@given(st.dictionaries(st.text().filter(lambda n: n not in ("node_a", "node_b")), st.text()),
       st.text(), st.text())
def test_a_link_key_is_its_parameters_sorted(params, a, b):
    """A sweep's link runs place node_a/node_b into their run's sorted parameters: the same
    key as sorting them, or a link's series would split."""
    base = tuple(sorted(params.items()))
    assert perflog._link_param_key(base, a, b) == tuple(
        sorted({**params, "node_a": a, "node_b": b}.items()))

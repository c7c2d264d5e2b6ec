"""Perflog layouts a site's history holds, and the bad input that comes with years of files.

Each case is a line in a layout ReFrame 2.x-4.x or a site's ``format`` writes (the real
published ones are in tests/data/real/perflogs/, read by test_real_perflogs.py); here each
variant is pinned down alone, with what must never happen: a value in the wrong series,
under the wrong variable, or at the wrong time.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import fabreg

from fabreg.review import perflog, run_report

DEFAULT_3X = ("2020-06-24T00:27:06|reframe 3.1-dev0 (rev: 9d92d0ec)|StreamWithRefTest on "
              "catalina:default using gnu|jobid=58384|Copy=24762.2|ref=25200 (l=-0.05, u=0.05)|"
              "MB/s")


def read(lines: list[str], source: str = "sys/part/Test.log"):
    return perflog.read_perflog_lines(lines, source)


def test_reframe_3x_default_line_gives_its_value_reference_and_thresholds():
    samples, problems = read([DEFAULT_3X])
    assert problems == []
    (s,) = samples
    assert (s.test, s.run.system, s.run.partition, s.run.environ) == (
        "StreamWithRefTest", "catalina", "default", "gnu")
    assert (s.perfvar, s.value, s.unit) == ("Copy", 24762.2, "MB/s")
    assert (s.ref, s.lower_thres, s.upper_thres) == (25200.0, -0.05, 0.05)
    assert s.run.jobid == "58384"
    assert s.params == {}


@pytest.mark.parametrize("line, perfvar, value, unit, params", [
    # the unit before ref
    ("2021-01-05T10:00:00+01:00|reframe 3.3|Osu on s:p using e|jobid=7|bw=9.5|GB/s|"
     "ref=10 (l=-0.1, u=None)", "bw", 9.5, "GB/s", {}),
    # num_tasks= before the value, tags after the unit
    ("2021-01-05T10:00:00+01:00|reframe 3.3|Osu on s:p using e|jobid=7|num_tasks=4|bw=9.5|"
     "ref=10 (l=-0.1, u=0.1)|GB/s|osu,benchmark", "bw", 9.5, "GB/s", {"num_tasks": "4"}),
    # ref=R|lower=L|upper=U
    ("2021-01-05T10:00:00+01:00|reframe 3.3|Osu on s:p using e|jobid=7|bw=9.5|ref=10|"
     "lower=-0.1|upper=0.1|GB/s", "bw", 9.5, "GB/s", {}),
    # the 3.x/4.x test info with parameters and hash, version without 'reframe '
    ("2023-02-01T08:00:00|4.0.1|Osu %mpi=ompi %size=8 /a1b2c3d4 @s:p+e|jobid=7|lat=1.2|"
     "ref=1 (l=None, u=0.5)|us", "lat", 1.2, "us", {"mpi": "ompi", "size": "8"}),
    # a site's own name=value fields and a variables={...} JSON field
    ("2022-07-01T00:00:00+0000|reframe 3.12.0|Osu on s:p using e|jobid=7|nodelist=n[1-2]|"
     'variables={"num_tasks": 2, "valid_systems": ["*"]}|queue=debug|bw=9.5|'
     "ref=10 (l=-0.1, u=0.1)|GB/s", "bw", 9.5, "GB/s", {"queue": "debug"}),
])
def test_headerless_site_variants(line, perfvar, value, unit, params):
    samples, problems = read([line])
    assert problems == []
    (s,) = samples
    assert (s.perfvar, s.value, s.unit, s.params) == (perfvar, value, unit, params)
    assert (s.run.system, s.run.partition, s.run.environ) == ("s", "p", "e")


def test_a_new_reframe_version_or_revision_does_not_start_a_new_series(tmp_path: Path):
    night1 = DEFAULT_3X
    night2 = DEFAULT_3X.replace("2020-06-24T00:27:06", "2020-06-25T00:27:06").replace(
        "reframe 3.1-dev0 (rev: 9d92d0ec)", "reframe 3.2").replace("58384", "58999")
    header = ("job_completion_time|version|info|jobid|num_tasks|display_name|system|partition|"
              "environ|bw_value|bw_unit|bw_ref|bw_lower_thres|bw_upper_thres|bw_result")

    def row(day: str, version: str, hash_: str) -> str:
        return (f"2023-05-0{day}T01:00:00|{version}|Osu %n=2 /{hash_} @s:p+e|1{day}|2|Osu %n=2|"
                f"s|p|e|9.{day}|GB/s|10|-0.1|0.1|pass")

    log = tmp_path / "s" / "p" / "Mixed.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join([night1, night2, header, row("1", "4.3.2", "aaaa1111"),
                              row("2", "4.4.0", "bbbb2222")]) + "\n")
    db = tmp_path / "f.db"
    proc = fabreg("ingest", str(log), db=db, check=True)
    assert "4 new value(s)" in proc.stdout
    with sqlite3.connect(db) as conn:
        series = conn.execute("SELECT test, params, perfvar FROM series ORDER BY 1, 2").fetchall()
    assert series == [("Osu", json.dumps({"n": "2", "num_tasks": "2"}), "bw"),
                      ("StreamWithRefTest", "{}", "Copy")]
    # The file changed layout midway: both layouts named, with their lines.
    assert "headerless 'Test on sys:part using env', 'ref=R (l=L, u=U)': 2 line(s)" in proc.stderr
    assert "header, '|'-separated, 15 columns: 2 line(s)" in proc.stderr


@pytest.mark.parametrize("sep", [",", ";", "\t"])
def test_header_perflogs_with_any_separator_and_a_combined_system_partition_column(sep):
    header = sep.join(["job_completion_time", "version", "display_name", "system:partition",
                       "environ", "bw_value", "bw_unit", "bw_ref"])
    line = sep.join(["2024-03-01T02:00:00+01:00", "4.5.2", "Osu %mpi=ompi", "daint:gpu",
                     "gnu", "9.5", "GB/s", "10"])
    samples, problems = read([header, line])
    assert problems == []
    (s,) = samples
    assert (s.run.system, s.run.partition, s.run.environ) == ("daint", "gpu", "gnu")
    assert (s.test, s.params, s.perfvar, s.value, s.ref) == ("Osu", {"mpi": "ompi"}, "bw",
                                                             9.5, 10.0)


def test_the_test_name_comes_from_the_file_name_where_no_column_holds_it():
    header = "job_completion_time|system|partition|environ|bw_value|bw_unit"
    samples, problems = read([header, "2024-03-01T02:00:00|s|p|e|9.5|GB/s"],
                             "perflogs/s/p/OsuBandwidth.log.h0")
    assert problems == []
    assert samples[0].test == "OsuBandwidth"


def test_a_node_list_spilling_into_extra_columns_of_a_comma_layout_is_reported():
    header = "job_completion_time,display_name,system,partition,environ,job_nodelist," \
             "bw_value,bw_unit"
    good = "2024-03-01T02:00:00,Osu,s,p,e,nid001,9.5,GB/s"
    spilled = "2024-03-02T02:00:00,Osu,s,p,e,nid001,nid002,9.7,GB/s"
    samples, problems = read([header, good, spilled])
    assert [s.value for s in samples] == [9.5]  # never 'nid002' as a value, nor 9.7 as a unit
    assert len(problems) == 1 and problems[0].line == 3
    assert "9 fields, header has 8 (a list field with ','" in problems[0].reason


def test_a_value_column_holding_text_is_reported_and_the_good_lines_kept():
    header = "job_completion_time|display_name|system|partition|environ|bw_value|bw_unit"
    samples, problems = read([header, "2024-03-01T02:00:00|Osu|s|p|e|fast|GB/s",
                              "2024-03-02T02:00:00|Osu|s|p|e|9.5|GB/s"])
    assert [s.value for s in samples] == [9.5]
    assert "bw_value 'fast' is not a number" in str(problems[0])
    samples, problems = read([DEFAULT_3X.replace("Copy=24762.2", "Copy=fast")])
    assert samples == []
    assert "no performance value" in str(problems[0])


def night(day: int, value: str) -> str:
    return DEFAULT_3X.replace("2020-06-24", f"2020-06-{day}").replace(
        "58384", f"5{day}00").replace("24762.2", value)


def test_a_line_cut_short_and_run_into_the_next_keeps_the_next_and_reports_the_cut():
    cut = night(24, "24762.2")
    cut = cut[:cut.index("Copy=24762.2") + len("Copy=24")]
    samples, problems = read([cut + night(25, "23000.0"), night(26, "23500.0")])
    # never 24 (the cut value) at the first night's time, nor 23000 at the first night's
    assert [(s.time, s.value) for s in samples] == [
        (perflog.parse_time("2020-06-25T00:27:06"), 23000.0),
        (perflog.parse_time("2020-06-26T00:27:06"), 23500.0)]
    assert [s.run.jobid for s in samples] == ["52500", "52600"]
    assert problems[0].line == 1
    assert "two lines run together" in problems[0].reason
    assert "1 of its 2 lines read, the one cut short left out" in problems[0].reason


def test_a_whole_line_whose_line_end_was_lost_is_read_with_the_next():
    whole = night(24, "24762.2") + "|tag1"  # a field after the unit: the line was whole
    samples, problems = read([whole + night(25, "23000.0")])
    assert problems == []
    assert [s.value for s in samples] == [24762.2, 23000.0]


def test_files_that_are_not_perflogs_or_reports_say_so_in_one_line(tmp_path: Path):
    notes = tmp_path / "notes.log"
    notes.write_text("\n".join(f"line {i} of some other log" for i in range(500)) + "\n")
    other = tmp_path / "package.json"
    other.write_text(json.dumps({"name": "x", "version": "1.0"}))
    future = tmp_path / "run-report-9.json"
    future.write_text(json.dumps({"session_info": {"data_version": "9.0"}, "runs": []}))
    db = tmp_path / "f.db"
    proc = fabreg("ingest", str(notes), str(other), str(future), db=db)
    assert proc.returncode == 1
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("fabreg: skipped")]
    assert len(skipped) == 3, proc.stderr
    assert "not a perflog: none of its 500 line(s) is in a ReFrame layout" in proc.stderr
    assert "without session_info and runs: not a ReFrame run report" in proc.stderr
    assert "data_version '9.0' is not one this reads" in proc.stderr


def test_a_reframe_3x_run_report_gives_its_values_at_the_sessions_end(tmp_path: Path):
    report = {
        "session_info": {"data_version": "2.2", "hostname": "login1",
                         "time_start": "2022-03-01T10:00:00+0100",
                         "time_end": "2022-03-01T10:05:00+0100", "cmdline": "reframe -r"},
        "runs": [{"testcases": [
            {"name": "StreamTest", "display_name": "StreamTest", "system": "daint:gpu",
             "environment": "gnu", "jobid": "77", "nodelist": ["nid1"], "result": "success",
             "check_params": {}, "check_vars": {"num_tasks": 1, "descr": "stream"},
             "perfvars": [{"name": "triad", "reference": 50000, "thres_lower": -0.1,
                           "thres_upper": None, "unit": "MB/s", "value": 51234.5},
                          {"name": "copy", "reference": 0, "thres_lower": None,
                           "thres_upper": None, "unit": "MB/s", "value": None}]},
            {"name": "Skipped", "system": "daint:gpu", "environment": "gnu",
             "perfvars": None}]}]}
    path = tmp_path / "run-report.json"
    path.write_text(json.dumps(report))
    read_back = run_report.read_run_report(path)
    assert read_back.problems == []
    assert "ReFrame 3.10-3.12" in read_back.layout
    (s,) = read_back.samples  # copy had no value: a gap
    assert (s.test, s.run.system, s.run.partition, s.run.environ) == (
        "StreamTest", "daint", "gpu", "gnu")
    assert (s.perfvar, s.value, s.ref, s.lower_thres, s.upper_thres) == (
        "triad", 51234.5, 50000.0, -0.1, None)
    assert s.time == perflog.parse_time("2022-03-01T10:05:00+0100")
    assert s.params == {"num_tasks": "1"}


SITE_FORMAT = ("%(check_job_completion_time)s %(check_name)s@%(check_system)s:"
               "%(check_partition)s+%(check_environ)s job %(check_jobid)s: %(check_perf_value)s "
               "%(check_perf_unit)s (%(check_perf_var)s, ref %(check_perf_ref)s)")
SITE_CONFIG = f"""
logging:
  - handlers_perflog:
      - type: filelog
        prefix: '%(check_system)s/%(check_partition)s'
        format: '{SITE_FORMAT}'
        datefmt: '%d/%m/%Y %H:%M:%S'
"""


def test_a_layout_no_rule_knows_is_read_by_the_sites_own_reframe_config(tmp_path: Path):
    config = tmp_path / "site.yaml"
    config.write_text(SITE_CONFIG)
    log = tmp_path / "daint" / "gpu" / "Osu.log"
    log.parent.mkdir(parents=True)
    log.write_text("24/11/2026 01:02:03 Osu@daint:gpu+gnu job 42: 9.5 GB/s (bw, ref 10)\n"
                   "25/11/2026 01:02:03 Osu@daint:gpu+gnu job 43: 9.4 GB/s (bw, ref 10)\n")
    db = tmp_path / "f.db"
    without = fabreg("ingest", str(log), db=db)
    assert "not a perflog" in without.stderr and "0 new value(s)" in without.stdout
    proc = fabreg("ingest", "--reframe-config", str(config), str(log), db=tmp_path / "g.db",
                  check=True)
    assert "2 new value(s)" in proc.stdout
    assert "the site's format" in proc.stderr
    with sqlite3.connect(tmp_path / "g.db") as conn:
        rows = conn.execute("SELECT test, system, partition, environ, perfvar, time, value, "
                            "ref FROM long ORDER BY time").fetchall()
    assert rows[0] == ("Osu", "daint", "gpu", "gnu", "bw",
                       perflog.parse_time("2026-11-24T01:02:03"), 9.5, 10.0)
    assert len(rows) == 2


def test_a_reframe_config_without_a_usable_format_is_one_line(tmp_path: Path):
    config = tmp_path / "site.py"
    config.write_text("site_configuration = {'logging': [{'handlers_perflog': [\n"
                      "  {'type': 'filelog', 'format': '%(check_job_completion_time)s|"
                      "%(check_perfvalues)s'}]}]}\n")
    proc = fabreg("ingest", "--reframe-config", str(config), str(tmp_path), db=tmp_path / "f.db")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "no perflog format to read by" in proc.stderr
    assert "header line, which ingest reads without the configuration" in proc.stderr


def test_a_run_in_a_perflog_and_an_undated_run_report_is_stored_once(tmp_path: Path):
    """ReFrame 3.0-4.6 reports give no completion time: the job id finds the perflog's run."""
    log = tmp_path / "logs" / "daint" / "gpu" / "StreamTest.log"
    log.parent.mkdir(parents=True)
    log.write_text("2022-03-01T10:04:12+01:00|reframe 3.12.0|StreamTest on daint:gpu using "
                   "gnu|jobid=77|triad=51234.5|ref=50000 (l=-0.1, u=None)|MB/s\n")
    report = {"session_info": {"data_version": "2.2", "hostname": "login1",
                               "time_start": "2022-03-01T10:00:00+0100",
                               "time_end": "2022-03-01T10:05:00+0100", "cmdline": "reframe -r",
                               "change": "fw-2.1"},
              "runs": [{"testcases": [
                  {"name": "StreamTest", "display_name": "StreamTest", "system": "daint:gpu",
                   "environment": "gnu", "jobid": "77", "result": "success",
                   "perfvars": [{"name": "triad", "reference": 50000, "thres_lower": -0.1,
                                 "thres_upper": None, "unit": "MB/s", "value": 51234.5}]},
                  {"name": "Other", "display_name": "Other", "system": "daint:gpu",
                   "environment": "gnu", "jobid": "78", "result": "success",
                   "perfvars": [{"name": "t", "reference": 0, "thres_lower": None,
                                 "thres_upper": None, "unit": "s", "value": 3.5}]}]}]}
    (tmp_path / "logs" / "run-report-1.json").write_text(json.dumps(report))
    db = tmp_path / "f.db"
    proc = fabreg("ingest", str(tmp_path / "logs"), db=db, check=True)
    assert "2 new value(s)" in proc.stdout  # triad once (from the perflog), Other's t
    with sqlite3.connect(db) as conn:
        sessions = dict(conn.execute("SELECT test, session FROM long").fetchall())
        extras = conn.execute("SELECT extras FROM sessions").fetchone()[0]
    assert sessions["StreamTest"] == sessions["Other"]  # the perflog run joined the session
    assert json.loads(extras)["change"] == "fw-2.1"


def test_fabreg_sessions_names_the_column_that_split_a_series(tmp_path: Path):
    header = "job_completion_time|display_name|system|partition|environ|{extra}bw_value|bw_unit"
    log = tmp_path / "s" / "p" / "Osu.log"
    log.parent.mkdir(parents=True)
    lines = [header.format(extra="")]
    lines += [f"2024-03-0{d}T02:00:00|Osu|s|p|e|9.{d}|GB/s" for d in (1, 2, 3)]
    lines += [header.format(extra="build_id|")]  # the site added a column in March
    lines += [f"2024-03-0{d}T02:00:00|Osu|s|p|e|b17|9.{d}|GB/s" for d in (4, 5)]
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "f.db"
    fabreg("ingest", str(log), db=db, check=True)
    proc = fabreg("sessions", db=db, check=True)
    assert "series split by a changed column (1)" in proc.stdout
    assert ("2024-03-04T02:00:00Z  Osu bw on s:p+e: column 'build_id' changed (absent) -> b17"
            in proc.stdout)


def test_a_column_the_site_declares_run_only_never_splits_a_series_and_is_remembered(
        tmp_path: Path):
    header = "job_completion_time|display_name|system|partition|environ|build_id|bw_value|bw_unit"
    log = tmp_path / "s" / "p" / "Osu.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join([header, "2024-03-01T02:00:00|Osu|s|p|e|b16|9.1|GB/s",
                              "2024-03-02T02:00:00|Osu|s|p|e|b17|9.2|GB/s"]) + "\n")
    db = tmp_path / "f.db"
    fabreg("ingest", "--run-only", "build_id", str(log), db=db, check=True)
    with log.open("a") as more:  # the next night, ingested without the flag
        more.write("2024-03-03T02:00:00|Osu|s|p|e|b18|9.3|GB/s\n")
    fabreg("ingest", str(log), db=db, check=True)
    with sqlite3.connect(db) as conn:
        series = conn.execute("SELECT params FROM series").fetchall()
        builds = [json.loads(a)["build_id"] for (a,) in conn.execute(
            "SELECT attrs FROM runs ORDER BY time")]
        values = conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert series == [("{}",)] and values == 3
    assert builds == ["b16", "b17", "b18"]  # kept per run
    assert "split by a changed column" not in fabreg("sessions", db=db, check=True).stdout

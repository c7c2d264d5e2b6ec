"""Public ReFrame perflogs and run reports (tests/data/real/perflogs/) read as a person counts them.

Each row of the folder's INDEX.md says how many values and series a person reading the file
counts, how many values the reader must store (fewer only where a line is bad input) and how
many lines it must report. The files cover ReFrame 2.7 to 4.9 and seven sources.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fabreg.review import perflog, run_report

CORPUS = Path(__file__).parent / "data" / "real" / "perflogs"


def rows() -> list[dict[str, str]]:
    lines = (CORPUS / "INDEX.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| file |"))
    names = [c.strip() for c in lines[header].strip("|").split("|")]
    out = []
    for line in lines[header + 2:]:
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            out.append(dict(zip(names, cells)))
    return out


def read(path: Path) -> tuple[list[perflog.Sample], list[perflog.Problem]]:
    if path.suffix == ".json":
        report = run_report.read_run_report(path)
        assert report.layout, report.problems
        return report.samples, report.problems
    samples, problems, _ = perflog.read_perflog_file(path)
    return samples, problems


def test_the_index_lists_every_file_and_covers_enough_layouts_and_sources():
    listed = {row["file"].strip("`") for row in rows()}
    present = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()
               and p.name != "INDEX.md"}
    assert listed == present
    sources = {row["source"].split(",")[0].replace("same", "") for row in rows()}
    assert len({r["layout"] for r in rows()}) >= 8
    assert len([s for s in sources if s]) >= 5
    majors = {r["ReFrame"][0] for r in rows()}
    assert {"2", "3", "4"} <= majors


@pytest.mark.parametrize("row", rows(), ids=lambda r: r["file"].strip("`"))
def test_each_file_gives_the_values_and_series_a_person_counts(row):
    samples, problems = read(CORPUS / row["file"].strip("`"))
    series = {(s.test, s.run.param_key, s.run.system, s.run.partition, s.run.environ,
               s.perfvar) for s in samples}
    assert len(samples) == int(row["read"]), [str(p) for p in problems]
    assert len(series) == int(row["series"])
    assert len(problems) == int(row["reported"]), [str(p) for p in problems]
    assert int(row["read"]) <= int(row["values"])
    for problem in problems:  # bad input is said in one line, with its reason
        assert problem.line > 0 and "\n" not in problem.reason


def test_the_3x_default_lines_are_read_as_printed():
    samples, _ = read(CORPUS / "reframe-docs-v3.1-default-on-using.log")
    first = samples[0]
    assert (first.test, first.run.system, first.run.partition, first.run.environ) == (
        "StreamWithRefTest", "catalina", "default", "gnu")
    assert (first.perfvar, first.value, first.unit, first.ref) == ("Copy", 24762.2, "MB/s",
                                                                   25200.0)
    assert (first.lower_thres, first.upper_thres, first.run.jobid) == (-0.05, 0.05, "58384")


def test_a_newer_reframe_and_another_tag_order_keep_one_series():
    samples, problems = read(CORPUS / "excalibur-tests-hpctests-v3.2-v3.3-glued-record.log")
    assert problems == []
    versions = {s.run.attrs["version"].split()[1] for s in samples}
    assert versions == {"3.2-dev1", "3.3-dev0"}
    by_var: dict[str, int] = {}
    for s in samples:
        by_var[s.perfvar] = by_var.get(s.perfvar, 0) + 1
    assert sorted(by_var.values()) == [2, 2, 2, 2]  # each variable: one series, two nights


def test_the_info_column_names_the_test_and_its_parameters_without_internal_ones():
    samples, _ = read(CORPUS / "powercapping-v4.6-header-comma-site.log")
    assert {s.test for s in samples} == {"specfemd3d_iso_benchmark"}
    assert all("repeat_no" not in s.params for s in samples)
    assert {s.params["num_gpus"] for s in samples} == {"1", "2", "4"}


def test_a_dict_parameter_with_spaces_stays_whole():
    samples, _ = read(CORPUS / "feelpp-benchmarking-v4.2-run-report.json")
    assert {s.params["my_regression_parameter"] for s in samples} == {
        f"{{'nodes': {n}, 'tasks_per_node': 128}}" for n in (1, 2, 4, 8, 16, 32)}

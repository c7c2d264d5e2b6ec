"""Reference tables: lookup, direction, bands, and clear errors for broken files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabreg.errors import FabregError
from fabreg.run.references import (
    HOST_KEY_VARIABLE,
    ReferenceTable,
    host_key,
    reference_file,
)

REPO = Path(__file__).resolve().parents[1]


def _table(text: str, tmp_path: Path) -> ReferenceTable:
    path = tmp_path / "sys.yaml"
    path.write_text(text)
    return ReferenceTable.load(path)


def test_shipped_local_references_hold_no_figure_measured_on_another_host():
    from fabreg.testlib.osu import BENCHMARKS

    table = ReferenceTable.load(reference_file(REPO / "checks", "local"))
    for bench, (metric, _, sizes) in BENCHMARKS.items():
        for size in sizes:
            assert table.lookup(benchmark=bench, metric=metric, size=size, mpi="openmpi",
                                transport="shm", nodes=1) is None, (bench, size)
    fair = table.lookup(benchmark="fabreg_streams_fanin", metric="fanin_share", size=65536)
    assert fair is not None and fair.value == 1.0


@pytest.mark.parametrize("cpuinfo, cpus, key", [
    ("model name\t: Intel(R) Xeon(R) Processor @ 2.50GHz\n", 2, "intel-xeon-2.50ghz-2cpu"),
    ("processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\n", 128,
     "amd-epyc-7763-64-core-128cpu"),
    ("CPU part\t: 0xd0c\nModel\t: Raspberry Pi 4\n", 4, "raspberry-pi-4-4cpu"),
])
def test_host_key_names_the_cpu_model_and_count(monkeypatch, cpuinfo, cpus, key):
    monkeypatch.delenv(HOST_KEY_VARIABLE, raising=False)
    assert host_key(cpuinfo, cpus) == key


def test_host_key_can_be_set(monkeypatch):
    monkeypatch.setenv(HOST_KEY_VARIABLE, "Rack 7 / GPU nodes")
    assert host_key("model name: x", 2) == "rack-7-gpu-nodes"


def test_most_specific_row_wins(tmp_path):
    t = _table("""
references:
  - {benchmark: osu_latency, metric: latency, value: 10, unit: us}
  - {benchmark: osu_latency, metric: latency, size: 8, mpi: mpich, value: 2, unit: us}
  - {benchmark: osu_latency, metric: latency, size: 8, value: 5, unit: us}
""", tmp_path)
    assert t.lookup(benchmark="osu_latency", metric="latency", size=8, mpi="mpich").value == 2
    assert t.lookup(benchmark="osu_latency", metric="latency", size=8, mpi="openmpi").value == 5
    assert t.lookup(benchmark="osu_latency", metric="latency", size=64, mpi="x").value == 10
    assert t.lookup(benchmark="osu_bw", metric="bandwidth", size=8) is None


def test_direction_bands_and_deviation(tmp_path):
    t = _table("""
defaults: {warn: 0.1, fail: 0.3}
references:
  - {benchmark: b, metric: latency, value: 10, unit: us}
  - {benchmark: b, metric: bandwidth, value: 1000, unit: MB/s}
""", tmp_path)
    lat = t.lookup(benchmark="b", metric="latency")
    bw = t.lookup(benchmark="b", metric="bandwidth")
    assert lat.lower_is_better and not bw.lower_is_better
    assert [lat.verdict(v) for v in (5, 10.5, 12, 14)] == ["ok", "ok", "warn", "fail"]
    assert [bw.verdict(v) for v in (2000, 950, 850, 600)] == ["ok", "ok", "warn", "fail"]
    assert lat.deviation(8) == pytest.approx(0.2)
    assert lat.deviation(12) == pytest.approx(-0.2)
    assert bw.deviation(1200) == pytest.approx(0.2)
    assert bw.deviation(800) == pytest.approx(-0.2)
    assert lat.reframe_tuple() == (10.0, None, 0.3, "us")
    assert bw.reframe_tuple() == (1000.0, -0.3, None, "MB/s")
    # the limits an in-job driver measures against: settled inside warn, confirmed beyond fail
    assert (lat.warning_limit, lat.failure_limit) == (pytest.approx(11), pytest.approx(13))
    assert (bw.warning_limit, bw.failure_limit) == (pytest.approx(900), pytest.approx(700))
    assert lat.verdict(lat.warning_limit * 0.999) == "ok" and bw.verdict(899) == "warn"


@pytest.mark.parametrize("text,message", [
    ("references:\n  - {benchmark: b, metric: latency, vlaue: 1, unit: us}\n",
     "references[0]: unknown key(s) vlaue"),
    ("references:\n  - {benchmark: b, metric: latency, unit: us}\n",
     "references[0]: missing key 'value'"),
    ("references:\n  - {benchmark: b, metric: latency, value: fast, unit: us}\n",
     "'value' must be a positive number"),
    ("references:\n  - {benchmark: b, metric: l, value: 1, unit: us, warn: 0.5, fail: 0.1}\n",
     "warn (0.5) must not exceed fail (0.1)"),
    ("defaults: {wran: 0.1}\n", "defaults: unknown key 'wran'"),
    ("refrences: []\n", "unknown top-level key(s): refrences"),
    ("method: two\n", "'method' must be a positive whole number"),
    ("method: 0\n", "'method' must be a positive whole number"),
    ("references: [\n", "not valid YAML"),
])
def test_malformed_files_name_file_and_key(tmp_path, text, message):
    with pytest.raises(FabregError) as err:
        _table(text, tmp_path)
    assert str(tmp_path / "sys.yaml") in str(err.value)
    assert message in str(err.value)


def test_assessment_bands_deviation_and_notes(tmp_path):
    from fabreg.run.references import Assessment, summarize

    t = _table("""
references:
  - {benchmark: b, metric: latency, value: 10, unit: us, warn: 0.1, fail: 0.5}
  - {benchmark: b, metric: bandwidth, value: 1000, unit: MB/s, warn: 0.1, fail: 0.5}
""", tmp_path)
    lat, bw = t.lookup(benchmark="b", metric="latency"), t.lookup(benchmark="b", metric="bandwidth")
    ok = Assessment("latency_8B", 9.0, "us", lat)
    warn = Assessment("latency_1KB", 12.0, "us", lat)
    fail = Assessment("bandwidth_1MB", 400.0, "MB/s", bw)
    missing = Assessment("latency_4MB", 3.0, "us", None)
    assert [a.verdict for a in (ok, warn, fail, missing)] == ["ok", "warn", "fail", "missing"]
    assert (ok.deviation, warn.deviation, fail.deviation, missing.deviation) == (
        0.1, -0.2, -0.6, None)
    assert warn.describe() == (
        "latency_1KB: 12 us vs 10 us (-20.0%; warn beyond -10%, fail beyond -50%): warn")
    assert missing.describe() == "latency_4MB: no reference"

    assert summarize([ok]).status == "ok" and summarize([ok]).notes == ""
    s = summarize([ok, warn])
    assert (s.status, s.deviations) == ("warn", {"latency_8B": 0.1, "latency_1KB": -0.2})
    assert s.notes == warn.describe()
    assert summarize([ok, warn, missing]).status == "missing"
    assert summarize([missing, fail]).status == "fail"
    assert summarize([ok, missing]).missing == ["latency_4MB"]
    assert summarize([]).status == ""
    assert "|" not in summarize([ok, warn, fail, missing]).notes

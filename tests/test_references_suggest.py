"""``fabreg references suggest``: reference files from stored runs.

The end-to-end test runs real ReFrame (quick tag, OpenMPI) a few times, ingests the
perflogs with the real store and loads the command's output with ReferenceTable. The
other tests fill a store through its API and check grouping, median, spread, the
minimum number of runs and the errors.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import yaml
from conftest import CHECKS, fabreg, have, reframe_binary, run_reframe

from fabreg.cli import main
from fabreg.review import suggest
from fabreg.review.perflog import Run, Sample, read_perflog_file
from fabreg.review.store import Store
from fabreg.run.references import ReferenceTable
from fabreg.schema import MEASUREMENT_METHOD, control_on_path, figures_on_path

LAT8 = {"benchmark": "osu_latency", "metric": "latency", "size": 8, "mpi": "openmpi",
        "transport": "shm", "nodes": 1}
BW1M = {"benchmark": "osu_bw", "metric": "bandwidth", "size": 1048576, "mpi": "openmpi",
        "transport": "shm", "nodes": 1}


# -- a store filled through its API ----------------------------------------------------

def add_run(store: Store, t: float, values: dict[str, tuple[float, str]],
            keys: dict[str, dict] | None, test: str = "OsuLatency", system: str = "local",
            environ: str = "openmpi", params: dict[str, str] | None = None,
            extra: dict[str, str] | None = None,
            method: int | None = MEASUREMENT_METHOD) -> None:
    """One test-case run, as fabreg.review.perflog would have read it from a perflog line
    (of this suite's measurement generation; ``method=None``: a perflog without the column)."""
    attrs = {"ref_status": "ok", **({"method": str(method)} if method else {}), **(extra or {})}
    if keys is not None:
        attrs["ref_keys"] = json.dumps(keys)
    run = Run(t, test, params or {"transport": "shm"}, system, "default", environ,
              jobid=str(int(t)), attrs=attrs)
    store.add([Sample(run, var, value, unit) for var, (value, unit) in values.items()])


def suggest_cli(db: Path, *args: str, capsys) -> tuple[int, str, str]:
    code = main(["references", "suggest", "--db", str(db), *args])
    out, err = capsys.readouterr()
    return code, out, err


def load(text: str, tmp_path: Path) -> ReferenceTable:
    path = tmp_path / "suggested.yaml"
    path.write_text(text)
    return ReferenceTable.load(path)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """Five latency runs pooled from two tests, bandwidth runs, a key with two runs,
    an old run without ref_keys and another system's runs."""
    db = tmp_path / "fabreg.db"
    lat = [1.0, 1.1, 0.95, 1.3, 1.02]
    bw = [9000.0, 8000.0, 9100.0, 8700.0]
    with Store(db) as store:
        for i, v in enumerate(lat):
            # The same key logged by two different tests (e.g. with/without a provider
            # parameter): both are runs of the same reference row.
            add_run(store, 1000 + i * 100, {"latency_8B": (v, "us")}, {"latency_8B": LAT8},
                    test="OsuLatency" if i % 2 else "OsuLatencyOther")
        for i, v in enumerate(bw):
            add_run(store, 2000 + i * 100, {"bandwidth_1MB": (v, "MB/s"),
                                            "latency_1KB": (3.0, "us")},
                    {"bandwidth_1MB": BW1M}, test="OsuBandwidth")
        mpich = {**LAT8, "mpi": "mpich"}
        for i, v in enumerate([0.7, 0.8]):
            add_run(store, 3000 + i * 100, {"latency_8B": (v, "us")}, {"latency_8B": mpich},
                    environ="mpich")
        add_run(store, 500, {"latency_8B": (50.0, "us")}, None)  # before ref_keys existed
        for i in range(3):
            add_run(store, 4000 + i, {"latency_8B": (99.0, "us")}, {"latency_8B": LAT8},
                    system="othersys")
    return db


def test_rows_are_medians_of_the_runs_of_each_key(store_path, tmp_path, capsys):
    code, out, _ = suggest_cli(store_path, "--system", "local", capsys=capsys)
    assert code == 0
    table = load(out, tmp_path)
    assert len(table) == 2
    lat = table.lookup(**LAT8)
    assert lat.value == 1.02 and lat.unit == "us" and lat.lower_is_better
    bw = table.lookup(**BW1M)
    assert bw.value == statistics.median([9000.0, 8000.0, 9100.0, 8700.0]) == 8850
    assert not bw.lower_is_better
    doc = yaml.safe_load(out)
    assert doc["system"] == "local"
    assert doc["defaults"] == {"warn": suggest.DEFAULT_WARN, "fail": suggest.DEFAULT_FAIL}
    # Every row is explicit about its bands, and says what it rests on.
    assert all({"warn", "fail"} <= set(row) for row in doc["references"])
    assert "# 5 runs, 0.95..1.3 us, worse-side spread" in out
    assert "5 value(s) without a logged reference key" in out  # 1 old run + 4 x 1KB
    # latency_1KB of the bandwidth runs has no key: not a row, not an error.
    assert "latency_1KB" not in out


def test_keys_with_too_few_runs_are_a_comment_not_a_row(store_path, tmp_path, capsys):
    _, out, _ = suggest_cli(store_path, "--system", "local", capsys=capsys)
    mpich = {**LAT8, "mpi": "mpich"}
    assert load(out, tmp_path).lookup(**mpich) is None
    line = next(x for x in out.splitlines() if "mpi: mpich" in x)
    assert line.startswith("#   {benchmark: osu_latency") and "2 runs < 3" in line
    _, out, _ = suggest_cli(store_path, "--system", "local", "--min-runs", "2", capsys=capsys)
    assert load(out, tmp_path).lookup(**mpich).value == 0.75


def test_since_and_other_systems(store_path, tmp_path, capsys):
    _, out, _ = suggest_cli(store_path, "--system", "othersys", "--min-runs", "3",
                            capsys=capsys)
    assert load(out, tmp_path).lookup(**LAT8).value == 99
    _, out, _ = suggest_cli(store_path, "--system", "local", "--since",
                            "1970-01-01T00:33:20Z", capsys=capsys)  # t >= 2000: bw only
    table = load(out, tmp_path)
    assert table.lookup(**LAT8) is None and table.lookup(**BW1M) is not None


def test_bands_follow_the_worse_side_spread_with_floors(store_path, tmp_path, capsys):
    _, out, _ = suggest_cli(store_path, "--system", "local", "--warn", "0.01", "--fail",
                            "0.02", capsys=capsys)
    lat = load(out, tmp_path).lookup(**LAT8)
    # Worse side of 1.02: 1.1 and 1.3 -> deviations 0.078, 0.275; median 0.177 x 1.4826.
    spread = 1.4826 * statistics.median([(1.1 - 1.02) / 1.02, (1.3 - 1.02) / 1.02])
    assert lat.warn == suggest.ceil_significant(3 * spread)
    assert lat.fail == suggest.ceil_significant(6 * spread)
    _, out, _ = suggest_cli(store_path, "--system", "local", "--warn", "2", "--fail", "3",
                            capsys=capsys)
    lat = load(out, tmp_path).lookup(**LAT8)
    assert (lat.warn, lat.fail) == (2, 3)  # the floors win over a smaller spread


def test_worse_side_spread_is_direction_aware_and_robust():
    lat = [10, 10, 10, 11, 30]  # one slow run among small ones
    assert suggest.worse_side_spread(lat, 10, lower_better=True) == pytest.approx(
        1.4826 * statistics.median([0.1, 2.0]))
    # For a bandwidth, faster runs are the good side: they do not widen the band.
    assert suggest.worse_side_spread([100, 200, 300], 100, lower_better=False) == 0
    assert suggest.worse_side_spread([80, 90, 100, 100, 100], 100,
                                     lower_better=False) == pytest.approx(1.4826 * 0.15)
    many = [10] * 3 + [10.5] * 5 + [500]  # the worst run barely moves it
    assert suggest.worse_side_spread(many, 10, True) == pytest.approx(1.4826 * 0.05)


def test_tolerances_rounding_and_cap():
    assert suggest.tolerances(0.0, True, 0.05, 0.15) == (0.05, 0.15)
    assert suggest.tolerances(0.1, True, 0.05, 0.15) == (0.3, 0.6)
    assert suggest.tolerances(1.0, True, 0.05, 0.15) == (3.0, 6.0)
    # A bandwidth cannot drop by more than 100 %: a derived band stops at 95 %.
    assert suggest.tolerances(1.0, False, 0.05, 0.15) == (0.95, 0.95)
    assert suggest.ceil_significant(0.1234) == 0.13
    assert suggest.ceil_significant(0.15) == 0.15
    assert suggest.ceil_significant(12.01) == 13
    assert suggest.round_significant(8512.3) == 8510
    assert suggest.round_significant(0.0003127) == 0.000313
    assert suggest.format_number(8510.0) == "8510" and suggest.format_number(1.0) == "1"


def test_mixed_units_and_non_positive_medians_get_no_row(tmp_path, capsys):
    db = tmp_path / "fabreg.db"
    zero = {"benchmark": "b", "metric": "loss", "size": 8}
    with Store(db) as store:
        for i in range(3):
            add_run(store, 100 + i, {"latency_8B": (1.0, "us" if i else "ms"),
                                     "loss_8B": (0.0, "%")},
                    {"latency_8B": LAT8, "loss_8B": zero})
    code, out, _ = suggest_cli(db, "--system", "local", capsys=capsys)
    assert code == 0
    assert "mixed units ms, us" in out and "a reference must be positive" in out
    assert len(load(out, tmp_path)) == 0


def test_out_refuses_to_overwrite_without_force(store_path, tmp_path, capsys):
    target = tmp_path / "local.yaml"
    code, out, _ = suggest_cli(store_path, "--system", "local", "--out", str(target),
                               capsys=capsys)
    assert code == 0 and "wrote" in out and "2 reference row(s)" in out
    # the mpich key's 2 runs: the line says what gives it a row
    assert "1 key(s) without a row (1 of them with fewer than 3 runs" in out
    assert "calibrate again with --force" in out
    assert len(ReferenceTable.load(target)) == 2
    target.write_text("keep me\n")
    code, _, err = suggest_cli(store_path, "--system", "local", "--out", str(target),
                               capsys=capsys)
    assert code == 2 and "exists; use --force" in err
    assert target.read_text() == "keep me\n"
    code, _, _ = suggest_cli(store_path, "--system", "local", "--out", str(target),
                             "--force", capsys=capsys)
    assert code == 0 and len(ReferenceTable.load(target)) == 2


@pytest.mark.parametrize("args,message", [
    (["--system", "nosuch"], "no runs of system 'nosuch' in the store"),
    (["--system", "local", "--since", "2999-01-01"], "since 2999-01-01"),
    (["--system", "local", "--warn", "0.5", "--fail", "0.2"], "--warn (0.5) must not exceed"),
    (["--system", "local", "--warn", "-1"], "--warn must be a fraction >= 0"),
    (["--system", "local", "--min-runs", "0"], "--min-runs must be at least 1"),
    (["--system", "local", "--since", "last week"], "--since: timestamp 'last week'"),
])
def test_bad_arguments_are_one_line_errors(store_path, capsys, args, message):
    code, out, err = suggest_cli(store_path, *args, capsys=capsys)
    assert code == 2 and out == ""
    assert err.startswith("fabreg: error: ") and message in err
    assert err.count("\n") == 1
    if "nosuch" in args:
        assert "systems there: local, othersys" in err


def test_no_store_and_no_keyed_runs(tmp_path, capsys):
    code, _, err = suggest_cli(tmp_path / "none.db", "--system", "local", capsys=capsys)
    assert code == 2 and "no store at" in err and "fabreg ingest" in err
    db = tmp_path / "old.db"
    with Store(db) as store:
        add_run(store, 1.0, {"latency_8B": (1.0, "us")}, None)
    code, _, err = suggest_cli(db, "--system", "local", capsys=capsys)
    assert code == 2 and "logged reference keys (perflog column ref_keys)" in err


# -- real ReFrame runs -----------------------------------------------------------------

@pytest.mark.slow
def test_suggested_file_from_real_runs_gives_each_key_its_median(tmp_path: Path):
    """Quick tag, OpenMPI, three sessions' worth (``--repeat 3``): every logged value's key
    must find its median. One measurement a value in each job: its count is not what is
    asserted, and two more launches of each curve tripled the jobs' time."""
    if reframe_binary() is None:
        pytest.skip("ReFrame not installed (pip install 'reframe-hpc==4.10.4')")
    if not have("mpirun.openmpi") and not have("mpirun"):
        pytest.skip("OpenMPI is not installed (apt-get install openmpi-bin libopenmpi-dev)")
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "--tag", "quick", "-p", "openmpi", "--repeat", "3",
                       "-S", "repeats=1", perflog_dir=perflogs, cwd=tmp_path,
                       checks=CHECKS / "osu.py")  # every check tagged quick is in osu.py
    # Whether a busy host meets the shipped references does not matter here: a
    # performance failure still writes its perflog line.
    assert "Ran " in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]

    # What the perflogs say, read by the one perflog parser.
    expected: dict[str, tuple[dict, str, list[float]]] = {}
    logs = [perflogs / "local" / "default" / f"{name}.log"
            for name in ("OsuLatency", "OsuBandwidth", "OsuAllreduce")]  # fixtures log no values
    for path in logs:
        assert "|ref_keys|" in path.read_text().splitlines()[0]
        samples, problems, _ = read_perflog_file(path)
        assert problems == [] and samples
        for s in samples:
            key = json.loads(s.run.attrs["ref_keys"])[s.perfvar]  # every value has its key
            # The key is the run's own identity, not something the reader made up.
            assert key["mpi"] == s.run.environ == "openmpi"
            assert key["transport"] == s.params["transport"]
            assert str(key["nodes"]) == s.params["nodes"]
            assert s.perfvar.startswith(key["metric"] + "_")
            entry = expected.setdefault(json.dumps(key, sort_keys=True), (key, s.unit, []))
            entry[2].append(s.value)
    assert all(len(values) == 3 for _, _, values in expected.values()), expected

    db = tmp_path / "fabreg.db"
    fabreg("ingest", str(perflogs), db=db, check=True)
    out = fabreg("references", "suggest", "--system", "local", db=db, check=True).stdout
    table = load(out, tmp_path)
    assert len(table) == len(expected)
    for key, unit, values in expected.values():
        ref = table.lookup(**key)
        assert ref is not None, key
        assert ref.value == suggest.round_significant(statistics.median(values)), (key, values)
        assert ref.value == pytest.approx(statistics.median(values), rel=5e-3)
        assert ref.unit == unit
        assert ref.fail >= ref.warn >= suggest.DEFAULT_WARN
    assert out.count("  # 3 runs, ") == len(expected)

    # The results DB carries the keys too: on its own it gives the same file.
    alone = tmp_path / "results-only.db"
    fabreg("ingest", str(perflogs / "results.db"), db=alone, check=True)
    again = fabreg("references", "suggest", "--system", "local", db=alone, check=True).stdout
    assert again == out


def test_a_baseline_of_only_contended_values_is_refused_saying_why(tmp_path, capsys):
    """Calibration jobs run while the host was busy (seen in CI beside a compiler): every
    value is left out, and the user is told that, not that the store holds no runs."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    bw2 = {**BW1M, "transport": "tcp", "nodes": 2}
    with Store(db) as store:
        for i, value in enumerate([1193.5, 1422.8, 1301.0]):
            add_run(store, 1000 + i * 10, {"bandwidth_1MB": (value, "MB/s")},
                    {"bandwidth_1MB": bw2}, system="minicluster", test="OsuBandwidth",
                    extra={"host_key": "testhost",
                           "interference": json.dumps({"other_share": 0.74})})
    code = main(["references", "calibrate", "--db", str(db), "--system", "minicluster",
                 "--checks", str(checks), "--host-key", "testhost"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines() == [
        "fabreg: error: all 3 value(s) of system 'minicluster' on testhost were measured under "
        "interference (other work took more than 10% of the host's CPU, or judged "
        "inconclusive): run the checks again while the host is quiet"]
    assert not list((checks / "references").rglob("*.yaml"))


def test_a_baseline_leaves_out_values_measured_under_interference(tmp_path, capsys):
    """A new host's first runs have no reference, hence no verdict: only their interference
    column says that other work took the CPUs. Seen in CI: two such calibration jobs (other
    work 27-29 % of the CPU, 1193 and 1423 MB/s against ~2200) widened the band of a
    minicluster link to 0.68, past the half-speed link it must catch."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    bw2 = {**BW1M, "transport": "tcp", "nodes": 2}
    quiet = [2183.8, 2291.8, 2315.7, 2204.6, 2142.6, 2250.0]
    with Store(db) as store:
        for i, (value, share) in enumerate([(v, 0.03) for v in quiet]
                                           + [(1193.5, 0.2944), (1422.8, 0.2655)]):
            add_run(store, 1000 + i * 10, {"bandwidth_1MB": (value, "MB/s")},
                    {"bandwidth_1MB": bw2}, system="minicluster", test="OsuBandwidth",
                    extra={"host_key": "testhost",
                           "interference": json.dumps({"other_share": share})})
    code = main(["references", "calibrate", "--db", str(db), "--system", "minicluster",
                 "--checks", str(checks), "--host-key", "testhost"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "left out 2 value(s) measured under interference" in out
    # 6 runs within 50 s saw one of the host's modes at most, and the user is told so
    assert "warning: the baseline rests on 6 run(s) within 1 min" in err
    written = yaml.safe_load((checks / "references" / "minicluster" / "testhost.yaml")
                             .read_text())
    (row,) = written["references"]
    assert row["value"] == pytest.approx(statistics.median(quiet), rel=0.01)
    # the measurement generation the runs rest on: a later suite sets an older one aside
    assert written["method"] == MEASUREMENT_METHOD
    assert row["fail"] < 0.5, row  # a link at half its bandwidth fails


@pytest.mark.parametrize("attrs, under", [
    ({"interference": '{"other_share": 0.11}'}, True),
    ({"interference": '{"other_share": 0.10}'}, False),
    ({"interference": ""}, False),
    ({"interference": "not json"}, False),
    ({"verdicts": '{"bandwidth_1MB": "inconclusive"}'}, True),
    ({"verdicts": '{"bandwidth_1MB": "ok"}', "interference": '{"other_share": 0.0}'}, False),
])
def test_what_counts_as_measured_under_interference(attrs, under):
    from fabreg.review.store import RunValue
    rv = RunValue("OsuBandwidth", "openmpi", "bandwidth_1MB", 0.0, 1.0, "MB/s", "k", attrs)
    assert suggest.measured_under_interference(rv) is under


def test_a_baseline_gets_the_host_controls_of_its_runs_one_value_per_run(tmp_path, capsys):
    """Each run's ``host_control`` column becomes one value per figure; the baseline's
    ``host_control`` rows are their medians, a contended control and a run left out for
    interference add nothing; the rows are what a check's control is judged against."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    trips = [0.29, 0.31, 0.30, 0.28, 0.33]
    with Store(db) as store:
        for i, trip in enumerate(trips):
            control = {"round_trip": trip, "copy_bandwidth": 45.0 + i}
            add_run(store, 1000 + i * 10, {"latency_8B": (0.5, "us"), "latency_1KB": (1.0, "us")},
                    {"latency_8B": LAT8, "latency_1KB": {**LAT8, "size": 1024}},
                    extra={"host_key": "testhost", "host_control": json.dumps(control)})
        add_run(store, 2000, {"latency_8B": (0.5, "us")}, {"latency_8B": LAT8},  # contended
                extra={"host_key": "testhost", "host_control": json.dumps(
                    {"round_trip": 9.0, "copy_bandwidth": 1.0, "contended": True})})
        add_run(store, 2010, {"latency_8B": (0.5, "us")}, {"latency_8B": LAT8},  # busy run
                extra={"host_key": "testhost", "interference": '{"other_share": 0.5}',
                       "host_control": json.dumps({"round_trip": 9.0, "copy_bandwidth": 1.0})})
    code = main(["references", "calibrate", "--db", str(db), "--system", "local",
                 "--checks", str(checks), "--host-key", "testhost"])
    assert code == 0, capsys.readouterr().err
    table = ReferenceTable.load(checks / "references" / "local" / "testhost.yaml")
    trip = table.lookup(benchmark="host_control", metric="round_trip")
    copy = table.lookup(benchmark="host_control", metric="copy_bandwidth")
    assert trip is not None and copy is not None
    assert trip.value == pytest.approx(statistics.median(trips))
    assert trip.unit == "us" and trip.lower_is_better
    assert copy.value == pytest.approx(47.0) and copy.unit == "GB/s" and not copy.lower_is_better
    assert trip.verdict(0.30) == "ok" and trip.verdict(0.8) == "fail"  # the slow host state
    # an OSU lookup never meets a control row
    assert table.lookup(**LAT8).value == pytest.approx(0.5)


def test_a_control_row_follows_the_controls_usual_noise_not_its_worst_run(tmp_path, capsys):
    """A control row rests on every job's control: the few taken while the VM's vCPUs shared
    no cache (a 128 KiB handoff at 1.9 GB/s against 6.8) must lie beyond its band. A fabric
    row drawn from the same jobs would follow them (its worst run) and pass them: those jobs
    are set aside from it, and the user is told how many."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    handoffs = [6.8 + 0.05 * (i % 5) for i in range(24)] + [1.9, 2.0, 1.95]
    with Store(db) as store:
        for i, handoff in enumerate(handoffs):
            add_run(store, 1000 + i * 200, {"bandwidth_128KB": (handoff * 1000, "MB/s")},
                    {"bandwidth_128KB": {**BW1M, "size": 131072}},
                    extra={"host_key": "testhost", "host_control": json.dumps(
                        {"handoff_bandwidth": handoff, "copy_bandwidth": 45.0})})
    code = main(["references", "calibrate", "--db", str(db), "--system", "local",
                 "--checks", str(checks), "--host-key", "testhost"])
    out, err = capsys.readouterr()
    assert code == 0, err
    table = ReferenceTable.load(checks / "references" / "local" / "testhost.yaml")
    control = table.lookup(benchmark="host_control", metric="handoff_bandwidth")
    assert control.value == pytest.approx(6.9) and control.fail == pytest.approx(0.25)
    assert control.verdict(6.8) == "ok" and control.verdict(1.9) == "fail"
    assert ("left out 3 value(s) of 3 run(s) measured while the host itself ran slow "
            "(a host_control figure on their path beyond its failure limit") in out
    fabric = table.lookup(**{**BW1M, "size": 131072})
    assert fabric.value == pytest.approx(6900.0) and fabric.fail == pytest.approx(0.25)
    assert fabric.verdict(1900.0) == "fail" and fabric.verdict(6800.0) == "ok"


def test_a_calibration_sets_aside_a_value_whose_own_path_ran_slow_and_keeps_the_others(
        tmp_path, capsys):
    """Two of eight calibration jobs ran while the host's TCP loopback ran at half its usual
    rate (a placement of the VM's vCPUs), and their 2-node TCP bandwidth with it: the TCP row
    rests on the other six and still catches a link at half speed, which the two would have
    hidden (the band follows the worst run). Each value goes by the figures on its own path:
    the same jobs' shared-memory values, whose figures read as usual, stay, and so do the
    values of a run that logged no control."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    tcp = {**BW1M, "transport": "tcp", "nodes": 2}
    jobs = [(1740.0, 5.9), (1752.0, 6.0), (1731.0, 5.7), (1760.0, 6.2), (1722.0, 5.8),
            (1748.0, 6.1), (1060.0, 2.9), (1010.0, 3.0)]
    with Store(db) as store:
        for i, (bandwidth, loopback) in enumerate(jobs):
            add_run(store, 1000 + i * 600,
                    {"bandwidth_1MB": (bandwidth, "MB/s"), "shm_1MB": (9000.0 + i, "MB/s")},
                    {"bandwidth_1MB": tcp, "shm_1MB": {**BW1M, "mpi": "mpich"}},
                    test="OsuBandwidth", extra={"host_key": "testhost", "host_control": json.dumps(
                        {"tcp_loopback": loopback, "copy_bandwidth": 25.0,
                         "handoff_bandwidth": 4.0, "shared_compute": 3.6})})
        add_run(store, 9000, {"bandwidth_1MB": (1700.0, "MB/s")}, {"bandwidth_1MB": tcp},
                test="OsuBandwidth", extra={"host_key": "testhost"})
    code = main(["references", "calibrate", "--db", str(db), "--system", "local",
                 "--checks", str(checks), "--host-key", "testhost"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "left out 2 value(s) of 2 run(s) measured while the host itself ran slow" in out
    assert "cannot catch a link at half speed" not in err
    table = ReferenceTable.load(checks / "references" / "local" / "testhost.yaml")
    row = table.lookup(**tcp)
    assert row.value == pytest.approx(1740.0, rel=0.01) and row.fail == pytest.approx(0.25)
    assert row.verdict(row.value / 2) == "fail"
    assert "7 runs" in (checks / "references" / "local" / "testhost.yaml").read_text()
    shm = table.lookup(**{**BW1M, "mpi": "mpich"})
    assert shm.value == pytest.approx(9004.0, rel=0.001)  # all 8 jobs' values
    loopback = table.lookup(benchmark="host_control", metric="tcp_loopback")
    assert loopback.value == pytest.approx(5.85, rel=0.01)  # every job's control


def test_a_control_row_never_passes_a_host_at_half_its_rate(tmp_path, capsys):
    """Eight healthy TCP jobs whose loopback controls fell in two placements (4.97-6.73 GB/s,
    a CI run's) spread the controls so that 6x their usual noise reached -94 %: the row
    then passed the slow host's job, at a twelfth of the rate, and the band of the link's
    row followed it. A control row stops short of half speed: that job is set aside."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    tcp = {**BW1M, "transport": "tcp", "nodes": 2}
    jobs = [(848.4, 0.4995), (1628.1, 5.3244), (1616.3, 6.7324), (1611.1, 6.6519),
            (1580.6, 6.0261), (1614.7, 4.9693), (1669.0, 6.3927), (1684.8, 5.9071),
            (1639.1, 6.6578)]
    with Store(db) as store:
        for i, (bandwidth, loopback) in enumerate(jobs):
            add_run(store, 1000 + i * 600, {"bandwidth_1MB": (bandwidth, "MB/s")},
                    {"bandwidth_1MB": tcp}, test="OsuBandwidth",
                    extra={"host_key": "testhost", "host_control": json.dumps(
                        control_on_path({"tcp_loopback": loopback}, ["tcp_loopback"]))})
    code = main(["references", "calibrate", "--db", str(db), "--system", "local",
                 "--checks", str(checks), "--host-key", "testhost"])
    out, err = capsys.readouterr()
    assert code == 0, err
    table = ReferenceTable.load(checks / "references" / "local" / "testhost.yaml")
    loopback = table.lookup(benchmark="host_control", metric="tcp_loopback")
    assert loopback.fail == pytest.approx(0.5) and loopback.warn <= 0.5, loopback
    assert loopback.verdict(loopback.value * 0.4) == "fail"  # the VM's 2.6x slow placement
    assert loopback.verdict(4.97) == "ok"  # the slower of the usual placements
    assert "left out 1 value(s) of 1 run(s) measured while the host itself ran slow" in out
    row = table.lookup(**tcp)
    assert row.fail < 0.5 and row.verdict(row.value / 2) == "fail", row
    assert "cannot catch a link at half speed" not in err


def test_a_calibration_goes_by_the_path_the_job_named_not_its_keys_transport(
        tmp_path, capsys):
    """perftest's verbs run over an RDMA queue pair, UCX rc's path, though its reference key
    names no transport: its job logs the figures its verdict went by (``on_path``), and the
    calibration goes by them. Two jobs ran while the TCP loopback ran at half its rate (off
    that path: their values stay), two while the memory copy did (on it: left out). By the
    key alone, every figure would be on the path and all four would be left out."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    key = {"benchmark": "ib_write_bw", "metric": "bandwidth", "size": 65536, "nodes": 2}
    jobs = [(11000.0, 5.9, 25.0), (11050.0, 6.0, 25.5), (10980.0, 5.8, 24.8),
            (11020.0, 6.1, 25.2), (11010.0, 2.9, 25.1), (10990.0, 3.0, 24.9),
            (7000.0, 6.0, 11.0), (7100.0, 5.9, 12.0)]
    with Store(db) as store:
        for i, (bandwidth, loopback, copy) in enumerate(jobs):
            add_run(store, 1000 + i * 600, {"bandwidth_64KB": (bandwidth, "MB/s")},
                    {"bandwidth_64KB": key}, test="PerftestBandwidth",
                    extra={"host_key": "testhost", "host_control": json.dumps(control_on_path(
                        {"tcp_loopback": loopback, "copy_bandwidth": copy,
                         "handoff_bandwidth": 4.0, "shared_compute": 3.6, "round_trip": 0.2},
                        figures_on_path("ucx_rc")))})
    code = main(["references", "calibrate", "--db", str(db), "--system", "local",
                 "--checks", str(checks), "--host-key", "testhost"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "left out 2 value(s) of 2 run(s) measured while the host itself ran slow" in out
    row = ReferenceTable.load(checks / "references" / "local" / "testhost.yaml").lookup(**key)
    assert row.value == pytest.approx(11005.0, rel=0.001)  # the six with a usual copy
    assert "6 runs" in (checks / "references" / "local" / "testhost.yaml").read_text()
    assert row.verdict(row.value / 2) == "fail"


def test_a_baseline_is_drawn_from_runs_of_this_measurement_generation_only(tmp_path, capsys):
    """Runs of an older generation (an older ``method`` column, or none: a perflog of a suite
    before it) measured some values another way (validation moved them 2x): a baseline that
    says it rests on this generation leaves them out, and says how many."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    with Store(db) as store:
        for i, value in enumerate([2200.0, 2250.0, 2150.0, 2180.0, 2230.0]):
            add_run(store, 1000 + i * 600, {"bandwidth_1MB": (value, "MB/s")},
                    {"bandwidth_1MB": BW1M}, extra={"host_key": "testhost"})
        for i, (value, method) in enumerate([(1100.0, MEASUREMENT_METHOD - 1), (1150.0, None)]):
            add_run(store, 5000 + i * 600, {"bandwidth_1MB": (value, "MB/s")},
                    {"bandwidth_1MB": BW1M}, extra={"host_key": "testhost"}, method=method)
    calibrate = ["references", "calibrate", "--db", str(db), "--system", "local",
                 "--checks", str(checks), "--host-key", "testhost"]
    code = main(calibrate)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (f"left out 2 value(s) of runs of an older measurement generation (not method "
            f"{MEASUREMENT_METHOD}; docs/references.md)") in out
    table = ReferenceTable.load(checks / "references" / "local" / "testhost.yaml")
    assert table.method == MEASUREMENT_METHOD
    assert table.lookup(**BW1M).value == pytest.approx(2200.0)  # 2180 with the older two

    # only runs of older generations: a one-line refusal that says what to do
    only_old = tmp_path / "old.db"
    with Store(only_old) as store:
        add_run(store, 1000, {"bandwidth_1MB": (1100.0, "MB/s")}, {"bandwidth_1MB": BW1M},
                extra={"host_key": "testhost"}, method=None)
    code = main([*calibrate[:3], str(only_old), *calibrate[4:], "--force"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines() == [
        f"fabreg: error: all 1 value(s) of system 'local' on testhost were measured by an older "
        f"generation of the suite's measurements (their runs log no method "
        f"{MEASUREMENT_METHOD}; docs/references.md): run the checks with this fabreg, ingest "
        f"their perflogs and calibrate again"]


def test_host_control_values_are_one_per_run_and_figure():
    from fabreg.review.store import RunValue
    control = json.dumps({"round_trip": 0.3, "copy_bandwidth": 40.0, "problem": "x"})
    runs = [RunValue("OsuLatency", "openmpi", var, 0.0, 1.0, "us", key, {"host_control": text})
            for key, text in (("a", control), ("b", '{"round_trip": true}'), ("c", "not json"))
            for var in ("latency_8B", "latency_1KB")]
    got = suggest.host_control_values(runs)
    assert [(v.run_key, v.perfvar, v.value, v.unit) for v in got] == [
        ("a", "host_round_trip", 0.3, "us"), ("a", "host_copy_bandwidth", 40.0, "GB/s")]
    assert json.loads(got[0].attrs["ref_keys"]) == {
        "host_round_trip": {"benchmark": "host_control", "metric": "round_trip"}}


def calibrate_bandwidths(tmp_path: Path, capsys, values: list[float], gap_s: float
                         ) -> tuple[str, str]:
    """``references calibrate`` of host ``testhost`` from one 1 MiB bandwidth run per value,
    ``gap_s`` apart, into ``tmp_path/checks``: its (stdout, stderr)."""
    db = tmp_path / "fabreg.db"
    checks = tmp_path / "checks"
    (checks / "references").mkdir(parents=True)
    with Store(db) as store:
        for i, value in enumerate(values):
            add_run(store, 1000 + i * gap_s, {"bandwidth_1MB": (value, "MB/s")},
                    {"bandwidth_1MB": BW1M}, extra={"host_key": "testhost"})
    code = main(["references", "calibrate", "--db", str(db), "--system", "local",
                 "--checks", str(checks), "--host-key", "testhost"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def test_a_baseline_spanning_hours_gets_no_warning_of_a_short_span(tmp_path, capsys):
    out, err = calibrate_bandwidths(tmp_path, capsys, [2200.0, 2250.0, 2150.0], 1800)
    assert "wrote" in out and "rests on" not in err


#: The best-of-5 bandwidths (MB/s) of the 8 healthy calibration jobs of a CI run of
#: test_cluster's capped-link test on a slow day: one job ran -33 % in all its repeats.
SLOW_SPELL_CALIBRATION = [1631.43, 1424.34, 1656.4, 1063.98, 1384.17, 1607.61, 1761.4,
                          1583.34]


@pytest.mark.parametrize("values, blind", [
    (SLOW_SPELL_CALIBRATION, True),
    ([v for v in SLOW_SPELL_CALIBRATION if v > 1100], False),
])
def test_a_baseline_too_wide_to_catch_a_half_speed_link_says_so(tmp_path, capsys, values,
                                                                blind):
    _, err = calibrate_bandwidths(tmp_path, capsys, values, 600)
    (row,) = yaml.safe_load((tmp_path / "checks" / "references" / "local" / "testhost.yaml"
                             ).read_text())["references"]
    assert (row["fail"] >= 0.5) == blind, row
    if blind:
        assert "1 row(s) cannot catch a link at half speed" in err, err
        assert "fail 50%, its worst of 8 runs -33%" in err and "--since" in err, err
    else:
        assert "half speed" not in err, err


def test_blind_rows_are_fabric_rows_that_pass_the_fault_in_either_direction():
    def row(metric: str, unit: str, fail: float, benchmark: str = "osu") -> suggest.Suggestion:
        lower = suggest.lower_is_better(metric, unit)
        return suggest.Suggestion((("benchmark", benchmark), ("metric", metric)), unit, 5,
                                  1.0, 0.9, 1.1, 0.0, lower, 1.0, fail / 2, fail, 0, 0)
    rows = [row("bandwidth", "MB/s", 0.49), row("bandwidth", "MB/s", 0.5),
            row("latency", "us", 0.99), row("latency", "us", 1.0),
            row("copy_bandwidth", "GB/s", 0.6, benchmark="host_control")]
    assert [(dict(s.key)["metric"], s.fail) for s in suggest.blind_rows(rows)] == [
        ("bandwidth", 0.5), ("latency", 1.0)]
    assert suggest.blind_warning(rows[:1]) == ""

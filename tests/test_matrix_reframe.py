"""The MPI x transport x nodes matrix through real ReFrame: listing, skips, verification,
references (bands, deviation, missing), bus bandwidth and the modes."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import CHECKS, REPO, have, run_reframe

PT2PT = {"OsuLatency", "OsuBandwidth", "OsuBiBandwidth"}
COLLECTIVES = {"OsuAllreduce", "OsuBcast", "OsuAlltoall", "OsuReduce", "OsuAllgather"}
INTER_NODE = {"ucx_rc", "ucx_ud", "ucx_dc", "tcp", "tcp_ob1"}
# Which MPI can select which transport (the mapping, stated independently here).
MPI_TRANSPORTS = {
    "openmpi": {"ucx_rc", "ucx_ud", "ucx_dc", "tcp", "tcp_ob1", "shm"},
    "mpich": {"ucx_rc", "ucx_ud", "ucx_dc", "tcp", "shm"},
    "mvapich2": {"ucx_rc", "ucx_ud", "tcp", "shm"},
}
_CASE = re.compile(r"^- (?P<name>\w+) %transport=(?P<transport>\w+) %nodes=(?P<nodes>\d+) "
                   r"/\w+(?: @(?P<part>[\w:]+)\+(?P<env>\w+))?$")


def derived_config(tmp_path: Path, partition_extras: dict[str, object],
                   mpich_launcher: list[str] | None = None) -> Path:
    """The repository's config with the local partition's extras (and MPICH launcher) changed."""
    path = tmp_path / "config.py"
    path.write_text(
        "import copy\nimport runpy\n"
        f"_base = runpy.run_path({str(REPO / 'reframe-config.py')!r})\n"
        "site_configuration = copy.deepcopy(_base['site_configuration'])\n"
        "site_configuration['systems'][0]['partitions'][0]['extras'].update("
        f"{partition_extras!r})\n"
        + ("" if mpich_launcher is None else
           "[e for e in site_configuration['environments'] if e['name'] == 'mpich'][0]"
           f"['extras']['launcher'] = {mpich_launcher!r}\n"))
    return path


def _cases(output: str) -> set[tuple[str, ...]]:
    """The OSU test cases listed (the workload checks have tests of their own)."""
    out = set()
    for line in output.splitlines():
        m = _CASE.match(line.strip())
        if m and m["name"] in PT2PT | COLLECTIVES:
            out.add(tuple(v for v in (m["name"], m["transport"], m["nodes"], m["env"]) if v))
    return out


def _sessions(perflogs: Path) -> list[dict[str, object]]:
    """Session info of each session in the results database (session extras are merged in)."""
    with sqlite3.connect(perflogs / "results.db") as db:
        return [json.loads(row[0])["session_info"]
                for row in db.execute("SELECT json_blob FROM sessions")]


def _perflog_rows(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"))) for line in lines[1:]]


def test_local_lists_shared_memory_on_one_node_only(tmp_path):
    proc = run_reframe("-l", perflog_dir=tmp_path / "p", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _cases(proc.stdout) == {(name, "shm", "1") for name in PT2PT | COLLECTIVES}


def test_four_node_partition_lists_every_valid_combination_and_nothing_else(tmp_path):
    config = derived_config(tmp_path, {"max_nodes": 4})
    proc = run_reframe("-lC", config=config, perflog_dir=tmp_path / "p", cwd=tmp_path,
                       timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = set()
    for name in PT2PT | COLLECTIVES:
        node_counts = (1, 2) if name in PT2PT else (1, 2, 4)
        for mpi, transports in MPI_TRANSPORTS.items():
            for transport in transports:
                for nodes in node_counts:
                    if (transport == "shm") == (nodes == 1):
                        expected.add((name, transport, str(nodes), mpi))
    assert _cases(proc.stdout) == expected


def test_node_counts_follow_the_configured_maximum(tmp_path):
    config = derived_config(tmp_path, {"max_nodes": 6})
    proc = run_reframe("-l", "-n", "OsuAllreduce", config=config, perflog_dir=tmp_path / "p",
                       cwd=tmp_path, timeout=300)
    nodes = {int(case[2]) for case in _cases(proc.stdout)}
    assert nodes == {1, 2, 4, 6}


def test_bad_max_nodes_is_one_clear_error(tmp_path):
    config = derived_config(tmp_path, {"max_nodes": "four"})
    proc = run_reframe("-l", config=config, perflog_dir=tmp_path / "p", cwd=tmp_path,
                       timeout=300)
    out = proc.stdout + proc.stderr
    assert "partition local:default: extras['max_nodes'] must be a positive integer, " \
           "got 'four'" in out
    assert "Traceback" not in out


@pytest.mark.slow
def test_rdma_transports_are_skipped_with_the_reason_never_passed(tmp_path):
    if not have("ucx_info"):
        pytest.skip("ucx_info not installed")
    config = derived_config(tmp_path, {"max_nodes": 2})
    proc = run_reframe("-r", "-n", "OsuLatency%transport=ucx_rc", "-n",
                       "OsuLatency%transport=ucx_ud", "-n", "OsuLatency%transport=ucx_dc",
                       config=config, perflog_dir=tmp_path / "p", cwd=tmp_path,
                       checks=CHECKS / "osu.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "[       OK ]" not in out and "OK ]" not in out.replace("SKIP", "")
    for transport, names in [("ucx_rc", "rc_mlx5 or rc_verbs"), ("ucx_ud", "ud_mlx5 or ud_verbs"),
                             ("ucx_dc", "dc_mlx5")]:
        for mpi in ("openmpi", "mpich"):
            assert (f"{transport} is unavailable for {mpi} on local:default: {transport} needs "
                    f"UCX transport {names}") in out
    assert "Ran 0/" in out or re.search(r"0 failure\(s\)", out)


@pytest.mark.slow
def test_nightly_run_logs_transport_bands_deviation_missing_and_busbw(tmp_path):
    checks = tmp_path / "checks"
    shutil.copytree(CHECKS, checks)
    # Deterministic bands whatever this machine's speed: any latency above 1e-6 us is in the
    # warning band (warn 0, fail 1e9); no bandwidth reaches 1e9 MB/s (failure band).
    (checks / "references" / "local.yaml").write_text(
        "references:\n"
        "  - {benchmark: osu_latency, metric: latency, value: 0.000001, unit: us, warn: 0,"
        " fail: 1000000000}\n"
        "  - {benchmark: osu_bw, metric: bandwidth, value: 1000000000, unit: MB/s, warn: 0.1,"
        " fail: 0.5}\n"
        "  - {benchmark: osu_allreduce, metric: busbw, value: 0.000001, unit: MB/s}\n")
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "--mode", "nightly", "-S", "valid_prog_environs=openmpi,mpich",
                       "-n", "OsuLatency", "-n", "OsuBandwidth", "-n", "OsuAllreduce",
                       "-S", "perf_sizes=1024", "-S", "contended_share=1.0",
                       # what is asserted is what the nightly logs, not how many runs a
                       # verdict takes (tests/test_verdicts_reframe.py): the fewest runs
                       "-S", "repeats=1", "-S", "confirm_runs=2", "-S", "confirm_span=2",
                       "-S", "control_gap=0.5",
                       checks=checks, perflog_dir=perflogs, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "OsuBandwidth" in out and "failed to meet reference(s): bandwidth_1KB" in out
    assert "OsuLatency %transport=shm %nodes=1: latency_1KB:" in out and ": warn" in out
    assert "OsuAllreduce %transport=shm %nodes=1: latency_1KB: no reference" in out

    logs = perflogs / "local" / "default"
    for row in _perflog_rows(logs / "OsuLatency.log"):
        assert (row["result"], row["ref_status"]) == ("pass", "warn")
        assert (row["transport"], row["transport_used"], row["nodes"]) == ("shm", "shm", "1")
        assert row["mpi"] == row["environ"]
        deviation = json.loads(row["deviation"])
        assert set(deviation) == {"latency_1KB"} and deviation["latency_1KB"] < -1000
        assert "latency_1KB:" in row["ref_notes"] and row["ref_notes"].endswith("warn")
    for row in _perflog_rows(logs / "OsuBandwidth.log"):
        assert (row["result"], row["ref_status"], row["bandwidth_1KB_result"]) == (
            "fail", "fail", "fail")
        assert json.loads(row["deviation"])["bandwidth_1KB"] == pytest.approx(-1.0, abs=1e-3)
    rows = _perflog_rows(logs / "OsuAllreduce.log")
    assert {r["environ"] for r in rows} == {"openmpi", "mpich"}
    for row in rows:
        assert (row["result"], row["ref_status"]) == ("pass", "missing")
        assert row["latency_1KB_ref"] == "0"
        deviation = json.loads(row["deviation"])
        assert deviation["latency_1KB"] is None and deviation["busbw_1KB"] > 0
        ranks = int(row["num_tasks"])
        expected = 1024 / float(row["latency_1KB_value"]) * 2 * (ranks - 1) / ranks
        assert float(row["busbw_1KB_value"]) == pytest.approx(expected, rel=1e-3)
        assert row["busbw_1KB_unit"] == "MB/s"

    assert [s["mode"] for s in _sessions(perflogs)] == ["nightly"]


@pytest.mark.slow
def test_acceptance_requires_references_repeats_and_tags_the_session(tmp_path):
    checks = tmp_path / "checks"
    shutil.copytree(CHECKS, checks)
    (checks / "references" / "local.yaml").write_text(
        "references:\n"
        "  - {benchmark: osu_latency, metric: latency, value: 1000000, unit: us}\n")
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "--mode", "acceptance", "-S", "valid_prog_environs=mpich",
                       "-n", "OsuLatency", "-n", "OsuAllreduce", "-S", "perf_sizes=1024",
                       checks=checks, perflog_dir=perflogs, cwd=tmp_path,
                       env={"FABREG_CHANGE": "CHG-42, switch firmware 3.1",
                            "FABREG_ACCEPTANCE_REPEATS": "2"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # the file a missing row belongs in is this host's baseline (local keys by host)
    assert re.search(r"references are required \(acceptance mode\) but "
                     r"checks/references/local/[a-z0-9.-]+\.yaml has none for latency_1KB "
                     r"\(benchmark=osu_allreduce, mpi=mpich, transport=shm, nodes=1\)", out), out

    logs = perflogs / "local" / "default"
    latency = _perflog_rows(logs / "OsuLatency.log")
    assert [r["result"] for r in latency] == ["pass", "pass"]
    allreduce = _perflog_rows(logs / "OsuAllreduce.log")
    assert [(r["result"], r["ref_status"]) for r in allreduce] == [("fail", "missing")] * 2
    [session] = _sessions(perflogs)
    assert (session["mode"], session["change"]) == ("acceptance", "CHG-42; switch firmware 3.1")


@pytest.mark.slow
def test_run_forced_onto_another_transport_fails_verification(tmp_path):
    """The site's MPICH launcher forces UCX onto TCP; the check asked for shared memory."""
    if not have("mpiexec.mpich"):
        pytest.skip("MPICH is not installed")
    config = derived_config(tmp_path, {}, mpich_launcher=[
        "mpiexec.mpich", "-genv", "UCX_TLS", "tcp,self", "-n", "{num_tasks}"])
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "mpich", "-S", "perf_sizes=8",
                       config=config, perflog_dir=tmp_path / "p", cwd=tmp_path,
                       checks=CHECKS / "osu.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "transport verification failed: asked for shm but traffic went over tcp " \
           "(UCX tag lanes:" in out
    # The results database keeps the failed case with what the logs showed.
    with sqlite3.connect(tmp_path / "p" / "results.db") as db:
        [blob] = [json.loads(row[0]) for row in db.execute("SELECT json_blob FROM sessions")]
    [case] = [tc for run in blob["runs"] for tc in run["testcases"]
              if tc["name"].startswith("OsuLatency")]
    assert (case["result"], case["transport"], case["transport_used"]) == ("fail", "shm", "tcp")

"""The workload checks as users run them: real ReFrame sessions on this host."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import CHECKS, have, mvapich2_mrail_prefix, run_reframe
from test_matrix_reframe import derived_config

from fabreg import schema
from fabreg.metrics import split_perfvar
from fabreg.run import client_server
from fabreg.run.parsers.ucx_perftest import parse_ucx_perftest

WORKLOAD_CHECKS = ["UcxPerftestLatency", "UcxPerftestBandwidth", "IbWriteBw", "IbReadBw",
                   "IbSendBw", "IbWriteLat", "IbReadLat", "IbSendLat", "Streams",
                   "StreamsFanIn", "TailLatency", "Matmul", "GpuOsuLatency",
                   "GpuOsuBandwidth", "GpuOsuAllreduce"]


def _rows(perflogs: Path, check: str) -> list[dict[str, str]]:
    lines = (perflogs / "local" / "default" / f"{check}.log").read_text().splitlines()
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"))) for line in lines[1:]]


def _out(proc) -> str:
    return proc.stdout + proc.stderr


def test_workload_checks_are_listed(tmp_path):
    proc = run_reframe("-l", perflog_dir=tmp_path / "p", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, _out(proc)
    listed = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("- ")}
    assert set(WORKLOAD_CHECKS) <= listed


_PROBE_CASE = re.compile(r"^- (?P<name>Streams|StreamsFanIn|TailLatency|Matmul) "
                         r"%transport=(?P<transport>\w+) %nodes=(?P<nodes>\d+)(?P<rest>.*) /\w+$")


def test_four_node_partition_places_probes_sensibly(tmp_path):
    """Across nodes: cross pairs and interleaved tail latency on even node counts, fan-in on
    one node only, matmul with the same ranks on every node; shm only on one node."""
    config = derived_config(tmp_path, {"max_nodes": 4})
    proc = run_reframe("-l", "--tag", "workload", config=config, perflog_dir=tmp_path / "p",
                       cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, _out(proc)
    cases: dict[str, set[tuple[str, int, str]]] = {}
    for line in proc.stdout.splitlines():
        if m := _PROBE_CASE.match(line.strip()):
            cases.setdefault(m["name"], set()).add(
                (m["transport"], int(m["nodes"]), m["rest"].strip()))
    assert {(n, r) for t, n, r in cases["Streams"]} == {
        (1, "%layout=pair"), (1, "%layout=pairs"), (2, "%layout=cross"), (4, "%layout=cross")}
    assert {n for _, n, _ in cases["StreamsFanIn"]} == {1}
    assert {n for _, n, _ in cases["TailLatency"]} == {1, 2, 4}
    matmul = {(n, r.split("%ranks=")[1]) for _, n, r in cases["Matmul"]}
    assert matmul == {(1, "2"), (1, "4"), (2, "2"), (2, "4"), (4, "4")}
    for name, found in cases.items():
        for transport, nodes, _ in found:
            assert (transport == "shm") == (nodes == 1), (name, transport, nodes)
    # Server + client benchmarks: one node or two, never shared memory across nodes.
    ucx = re.findall(r"^- UcxPerftestLatency %nodes=(\d) %ucx_test=tag_lat %transport=(\w+) "
                     r"%buffer=host", proc.stdout, re.MULTILINE)
    assert {(int(n), t) for n, t in ucx} == {
        (n, t) for n in (1, 2) for t in ("ucx_rc", "ucx_ud", "ucx_dc", "tcp", "shm")
        if not (t == "shm" and n == 2)}
    proc = run_reframe("-l", "-n", "IbWriteLat", config=config, perflog_dir=tmp_path / "p",
                       cwd=tmp_path, timeout=300, checks=CHECKS / "perftest.py")
    assert set(re.findall(r"^- IbWriteLat %nodes=(\d)", proc.stdout, re.MULTILINE)) == {"1", "2"}


@pytest.mark.slow
@pytest.mark.skipif(not have("ucx_perftest"), reason="ucx_perftest is not installed")
def test_ucx_perftest_runs_tcp_and_posix_and_skips_the_rest(tmp_path):
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "-n", "UcxPerftestLatency%.*ucx_test=tag_lat", perflog_dir=perflogs,
                       cwd=tmp_path, checks=CHECKS / "ucx_perftest.py")
    out = _out(proc)
    assert proc.returncode == 0, out[-3000:]
    rows = {r["transport"]: r for r in _rows(perflogs, "UcxPerftestLatency")}
    assert set(rows) == {"tcp", "shm"}
    for tl, row in rows.items():
        assert row["buffer"] == "host" and row["result"] == "pass"
        assert row["transport_used"] == tl  # from UCX's own lane report
        assert row["ucx_tls"] == {"tcp": "tcp,self", "shm": "sm,self"}[tl]
        assert float(row["latency_8B_value"]) > 0 and row["latency_8B_unit"] == "us"
        # judged by this host's baseline, or missing until one is calibrated
        assert row["host_key"] and json.loads(row["ref_keys"])["latency_8B"]["transport"] == tl
        assert (float(row["latency_8B_ref"]) > 0) == (row["ref_status"] != "missing")
        assert float(row["msgrate_8B_value"]) > 0
        assert row["fabric_counters"].startswith("unavailable: no RDMA devices")
        # three runs of the pair, each figure judged by its best, the spread logged
        (out_dir,) = (tmp_path / "output").rglob(f"UcxPerftestLatency_{row['hashcode']}")
        # the driver took the counters' snapshots: no interpreter started for them
        assert "counters read" not in (out_dir / "rfm_job.sh").read_text()
        runs = [parse_ucx_perftest((out_dir / client_server.repeat_output(i)).read_text())
                for i in (1, 2, 3)]
        assert float(row["latency_8B_value"]) == pytest.approx(min(r.p50_usec for r in runs))
        assert float(row["msgrate_8B_value"]) == pytest.approx(
            max(r.msgrate_average for r in runs))
        assert json.loads(row["spread"])["latency_8B"] >= 0
    assert "ucx_rc is unavailable to UCX on local:default: ucx_rc needs UCX transport" in out
    assert "ucx_ud is unavailable to UCX on local:default" in out
    if not Path("/dev/nvidia0").exists():
        assert "no GPU: this host has no NVIDIA GPU" in out


@pytest.mark.skipif(not have("ucx_perftest"), reason="ucx_perftest is not installed")
def test_a_figure_that_measures_no_property_of_the_transport_is_logged_not_judged(tmp_path):
    """ucp_put_bw over TCP: its p50 send overhead spans 0.04-142 us between healthy runs
    (UNJUDGED); it is logged, while bandwidth, message rate and average overhead are judged."""
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "-n", "UcxPerftestBandwidth%nodes=1%ucx_test=ucp_put_bw"
                       "%transport=tcp%buffer=host", "-S", "iterations=500",
                       perflog_dir=perflogs, cwd=tmp_path, checks=CHECKS / "ucx_perftest.py")
    out = _out(proc)
    assert proc.returncode == 0, out[-3000:]
    (row,) = _rows(perflogs, "UcxPerftestBandwidth")
    assert float(row["overhead_64KB_value"]) > 0
    keys = json.loads(row["ref_keys"])
    assert "overhead_64KB" not in keys and "overhead_64KB" not in json.loads(row["verdicts"])
    assert {"overhead_avg_64KB", "bandwidth_64KB", "msgrate_64KB"} <= set(keys)


@pytest.mark.slow
@pytest.mark.skipif(not have("ib_write_lat"), reason="perftest is not installed")
@pytest.mark.skipif(Path("/sys/class/infiniband").is_dir(), reason="this host has RDMA devices")
def test_perftest_is_skipped_for_lack_of_a_device(tmp_path):
    proc = run_reframe("-r", "-n", "IbWriteLat", perflog_dir=tmp_path / "p", cwd=tmp_path,
                       checks=CHECKS / "perftest.py")
    out = _out(proc)
    assert proc.returncode == 0, out[-3000:]
    assert out.count("SKIP") >= 1  # polling only: RDMA write has no event completion
    assert "no RDMA device: /sys/class/infiniband lists none on this host" in out
    # Without the up-front check, perftest itself runs and says so: still a skip.
    # Every perftest case reaches perftest's own device check: none is refused its options
    # first (event completion on RDMA write, -n not a multiple of -l 16: 30 cases failed so
    # on the emulated cluster, whose nodes, not the ReFrame host, decide)
    proc = run_reframe("-r", "-n", "^Ib", "-S", "detect_devices=false",
                       perflog_dir=tmp_path / "p2", cwd=tmp_path, checks=CHECKS / "perftest.py")
    out = _out(proc)
    assert proc.returncode == 0, out[-3000:]
    # every case the run went through, as ReFrame names it (with its parameters)
    listed = re.findall(r"\] \(\s*\d+/\s*\d+\) (Ib\w+ .*?) /[0-9a-f]{8} ", out)
    assert not [c for c in listed if c.startswith("IbWrite") and "completion=event" in c]
    # one node here: read and send bandwidth 2 completions x 2 qps x 2 post lists each, write
    # 2 x 2 (polling only); read and send latency 2 each, write 1
    assert len(listed) == 25, out[-2000:]
    assert out.count("no RDMA device: perftest says 'Did not detect devices'") >= len(listed)


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.openmpi"), reason="OpenMPI is not installed")
def test_probe_checks_write_perflogs_with_references_and_counters(tmp_path):
    perflogs = tmp_path / "perflogs"
    proc = run_reframe(
        "-r", "-p", "openmpi", "-n", "Streams%.*layout=pair$", "-n", "StreamsFanIn",
        "-n", "Matmul%.*mode=nonblocking%matrix_size=512%ranks=2",
        "-n", "TailLatency%.*case=allreduce:default%environment=low_tail",
        perflog_dir=perflogs, cwd=tmp_path,
        checks=[CHECKS / f for f in ("streams.py", "matmul.py", "tail_latency.py")])
    out = _out(proc)
    assert proc.returncode == 0, out[-4000:]
    (pair,) = _rows(perflogs, "Streams")
    assert pair["layout"] == "pair" and float(pair["rate_min_value"]) > 0
    assert pair["loss_rate_value"] == "0.0"
    (fanin,) = _rows(perflogs, "StreamsFanIn")
    assert float(fanin["fanin_share_value"]) > 0 and float(fanin["fanin_share_ref"]) == 1.0
    (mm,) = _rows(perflogs, "Matmul")
    assert 0 < float(mm["comm_fraction_value"]) < 1
    (tail,) = _rows(perflogs, "TailLatency")
    assert tail["collective"] == "allreduce" and tail["algorithm"] == "default"
    assert tail["environment"] == "low_tail" and float(tail["tail_target"]) == 1.5
    assert float(tail["p99_value"]) >= float(tail["p50_value"]) > 0
    assert float(tail["tail_reached"]) == float(tail["p99_over_p50_value"])
    # loaded figures describe the environment the job chose: logged, never judged by a baseline
    assert json.loads(tail["ref_keys"]) == {} and json.loads(tail["verdicts"]) == {}, tail
    assert tail["ref_status"] == "", tail["ref_status"]
    for row in (pair, fanin, mm, tail):
        assert undeclared_metrics(row) == []
        # Measured figures are judged by this host's own baseline only; without one (a new
        # host) they are missing, and the run says how to record one.
        baseline = CHECKS / "references" / "local" / f"{row['host_key']}.yaml"
        if row is not tail and not baseline.exists():
            assert row["ref_status"] == "missing", row["ref_status"]
            assert "fabreg references calibrate --system local" in row["ref_notes"]
        assert row["fabric_counters"].startswith("unavailable: no RDMA devices"), (
            row["fabric_counters"])
        assert row["mpi"] == "openmpi" and row["provider"] == "fabreg-probes"
        assert row["transport"] == "shm" and row["nodes"] == "1"
        assert row["transport_used"] == "shm", row["transport_used"]
    # The tail check keeps, next to the job's own output, the calibration (what was tried,
    # what was chosen, what was reached) and the output of every run its figures come from:
    # its measured runs, or the calibration step that showed the environment out of reach.
    (result,) = list((tmp_path / "output").rglob("tail-environment.json"))
    environment = json.loads(result.read_text())
    assert environment["calibration"] and environment["runs"], environment
    for name in environment["runs"]:
        assert (result.parent / name).is_file(), f"{name} not kept"
    if environment["host_tail_out_of_reach"]:
        assert environment["runs"] == [f"tail_calibrate{environment['calibration'][-1]['step']}"
                                       ".out"], environment["runs"]


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.openmpi"), reason="OpenMPI is not installed")
def test_fan_in_fails_as_unfair_only_when_every_run_is_unfair(tmp_path):
    # No fan-in is fairer than 1.0 (slowest = fastest): every run is "unfair" against 1.01.
    proc = run_reframe("-r", "-p", "openmpi", "-n", "StreamsFanIn", "-S", "min_fairness=1.01",
                       perflog_dir=tmp_path / "p", cwd=tmp_path, checks=CHECKS / "streams.py")
    out = _out(proc)
    assert proc.returncode != 0
    assert "unfair fan-in in every one of 3 run(s): the fairest had stream rates" in out, out
    # Each run had its single-stream baseline launch, kept beside the fan-in's output.
    kept = sorted(p.name for p in tmp_path.rglob("probe-run*-baseline.out"))
    assert kept == [f"probe-run{i}-baseline.out" for i in (1, 2, 3)], kept


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.mpich"), reason="MPICH is not installed")
def test_tail_latency_of_busy_polling_ranks_on_too_few_cpus_is_skipped_saying_why(tmp_path):
    """A loaded tail environment on one node runs 4 ranks; on fewer CPUs MPICH's ranks,
    which busy-poll, would measure the OS scheduler's time slices: those cases are skipped,
    saying so, and the quiet one (2 ranks) and Open MPI's (which yields) are not. A dry run
    of the check passes: nothing ran, so there is nothing to read or judge."""
    proc = run_reframe("--dry-run", "-n", "TailLatency%.*case=allreduce:default",
                       "-p", "openmpi|mpich", perflog_dir=tmp_path / "p", cwd=tmp_path,
                       checks=CHECKS / "tail_latency.py")
    out = _out(proc)
    assert proc.returncode == 0, out[-4000:]
    skipped = re.findall(r"SKIP.*\] \(.*\) TailLatency .*%environment=(\w+) .*\+(\w+) \[(.*)\]",
                         out)
    cpus = os.cpu_count() or 1
    if cpus >= 4:
        assert not skipped, skipped
        return
    assert sorted((env, mpi) for env, mpi, _ in skipped) == [
        ("high_tail", "mpich"), ("low_tail", "mpich")], skipped
    for _, _, why in skipped:
        assert why == (f"4 ranks on {cpus} CPUs: MPICH's ch4:ucx device polls for messages "
                       "without yielding the CPU, so the tail would be the OS scheduler's time "
                       "slices, not the fabric's; run it on a node of 4 CPUs or more"), why
    assert out.count("DRY") >= 4, out[-4000:]  # 3 of Open MPI's, MPICH's quiet one


@pytest.mark.slow
def test_a_quiet_tail_of_more_ranks_than_cpus_is_skipped_under_an_mpi_that_yields_too(tmp_path):
    """The quiet tail, which a baseline row judges, of more ranks than the node's CPUs is the
    scheduler's under Open MPI too (its ranks yield, but each then waits for its peer's next
    slice): skipped, saying so; its loaded environments, judged by the ratio their background
    reaches, still run. A dry run: only what would run is decided."""
    cpus = os.cpu_count() or 1
    proc = run_reframe("--dry-run", "-n", "TailLatency%.*case=allreduce:default",
                       "-p", "openmpi", "-S", f"TailLatency.measured_ranks={cpus + 1}",
                       perflog_dir=tmp_path / "p", cwd=tmp_path,
                       checks=CHECKS / "tail_latency.py")
    out = _out(proc)
    assert proc.returncode == 0, out[-4000:]
    skipped = re.findall(r"SKIP.*\] \(.*\) TailLatency .*%environment=(\w+) .*\+(\w+) \[(.*)\]",
                         out)
    assert skipped == [("quiet", "openmpi", (
        f"{cpus + 1} ranks on {cpus} CPUs: a rank that gives its CPU away still waits for its "
        "peer's next time slice, so the tail would be the OS scheduler's time slices, not the "
        f"fabric's; run it on a node of {cpus + 1} CPUs or more"))], skipped
    assert out.count("DRY") >= 2, out[-4000:]  # the two loaded environments


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.mpich"), reason="MPICH is not installed")
def test_fanin_of_busy_polling_ranks_on_too_few_cpus_is_skipped_saying_why(tmp_path):
    """The fan-in runs 3 ranks on one node; on fewer CPUs MPICH's ranks, which busy-poll,
    hold two CPUs between three, so its fair share would be the OS scheduler's: the case is
    skipped, saying so, and Open MPI's (which yields) is not."""
    proc = run_reframe("--dry-run", "-n", "StreamsFanIn", "-p", "openmpi|mpich",
                       perflog_dir=tmp_path / "p", cwd=tmp_path, checks=CHECKS / "streams.py")
    out = _out(proc)
    assert proc.returncode == 0, out[-4000:]
    skipped = re.findall(r"SKIP.*\] \(.*\) StreamsFanIn .*\+(\w+) \[(.*)\]", out)
    cpus = os.cpu_count() or 1
    if cpus >= 3:
        assert not skipped, skipped
        return
    assert skipped == [("mpich", f"3 ranks on {cpus} CPUs: MPICH's ch4:ucx device polls for "
                        "messages without yielding the CPU, so the streams' shares would be "
                        "the OS scheduler's time slices, not the fabric's; run it on a node of "
                        "3 CPUs or more")], skipped
    assert out.count("DRY") >= 1, out[-4000:]  # Open MPI's


@pytest.mark.slow
def test_mvapich2_infiniband_build_runs_more_ranks_than_cores(tmp_path):
    """MVAPICH2's mrail device pins a rank per core and stops in MPI_Init on more
    ("MV2_ENABLE_AFFINITY: oversubscribed cores"); a host of fewer cores than ranks
    (a 2-core CI machine) runs its 4-rank matmul with affinity off. Its idle ranks spin
    rather than yield, so a 3-rank fan-in on 2 cores would measure the OS scheduler's
    shares: that case is skipped, saying so."""
    prefix = mvapich2_mrail_prefix()
    if prefix is None:
        pytest.skip("no MVAPICH2 ch3:mrail build here: ci/build-mvapich2.sh SRC "
                    "~/.cache/fabreg/mvapich2-mrail mrail, or FABREG_MVAPICH2_MRAIL_PREFIX")
    if (os.cpu_count() or 1) >= 4:
        pytest.skip("this host has 4 cores or more: 4 ranks do not oversubscribe it")
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "-p", "mvapich2", "-n",
                       "Matmul%transport=shm%nodes=1%mode=blocking%matrix_size=512%ranks=4$",
                       "-n", "StreamsFanIn", perflog_dir=perflogs, cwd=tmp_path,
                       env={"FABREG_MVAPICH2_PREFIX": str(prefix)},
                       checks=[CHECKS / "matmul.py", CHECKS / "streams.py"])
    out = _out(proc)
    assert proc.returncode == 0, out[-4000:]
    cpus = os.cpu_count() or 1
    if cpus < 3:
        assert (f"3 ranks on {cpus} CPUs: MVAPICH2's ch3:mrail device polls shared memory "
                "without yielding the CPU, so the streams' shares would be the OS scheduler's "
                "time slices, not the fabric's; run it on a node of 3 CPUs or more" in out), \
            out[-4000:]
        assert not (perflogs / "local" / "default" / "StreamsFanIn.log").exists()
    (row,) = _rows(perflogs, "Matmul")
    assert row["result"] == "pass" and row["ranks"] == "4" and row["mpi"] == "mvapich2", row
    (script,) = list((tmp_path / "output").rglob("Matmul_*/rfm_job.sh"))
    assert "export MV2_ENABLE_AFFINITY=0" in script.read_text()


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.mpich"), reason="MPICH is not installed")
def test_matmul_check_fails_on_a_wrong_answer(tmp_path):
    proc = run_reframe("-r", "-p", "mpich", "-n", "Matmul%.*mode=blocking%matrix_size=512%ranks=2",
                       "-S", "corrupt=true", perflog_dir=tmp_path / "p", cwd=tmp_path,
                       checks=CHECKS / "matmul.py")
    out = _out(proc)
    assert proc.returncode != 0
    assert "C differs from the known answer A*B (n=512, 2 ranks, blocking)" in out


def undeclared_metrics(row: dict[str, str]) -> list[str]:
    """Perf variables of a perflog line whose metric has no declared direction."""
    names = [c[: -len("_value")] for c in row if c.endswith("_value")]
    return [n for n in names if schema.declared_direction(split_perfvar(n)[0]) is None]

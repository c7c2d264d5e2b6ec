"""`fabreg stress`: bounded collective traffic as a local process group (real MPI ranks)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from fabreg.cli import main
from fabreg.errors import FabregError
from fabreg.run import stress

HAVE_OPENMPI = shutil.which("mpicc.openmpi") and shutil.which("mpirun.openmpi")


def _ours_running(state_dir: Path) -> list[int]:
    """PIDs of processes running a binary built in ``state_dir`` (only ours can)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.startswith(str(state_dir).encode()) for arg in cmdline[:1]):
            pids.append(int(proc.name))
    return pids


def _wait_for(predicate, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_OPENMPI, reason="OpenMPI is not installed")
def test_runs_logs_and_stops_by_itself(tmp_path):
    run = stress.start(tmp_path, duration=3, size=1 << 20, window=0.5)
    assert run.mode == "local" and run.pid and run.deadline - run.started == 3
    assert stress.get_status(tmp_path).running
    log = Path(run.log)
    assert _wait_for(lambda: {s.op for s in stress.read_samples(log)} ==
                     {"allreduce", "alltoall"}, 20)
    # It ends on its own at its time limit (plus launcher start-up and teardown).
    assert _wait_for(lambda: not stress.get_status(tmp_path).running, 30)
    status = stress.get_status(tmp_path)
    assert status.state == "finished"
    samples = stress.read_samples(log)
    assert all(s.iterations > 0 and s.p50_us <= s.p99_us <= s.max_us for s in samples)
    assert all(s.size == 1 << 20 and s.ranks == 2 for s in samples)
    assert samples[-1].time <= run.deadline + 5
    assert _ours_running(tmp_path) == []


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("mpicc.mpich"), reason="MPICH is not installed")
def test_stop_ends_every_process_it_started(tmp_path):
    stress.start(tmp_path, mpi="mpich", duration=120, size=1 << 20)
    assert _wait_for(lambda: len(_ours_running(tmp_path)) >= 2, 20)  # both ranks up
    with pytest.raises(FabregError, match="already active"):
        stress.start(tmp_path, mpi="mpich", duration=5)
    assert stress.stop(tmp_path).startswith("stopped stress process group")
    assert _wait_for(lambda: _ours_running(tmp_path) == [], 10)
    assert stress.get_status(tmp_path).state == "stopped"
    assert stress.stop(tmp_path) == "stress run already ended"


def test_stop_never_touches_a_reused_pid(tmp_path):
    """A recorded PID now owned by another process (here: this test) is left alone."""
    run = stress.StressRun(mode="local", started=0, deadline=1, duration=1, ranks=2, size=8,
                           ops=["allreduce"], mpi="openmpi", log=str(tmp_path / "l"),
                           out=str(tmp_path / "o"), command=[], pid=os.getpid(), pid_start=1)
    run.save(tmp_path)
    assert stress.stop(tmp_path) == "stress run already ended"
    assert not stress.get_status(tmp_path).running


def test_log_reader_tolerates_a_line_being_written(tmp_path):
    line = {"time": 1.0, "op": "allreduce", "size": 8, "ranks": 2, "window_s": 1.0,
            "iterations": 3, "p50_us": 1.0, "p99_us": 2.0, "max_us": 3.0, "mean_us": 1.5}
    log = tmp_path / "latency.jsonl"
    log.write_text(json.dumps(line) + "\n" + '{"time": 2.0, "op": "all')
    assert [s.p99_us for s in stress.read_samples(log)] == [2.0]
    log.write_text("garbage\n" + json.dumps(line) + "\n")
    with pytest.raises(FabregError, match="latency.jsonl:1: not a stress latency record"):
        stress.read_samples(log)


def test_exposition_of_the_latest_window(tmp_path):
    assert stress.exposition(tmp_path) == []
    run = stress.StressRun(mode="local", started=0, deadline=1, duration=1, ranks=2, size=8,
                           ops=["allreduce"], mpi="openmpi", log=str(tmp_path / "latency.jsonl"),
                           out=str(tmp_path / "o"), command=[], pid=None, pid_start=None)
    run.save(tmp_path)
    rows = [{"time": t, "op": "allreduce", "size": 8, "ranks": 2, "window_s": 1.0,
             "iterations": 3, "p50_us": p, "p99_us": 2 * p, "max_us": 3 * p, "mean_us": p}
            for t, p in ((1.0, 10.0), (2.0, 20.0))]
    (tmp_path / "latency.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = "\n".join(stress.exposition(tmp_path))
    assert "fabreg_stress_running 0" in text
    assert 'fabreg_stress_latency_us{op="allreduce",size="8",ranks="2",quantile="0.5"} 20.0' in text
    assert 'quantile="0.99"} 40.0' in text and 'quantile="1"} 60.0' in text
    assert 'fabreg_stress_window_timestamp_seconds{op="allreduce"} 2.0' in text


def test_sbatch_call_is_bounded_by_its_time_limit(tmp_path):
    argv = stress.sbatch_argv(["mpirun", "-np", "4", "/x/fabreg_stress", "-t", "600"],
                              600, 4, 2, "fabric", tmp_path / "stress.out")
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--time=11" in argv  # 600 s + 30 s grace, in whole minutes
    assert "--nodes=2" in argv and "--ntasks=4" in argv and "--partition=fabric" in argv
    assert argv[-2:] == ["--wrap", "mpirun -np 4 /x/fabreg_stress -t 600"]


@pytest.mark.parametrize("args, message", [
    (["--duration", "0"], "--duration must be between 1 and 86400 seconds"),
    (["--ranks", "1"], "--ranks must be at least 2"),
    (["--ops", "bcast"], "--ops takes allreduce and/or alltoall"),
    (["--size", "4XB"], "bad message size '4XB'"),
    (["--mpi", "lam"], "unknown MPI 'lam'"),
])
def test_bad_requests_are_one_line(tmp_path, capsys, args, message):
    assert main(["stress", "start", "--state-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fabreg: error: ") and message in err
    assert len(err.splitlines()) == 1


def test_status_and_stop_without_a_run(tmp_path, capsys):
    assert main(["stress", "status", "--state-dir", str(tmp_path)]) == 0
    assert "no run recorded" in capsys.readouterr().out
    assert main(["stress", "stop", "--state-dir", str(tmp_path)]) == 2
    assert "no stress run recorded" in capsys.readouterr().err


def test_sizes():
    assert stress.parse_size("4MB") == 4 << 20
    assert stress.parse_size("64k") == 64 << 10
    assert stress.parse_size("4096") == 4096

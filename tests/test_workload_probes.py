"""fabreg's workload probes (streams, tail latency, matmul, sweep): real MPI runs.

Each probe is compiled once per MPI into a temporary directory and started with
2-4 ranks on this host; the parsers in fabreg.run.parsers.probes read the output.
Runs are kept to about a second each (the machine has 2 shared cores).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fabreg.run.interference import TOKEN_VARIABLE, InterferenceMeter
from fabreg.run.parsers.probes import (
    ProbeOutputError,
    parse_block,
    parse_matmul,
    parse_streams,
    parse_sweep,
    parse_tail_latency,
)

PROBES = Path(__file__).resolve().parents[1] / "src" / "probes"
MPIS = {
    "openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--oversubscribe", "-np"]),
    "mpich": ("mpicc.mpich", ["mpiexec.mpich", "-n"]),
}
OMPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def make_probe(out: Path, name: str, cc: str = "mpicc.openmpi") -> Path:
    """Build probe ``name`` into ``out`` through the probes' Makefile, with ``cc``."""
    proc = subprocess.run(["make", "-f", str(PROBES / "Makefile"), f"CC={cc}", name],
                          cwd=out, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / name


class Probe:
    """A probe built against one MPI, started with that MPI's launcher."""

    def __init__(self, binary: Path, launcher: list[str]) -> None:
        self.binary, self.launcher = binary, launcher

    def run(self, ranks: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, **OMPI_ROOT}
        proc = subprocess.run([*self.launcher, str(ranks), str(self.binary), *args],
                              capture_output=True, text=True, timeout=120, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"probe failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc


@pytest.fixture(scope="module", params=sorted(MPIS))
def build(request, tmp_path_factory):
    """Each probe built on first use through the probes' Makefile (it links libprobe.a),
    out of tree, warning-free with the Makefile's -Wall -Wextra."""
    mpi = request.param
    cc, launcher = MPIS[mpi]
    if not shutil.which(cc) or not shutil.which(launcher[0]):
        pytest.skip(f"{mpi} is not installed ({cc} / {launcher[0]} not on PATH)")
    out = tmp_path_factory.mktemp(f"probes-{mpi}")

    def probe(name: str) -> Probe:
        binary = out / name
        if not binary.exists():
            proc = subprocess.run(["make", "-f", str(PROBES / "Makefile"), f"CC={cc}", name],
                                  cwd=out, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            warnings = [line for line in proc.stderr.splitlines() if "warning" in line.lower()]
            assert warnings == [], proc.stderr
        return Probe(binary, launcher)

    return probe


# --- parsing of the block format (hand-written blocks in the probes' own format) ---

def test_block_without_end_is_incomplete():
    text = "# fabreg_streams v1 placement=pairs\n# stream tx\n0 0\n"
    with pytest.raises(ProbeOutputError, match="cut short"):
        parse_block(text, "streams")


def test_missing_block_is_reported():
    with pytest.raises(ProbeOutputError, match="no '# fabreg_matmul' result block"):
        parse_block("mpirun noise\n", "matmul")


def test_block_ignores_launcher_chatter():
    text = ("warning: something\n# fabreg_tail_latency v2 op=allreduce size=8 iterations=10 "
            "blocks=2 ranks=2 measured_ranks=2 background_pairs=0 background_size=1\n"
            "# phase p50_us p90_us p99_us max_us mean_us min_us p99_over_p50\n"
            "[vm] UCX WARN noise\n"
            "quiet 1.0 2.0 3.0 4.0 2.0 0.5 3.0\n"
            "# end fabreg_tail_latency status=ok background_rounds=0\n")
    result = parse_tail_latency(text)
    assert result.quiet.p99_over_p50 == 3.0 and result.loaded is None


def test_a_ucx_log_line_inside_a_row_leaves_the_row_whole():
    """Another rank's UCX log line forwarded into the middle of the quiet row (as MPICH's
    launcher did to OSU's header on the emulated cluster): the row is read as written."""
    text = ("# fabreg_tail_latency v2 op=allreduce size=8 iterations=10 blocks=2 ranks=2 "
            "measured_ranks=2 background_pairs=0 background_size=1\n"
            "# phase p50_us p90_us p99_us max_us mean_us min_us p99_over_p50\n"
            "quiet 1.0 2.0 3.0[1795797471.108142] [node2:8516 :0]      ucp_worker.c:1763 UCX  "
            "INFO    ep_cfg[0]: tag(tcp/fab0)\n"
            " 4.0 2.0 0.5 3.0\n"
            "# end fabreg_tail_latency status=ok background_rounds=0\n")
    result = parse_tail_latency(text)
    assert result.quiet.p99_us == 3.0 and result.quiet.max_us == 4.0


def test_tail_latency_missing_loaded_row_is_an_error():
    text = ("# fabreg_tail_latency v2 op=allreduce size=8 iterations=10 blocks=2 ranks=4 "
            "measured_ranks=2 background_pairs=1 background_size=1\n"
            "# phase p50_us p90_us p99_us max_us mean_us min_us p99_over_p50\n"
            "quiet 1.0 2.0 3.0 4.0 2.0 0.5 3.0\n# end fabreg_tail_latency status=ok\n")
    with pytest.raises(ProbeOutputError, match="no loaded row"):
        parse_tail_latency(text)


# --- streams ------------------------------------------------------------------------

@pytest.mark.slow
def test_streams_pair(build):
    result = parse_streams(build("fabreg_streams").run(2, "-n", "500", "-s", "65536").stdout)
    assert result.placement == "pairs" and len(result.streams) == 1
    (s,) = result.streams
    assert (s.tx, s.rx, s.sent, s.received, s.missed, s.corrupted) == (0, 1, 500, 500, 0, 0)
    assert s.loss_rate == 0 and s.rate_gbps > 0


@pytest.mark.slow
def test_streams_several_pairs_and_cross(build):
    probe = build("fabreg_streams")
    pairs = parse_streams(probe.run(4, "-n", "300", "-s", "16384").stdout)
    assert [(s.tx, s.rx) for s in pairs.streams] == [(0, 1), (2, 3)]
    cross = parse_streams(probe.run(4, "-p", "cross", "-n", "300", "-s", "16384").stdout)
    assert [(s.tx, s.rx) for s in cross.streams] == [(0, 2), (1, 3)]
    for result in (pairs, cross):
        assert result.total_missed == 0 and result.total_corrupted == 0
        assert all(s.received == 300 for s in result.streams)


@pytest.mark.slow
def test_streams_fanin(build):
    result = parse_streams(build("fabreg_streams").run(3, "-p", "fanin", "-n", "400").stdout)
    assert [(s.tx, s.rx) for s in result.streams] == [(1, 0), (2, 0)]
    assert result.total_missed == 0 and result.total_corrupted == 0
    assert all(s.received == 400 and s.rate_gbps > 0 for s in result.streams)


@pytest.mark.slow
def test_streams_detects_loss_and_corruption(build):
    out = build("fabreg_streams").run(2, "-n", "200", "--skip-every", "10",
                                      "--corrupt-every", "7").stdout
    (s,) = parse_streams(out).streams
    # seq+1 multiple of 10 is never sent (20); of 7 but not 70, sent corrupted (28 - 2).
    assert (s.sent, s.missed, s.corrupted, s.received) == (180, 20, 26, 154)
    assert s.loss_rate == pytest.approx(0.1)


@pytest.mark.slow
def test_streams_bad_placement_is_one_clear_line(build):
    proc = build("fabreg_streams").run(2, "-p", "ring", check=False)
    assert proc.returncode != 0
    assert "unknown placement 'ring'" in proc.stderr


# --- tail latency -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("op", ["allreduce", "alltoall"])
def test_tail_latency_background_raises_the_tail(build, op, monkeypatch):
    """p99/p50 is higher while a background pair bursts than while it sleeps.

    The probe alternates quiet and loaded blocks in one run, so both samples see
    the same host load, and its default background (many short bursts of 2 x 512 KiB,
    each loaded block starting with one) disturbs enough iterations that the loaded
    p99 lands among them: on a quiet 2-core host every one of 20 runs per MPI and
    collective showed it, with the loaded p99 2-10x the quiet one (docs/workloads.md).

    Each run is metered (fabreg.run.interference): a run during which other work took
    more than a tenth of the CPUs cannot show the effect (its quiet tail grows as long as
    the loaded one) and does not count, as the check itself calls it inconclusive. Three
    of the first five quiet runs (of at most ten) must show it; a host that is never quiet
    leaves the claim unobservable, which the test says rather than fail or pass.
    """
    token = f"tail-{op}-{os.getpid()}"
    monkeypatch.setenv(TOKEN_VARIABLE, token)
    probe = build("fabreg_tail_latency")
    quiet_runs, busy = [], []
    for _ in range(10):
        meter = InterferenceMeter(token).start()
        r = parse_tail_latency(probe.run(4, "-o", op, "-s", "65536", "-i", "1000", "-k", "20",
                                         "-b", "1").stdout)
        figure = meter.stop()
        assert r.op == op and r.background_pairs == 1 and r.measured_ranks == 2
        assert r.background_size == 512 << 10 and r.background_rounds >= r.blocks
        assert r.iterations == 1000 and r.blocks == 20
        assert r.loaded is not None
        assert r.quiet.p50_us <= r.quiet.p99_us <= r.quiet.max_us
        pair = (r.quiet.p99_over_p50, r.loaded.p99_over_p50)
        if figure.contended():
            busy.append((round(figure.share, 2), pair))
            continue
        quiet_runs.append(pair)
        if len(quiet_runs) == 5:
            break
    if len(quiet_runs) < 3:
        pytest.skip(f"inconclusive: other work took the CPUs in {len(busy)} of "
                    f"{len(busy) + len(quiet_runs)} runs (share, (quiet, loaded)): {busy}")
    shown = sum(loaded > quiet for quiet, loaded in quiet_runs)
    assert shown >= 3, (quiet_runs, busy)
    alone = parse_tail_latency(probe.run(2, "-o", op, "-s", "65536", "-i", "100").stdout)
    assert alone.loaded is None and alone.background_rounds == 0


@pytest.mark.slow
def test_tail_latency_alltoall(build):
    r = parse_tail_latency(build("fabreg_tail_latency").run(
        2, "-o", "alltoall", "-s", "1024", "-i", "200", "-k", "4").stdout)
    assert r.op == "alltoall" and r.iterations == 200 and r.blocks == 4
    assert r.quiet.min_us <= r.quiet.p50_us


@pytest.mark.slow
def test_tail_latency_needs_two_measured_ranks(build):
    proc = build("fabreg_tail_latency").run(2, "-b", "1", check=False)
    assert proc.returncode != 0 and "need at least 2" in proc.stderr


# --- matmul ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blocking", "nonblocking"])
def test_matmul_phases_and_answer(build, mode):
    """The phases add up to the separately measured total within 5 % (median of 3 runs:
    a rank descheduled by other work on a shared host is time rank 0 cannot see)."""
    gaps = []
    for _ in range(3):
        result = parse_matmul(build("fabreg_matmul").run(2, "-n", "1024", "-m", mode).stdout)
        assert result.verified and result.mode == mode and result.ranks == 2
        expected = {"blocking": ["bcast", "scatter", "compute", "gather"],
                    "nonblocking": ["distribute", "compute", "gather"]}[mode]
        assert list(result.phases) == expected
        assert 0 < result.comm_fraction < 1
        assert result.comm_s + result.compute_s == pytest.approx(result.phase_sum_s, rel=1e-3)
        assert result.phase_sum_s <= result.total_s * 1.001  # phases lie inside the total
        gaps.append(abs(result.total_s - result.phase_sum_s) / result.total_s)
    assert sorted(gaps)[1] <= 0.05, gaps


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blocking", "nonblocking"])
def test_matmul_wrong_answer_is_detected(build, mode):
    proc = build("fabreg_matmul").run(2, "-n", "128", "-m", mode, "--corrupt", check=False)
    assert proc.returncode != 0
    assert "differs from the known answer" in proc.stderr
    result = parse_matmul(proc.stdout)
    assert not result.verified


@pytest.mark.slow
def test_matmul_seconds_reports_each_phases_fastest_of_several_runs(build):
    """``--seconds`` repeats the multiply for that long (a 128 multiply takes about a
    millisecond, so at most 50 runs) and each figure is the fastest of them: the phases of
    their fastest runs still lie inside the fastest total."""
    once = parse_matmul(build("fabreg_matmul").run(2, "-n", "128").stdout)
    assert once.runs == 1
    result = parse_matmul(build("fabreg_matmul").run(2, "-n", "128", "--seconds", "0.2").stdout)
    assert result.verified and 1 < result.runs <= 50
    assert result.phase_sum_s <= result.total_s * 1.001
    assert 0 < result.comm_fraction < 1


@pytest.mark.slow
@pytest.mark.parametrize("option", [("--seconds", "-1"), ("--seconds", "61"),
                                    ("--seconds", "soon"), ("-n", "10x"), ("-n", "abc")])
def test_matmul_bad_numbers_are_refused_in_one_line(build, option):
    """A number must be all number: ``-n 10x`` once ran a 10 multiply, ``soon`` seconds
    none."""
    proc = build("fabreg_matmul").run(2, "-n", "128", *option, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("fabreg_matmul: ") and option[1] in proc.stderr.splitlines()[0]
    assert "# fabreg_matmul" not in proc.stdout


def test_matmul_output_without_runs_is_one_run():
    """Outputs of the probe before ``--seconds`` (kept perflogs' job outputs) read as one
    run."""
    text = ("# fabreg_matmul v1 n=64 ranks=2 mode=blocking corrupt=0\n# phase seconds\n"
            "bcast 0.000100\nscatter 0.000100\ncompute 0.000500\ngather 0.000100\n"
            "# end fabreg_matmul status=ok verify=pass total_s=0.000900 comm_s=0.000300 "
            "compute_s=0.000500 unaccounted_s=0.000100 comm_fraction=0.3333 gflops=0.58\n")
    result = parse_matmul(text)
    assert result.runs == 1 and result.verified and result.n == 64


@pytest.mark.slow
def test_matmul_uneven_rows(build):
    result = parse_matmul(build("fabreg_matmul").run(3, "-n", "101").stdout)
    assert result.verified and result.n == 101 and result.ranks == 3


# --- sweep ------------------------------------------------------------------------------

def test_sweep_shifts_measure_every_ordered_pair_once(build):
    result = parse_sweep(build("fabreg_sweep").run(4, "-n", "2", "-r", "2", "-i", "20",
                                                   "-s", "65536").stdout)
    assert (result.pattern, result.ranks, result.rounds) == ("shifts", 4, 3)
    ordered = sorted((p.rank_a, p.rank_b) for p in result.pairs)
    assert ordered == sorted((a, b) for a in range(4) for b in range(4) if a != b)
    assert {p.round for p in result.pairs} == {1, 2, 3}
    for p in result.pairs:
        assert p.rank_b == (p.rank_a + p.round) % 4
        assert p.bandwidth_mbs > 0 and 0 < p.latency_us <= p.latency_p50_us
    controls = {(c.rank_a, c.pattern) for c in result.controls}
    assert controls == {(r, k) for r in range(4) for k in ("loopback", "memory")}
    assert all(c.bandwidth_mbs > 0 for c in result.controls)


def test_sweep_xor_rounds_pair_ranks_both_ways_and_leave_the_odd_one_idle(build):
    result = parse_sweep(build("fabreg_sweep").run(3, "-p", "xor", "-n", "2", "-r", "1",
                                                   "-i", "10", "--no-controls").stdout)
    assert result.rounds == 2 and result.controls == []
    assert sorted((p.round, p.rank_a, p.rank_b) for p in result.pairs) == [
        (1, 0, 1), (1, 1, 0), (2, 0, 2), (2, 2, 0)]


def test_sweep_rounds_can_be_limited(build):
    result = parse_sweep(build("fabreg_sweep").run(4, "-R", "1", "-n", "1", "-r", "1", "-i",
                                                   "5", "--no-controls").stdout)
    assert result.rounds == 1 and len(result.pairs) == 4


def test_sweep_refuses_one_rank_and_bad_options(build):
    one = build("fabreg_sweep").run(1, check=False)
    assert one.returncode == 2
    assert "fabreg_sweep: needs at least 2 ranks (one per node), got 1" in one.stdout + one.stderr
    bad = build("fabreg_sweep").run(2, "-p", "ring", check=False)
    assert bad.returncode == 2 and "unknown pattern 'ring'" in bad.stdout + bad.stderr


def test_a_cut_sweep_block_is_not_read():
    text = ("# fabreg_sweep v1 pattern=shifts ranks=2 rounds=1 size=8\n"
            "# round pattern node_a node_b rank_a rank_b bw_mbs lat_us lat_p50_us\n"
            "1 shift a b 0 1 10.0 5.0 6.0\n")
    with pytest.raises(ProbeOutputError, match="cut short"):
        parse_sweep(text)
    with pytest.raises(ProbeOutputError, match="announced 2 pairs but reported 1"):
        parse_sweep(text + "# end fabreg_sweep status=ok pairs=2 seconds=0.1\n")


@pytest.mark.parametrize("ranks", [4, 5])
def test_sweep_pairs_meet_every_rank_once_both_ways(build, ranks):
    result = parse_sweep(build("fabreg_sweep").run(ranks, "-p", "pairs", "-n", "1", "-r", "1",
                                                   "-i", "5", "--no-controls").stdout)
    assert result.rounds == (ranks - 1 if ranks % 2 == 0 else ranks)
    ordered = sorted((p.rank_a, p.rank_b) for p in result.pairs)
    assert ordered == sorted((a, b) for a in range(ranks) for b in range(ranks) if a != b)
    for r in {p.round for p in result.pairs}:
        this = [(p.rank_a, p.rank_b) for p in result.pairs if p.round == r]
        assert {(b, a) for a, b in this} == set(this)  # both ways, disjoint pairs
        assert len({a for a, _ in this}) == len(this)

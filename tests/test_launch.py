"""fabreg.run.launch: a launch that hangs after its results is ended, its results kept, and
the hang is noted for the later launches of the job and of the run that launch the same way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from fabreg.run import launch

#: Prints its complete output at once, then never exits (a hang in MPI_Finalize).
HANGS = ["sh", "-c", "echo 'result 42'; echo '# end'; exec sleep 600"]
EXITS = ["sh", "-c", "echo 'result 42'; echo '# end'"]


def _complete(line: bytes) -> bool:
    return line.startswith(b"# end")


def test_a_launch_that_hangs_after_its_results_is_ended_and_noted(tmp_path):
    note = tmp_path / "stage" / ".fabreg-hangs-run" / "tcp"
    done = launch.run_once(HANGS, [], tmp_path / "out", _complete, 1.0, dict(os.environ),
                           hang_note=str(note))
    assert done.hung_after_results and done.returncode != 0
    assert (tmp_path / "out").read_text() == "result 42\n# end\n"
    # its results came at once; the rest was the grace (and the ending)
    assert done.results_s is not None and done.results_s < 1.0 <= done.seconds
    assert json.loads(note.read_text())["output"] == "out"
    # a later job of the run that launches the same way starts with the short grace
    assert launch.grace_after([], 20.0, str(note)) == launch.KNOWN_HANG_GRACE_S
    assert launch.grace_after([], 20.0, str(tmp_path / "other")) == 20.0
    assert launch.grace_after([], 20.0) == 20.0
    assert launch.grace_after([done], 20.0) == launch.KNOWN_HANG_GRACE_S


def test_a_launch_that_exits_leaves_no_note(tmp_path):
    note = tmp_path / "note"
    done = launch.run_once(EXITS, [], tmp_path / "out", _complete, 5.0, dict(os.environ),
                           hang_note=str(note))
    assert not done.hung_after_results and done.returncode == 0
    assert done.results_s is not None and done.results_s <= done.seconds
    assert not note.exists()


def test_a_launch_that_never_completes_has_no_results_time(tmp_path):
    done = launch.run_once(["sh", "-c", "echo partial"], [], tmp_path / "out", _complete, 1.0,
                           dict(os.environ))
    assert done.results_s is None and not done.hung_after_results


def test_a_note_that_cannot_be_left_is_said_and_the_results_kept(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    note = blocker / "note"  # its parent is a file: it cannot be created
    start = time.monotonic()
    done = launch.run_once(HANGS, [], tmp_path / "out", _complete, 0.5, dict(os.environ),
                           hang_note=str(note))
    assert done.hung_after_results and time.monotonic() - start < 30
    err = capsys.readouterr().err
    assert err.startswith(f"fabreg: could not leave the hang note {note}: "), err
    assert launch.grace_after([], 20.0, str(note)) == 20.0


@pytest.mark.parametrize("existing", [True, False])
def test_the_first_hang_of_a_run_is_the_one_noted(tmp_path, existing):
    note = tmp_path / "note"
    if existing:
        note.write_text("earlier\n")
    launch.run_once(HANGS, [], tmp_path / "out", _complete, 0.5, dict(os.environ),
                    hang_note=str(note))
    assert (note.read_text() == "earlier\n") == existing


def _launch_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabreg.run.launch", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(shutil.which("mpiexec.mpich") is None, reason="needs MPICH's mpiexec")
def test_the_command_line_ends_mpi_ranks_that_hang_after_their_results(tmp_path):
    """The sweep's launch: real MPI ranks print their results and never exit; the launch is
    ended after the grace with status 0, the output kept, the hang said and noted."""
    marker = f"sleep {6000 + os.getpid() % 1000}"
    ranks = ["mpiexec.mpich", "-n", "2", "sh", "-c", f"echo 'pair 1 2 900.5'; "
             f"echo '# end fabreg_sweep status=ok'; exec {marker}"]
    note, result = tmp_path / "hangs" / "tcp", tmp_path / "launch.json"
    start = time.monotonic()
    proc = _launch_cli("--until", "# end fabreg_sweep", "--grace", "1", "--hang-note",
                       str(note), "--result", str(result), "--", *ranks)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 30
    assert proc.stdout.count("pair 1 2 900.5") == 2
    assert "printed its complete results and did not exit within 1 s" in proc.stderr
    (launched,) = json.loads(result.read_text())["launches"]
    assert launched["hung_after_results"] is True and launched["output"] == "stdout"
    assert note.is_file()
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1


def test_the_command_line_keeps_the_benchmarks_status_and_writes_its_output(tmp_path):
    out = tmp_path / "confirmation.out"
    proc = _launch_cli("--until", "# end", "--output", str(out), "--",
                       "sh", "-c", "echo 'no end line'; exit 3")
    assert proc.returncode == 3 and proc.stdout == ""
    assert out.read_text() == "no end line\n"
    proc = _launch_cli("--until", "# end", "--", "/nonexistent/fabreg_sweep")
    assert proc.returncode == 127
    assert proc.stderr.startswith("fabreg: cannot launch /nonexistent/fabreg_sweep: ")

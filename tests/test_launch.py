"""fabreg.run.launch: a launch that hangs after its results is ended, its results kept, and
the hang is noted for the later launches of the job and of the run that launch the same way."""

from __future__ import annotations

import json
import os
import time

import pytest

from fabreg.run import launch

#: Prints its complete output at once, then never exits (a hang in MPI_Finalize).
HANGS = ["sh", "-c", "echo 'result 42'; echo '# end'; exec sleep 600"]
EXITS = ["sh", "-c", "echo 'result 42'; echo '# end'"]


def _complete(line: bytes) -> bool:
    return line.startswith(b"# end")


def test_a_launch_that_hangs_after_its_results_is_ended_and_noted(tmp_path):
    note = tmp_path / "stage" / ".fabreg-hangs-run" / "tcp-4n"
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

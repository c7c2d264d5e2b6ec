"""Incremental ingest: what was read of a perflog is not read again; a file that was renamed,
replaced, truncated or rewritten is noticed; no value is duplicated or lost.

Each test runs the real CLI in a child process and checks the exact number of values in the
store and the number of lines the ingest says it read.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

from conftest import REPO, fabreg

from fabreg.review.store import Store

HEADER = ("job_completion_time|reframe version|name|system|partition|environ|jobid|"
          "job_nodelist|result|transport|latency_8B_value|latency_8B_unit|latency_8B_ref|"
          "latency_8B_lower_thres|latency_8B_upper_thres|latency_8B_result|"
          "bandwidth_1MB_value|bandwidth_1MB_unit|bandwidth_1MB_ref|bandwidth_1MB_lower_thres|"
          "bandwidth_1MB_upper_thres|bandwidth_1MB_result")
#: A header of the same check after it gained a parameter (ReFrame starts a new file).
HEADER2 = HEADER.replace("|transport|", "|transport|buffer|")
TESTS = 5  # lines per night, 2 values each
DAY = 86400
#: A real perflog of the Sweep check: lines with whole pair tables
REAL_SWEEP = REPO / "tests" / "data" / "sweep" / "link.log"


def night(n: int, header: str = HEADER, scale: float = 1.0) -> list[str]:
    """One nightly session: TESTS lines of 2 values each, at 2026-01-01 + n days."""
    out = []
    for t in range(TESTS):
        stamp = 1767225600 + n * DAY + t * 60
        fields = [f"{stamp}", "reframe 4.10.4", f"OsuLatency %transport=t{t}", "sys", "part",
                  "openmpi", f"{n}{t:02d}", "n1", "pass", f"t{t}"]
        if header == HEADER2:
            fields.append("host")
        fields += [f"{(1.5 + t) * scale:.4f}", "us", "1.5", "None", "0.1", "pass",
                   f"{9000.0 / scale:.1f}", "MB/s", "9000", "-0.1", "None", "pass"]
        out.append("|".join(fields))
    return out


def write(path: Path, lines: list[str], mode: str = "w") -> None:
    with open(path, mode, encoding="utf-8") as stream:
        stream.write("".join(line + "\n" for line in lines))


def values(db: Path) -> int:
    with Store(db, create=False) as store:
        count = store.count()[1]
    with sqlite3.connect(db) as conn:  # the kept counter agrees with the table
        assert conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == count
    return count


def ingest(root: Path, db: Path, *extra: str) -> tuple[int, int]:
    """Run `fabreg ingest`; return (new lines read, new values) from its summary."""
    proc = fabreg("ingest", "-q", *extra, str(root), db=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"(\d+) new line\(s\), (\d+) new value\(s\)", proc.stdout)
    assert found, proc.stdout
    return int(found[1]), int(found[2])


def setup(tmp_path: Path, nights: int = 3) -> tuple[Path, Path, Path]:
    root = tmp_path / "perflogs"
    log = root / "sys" / "part" / "OsuLatency.log"
    log.parent.mkdir(parents=True)
    write(log, [HEADER] + [line for n in range(nights) for line in night(n)])
    db = tmp_path / "fabreg.db"
    assert ingest(root, db) == (1 + nights * TESTS, nights * TESTS * 2)
    return root, log, db


def test_an_appended_night_is_the_only_thing_read(tmp_path: Path):
    root, log, db = setup(tmp_path)
    assert values(db) == 30
    assert ingest(root, db) == (0, 0)  # unchanged: nothing read
    write(log, night(3), "a")
    assert ingest(root, db) == (TESTS, TESTS * 2)
    assert values(db) == 40
    write(log, night(4) + night(5), "a")
    assert ingest(root, db) == (2 * TESTS, 2 * TESTS * 2)
    assert values(db) == 60
    assert ingest(root, db) == (0, 0)
    # --reread reads everything again and still adds nothing
    assert ingest(root, db, "--reread") == (1 + 6 * TESTS, 0)
    assert values(db) == 60


def test_a_line_still_being_written_waits_for_its_end(tmp_path: Path):
    root, log, db = setup(tmp_path)
    first, second = night(3)[0], night(3)[1]
    with open(log, "a", encoding="utf-8") as stream:
        stream.write(first + "\n" + second[:25])  # ReFrame in the middle of a line
    proc = fabreg("ingest", str(root), db=db)
    assert proc.returncode == 0 and "has no line end yet" in proc.stderr
    assert values(db) == 32  # the complete line only; never a truncated value
    with open(log, "a", encoding="utf-8") as stream:
        stream.write(second[25:] + "\n")
    assert ingest(root, db) == (1, 2)
    assert values(db) == 34
    with sqlite3.connect(db) as conn:
        got = conn.execute("SELECT value FROM long WHERE perfvar='latency_8B' AND time=?",
                           (1767225600 + 3 * DAY + 60,)).fetchall()
    assert got == [(2.5,)]


def test_header_change_rename_to_h0_then_new_file(tmp_path: Path):
    root, log, db = setup(tmp_path)
    # A night appended before the rename but never ingested must not be lost.
    write(log, night(3), "a")
    os.rename(log, log.with_name("OsuLatency.log.h0"))  # what ReFrame does on a new header
    write(log, [HEADER2] + night(4, HEADER2))
    lines, added = ingest(root, db)
    assert (lines, added) == (TESTS + 1 + TESTS, 2 * TESTS * 2)  # .h0's new night + new file
    assert values(db) == 50
    assert ingest(root, db) == (0, 0)
    write(log, night(5, HEADER2), "a")
    assert ingest(root, db) == (TESTS, TESTS * 2)
    assert values(db) == 60


def test_replaced_file_is_read_from_its_start(tmp_path: Path):
    root, log, db = setup(tmp_path)
    new = log.with_name("tmp")
    write(new, [HEADER] + night(2) + night(3))  # logrotate moved the old one away
    os.replace(new, log)
    assert ingest(root, db) == (1 + 2 * TESTS, TESTS * 2)  # night 2 was stored already
    assert values(db) == 40


def test_truncated_file_keeps_what_was_stored_and_reads_the_new_lines(tmp_path: Path):
    root, log, db = setup(tmp_path)
    with open(log, "r+", encoding="utf-8") as stream:  # copytruncate: same inode, size 0
        stream.truncate(0)
    assert ingest(root, db) == (0, 0)
    assert values(db) == 30  # nothing lost
    write(log, [HEADER] + night(3), "a")
    assert ingest(root, db) == (1 + TESTS, TESTS * 2)
    assert values(db) == 40
    # truncated, then more written than was there before: the tail digest notices
    with open(log, "r+", encoding="utf-8") as stream:
        stream.truncate(0)
    write(log, [HEADER] + night(4) + night(5) + night(6), "a")
    assert ingest(root, db) == (1 + 3 * TESTS, 3 * TESTS * 2)
    assert values(db) == 70


def test_rewritten_in_place_with_another_header_or_content(tmp_path: Path):
    root, log, db = setup(tmp_path)
    inode = log.stat().st_ino
    # Same inode, a different first line, longer than before.
    write(log, [HEADER2] + [line for n in range(3, 7) for line in night(n, HEADER2)])
    assert log.stat().st_ino == inode
    assert ingest(root, db) == (1 + 4 * TESTS, 4 * TESTS * 2)
    assert values(db) == 70
    # Same header, other values for the same runs: the first stored copy is kept, once.
    write(log, [HEADER2] + [line for n in range(3, 7) for line in night(n, HEADER2, 1.2)]
          + night(7, HEADER2))
    assert ingest(root, db) == (1 + 5 * TESTS, TESTS * 2)
    assert values(db) == 80


def test_skipped_lines_are_counted_per_file_and_listed_on_request(tmp_path: Path):
    root, log, db = setup(tmp_path)
    bad = [line.replace("|pass|t", "|pass|t", 1).replace("|sys|", "|sys|extra|", 1)
           for line in night(3)]
    write(log, bad + ["20261121|reframe 4.10.4|OsuLatency|sys|part|openmpi|1|n1|pass|t0|"
                      "1|us|1|None|0.1|pass|1|MB/s|1|-0.1|None|pass"], "a")
    proc = fabreg("ingest", str(root), db=db)
    assert proc.returncode == 1
    err = proc.stderr.splitlines()
    assert f"fabreg: {log}: skipped 6 of 6 new line(s)" in err
    assert sum(line.startswith("fabreg: skipped ") for line in err) == 3
    assert f"fabreg: ... 3 more in {log} (--all-problems lists every one)" in err
    assert values(db) == 30
    # the skipped lines were read: the next ingest does not report them again
    assert fabreg("ingest", str(root), db=db).returncode == 0
    write(log, bad, "a")
    proc = fabreg("ingest", "--all-problems", str(root), db=db)
    assert proc.returncode == 1
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("fabreg: skipped")]
    assert len(skipped) == TESTS and all(f"{log}:" in line for line in skipped)
    # the numeric date is never stored as 1970: its line is named with the reason
    log2 = log.with_name("OsuBw.log")
    write(log2, [HEADER, night(0)[0].replace("1767225600", "20261121", 1)])
    proc = fabreg("ingest", str(log2), db=db)
    assert proc.returncode == 1
    assert (f"fabreg: skipped {log2}:2: timestamp '20261121' is a number outside Unix "
            "seconds of 2000-2100") in proc.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT MIN(time) FROM long").fetchone()[0] >= 1767225600


def test_results_db_is_read_again_only_when_it_changed(tmp_path: Path):
    root, log, db = setup(tmp_path)
    rdb = root / "results.db"
    with sqlite3.connect(rdb) as conn:  # the layout ReFrame 4.10 writes (sessions table)
        conn.execute("CREATE TABLE sessions(uuid TEXT PRIMARY KEY, session_start_unix REAL, "
                     "session_end_unix REAL, json_blob TEXT, report_file TEXT)")
        conn.execute("INSERT INTO sessions VALUES('u1', 1767225600, 1767225900, ?, '')",
                     ('{"session_info": {"change": "fw-1"}, "runs": []}',))
    proc = fabreg("ingest", "-q", str(root), db=db)
    assert "1 session(s) updated" in proc.stdout and "1 unchanged" in proc.stdout
    proc = fabreg("ingest", "-q", str(root), db=db)
    assert "0 session(s) updated" in proc.stdout and "2 unchanged" in proc.stdout
    with sqlite3.connect(rdb) as conn:
        conn.execute("INSERT INTO sessions VALUES('u2', 1767312000, 1767312300, ?, '')",
                     ('{"session_info": {"change": "fw-2"}, "runs": []}',))
    proc = fabreg("ingest", "-q", str(root), db=db)
    assert "1 session(s) updated" in proc.stdout and "1 unchanged" in proc.stdout
    with Store(db, create=False) as store:
        assert {u: s.extras for u, s in store.sessions().items()} == {
            "u1": {"change": "fw-1"}, "u2": {"change": "fw-2"}}


def _long_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return sorted(conn.execute(
            "SELECT test, params, system, partition, environ, perfvar, time, value, unit, ref, "
            "lower_thres, upper_thres, result, jobid, nodelist, session, run_attributes "
            "FROM long").fetchall())


def test_a_large_perflog_is_read_in_pieces_into_the_same_store(tmp_path, monkeypatch, capsys):
    """A perflog's new lines are parsed and stored a piece at a time (a year of 10,000-node
    sweeps in one file needs tens of GB as objects): pieces of a few hundred bytes, cut at
    line ends, a header change among them and lines longer than a piece (a sweep's pair
    table), give the store that one piece gives, with the same lines counted and the same
    bad lines reported."""
    from fabreg.cli import ingest, main

    logs = tmp_path / "perflogs"
    logs.mkdir()
    lines = [HEADER, *night(0), *night(1), "not|a|line", *night(2), HEADER2, *night(3, HEADER2)]
    (logs / "Osu.log").write_text("\n".join(lines) + "\n")
    sweep = REAL_SWEEP.read_text()
    (logs / "Sweep.log").write_text(sweep)
    proc = fabreg("ingest", str(logs), db=tmp_path / "whole.db")
    assert proc.returncode == 1  # the bad line
    whole = (proc.stdout + proc.stderr).replace("whole.db", "DB")
    monkeypatch.setattr(ingest, "PIECE_BYTES", 300)
    monkeypatch.setenv("FABREG_DB", str(tmp_path / "pieces.db"))
    assert main(["ingest", str(logs)]) == 1
    said = capsys.readouterr()
    pieces = (said.out + said.err).replace("pieces.db", "DB")
    assert len(list(ingest._pieces((logs / "Osu.log").read_bytes()))) > 5
    assert len(max(sweep.splitlines(), key=len)) > 300  # a line longer than a piece
    assert _long_rows(tmp_path / "pieces.db") == _long_rows(tmp_path / "whole.db")
    assert re.sub(r"\d+\.\d+ s|[\d,.]+ values/s", "", pieces) == re.sub(
        r"\d+\.\d+ s|[\d,.]+ values/s", "", whole)
    assert "Osu.log:12: 3 fields" in pieces  # the bad line, by its number in the file
    # the mark is the whole file's: nothing new to read
    again = fabreg("ingest", str(logs), db=tmp_path / "pieces.db", check=True).stdout
    assert "2 unchanged since the last ingest" in again and " 0 new value(s)" in again


def test_an_ingest_cut_short_resumes_after_the_last_piece_it_stored(tmp_path, monkeypatch):
    """The first ingest of a year of 10,000-node sweeps takes many minutes; one stopped
    midway (killed, out of time) keeps what it stored and the next reads only the rest,
    into the store one whole ingest gives."""
    from fabreg.cli import ingest, main

    logs = tmp_path / "perflogs"
    logs.mkdir()
    lines = [HEADER, *night(0), *night(1), *night(2), HEADER2, *night(3, HEADER2)]
    (logs / "Osu.log").write_text("\n".join(lines) + "\n")
    fabreg("ingest", str(logs), db=tmp_path / "whole.db", check=True)

    monkeypatch.setattr(ingest, "PIECE_BYTES", 300)
    monkeypatch.setenv("FABREG_DB", str(tmp_path / "cut.db"))
    real_add, calls = Store.add, []

    def add_then_stop(self, *args, **kwargs):
        if len(calls) == 3:
            raise KeyboardInterrupt  # stopped after three pieces were stored
        calls.append(1)
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(Store, "add", add_then_stop)
    try:
        code = main(["ingest", str(logs)])  # the CLI's own word on an interrupt
    except KeyboardInterrupt:
        code = None
    assert len(calls) == 3 and code != 0
    with Store(tmp_path / "cut.db") as store:
        (mark,) = store.file_marks()
        stored = store.count()[0]
    assert 0 < mark.lines < len(lines) and 0 < stored < 4 * TESTS * 2
    monkeypatch.setattr(Store, "add", real_add)
    rest = fabreg("ingest", str(logs), db=tmp_path / "cut.db", check=True).stdout
    assert f"{len(lines) - mark.lines} new line(s)" in rest
    assert f"{4 * TESTS * 2 - stored} new value(s), 0 already stored" in rest
    assert _long_rows(tmp_path / "cut.db") == _long_rows(tmp_path / "whole.db")

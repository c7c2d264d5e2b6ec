"""Bad input to the review commands: one line naming what is wrong, a documented exit
status (docs/trends.md), never a traceback, never a silent pass on no data."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import fabreg

from fabreg.review.synthetic import generate


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad")
    generate(root / "perflogs", sessions=8, seed=21, transports=("tcp",), nodes=(1,))
    fabreg("ingest", "-q", str(root / "perflogs"), db=root / "f.db", check=True)
    return root / "f.db"


@pytest.mark.parametrize("args, message", [
    (("trends", "--since", "20261121"),
     "fabreg: error: --since: timestamp '20261121' is a number outside Unix seconds"),
    (("trends", "--match", "NoSuchCheck"),
     "fabreg: error: --match 'NoSuchCheck' matches no series in the store"),
    (("trends", "--min-shift", "-1"), "fabreg: error: --min-shift must be >= 0"),
    (("compare", "latest", "2030-01-01..2031-01-01"),
     "fabreg: error: selector '2030-01-01..2031-01-01' matches no runs"),
    (("compare", "..1999-01-01", "latest"), "fabreg: error: selector '..1999-01-01' matches"),
    (("compare", "latest~1", "latest", "--alpha", "2"), "fabreg: error: --alpha must be"),
    (("compare", "latest~99", "latest"), "fabreg: error: selector 'latest~99': only 8"),
])
def test_one_line_and_exit_2(db, args, message):
    proc = fabreg(*args, db=db)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_numeric_timestamps_are_never_stored_as_1970(tmp_path):
    log = tmp_path / "sys" / "part" / "Check.log"
    log.parent.mkdir(parents=True)
    header = ("job_completion_time|reframe version|name|system|partition|environ|jobid|"
              "job_nodelist|result|lat_value|lat_unit")
    log.write_text("\n".join([header,
                              "20261121|4.10|Check|sys|part|env|1|n1|pass|1.0|us",
                              "1795381954|4.10|Check|sys|part|env|2|n1|pass|1.0|us",
                              "1970-01-02T00:00:00+00:00|4.10|Check|sys|part|env|3|n1|pass|1|us",
                              "2026-11-21T02:00:00+00:00|4.10|Check|sys|part|env|4|n1|pass|1|us",
                              ]) + "\n")
    proc = fabreg("ingest", str(tmp_path), db=tmp_path / "f.db")
    assert proc.returncode == 1
    assert f"fabreg: {log}: skipped 2 of 5 new line(s)" in proc.stderr
    assert f"fabreg: skipped {log}:2: timestamp '20261121' is a number" in proc.stderr
    assert (f"fabreg: skipped {log}:4: completion time 1970-01-02T00:00:00Z is not in "
            "2000-2100") in proc.stderr
    assert "2 new value(s)" in proc.stdout

"""The `fabreg` dispatcher imports only the module of the command given.

Appending one night to a large store must cost the new lines, not the start-up of the
whole review side (docs/trends.md, incremental ingest): `fabreg ingest` must not load
matplotlib, numpy, prometheus-client or ReFrame, which the other commands need.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fabreg.cli import COMMANDS, build_parser, command_of

#: What ingest does not need; each costs more to import than a night of values to store.
HEAVY = ("numpy", "matplotlib", "prometheus_client", "reframe", "fabreg.review.trends",
         "fabreg.review.report", "fabreg.review.export")

PROBE = """
import json, sys
from fabreg.cli import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def loaded(*argv: str, env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    """(exit status, modules loaded) of one real `fabreg` command in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                          text=True, env=env, timeout=120)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report["status"], set(report["modules"])


def test_the_command_table_matches_what_the_modules_register():
    def commands(parser) -> set[str]:
        return set(next(a for a in parser._actions if a.dest == "command").choices)

    assert commands(build_parser()) == set(COMMANDS)  # every module
    for command, module in COMMANDS.items():
        assert command in commands(build_parser(command)), (command, module)


@pytest.mark.parametrize("argv, command", [
    (["ingest", "x"], "ingest"), (["--version"], None), ([], None), (["nope"], None),
    (["serve-metrics", "--port", "1"], "serve-metrics"),
])
def test_command_of(argv, command):
    assert command_of(argv) == command


def test_ingest_imports_neither_numpy_nor_plotting_nor_exporters(tmp_path: Path):
    log = tmp_path / "perflogs" / "site" / "batch" / "Check.log"
    log.parent.mkdir(parents=True)
    log.write_text("job_completion_time|name|system|partition|environ|latency_value|"
                   "latency_unit\n1790000000|Check|site|batch|env|1.5|us\n")
    status, modules = loaded("ingest", "-q", "--db", str(tmp_path / "fabreg.db"),
                             str(tmp_path / "perflogs"))
    assert status == 0
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY)
    assert heavy == []
    # The same store is read by the commands that do need them.
    status, modules = loaded("trends", "-q", "--db", str(tmp_path / "fabreg.db"))
    assert status == 0 and "numpy" in modules
    sessions = subprocess.run([sys.executable, "-m", "fabreg.cli", "sessions", "--db",
                               str(tmp_path / "fabreg.db")], capture_output=True, text=True,
                              timeout=120)
    assert sessions.stdout.split() == ["run-20260921T141320Z", "2026-09-21T14:13:20Z"]


def test_help_still_lists_every_command():
    proc = subprocess.run([sys.executable, "-m", "fabreg.cli", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0
    for command in COMMANDS:
        assert command in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "fabreg.cli", "nope"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr

"""``fabreg nightly`` end to end: real ReFrame sessions of a small check, ingest, the trends
gate, the report and the Prometheus textfile, and the documented exit statuses."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import REPO, reframe_binary

from fabreg.cli import nightly

CHECKS = REPO / "tests" / "data" / "checks"
pytestmark = pytest.mark.slow


def run_nightly(tmp: Path, *args: str, config: Path = REPO / "reframe-config.py"
                ) -> subprocess.CompletedProcess[str]:
    if reframe_binary() is None:
        pytest.skip("ReFrame not installed (pip install 'reframe-hpc==4.10.4')")
    return subprocess.run(
        [sys.executable, "-m", "fabreg.cli", "nightly", "-C", str(config), "-c", str(CHECKS),
         "--perflogs", str(tmp / "perflogs"), "--report", str(tmp / "report"),
         "--tag", "fabreg-review-test", *args],
        cwd=tmp, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in __import__("os").environ.items()
             if k not in ("FABREG_DB", "FABREG_PERFLOG_DIR", "RFM_CONFIG_FILES")})


def test_two_nights_pass_then_gate_on_the_regression(tmp_path: Path):
    rfm = ["--", "-p", "openmpi", "--prefix", str(tmp_path / "rfm")]
    first = run_nightly(tmp_path, *rfm, "--repeat", "6")
    assert first.returncode == nightly.OK, first.stdout[-3000:] + first.stderr[-3000:]
    assert "exit 0: the run passed" in first.stderr
    report = tmp_path / "report"
    junit = ET.parse(report / "reframe-junit.xml").getroot()
    assert len(list(junit.iter("testcase"))) == 2 * 6 and not list(junit.iter("failure"))
    assert (report / "index.html").stat().st_size > 0 and (report / "summary.md").exists()
    prom = (report / "fabreg.prom").read_text()
    assert 'fabreg_open_regressions{partition="default",system="local"} 0.0' in prom
    assert (tmp_path / "perflogs" / "fabreg.db").exists()  # the store next to the perflogs

    # The second night is 30 % slower: the checks fail their references, and three runs at
    # the new level make it a confirmed (open) regression, which wins the exit status.
    second = run_nightly(tmp_path, *rfm, "--repeat", "3", "-S", "scale=1.3")
    assert second.returncode == nightly.REGRESSION, second.stdout[-3000:] + second.stderr[-3000:]
    assert re.search(r"test case\(s\) failed \(JUnit report", second.stderr)
    opened = int(re.search(r"(\d+) open regression\(s\)", second.stdout).group(1))
    assert opened == 6  # 2 transports x 3 variables
    prom = (report / "fabreg.prom").read_text()
    assert f'fabreg_open_regressions{{partition="default",system="local"}} {opened}.0' in prom
    md = (report / "summary.md").read_text()
    assert f"| open regressions | {opened} |" in md
    # The check logs no verdicts column: ReFrame's own per-variable result says which newest
    # values failed their reference (latency_8B and bandwidth_1MB have one, per transport).
    assert "| newest value failed its reference | 4 |" in md
    junit = ET.parse(report / "reframe-junit.xml").getroot()  # tonight's, not last night's
    assert len(list(junit.iter("testcase"))) == 2 * 3 and list(junit.iter("failure"))


def test_a_reframe_run_that_never_happened_fails_the_night(tmp_path: Path):
    broken = tmp_path / "broken-config.py"
    broken.write_text("site_configuration = {'systems': [}\n")  # a syntax error
    proc = run_nightly(tmp_path, config=broken)
    assert proc.returncode == nightly.RUN_FAILED, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ReFrame did not complete a run" in proc.stderr
    assert "Traceback" not in proc.stderr.split("fabreg nightly: [2/5]")[1]
    # Each later step still ran and said in one line why it had nothing to work on.
    assert "fabreg: error: no perflogs" in proc.stderr and "[5/5]" in proc.stderr
    # A check tag that selects nothing is no green night either.
    proc = run_nightly(tmp_path, "--tag", "no-such-tag-anywhere")
    assert proc.returncode == nightly.RUN_FAILED, proc.stderr[-2000:]


def test_bad_usage_is_a_one_line_error_and_runs_nothing(tmp_path: Path):
    cases = ((["-C", str(tmp_path / "missing.py")], "--config"),
             (["--reframe", "no-such-reframe-binary"], "--reframe"),
             (["--prometheus", str(tmp_path / "no" / "dir" / "f.prom")], "--prometheus"))
    for args, words in cases:
        proc = subprocess.run([sys.executable, "-m", "fabreg.cli", "nightly",
                               "-C", str(REPO / "reframe-config.py"), "-c", str(CHECKS),
                               "--report", str(tmp_path / "report"), *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == nightly.USAGE, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
            f"fabreg: error: {words}"), proc.stderr
    assert not (tmp_path / "report").exists() and not (tmp_path / "no").exists()


TEMPLATES = REPO / "ci" / "templates"


def _nightly_lines(text: str) -> list[str]:
    return [line[line.index("fabreg nightly"):] for line in text.splitlines()
            if "fabreg nightly " in line and not line.lstrip().startswith(("#", "name:"))]


@pytest.mark.parametrize("name", ["scrontab", "gitlab-ci.yml", "github-nightly.yml"])
def test_ci_templates_run_a_valid_nightly_command(name: str):
    """Each template's command parses with the real `fabreg nightly` options, and the YAML
    ones are valid YAML of the shape their CI expects."""
    import shlex

    import yaml

    from fabreg.cli import build_parser

    text = (TEMPLATES / name).read_text()
    if name == "gitlab-ci.yml":
        job = yaml.safe_load(text)["fabreg-nightly"]
        commands = job["script"]
        assert job["artifacts"]["reports"]["junit"] == "report/reframe-junit.xml"
    elif name == "github-nightly.yml":
        workflow = yaml.safe_load(text)
        steps = workflow["jobs"]["nightly"]["steps"]
        assert "self-hosted" in workflow["jobs"]["nightly"]["runs-on"]
        # GitHub's expression syntax is filled in by the runner: drop it to parse the rest.
        commands = [re.sub(r"\$\{\{.*?\}\}", "", s["run"]) for s in steps if "run" in s]
    else:
        entries = [line for line in text.splitlines() if line and line[0].isdigit()]
        assert len(entries) == 1 and len(entries[0].split(None, 5)) == 6  # m h dom mon dow cmd
        assert sum(line.startswith("#SCRON ") for line in text.splitlines()) >= 3
        commands = [entries[0].split(None, 5)[5]]
    lines = [line for c in commands for line in _nightly_lines(c)]
    assert len(lines) == 1, commands
    argv = shlex.split(re.sub(r"<[^>]*>", "X", lines[0]))[1:]  # placeholders -> a word
    args = build_parser().parse_args(argv)
    assert args.func is nightly.run and "--mode" in args.reframe_args

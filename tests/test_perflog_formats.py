"""Perflogs as ReFrame users have them: written by real ReFrame 4.10 runs under ReFrame's
unchanged default logging configuration and under a site's own format, then ingested.

ReFrame's default filelog format is ``%(check_result)s|%(check_job_completion_time)s|
%(check_#ALL)s`` with five columns per performance variable (no ``_result``), every loggable
attribute in alphabetical order and the perf columns in the middle; a site's format may have
fewer columns, in another order, with system and partition only in the file's path.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, fabreg, reframe_binary

from fabreg.review.store import Store

CHECK = REPO / "tests" / "data" / "checks" / "scaled_perflog.py"
pytestmark = pytest.mark.slow

SYSTEM = """
    'systems': [{'name': 'site', 'hostnames': ['.*'], 'partitions': [
        {'name': 'batch', 'scheduler': 'local', 'launcher': 'local',
         'environs': ['openmpi']}]}],
    'environments': [{'name': 'openmpi'}],
"""
#: No logging section at all: ReFrame's own default perflog handler and format.
DEFAULT_CONFIG = "site_configuration = {" + SYSTEM + "}\n"
#: A site's own format: fewer columns, another order, no system/partition/environ columns.
SITE_CONFIG = "site_configuration = {" + SYSTEM + """
    'logging': [{'handlers_perflog': [{
        'type': 'filelog', 'prefix': '%(check_system)s/%(check_partition)s',
        'basedir': os.environ['PERFLOGS'], 'level': 'info', 'append': True,
        'format': '%(check_name)s|%(check_job_completion_time)s|%(check_transport)s|'
                  '%(check_jobid)s|%(check_perfvalues)s',
        'format_perfvars': '%(check_perf_value)s|%(check_perf_unit)s|',
    }]}],
}
"""


def run(tmp: Path, config: str, *args: str) -> Path:
    """Two real ReFrame sessions of the small check; returns the perflog directory."""
    binary = reframe_binary()
    if binary is None:
        pytest.skip("ReFrame not installed")
    cfg = tmp / "config.py"
    cfg.write_text("import os\n" + textwrap.dedent(config))
    perflogs = tmp / "perflogs"
    env = dict(os.environ, PERFLOGS=str(perflogs))
    env.pop("RFM_CONFIG_FILES", None)
    for scale in ("1.0", "1.0"):
        proc = subprocess.run([binary, "-C", str(cfg), "-c", str(CHECK), "-r",
                               "--prefix", str(tmp / "rfm"), "-S", f"scale={scale}", *args],
                              env=env, capture_output=True, text=True, timeout=600, cwd=tmp)
        assert "Ran " in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    return perflogs if perflogs.is_dir() else tmp / "rfm" / "perflogs"


def stored(tmp: Path, perflogs: Path) -> list:
    db = tmp / "fabreg.db"
    fabreg("ingest", str(perflogs), db=db, check=True)
    with Store(db, create=False) as store:
        return store.load()


def test_reframe_default_format_is_read(tmp_path):
    perflogs = run(tmp_path, DEFAULT_CONFIG)
    (log,) = perflogs.rglob("ScaledPerflogLatency.log")
    header = log.read_text().splitlines()[0]
    assert header.startswith("result|job_completion_time|")  # ReFrame's default, unchanged
    assert "latency_8B_result" not in header and "job_completion_time_unix" in header
    series = stored(tmp_path, perflogs)
    # 2 transports x 3 perf variables, each with both sessions' values
    assert len(series) == 6, [s.key for s in series]
    for s in series:
        assert (s.key.system, s.key.partition, s.key.environ) == ("site", "batch", "openmpi")
        params = dict(s.key.params)
        # run-only columns never split a series
        assert not {"job_completion_time_unix", "jobid", "job_nodelist", "short_name",
                    "unique_name", "job_submit_time", "ref_status"} & set(params), params
        assert params["transport"] in ("shm", "tcp") and params["benchmark"] == "osu_latency"
        assert len(s.value) == 2


def test_a_site_format_with_fewer_columns_is_read(tmp_path):
    perflogs = run(tmp_path, SITE_CONFIG)
    (log,) = perflogs.rglob("ScaledPerflogLatency.log")
    assert log.parent.parent.name == "site" and log.parent.name == "batch"
    assert log.read_text().splitlines()[0].startswith("name|job_completion_time|transport|")
    series = stored(tmp_path, perflogs)
    assert len(series) == 6
    for s in series:
        assert (s.key.system, s.key.partition) == ("site", "batch")  # from the path
        assert dict(s.key.params)["transport"] in ("shm", "tcp")
        assert len(s.value) == 2 and all(v > 0 for v in s.value)

"""Server + client in one script: real ucx_perftest over tcp and posix on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fabreg.run import client_server
from fabreg.run.parsers.ucx_perftest import failure_reason, parse_ucx_perftest
from fabreg.testlib.base import free_port

needs_ucx = pytest.mark.skipif(not shutil.which("ucx_perftest"),
                               reason="ucx_perftest is not installed (ucx-utils)")


def _run(tmp_path: Path, tls: str, test: str, size: int, iters: int) -> tuple[int, str]:
    port = str(free_port())
    text = client_server.script(
        ["ucx_perftest", "-p", port],
        ["ucx_perftest", "{server_host}", "-p", port, "-t", test, "-s", str(size),
         "-n", str(iters)])
    (tmp_path / client_server.SCRIPT).write_text(text)
    proc = subprocess.run(["bash", client_server.SCRIPT], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "UCX_TLS": tls})
    return proc.returncode, proc.stdout


@pytest.mark.slow
@needs_ucx
@pytest.mark.parametrize("tls", ["tcp", "posix"])
@pytest.mark.parametrize("test, size, kind", [("tag_lat", 8, "latency"),
                                              ("tag_bw", 65536, "overhead"),
                                              ("ucp_put_bw", 65536, "overhead")])
def test_ucx_perftest_on_loopback(tmp_path, tls, test, size, kind):
    rc, out = _run(tmp_path, tls, test, size, 500)
    assert rc == 0, out
    result = parse_ucx_perftest(out)
    assert result.kind == kind and result.iterations == 500
    assert result.p50_usec > 0 and result.bandwidth_average_mbs > 0
    assert result.msgrate_average > 0
    # The server ran and exited by itself (no process left behind).
    assert (tmp_path / client_server.SERVER_OUT).is_file()


@pytest.mark.slow
@needs_ucx
def test_unavailable_transport_is_reported(tmp_path):
    rc, out = _run(tmp_path, "rc", "tag_lat", 8, 10)
    assert rc != 0
    reason = failure_reason(out)
    assert reason and "'rc' is not available" in reason


def test_script_places_server_and_client_on_two_nodes():
    text = client_server.script(["ib_write_bw", "-p", "1"], ["ib_write_bw", "-p", "1",
                                                             "{server_host}"], nodes=2)
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert 'srun -N1 -n1 -w "${hosts[0]}"' in text and 'srun -N1 -n1 -w "${hosts[1]}"' in text
    assert 'ib_write_bw -p 1 "$server_host"' in text

"""The server/client driver (fabreg.run.client_server): real ucx_perftest over tcp and posix
on loopback, repeated, and a failing figure confirmed (or not) by runs spread in time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fabreg.run import client_server, confirm
from fabreg.run.client_server import Figure, Plan
from fabreg.run.parsers.ucx_perftest import failure_reason, parse_ucx_perftest
from fabreg.schema import CONTENDED_SHARE

needs_ucx = pytest.mark.skipif(not shutil.which("ucx_perftest"),
                               reason="ucx_perftest is not installed (ucx-utils)")

P50 = {"latency": Figure("ucx_perftest", "p50_usec", lower_is_better=True)}


def plan(test: str, size: int, iters: int, **kw) -> Plan:
    kw.setdefault("control_gap_s", 0.5)  # a failing job's host control, judged by none
    return Plan(server=["ucx_perftest", "-p", "{port}"],
                client=["ucx_perftest", "{server_host}", "-p", "{port}", "-t", test,
                        "-s", str(size), "-n", str(iters)], **kw)


@pytest.fixture
def tls(monkeypatch):
    def use(name: str) -> None:
        monkeypatch.setenv("UCX_TLS", name)
    return use


@pytest.mark.slow
@needs_ucx
@pytest.mark.parametrize("transport", ["tcp", "posix"])
@pytest.mark.parametrize("test, size, kind", [("tag_lat", 8, "latency"),
                                              ("tag_bw", 65536, "overhead"),
                                              ("ucp_put_bw", 65536, "overhead")])
def test_ucx_perftest_on_loopback(tmp_path, tls, transport, test, size, kind):
    tls(transport)
    result = client_server.run(plan(test, size, 500, figures=P50, repeats=2), tmp_path)
    assert result["returncode"] == 0, (tmp_path / client_server.CLIENT_OUT).read_text()
    first = parse_ucx_perftest((tmp_path / client_server.CLIENT_OUT).read_text())
    assert first.kind == kind and first.iterations == 500
    assert first.p50_usec > 0 and first.bandwidth_average_mbs > 0 and first.msgrate_average > 0
    # Each run on its own port; the judged figure is the best of both; the server ran and
    # exited by itself (no process left behind).
    assert len(result["runs"]) == 2 and len(result["values"]["latency"]) == 2
    assert result["best"]["latency"] == min(result["values"]["latency"])
    assert (tmp_path / client_server.SERVER_OUT).is_file()
    assert result["confirmation"] == {}  # no limit, nothing to confirm


@pytest.mark.slow
@needs_ucx
def test_a_figure_inside_its_warning_band_is_measured_once(tmp_path, tls):
    tls("tcp")
    result = client_server.run(plan("tag_lat", 8, 500, figures=P50, repeats=3,
                                    warn_limits={"latency": 1e9}, fail_limits={"latency": 2e9}),
                               tmp_path)
    assert result["returncode"] == 0 and len(result["runs"]) == 1
    assert result["measurements"] == {"latency": 1} and result["confirmation"] == {}


@pytest.mark.slow
@needs_ucx
def test_unavailable_transport_is_reported_and_not_repeated(tmp_path, tls):
    tls("rc")
    result = client_server.run(plan("tag_lat", 8, 10, figures=P50), tmp_path)
    assert result["returncode"] != 0 and len(result["runs"]) == 1
    reason = failure_reason((tmp_path / client_server.CLIENT_OUT).read_text())
    assert reason and "'rc' is not available" in reason


@pytest.mark.slow
@needs_ucx
def test_a_figure_that_keeps_failing_is_confirmed_by_runs_spread_over_the_span(tmp_path, tls):
    tls("tcp")
    # A limit no healthy run meets: every confirmation run fails too.
    result = client_server.run(plan("tag_lat", 8, 500, figures=P50, repeats=2,
                                    fail_limits={"latency": 0.001}, confirm_span_s=4,
                                    confirm_runs=2),
                               tmp_path)
    runs = result["runs"]
    assert len(runs) == 4, runs  # 2 repeats, then 2 confirmation runs
    assert set(result["confirmation"]) == {"latency"}
    # spread over the span: the last run waits for its slot, the span after the repeats
    # ended (a busy host may delay the first confirmation run, never bring the last forward)
    repeats_end = runs[1]["started"] + runs[1]["seconds"]
    assert runs[3]["started"] - repeats_end >= 3.9, runs
    # Quiet at least once, unless the host was not: other work (the hypervisor's steal
    # included) over its share in the whole job, or in each confirmation run's own meter.
    shares = result["confirmation_other_shares"]
    assert len(shares) == 2, shares
    assert (result["quiet_confirmations"].get("latency", 0) >= 1 or result["contended"]
            or min(shares) > CONTENDED_SHARE), (shares, result["interference"])


@pytest.mark.slow
@needs_ucx
def test_the_confirmation_stops_at_the_first_run_that_no_longer_fails(tmp_path, tls,
                                                                       monkeypatch):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    tls("tcp")
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    limit = max(client_server.run(plan("tag_lat", 8, 500, figures=P50),
                                  healthy)["values"]["latency"]) * 2
    # The first batch runs with server and client squeezed onto one core, both polling (a
    # host slow for a while); the confirmation gets every core back.
    squeezed = plan("tag_lat", 8, 500, figures=P50, fail_limits={"latency": limit},
                    warn_limits={"latency": limit}, confirm_span_s=10)
    pinned = ["taskset", "-c", str(cores[0])]
    squeezed.server, squeezed.client = [*pinned, *squeezed.server], [*pinned, *squeezed.client]
    busy = tmp_path / "busy"
    busy.mkdir()
    quiet = confirm.wait_for_quiet
    free = plan("tag_lat", 8, 500)

    def cores_back(*args):
        (busy / client_server.SCRIPT).write_text(client_server.script(free.server, free.client))
        return quiet(*args)

    monkeypatch.setattr(confirm, "wait_for_quiet", cores_back)
    result = client_server.run(squeezed, busy)
    values = result["values"]["latency"]
    assert values[0] > limit, (limit, values, result["runs"])
    assert set(result["confirmation"]) == {"latency"}
    assert len(values) == 2, values  # the first batch, then one confirmation run
    assert result["best"]["latency"] <= limit


def test_script_places_server_and_client_on_two_nodes():
    text = client_server.script(["ib_write_bw", "-p", "{port}"],
                                ["ib_write_bw", "-p", "{port}", "{server_host}"], nodes=2)
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert 'srun -N1 -n1 -w "${hosts[0]}"' in text and 'srun -N1 -n1 -w "${hosts[1]}"' in text
    assert 'ib_write_bw -p "$port" "$server_host"' in text


def test_a_plan_survives_its_json_round_trip(tmp_path: Path):
    written = plan("tag_lat", 8, 10, figures=P50, fail_limits={"latency": 3.0}, nodes=2)
    written.save(tmp_path / client_server.PLAN)
    assert Plan.load(tmp_path / client_server.PLAN) == written

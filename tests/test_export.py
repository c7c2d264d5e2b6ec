"""Prometheus textfile (checked by promtool), metrics server, Grafana dashboard."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fabreg.review import export
from fabreg.review.perflog import Run, Sample
from fabreg.review.store import Store
from fabreg.review.synthetic import generate

REPO = Path(__file__).resolve().parent.parent
PROMTOOL = shutil.which("promtool")
# The metric names are the ones the issue asks for; promtool's *style* lint prefers base
# units (seconds) and says so about `_us`. That lint is the only complaint accepted.
ACCEPTED_LINT = "fabreg_latency_us metric names should not contain abbreviated units"


def promtool_check(text: str) -> None:
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                          text=True)
    complaints = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode in (0, 3), complaints  # 1 would be a parse error
    assert all(c == ACCEPTED_LINT for c in complaints), complaints


@pytest.fixture(scope="module")
def store_db(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export")
    generate(root / "perflogs", sessions=30, shifted=0.5, seed=21)
    db = root / "fabreg.db"
    subprocess.run([sys.executable, "-m", "fabreg.cli", "ingest", "-q", str(root / "perflogs")],
                   env=dict(os.environ, FABREG_DB=str(db)), check=True, capture_output=True)
    # A series whose parameter values need escaping.
    with Store(db) as store:
        run = Run(1.7e9, "Odd", {"transport": 'a"b\\c\nd', "num_nodes": "2"}, "sys", "p", "env",
                  jobid="1")
        store.add([Sample(run, "latency_8B", 1.25, "ms"), Sample(run, "msgrate", 5.0, "msg/s")])
    return db


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package "
                                             "'prometheus')")
def test_textfile_passes_promtool_and_has_the_promised_metrics(store_db: Path, tmp_path: Path,
                                                               run_fabreg):
    out = tmp_path / "textfile" / "fabreg.prom"
    proc = run_fabreg("export", "prometheus", "--out", str(out), db=store_db, check=True)
    assert "wrote" in proc.stdout
    text = out.read_text()
    promtool_check(text)
    assert list(out.parent.iterdir()) == [out]  # atomic write leaves no temporary file
    names = set(re.findall(r"^(fabreg_\w+)\{", text, re.M))
    assert names == {"fabreg_latency_us", "fabreg_bandwidth_mbps", "fabreg_busbw_mbps",
                     "fabreg_value", "fabreg_regression_open", "fabreg_open_regressions",
                     "fabreg_last_run_timestamp_seconds"}
    lat = re.search(r'^fabreg_latency_us\{test="OsuLatency",benchmark="osu_latency",'
                    r'size="8",nodes="(\d+)",mpi="(\w+)",transport="(\w+)",', text, re.M)
    assert lat, text[:500]
    # ms are converted to us; label values are escaped.
    assert re.search(r'fabreg_latency_us\{test="Odd",.*transport="a\\"b\\\\c\\nd".*\} 1250\.0',
                     text)
    assert 'fabreg_value{test="Odd"' in text and 'perfvar="msgrate",unit="msg/s"} 5.0' in text
    opened = int(re.search(r"^fabreg_open_regressions\{system=\"bench\",partition=\"p0\"\} "
                           r"(\d+)", text, re.M).group(1))
    assert opened == len(re.findall(r'^fabreg_regression_open\{.*system="bench".*\} 1$', text,
                                    re.M))
    assert opened > 0


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
def test_render_is_valid_for_odd_values():
    promtool_check(export.render([], []))
    assert export.escape('x"y\\z\nw') == 'x\\"y\\\\z\\nw'


def test_serve_metrics_on_loopback(store_db: Path, tmp_path: Path):
    proc = subprocess.Popen([sys.executable, "-m", "fabreg.cli", "serve-metrics", "--port", "0",
                             "--db", str(store_db)], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, line
        url = f"http://127.0.0.1:{match.group(1)}/metrics"
        with urllib.request.urlopen(url, timeout=60) as resp:
            body = resp.read().decode()
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "fabreg_latency_us{" in body
        out = tmp_path / "m.prom"
        export.write_textfile(body, out)
        if PROMTOOL:
            promtool_check(body)
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_metrics_includes_stress_latencies(store_db: Path, tmp_path: Path):
    """`fabreg stress` writes latency.jsonl (docs/workloads.md); serve-metrics exposes it."""
    state = tmp_path / "stress"
    state.mkdir()
    (state / "state.json").write_text(json.dumps({
        "mode": "local", "started": 1.0, "deadline": 2.0, "duration": 1.0, "ranks": 2,
        "size": 4194304, "ops": ["allreduce"], "mpi": "openmpi",
        "log": str(state / "latency.jsonl"), "out": str(state / "stress.out"), "command": []}))
    (state / "latency.jsonl").write_text(json.dumps({
        "time": 2.0, "op": "allreduce", "size": 4194304, "ranks": 2, "window_s": 1.0,
        "iterations": 9, "p50_us": 900.5, "p99_us": 1500.0, "max_us": 1600.0,
        "mean_us": 950.0}) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "fabreg.cli", "serve-metrics", "--port", "0",
                             "--db", str(store_db), "--stress-dir", str(state)],
                            stderr=subprocess.PIPE, text=True)
    try:
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", proc.stderr.readline())
        assert match
        url = f"http://127.0.0.1:{match.group(1)}/metrics"
        with urllib.request.urlopen(url, timeout=60) as resp:
            body = resp.read().decode()
        assert "fabreg_stress_running 0" in body
        assert ('fabreg_stress_latency_us{op="allreduce",size="4194304",ranks="2",'
                'quantile="0.99"} 1500.0') in body
        assert "fabreg_latency_us{" in body  # the store's metrics are still there
        if PROMTOOL:
            proc_check = subprocess.run([PROMTOOL, "check", "metrics"], input=body,
                                        capture_output=True, text=True)
            assert proc_check.returncode in (0, 3), proc_check.stdout + proc_check.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_metrics_without_store_fails_clearly(tmp_path: Path, run_fabreg):
    proc = run_fabreg("serve-metrics", "--port", "0", db=tmp_path / "none.db")
    assert proc.returncode == 2 and proc.stderr.startswith("fabreg: error: no store")


def test_grafana_dashboard_is_importable_and_queries_exported_metrics(store_db: Path):
    dash = json.loads((REPO / "docs" / "grafana" / "fabreg-dashboard.json").read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    assert dash["__inputs"][0]["pluginId"] == "prometheus"
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    text = export.render(*_load(store_db))
    produced = set(re.findall(r"^(fabreg_\w+)\{", text, re.M))
    used = {m for e in exprs for m in re.findall(r"fabreg_\w+", e)}
    assert used <= produced and {"fabreg_latency_us", "fabreg_bandwidth_mbps",
                                 "fabreg_busbw_mbps", "fabreg_open_regressions"} <= used
    labels = set(re.findall(r"(\w+)=~", " ".join(exprs)))
    assert labels <= set(export.LABELS)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def _load(db: Path):
    from fabreg.review import trends

    with Store(db, create=False) as store:
        series = store.load()
    return series, trends.analyse(series)


def test_metrics_server_keeps_serving_when_the_store_breaks(tmp_path: Path):
    calls = []

    def produce() -> str:
        calls.append(1)
        raise RuntimeError("store gone")

    server = export.MetricsServer("127.0.0.1", 0, produce)
    import threading

    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30)
        assert err.value.code == 503
        time.sleep(0.1)
        assert calls
    finally:
        server.shutdown()
        server.server_close()

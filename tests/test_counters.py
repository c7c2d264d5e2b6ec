"""Fabric counter collection on a directory tree laid out like sysfs, and on this host."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fabreg.cli import main
from fabreg.errors import FabregError
from fabreg.run.counters import (
    AFTER,
    BEFORE,
    SNAPSHOTS_VARIABLE,
    CounterReading,
    deltas,
    read_counters,
    read_pause_frames,
    read_rdma,
    roce_interfaces,
)
from fabreg.run.launch import JsonPlan, driver_main
from fabreg.run.parsers.ethtool import parse_ethtool_stats


def _write(path: Path, value: int | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def fake_sysfs(root: Path, symbol_error: int = 0, ecn: int = 10, cnp: int = 3) -> Path:
    """/sys/class/infiniband with one mlx5-like RoCE port and one IB port without hw_counters."""
    ib = root / "infiniband"
    port = ib / "mlx5_0" / "ports" / "1"
    _write(port / "counters" / "symbol_error", symbol_error)
    _write(port / "counters" / "link_downed", 0)
    _write(port / "counters" / "port_rcv_errors", 2)
    _write(port / "counters" / "port_xmit_data", 123456)  # not an error counter: not read
    _write(port / "hw_counters" / "np_ecn_marked_roce_packets", ecn)
    _write(port / "hw_counters" / "np_cnp_sent", cnp)
    _write(port / "hw_counters" / "out_of_sequence", 1)
    _write(port / "hw_counters" / "lifespan", 10)  # a setting, not a counter of interest
    (ib / "mlx5_0" / "device" / "net" / "ens1f0").mkdir(parents=True)
    other = ib / "qib0" / "ports" / "1"
    _write(other / "counters" / "link_downed", 4)
    return ib


def test_reads_port_and_hw_counters(tmp_path):
    reading = read_rdma(fake_sysfs(tmp_path))
    assert reading.values == {
        "mlx5_0/1/symbol_error": 0,
        "mlx5_0/1/link_downed": 0,
        "mlx5_0/1/port_rcv_errors": 2,
        "mlx5_0/1/np_cnp_sent": 3,
        "mlx5_0/1/np_ecn_marked_roce_packets": 10,
        "mlx5_0/1/out_of_sequence": 1,
        "qib0/1/link_downed": 4,
    }
    assert reading.unavailable == ["qib0/1: no hw_counters (driver exposes none)"]


def test_deltas_between_two_readings(tmp_path):
    before = read_rdma(fake_sysfs(tmp_path / "a", symbol_error=5, ecn=10, cnp=3))
    after = read_rdma(fake_sysfs(tmp_path / "b", symbol_error=7, ecn=110, cnp=3))
    d = deltas(before, after)
    assert d.deltas["mlx5_0/1/symbol_error"] == 2
    assert d.deltas["mlx5_0/1/np_ecn_marked_roce_packets"] == 100
    assert d.deltas["mlx5_0/1/np_cnp_sent"] == 0  # read twice, nothing happened: a real zero
    assert d.nonzero() == {"mlx5_0/1/symbol_error": 2, "mlx5_0/1/np_ecn_marked_roce_packets": 100}
    text = d.perflog_text()
    assert "mlx5_0/1/symbol_error=2" in text and "|" not in text


def test_reset_counter_is_not_a_negative_delta():
    d = deltas(CounterReading({"x/1/link_downed": 9}), CounterReading({"x/1/link_downed": 1}))
    assert d.deltas == {}
    assert d.unavailable == ["x/1/link_downed: counter reset during the test"]


def test_no_devices_is_unavailable_not_zero(tmp_path):
    reading = read_rdma(tmp_path / "missing")
    assert reading.values == {}
    assert reading.unavailable == [f"no RDMA devices in {tmp_path / 'missing'}"]
    text = deltas(reading, reading).perflog_text()
    assert text.startswith("unavailable: no RDMA devices")
    assert "=0" not in text


def test_roce_interfaces(tmp_path):
    assert roce_interfaces(fake_sysfs(tmp_path)) == ["ens1f0"]


def test_ethtool_pause_counters_parsed():
    # Hand-written in the format of `ethtool -S` on an mlx5 NIC.
    text = ("NIC statistics:\n     rx_packets: 10\n     rx_pause_ctrl_phy: 7\n"
            "     tx_pause_ctrl_phy: 0\n     rx_prio3_pause: 2\n")
    stats = parse_ethtool_stats(text)
    assert stats == {"rx_packets": 10, "rx_pause_ctrl_phy": 7, "tx_pause_ctrl_phy": 0,
                     "rx_prio3_pause": 2}


@pytest.mark.skipif(not shutil.which("ethtool"), reason="ethtool is not installed")
def test_real_ethtool_on_loopback_has_no_pause_frames():
    reading = read_pause_frames(["lo", "fabreg-no-such-if0"])
    assert reading.values == {}
    assert reading.unavailable[0].startswith("lo: no pause-frame counters")
    assert reading.unavailable[1].startswith("fabreg-no-such-if0: no pause-frame counters (")


def test_physical_interfaces_default(tmp_path):
    net = tmp_path / "net"
    (net / "eth9" / "device").mkdir(parents=True)
    (net / "br9").mkdir()
    reading = read_counters(ib_root=tmp_path / "none", net_root=net)
    assert reading.values == {}
    # eth9 is physical but does not exist on this host: named, reported unavailable.
    assert reading.unavailable[0] == f"no RDMA devices in {tmp_path / 'none'}"
    assert reading.unavailable[1].startswith("eth9: no pause-frame counters")
    assert not any(u.startswith("br9") for u in reading.unavailable)


def test_read_counters_combines_sources(tmp_path):
    reading = read_counters(ib_root=fake_sysfs(tmp_path))
    assert "mlx5_0/1/symbol_error" in reading.values
    # ens1f0 does not exist on this host: its pause counters are unavailable, not zero.
    assert any(u.startswith("ens1f0: ") for u in reading.unavailable)


def test_cli_read_and_delta(tmp_path, capsys):
    ib = fake_sysfs(tmp_path / "sys")
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    assert main(["counters", "read", "--sysfs", str(ib), "-o", str(before)]) == 0
    _write(ib / "mlx5_0" / "ports" / "1" / "counters" / "link_downed", 1)
    assert main(["counters", "read", "--sysfs", str(ib), "-o", str(after)]) == 0
    assert main(["counters", "delta", str(before), str(after)]) == 0
    out = capsys.readouterr().out
    assert "mlx5_0/1/link_downed=1" in out


def test_cli_bad_snapshot_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["counters", "delta", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fabreg: error: {bad}: not a fabreg counter reading")
    assert len(err.strip().splitlines()) == 1


class _Plan(JsonPlan):
    pass


@pytest.mark.parametrize("fails", [False, True])
def test_a_driver_handed_the_snapshots_takes_them_around_its_run(tmp_path, monkeypatch, fails):
    """The job's first and last readings, as the job script's ``fabreg counters read`` took
    them: the first before the driver measures, the last after it, also when it failed."""
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    seen: list[list[str]] = []

    def run(_plan: _Plan, workdir: Path) -> dict:
        seen.append(sorted(p.name for p in workdir.glob("fabric-counters-*")))
        if fails:
            raise FabregError("the benchmark failed")
        return {"returncode": 0}

    monkeypatch.setenv(SNAPSHOTS_VARIABLE, "lo")
    assert driver_main("test", [str(plan)], _Plan, run) == (1 if fails else 0)
    assert seen == [[BEFORE]]
    before, after = (CounterReading.from_json((tmp_path / n).read_text()) for n in (BEFORE, AFTER))
    assert before.unavailable == after.unavailable and any(
        u.startswith("lo: ") for u in after.unavailable)  # the interface handed, read
    # Not handed them (the job script takes them): the driver reads nothing.
    (tmp_path / BEFORE).unlink()
    (tmp_path / AFTER).unlink()
    monkeypatch.delenv(SNAPSHOTS_VARIABLE)
    driver_main("test", [str(plan)], _Plan, run)
    assert seen[-1] == [] and not list(tmp_path.glob("fabric-counters-*"))

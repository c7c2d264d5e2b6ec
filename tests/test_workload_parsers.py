"""Parsers for ucx_perftest, perftest and ucx_info, on real golden outputs.

Golden outputs live outside the repository (the ``golden`` fixture in
conftest.py; tests that need them skip with the reason when they are absent).
The perftest *table* fixtures
below are hand-written from perftest's documented output format, because the
golden host has no RDMA device and so no real table exists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fabreg.run.parsers.perftest import failure_reason as perftest_failure
from fabreg.run.parsers.perftest import no_device_reason, parse_perftest
from fabreg.run.parsers.ucx_perftest import (
    UcxPerftestError,
    failure_reason,
    parse_ucx_perftest,
)


def _read(golden: Path, rel: str) -> str:
    return (golden / rel).read_text()


# --- ucx_perftest ---------------------------------------------------------

@pytest.mark.parametrize(
    "name, kind, iters, p50, avg, bw, rate",
    [
        ("tcp-tag_lat.txt", "latency", 2000, 63.477, 64.656, 966.66, 15467),
        ("tcp-tag_lat-8B.txt", "latency", 10000, 8.902, 8.777, 0.87, 113934),
        ("tcp-tag_bw.txt", "overhead", 2000, 7.342, 42.609, 1466.83, 23469),
        ("tcp-ucp_put_bw.txt", "overhead", 2000, 0.050, 71.308, 876.47, 14024),
        ("posix-tag_lat.txt", "latency", 2000, 21.179, 22.038, 2836.07, 45377),
        ("posix-tag_bw.txt", "overhead", 2000, 0.120, 5.959, 10489.12, 167826),
        ("posix-ucp_put_bw.txt", "overhead", 2000, 1.684, 1.760, 35501.63, 568026),
    ],
)
def test_ucx_perftest_final_row(golden, name, kind, iters, p50, avg, bw, rate):
    text = _read(golden, f"ucx_perftest-1.13/{name}")
    result = parse_ucx_perftest(text)
    assert result.kind == kind
    assert result.iterations == iters
    assert result.p50_usec == pytest.approx(p50)
    assert result.average_usec == pytest.approx(avg)
    assert result.overall_usec == pytest.approx(avg)
    assert result.bandwidth_average_mbs == pytest.approx(bw)
    assert result.bandwidth_overall_mbs == pytest.approx(bw)
    assert result.msgrate_average == pytest.approx(rate)
    assert result.msgrate_overall == pytest.approx(rate)
    assert failure_reason(text) is None


def test_ucx_perftest_final_row_with_an_infinite_interval_average(golden):
    # Server and client on one core: no iteration completed in the last report interval,
    # so the interval columns read inf and 0; the p50 and the overall figures still hold.
    result = parse_ucx_perftest(_read(golden, "ucx_perftest-1.13/tcp-tag_lat-one-core-inf.txt"))
    assert result.p50_usec == pytest.approx(4008.542)
    assert result.average_usec == float("inf") and result.msgrate_average == 0
    assert result.overall_usec == pytest.approx(4007.837) and result.msgrate_overall == 250


def test_ucx_perftest_refused_connection(golden):
    text = _read(golden, "ucx_perftest-1.13/no-server.txt")
    with pytest.raises(UcxPerftestError) as info:
        parse_ucx_perftest(text)
    assert "connection refused" in info.value.reason
    assert not info.value.transport_unavailable


def test_ucx_perftest_unavailable_transport(golden):
    text = _read(golden, "ucx_perftest-1.13/rc-unavailable.txt")
    with pytest.raises(UcxPerftestError) as info:
        parse_ucx_perftest(text)
    assert info.value.transport_unavailable
    assert "'rc' is not available" in info.value.reason
    assert "tcp" in info.value.reason  # names what is available instead


def test_ucx_perftest_header_only_is_a_failure():
    text = "+----+\n|   Stage     | # iterations | 50.0%ile | average |\n"
    assert failure_reason(text) == "ucx_perftest printed no 'Final:' result row"


def test_ucx_perftest_generic_error_is_reported():
    text = "[1.0] [vm:1:0] perftest.c:1  UCX  ERROR something odd happened\n"
    assert failure_reason(text) == "ucx_perftest failed: something odd happened"


# --- perftest -------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "ib_write_bw-no-rdma-device.txt",
    "ib_write_lat-no-rdma-device.txt",
    "ib_read_bw-no-rdma-device.txt",
    "ib_send_lat-no-rdma-device.txt",
])
def test_perftest_no_device(golden, name):
    text = _read(golden, f"perftest-4.5/{name}")
    reason = no_device_reason(text)
    assert reason is not None and reason.startswith("no RDMA device")
    assert perftest_failure(text) == reason
    assert parse_perftest(text).rows == {}


def test_perftest_help_is_not_a_table(golden):
    text = _read(golden, "perftest-4.5/ib_write_bw-help.txt")
    assert no_device_reason(text) is None
    assert parse_perftest(text).rows == {}
    assert perftest_failure(text) is not None


@pytest.mark.parametrize("name, words", [
    ("ib_write_bw-n1000-l16-refused.txt",
     "Number of iterations must be a multiple of post list size"),
    ("ib_write_bw-event-refused.txt", "Events feature not available on WRITE verb"),
])
def test_perftest_refusing_its_options_says_so_in_its_words(golden, name, words):
    text = _read(golden, f"perftest-4.5/{name}")
    assert no_device_reason(text) is None and parse_perftest(text).rows == {}
    assert perftest_failure(text) == f"perftest failed: perftest rejected its options ({words})"


# Hand-written from perftest's documented output format (README / source
# print formats), not captured from a device: no RDMA hardware was available.
BW_TABLE = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
 Number of qps   : 1            Transport type : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 2          5000           10.50              10.41                5.458010
 1024       5000           5120.25            5101.00              5.223424
 65536      5000           11800.00           11750.50             0.188008
 8388608    5000           11900.10           11899.90             0.001488
---------------------------------------------------------------------------------------
"""

LAT_TABLE = """\
---------------------------------------------------------------------------------------
                    RDMA_Write Latency Test
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]
 2       1000          0.87           3.51         0.90               0.91           \
0.05            1.01                   3.51
 4096    1000          1.95           6.20         2.01               2.05           \
0.11            2.40                   6.20
---------------------------------------------------------------------------------------
"""


def test_perftest_bw_table():
    table = parse_perftest(BW_TABLE)
    assert table.title == "RDMA_Write BW Test"
    assert table.columns == ["bytes", "iterations", "bw_peak", "bw_average", "msg_rate"]
    assert table.units == {"bw_peak": "MB/sec", "bw_average": "MB/sec", "msg_rate": "Mpps"}
    assert table.sizes == [2, 1024, 65536, 8388608]
    assert table.value(65536, "bw_average") == pytest.approx(11750.50)
    assert table.value(2, "msg_rate") == pytest.approx(5.458010)
    assert table.value(2, "iterations") == 5000
    assert perftest_failure(BW_TABLE) is None


def test_perftest_lat_table():
    table = parse_perftest(LAT_TABLE)
    assert table.title == "RDMA_Write Latency Test"
    assert table.columns == ["bytes", "iterations", "t_min", "t_max", "t_typical",
                             "t_avg", "t_stdev", "t_p99", "t_p99_9"]
    assert table.units["t_p99_9"] == "usec"
    assert table.value(4096, "t_typical") == pytest.approx(2.01)
    assert table.value(2, "t_p99") == pytest.approx(1.01)
    assert table.value(2, "t_p99_9") == pytest.approx(3.51)


def test_perftest_gbit_units_and_short_rows():
    text = BW_TABLE.replace("MB/sec", "Gb/sec") + " 4096  5000  1.0\n"
    table = parse_perftest(text)
    assert table.units["bw_average"] == "Gb/sec"
    assert 4096 not in table.rows  # a row with missing columns is not a result


def test_perftest_connection_failure():
    text = " Couldn't connect to 10.0.0.2:18515\n Unable to open file descriptor\n"
    assert perftest_failure(text) == ("perftest failed: no perftest server answered at "
                                      "10.0.0.2:18515 (Couldn't connect to 10.0.0.2:18515)")


def test_perftest_duration_latency_header():
    # RESULT_FMT_LAT_DUR of perftest's perftest_parameters.h: what -D latency runs print.
    text = (" #bytes        #iterations       t_avg[usec]    tps average\n"
            " 2             1289984            3.88           128993.46\n")
    table = parse_perftest(text)
    assert table.columns == ["bytes", "iterations", "t_avg", "tps_average"]
    assert table.duration_mode and table.units == {"t_avg": "usec"}
    assert table.rows[2] == {"iterations": 1289984.0, "t_avg": 3.88, "tps_average": 128993.46}
    with pytest.raises(ValueError, match="not a bandwidth"):
        table.bandwidth_mbs(2, "t_avg")


def test_perftest_port_state_reason():
    # perftest_parameters.c: " Port number %d state is %s" when the port is not Active.
    assert perftest_failure(" Port number 1 state is Down\n") == (
        "perftest failed: port 1 of the RDMA device is Down, not Active")

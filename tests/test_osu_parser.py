"""The OSU parser against every real OSU 7.2 output in the golden set (tests/data/golden)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabreg.run.parsers.osu import (
    TITLES,
    abort_line,
    element_bytes,
    expected_sizes,
    parse_osu,
    powers_of_two,
    table_problem,
)


def _text(golden, name: str) -> str:
    return (golden / "osu-7.2" / name).read_text()


def test_every_golden_file_parses_without_error(golden):
    files = sorted((golden / "osu-7.2").glob("*.txt"))
    assert len(files) >= 30
    for path in files:
        result = parse_osu(path.read_text())
        for size, row in result.rows.items():
            assert size > 0
            assert set(row) == set(result.columns), path.name


def test_latency_table(golden):
    r = parse_osu(_text(golden, "openmpi-shm-osu_latency.txt"))
    assert (r.title, r.version, r.datatype) == ("Latency", "7.2", "MPI_CHAR")
    assert r.columns == ["Latency (us)"]
    assert r.sizes == powers_of_two(1, 4194304)
    assert r.value(8) == 0.46
    assert r.value(1024) == 1.12
    assert r.value(4194304) == 466.01
    assert table_problem(r, "osu_latency", powers_of_two(1, 4194304)) is None


def test_bandwidth_tables(golden):
    bw = parse_osu(_text(golden, "openmpi-shm-osu_bw.txt"))
    assert bw.columns == ["Bandwidth (MB/s)"]
    assert bw.value(65536) == 8195.56
    assert bw.value(4194304) == 10566.52
    bibw = parse_osu(_text(golden, "openmpi-shm-osu_bibw.txt"))
    assert bibw.title == TITLES["osu_bibw"]
    assert bibw.value(1048576) == 18502.99


@pytest.mark.parametrize("name,benchmark", [
    ("openmpi-shm-osu_allreduce-2ranks.txt", "osu_allreduce"),
    ("openmpi-shm-osu_bcast-2ranks.txt", "osu_bcast"),
    ("openmpi-shm-osu_alltoall-2ranks.txt", "osu_alltoall"),
    ("openmpi-shm-osu_reduce-2ranks.txt", "osu_reduce"),
    ("openmpi-shm-osu_allgather-2ranks.txt", "osu_allgather"),
])
def test_collective_headers_match_their_benchmark(golden, name, benchmark):
    r = parse_osu(_text(golden, name))
    assert r.columns == ["Avg Latency(us)"]
    assert table_problem(r, benchmark, powers_of_two(1, 4194304)) is None
    other = "osu_bcast" if benchmark != "osu_bcast" else "osu_reduce"
    assert "expected" in table_problem(r, other, [1])


def test_full_format_columns(golden):
    r = parse_osu(_text(golden, "openmpi-shm-osu_allreduce-4ranks-full.txt"))
    assert r.columns == ["Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iterations"]
    assert r.rows[1048576] == {"Avg Latency(us)": 642.93, "Min Latency(us)": 606.84,
                               "Max Latency(us)": 670.19, "Iterations": 100.0}
    assert r.value(1048576, "Max Latency(us)") == 670.19


def test_validation_column(golden):
    r = parse_osu(_text(golden, "openmpi-shm-osu_latency-validation.txt"))
    assert r.columns == ["Latency (us)", "Validation"]
    assert r.has_validation and r.validation_failures == []
    row = "4096                    3.10              "
    failing = _text(golden, "openmpi-shm-osu_latency-validation.txt").replace(
        row + "Pass", row + "Fail")
    r2 = parse_osu(failing)
    assert r2.validation_failures == [4096]
    assert "validation failed at size(s) 4096" in table_problem(r2, "osu_latency",
                                                                 powers_of_two(1, 4096))


def test_bad_option_prints_header_but_no_rows(golden):
    """OSU exits 0 here: only the missing rows tell that nothing was measured."""
    text = _text(golden, "openmpi-bad-option-osu_latency.txt")
    assert text.rstrip().endswith("# exit status: 0")
    r = parse_osu(text)
    assert r.title == "Latency" and r.rows == {}
    problem = table_problem(r, "osu_latency", powers_of_two(1, 1024))
    assert problem == "osu_latency: no data row for 11 requested size(s): 1, 2, 4, 8, 16, 32 ..."


def test_one_rank_error_has_no_header(golden):
    r = parse_osu(_text(golden, "openmpi-one-rank-osu_latency.txt"))
    assert r.title is None and r.rows == {}
    assert any("requires exactly two processes" in line for line in r.preamble)
    assert "printed no OSU header" in table_problem(r, "osu_latency", [8])


def test_help_output_is_not_a_table(golden):
    r = parse_osu(_text(golden, "mpich-help-osu_allreduce.txt"))
    assert r.title is None and r.rows == {}


def test_truncated_run_is_missing_sizes(golden):
    """MPICH with 4 ranks on 2 cores was killed by a timeout part-way through the sweep."""
    r = parse_osu(_text(golden, "mpich-shm-osu_alltoall-4ranks.txt"))
    assert r.sizes and max(r.sizes) < 4194304
    assert "no data row" in table_problem(r, "osu_alltoall", powers_of_two(1, 4194304))


def test_rows_survive_interleaved_ucx_and_btl_logging(golden):
    r = parse_osu(_text(golden, "openmpi-ucx-tcp-loginfo-osu_latency.txt"))
    assert r.sizes == [8] and r.value(8) == 6.26
    r = parse_osu(_text(golden, "openmpi-ob1-tcp-btlverbose-osu_latency.txt"))
    assert r.sizes == [8]


def test_a_ucx_log_line_spliced_into_the_header_is_dropped():
    """4 MPICH ranks over UCX with UCX_LOG_LEVEL=info: another rank's log line landed inside
    OSU's column header, and the whole table was lost (session 16's 4-node run)."""
    text = ("# OSU MPI Allgather Latency Test v7.2\n# Datatype: MPI_CHAR.\n"
            "# Size       Avg Latency(us)        Validation[1795528600.260816] "
            "[node2:17532:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(tcp/fab0) "
            "rma_am(tcp/fab0) am(tcp/fab0)\n\n"
            "[1795528600.262530] [node2:17532:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: "
            "tag(self/memory0 tcp/fab0)\n"
            "1                    6376.87              Pass\n"
            "131072              54536.41              Pass\n")
    r = parse_osu(text)
    assert r.columns == ["Avg Latency(us)", "Validation"], r.columns
    assert r.sizes == [1, 131072] and r.value(131072) == 54536.41
    assert table_problem(r, "osu_allgather", [1, 131072]) is None


def test_a_ucx_log_line_inside_the_header_is_taken_out_and_the_header_joined():
    """2 MPICH ranks over UCX (a 4-node run's validation run): node2's log lines landed
    between the header's ``Bandwidth (MB/s)`` and its ``Validation``, which followed them on a
    line of its own; read without joining, every row had a column too many."""
    text = ("# OSU MPI Bandwidth Test v7.2\n"
            "# Size      Bandwidth (MB/s)[1795796820.354180] [node2:24657:0]      "
            "ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(tcp/fab0) rma_am(tcp/fab0) "
            "am(tcp/fab0)\n"
            "[1795796820.355280] [node2:24657:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: "
            "tag(self/memory0 tcp/fab0) rma(self/memory0) am(self/memory0 tcp/fab0)\n"
            "        Validation\n"
            "# Datatype: MPI_CHAR.\n"
            "1                       0.17              Pass\n"
            "16384                1077.34              Pass\n"
            "4194304              2096.11              Pass\n")
    r = parse_osu(text)
    assert r.columns == ["Bandwidth (MB/s)", "Validation"], r.columns
    assert r.sizes == [1, 16384, 4194304] and r.value(16384) == 1077.34
    assert r.validation_failures == []
    # and inside a row: the row's rest follows the log line
    row = text.replace("1077.34              Pass", "1077[1795796820.4] [node2:24657:0] UCX  "
                       "INFO    ep_cfg[2]: tag(tcp/fab0)\n.34              Pass")
    assert parse_osu(row).rows[16384] == {"Bandwidth (MB/s)": 1077.34, "Validation": "Pass"}


def test_a_ucx_log_line_with_a_padded_pid_after_the_datatype_is_taken_out():
    """The same run's allgather: UCX 1.13 padded the pid (``[node2:8516 :0]``), and the log
    line after ``# Datatype: MPI_CHAR.`` hid the datatype, so sizes no longer named bytes."""
    text = ("# OSU MPI Allgather Latency Test v7.2\n"
            "# Datatype: MPI_CHAR.[1795797471.108142] [node2:8516 :0]      ucp_worker.c:1763 UCX"
            "  INFO    ep_cfg[0]: tag(tcp/fab0) rma_am(tcp/fab0) am(tcp/fab0)\n"
            "[1795797471.108974] [node2:8516 :0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: "
            "tag(self/memory0 tcp/fab0) rma(self/memory0) am(self/memory0 tcp/fab0)\n"
            "\n"
            "# Size       Avg Latency(us)\n"
            "1                      20.55\n"
            "131072                 93.34\n")
    r = parse_osu(text)
    assert r.datatype == "MPI_CHAR" and r.sizes == [1, 131072] and r.value(131072) == 93.34


def test_slurm_chatter_around_the_table(golden):
    r = parse_osu(_text(golden, "minicluster-2nodes-4ranks-openmpi-tcp-osu_allreduce.txt"))
    assert r.sizes == powers_of_two(1, 4194304)
    assert r.value(4194304) == 25455.25


def test_multi_column_message_rate(golden):
    r = parse_osu(_text(golden, "openmpi-shm-osu_mbw_mr-4ranks.txt"))
    assert r.columns == ["MB/s", "Messages/s"]
    assert r.value(65536, "Messages/s") == 248267.99


def test_missing_benchmark_exit_127(golden):
    r = parse_osu(_text(golden, "mpich-ucx-tcp-loginfo-osu_latency.txt"))
    assert r.title is None
    assert "No such file or directory" in "\n".join(r.preamble)


REAL = Path(__file__).parent / "data" / "real" / "osu"


@pytest.mark.parametrize("name, version, datatype, element", [
    ("archer2-osu7.5-allreduce-mpi_int.txt", "7.5", "MPI_INT", 4),
    ("archer2-osu5.7-allreduce.txt", "5.7", None, 4),
])
def test_collective_tables_start_at_one_element_of_their_datatype(name, version, datatype,
                                                                  element):
    result = parse_osu((REAL / name).read_text())
    assert (result.version, result.datatype) == (version, datatype)
    assert element_bytes(result, "osu_allreduce") == element
    sizes = expected_sizes(result, "osu_allreduce", 1, 1 << 20)
    assert sizes[0] == 4 and sizes[-1] == 1 << 20
    assert table_problem(result, "osu_allreduce", sizes) is None
    # demanding 1 B and 2 B rows, as fabreg did, failed every current OSU collective
    assert "no data row for 2 requested size(s): 1, 2" in table_problem(
        result, "osu_allreduce", powers_of_two(1, 1 << 20))
    assert result.value(1 << 20) > result.value(4) > 0


def test_a_one_byte_datatype_still_demands_one_byte_rows(golden):
    result = parse_osu(_text(golden, "openmpi-shm-osu_allreduce-2ranks.txt"))
    assert result.datatype == "MPI_CHAR"
    assert expected_sizes(result, "osu_allreduce", 1, 64)[0] == 1


@pytest.mark.parametrize("line", [
    # MVAPICH2 2.3.7 ch3:nemesis under osu_bibw 5.9 (seen here; its source path shortened)
    "[rank 1] Assertion failed in file src/mpid/ch3/channels/nemesis/src/ch3_progress.c at "
    "line 782: pkt->type >= 0 && pkt->type < MPIDI_CH3_PKT_END_ALL",
    "internal ABORT - process 1",
    "===   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
    "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",
    "Fatal error in PMPI_Init: Other MPI error, error stack:",
])
def test_the_line_where_an_mpi_says_a_rank_died_explains_a_cut_table(line):
    text = "# OSU MPI Bi-Directional Bandwidth Test v5.9\n# Size      Bandwidth (MB/s)\n" + line
    assert abort_line(text) == line.strip()
    assert abort_line("# OSU MPI Latency Test v7.2\n1   0.21\n") is None


def test_mvapich2_nemesis_osu_7_2_latency_and_the_bibw_abort(golden):
    """Real OSU 7.2 on MVAPICH2 2.3.7 ch3:nemesis: latency parses, bibw's cut table names the
    MPI's own assertion as the reason."""
    latency = parse_osu((golden / "mvapich2-2.3.7" / "nemesis-shm-osu_latency.txt").read_text())
    assert (latency.title, latency.version) == ("Latency", "7.2")
    assert latency.sizes == powers_of_two(1, 65536)
    assert table_problem(latency, "osu_latency", powers_of_two(1, 65536)) is None
    text = (golden / "mvapich2-2.3.7" / "nemesis-shm-osu_bibw-abort.txt").read_text()
    bibw = parse_osu(text)
    assert bibw.rows == {}
    assert table_problem(bibw, "osu_bibw", powers_of_two(1, 65536)).startswith(
        "osu_bibw: no data row for 17 requested size(s)")
    assert abort_line(text).startswith("[rank 1] Assertion failed in file <src>/src/mpid/ch3/"
                                       "channels/nemesis/src/ch3_progress.c at line 782")

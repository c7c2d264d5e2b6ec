"""Every parser, and the transport verification, on outputs people posted publicly.

The files and their sources are listed in tests/data/real/INDEX.md; this module
reads that table, so a file without a row (or a row without a file) fails, and
every row must have its exact expectations below.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fabreg.run import transport as t
from fabreg.run.parsers import (
    ethtool,
    gpu_support,
    inventory,
    osu,
    perftest,
    slurm,
    ucx_perftest,
)
from fabreg.run.parsers.transport_log import (
    evidence_hosts,
    mvapich2_report,
    ob1_btls,
    ucx_lanes,
)

REAL = Path(__file__).parent / "data" / "real"
_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \| (?P<parser>[\w ]+) \| (?P<what>.+?) "
                  r"\| (?P<source>.+) \|$")
#: Parsers of fabreg's own probe programs (no public output exists for them).
OWN_FORMATS = {"probes"}


def _index() -> list[dict[str, str]]:
    return [m.groupdict() for line in (REAL / "INDEX.md").read_text().splitlines()
            if (m := _ROW.match(line))]


ROWS = _index()


def _text(name: str) -> str:
    return (REAL / name).read_text()


# --- OSU -------------------------------------------------------------------------------


def _osu(name: str, benchmark: str, title: str, version: str, datatype: str | None,
         columns: list[str], low: int, high: int, values: dict[int, float]) -> None:
    r = osu.parse_osu(_text(name))
    assert (r.title, r.version, r.datatype, r.columns) == (title, version, datatype, columns)
    assert r.sizes == ([0] if 0 in r.rows else []) + osu.powers_of_two(low, high)
    assert {size: r.value(size) for size in values} == values
    expected = osu.expected_sizes(r, benchmark, 1, high)
    assert osu.table_problem(r, benchmark, expected) is None
    assert expected[0] == low


def osu_archer2_75() -> None:
    _osu("osu/archer2-osu7.5-allreduce-mpi_int.txt", "osu_allreduce", "Allreduce Latency",
         "7.5", "MPI_INT", ["Avg Latency(us)"], 4, 1048576, {4: 10.05, 1048576: 1064.92})


def osu_archer2_57() -> None:
    _osu("osu/archer2-osu5.7-allreduce.txt", "osu_allreduce", "Allreduce Latency", "5.7",
         None, ["Avg Latency(us)"], 4, 1048576, {4: 6.81, 65536: 243.26})


def osu_bibw_ib() -> None:
    _osu("osu/ucx7245-hpcx2.7-osu5.7-bibw-connectx6.txt", "osu_bibw",
         "Bi-Directional Bandwidth", "5.7", None, ["Bandwidth (MB/s)"], 1, 4194304,
         {1: 5.95, 8192: 13899.90, 4194304: 24609.96})


def osu_bw_ugni() -> None:
    _osu("osu/ucx4274-osu5.6.2-bw-cuda-cray-ugni.txt", "osu_bw", "Bandwidth", "5.6.2", None,
         ["Bandwidth (MB/s)"], 1, 4194304, {2048: 807.29, 4194304: 1785.15})


def osu_bw_cuda() -> None:
    name = "osu/eessi716-osu7.2-bw-cuda-DD-a100-nvlink.txt"
    _osu(name, "osu_bw", "Bandwidth", "7.2", "MPI_CHAR", ["Bandwidth (MB/s)"], 1, 33554432,
         {1: 1.01, 16384: 3857.74, 33554432: 93130.52})
    # The MPI-CUDA title and the buffer line are OSU's; the preamble keeps nothing else.
    assert osu.parse_osu(_text(name)).preamble == []


def osu_bibw_cuda_validation() -> None:
    name = "osu/libfabric11231-osu7.5-bibw-cuda-DD-validation.txt"
    _osu(name, "osu_bibw", "Bi-Directional Bandwidth", "7.5", "MPI_CHAR",
         ["Bandwidth (MB/s)", "Validation"], 1, 8192, {1: 0.32, 8192: 2613.45})
    r = osu.parse_osu(_text(name))
    assert r.has_validation and r.validation_failures == []
    assert r.preamble == ["[b5303.betzy.sigma2.no:2544794] SET FI_LNX_PROV_LINKS=shm",
                          "0 gpu 0", "1 gpu 0"]
    # The posted table stops at 8 KiB: a run asked for 16 KiB is incomplete.
    assert osu.table_problem(r, "osu_bibw", osu.powers_of_two(1, 16384)) == (
        "osu_bibw: no data row for 1 requested size(s): 16384")


def osu_reduce_full() -> None:
    name = "osu/ompi12318-osu7.3-reduce-cuda-full.txt"
    _osu(name, "osu_reduce", "Reduce Latency", "7.3", "MPI_CHAR",
         ["Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Iterations"], 1, 1024,
         {1: 53.34, 1024: 55.48})
    r = osu.parse_osu(_text(name))
    assert r.rows[128] == {"Avg Latency(us)": 53.91, "Min Latency(us)": 23.22,
                           "Max Latency(us)": 160.13, "Iterations": 1000.0}


def osu_latency_aries() -> None:
    _osu("osu/libfabric-cray859-osu5.0-latency-aries.txt", "osu_latency", "Latency", "5.0",
         None, ["Latency (us)"], 1, 4194304, {0: 1.84, 1: 1.85, 4194304: 497.37})


def osu_mbw_mr() -> None:
    name = "osu/aws-pcluster7035-osu5.7.1-mbw_mr-48pairs-efa.txt"
    _osu(name, "osu_mbw_mr", "Multiple Bandwidth / Message Rate", "5.7.1", None,
         ["MB/s", "Messages/s"], 1, 2048, {1: 58.09, 2048: 99357.09})
    assert osu.parse_osu(_text(name)).value(1, "Messages/s") == 58086503.51


# --- perftest ------------------------------------------------------------------------------


def perftest_read_bw() -> None:
    table = perftest.parse_perftest(_text("perftest/ucx8851-read_bw-a-ib.txt"))
    assert table.title == "RDMA_Read BW Test"
    assert table.sizes == [2, 4, 8]
    assert table.units["bw_average"] == "MB/sec"
    assert table.rows[8] == {"iterations": 1000.0, "bw_peak": 19.51, "bw_average": 19.50,
                             "msg_rate": 2.556366}
    # perftest's MB/sec is MiB/s (2^20 B/s): 19.50 MiB/s = 20.447232 MB/s.
    assert table.bandwidth_mbs(8) == pytest.approx(20.447232)
    assert perftest.failure_reason(_text("perftest/ucx8851-read_bw-a-ib.txt")) is None


def perftest_write_bw_gbits() -> None:
    table = perftest.parse_perftest(_text("perftest/perftest132-write_bw-a-gbits-ib.txt"))
    assert table.title == "RDMA_Write BW Test"
    assert table.sizes == [2, 4, 8, 16]
    assert table.units["bw_average"] == "Gb/sec"
    assert table.value(2, "bw_average") == 0.042185
    assert table.value(16, "msg_rate") == 2.640952  # a row with tabs in it
    assert table.bandwidth_mbs(16) == pytest.approx(42.5)  # 0.34 Gb/s = 42.5 MB/s


def perftest_duration_bw() -> None:
    table = perftest.parse_perftest(_text("perftest/perftest273-write_bw-D60-gbits.txt"))
    assert table.title == "RDMA_Write Post List BW Test"
    assert table.sizes == [8]
    assert table.rows[8] == {"iterations": 224958464.0, "bw_peak": 0.00, "bw_average": 0.48,
                             "msg_rate": 7.498617}
    assert not table.duration_mode  # -D bandwidth keeps the usual columns
    assert table.bandwidth_mbs(8) == pytest.approx(60.0)


def _perftest_failure(name: str, reason: str) -> None:
    text = _text(name)
    assert perftest.parse_perftest(text).rows == {}
    assert perftest.no_device_reason(text) is None
    assert perftest.failure_reason(text) == "perftest failed: " + reason


def perftest_read_keys_server() -> None:
    _perftest_failure(
        "perftest/perftest132-server-couldnt-read-remote-address.txt",
        "the peer's connection data never arrived (ethernet_read_keys: Couldn't read remote "
        "address): the other side failed or exited before the exchange")


def perftest_modify_qp_client() -> None:
    _perftest_failure(
        "perftest/perftest132-client-failed-to-modify-qp.txt",
        "the queue pair could not be brought to RTS (Failed to modify QP to RTS): the two ends "
        "disagree on addressing (GID index, LID, MTU) or the link is down")


def perftest_read_keys_after_header() -> None:
    name = "perftest/sparkrdma31-ib_read_bw-server-couldnt-read-remote-address.txt"
    assert perftest.parse_perftest(_text(name)).title == "RDMA_Read BW Test"
    _perftest_failure(
        name,
        "the peer's connection data never arrived (ethernet_read_keys: Couldn't read remote "
        "address): the other side failed or exited before the exchange")


def perftest_no_server() -> None:
    _perftest_failure(
        "perftest/perftest228-couldnt-connect.txt",
        "no perftest server answered at 192.168.125.211:18515 "
        "(Couldn't connect to 192.168.125.211:18515)")


# --- ucx_perftest ------------------------------------------------------------------------


def ucx_perftest_final_row() -> None:
    r = ucx_perftest.parse_ucx_perftest(_text("ucx_perftest/ucx10649-tag_bw-thread-and-final.txt"))
    assert r == ucx_perftest.UcxPerftestResult(
        kind="overhead", iterations=1000, p50_usec=0.240, average_usec=1675.942,
        overall_usec=1671.351, bandwidth_average_mbs=46615.58, bandwidth_overall_mbs=46743.62,
        msgrate_average=597, msgrate_overall=598)
    # ucx_perftest's "MB/s" is MiB/s (its source divides by 1024.0 * 1024.0).
    assert r.bandwidth_average_decimal_mbs == pytest.approx(46615.58 * 1.048576)


def ucx_perftest_old_table_final_only() -> None:
    r = ucx_perftest.parse_ucx_perftest(
        _text("ucx_perftest/ucx4587-old-table-final-only-tag_lat-rocm.txt"))
    assert r == ucx_perftest.UcxPerftestResult(
        kind="latency", iterations=1000000, p50_usec=1.458, average_usec=8.188,
        overall_usec=9.640, bandwidth_average_mbs=0.93, bandwidth_overall_mbs=0.79,
        msgrate_average=122133, msgrate_overall=103732)


def ucx_perftest_old_table() -> None:
    text = _text("ucx_perftest/rocm-docs-ucx-old-table-put_lat.txt")
    r = ucx_perftest.parse_ucx_perftest(text)
    assert r == ucx_perftest.UcxPerftestResult(
        kind="latency", iterations=1000000, p50_usec=0.844, average_usec=0.848,
        overall_usec=0.851, bandwidth_average_mbs=4.50, bandwidth_overall_mbs=4.48,
        msgrate_average=589339, msgrate_overall=587686)
    assert ucx_perftest.failure_reason(text) is None
    # Cut after the first progress row, the run reports fewer iterations than it was asked.
    cut = text.split("     1000000")[0]
    assert ucx_perftest.parse_ucx_perftest(cut).iterations == 586527


# --- ucx_info -d ---------------------------------------------------------------------------


def ucx_info_old_layout() -> None:
    text = _text("ucx_info/hiroyuki-sato-ucx1.7-ucx_info-d.txt")
    found = inventory.ucx_transports(text)
    assert found == {"mm": ["posix", "sysv"], "self": ["self"],
                     "tcp": ["vboxnet3", "brbond0", "brib0.8001"], "cma": ["cma"]}
    inv = t.Inventory("mpich", ucx={k: tuple(v) for k, v in found.items()},
                      mpi_device="ch4:ucx")
    net = t.NetConfig(tcp_interfaces=("brib0.8001",))
    assert t.availability_problem("mpich", "tcp", inv, net) is None
    assert t.availability_problem("mpich", "shm", inv) is None  # "mm" is shared memory
    assert t.availability_problem("mpich", "ucx_rc", inv) == (
        "ucx_rc needs UCX transport rc_mlx5 or rc_verbs; `ucx_info -d` here lists only "
        "cma, mm, self, tcp (no RDMA device)")


def ucx_info_one_transport_two_devices() -> None:
    text = _text("ucx_info/ucx6264-ompi4.0.2-ucx_info-d-mlx5-old-layout.txt")
    found = inventory.ucx_transports(text)
    assert found == {"mm": ["posix", "sysv"], "self": ["self"], "tcp": ["eth2", "ib0"],
                     "rc": ["mlx5_0:1"], "rc_mlx5": ["mlx5_0:1"], "dc_mlx5": ["mlx5_0:1"],
                     "ud": ["mlx5_0:1"], "ud_mlx5": ["mlx5_0:1"], "cm": ["mlx5_0:1"],
                     "cma": ["cma"], "knem": ["knem"]}
    inv = t.Inventory("mpich", ucx={k: tuple(v) for k, v in found.items()},
                      mpi_device="ch4:ucx")
    # ib0 is the second device under the one "Transport: tcp" line: it is configured here.
    ipoib = t.NetConfig(tcp_interfaces=("ib0",), rdma_devices=("mlx5_0:1",))
    for transport in ("tcp", "ucx_rc", "ucx_ud", "ucx_dc", "shm"):
        assert t.availability_problem("mpich", transport, inv, ipoib) is None, transport
    assert t.ucx_tls("ucx_rc", ucx=inv.ucx) == "rc_x,self"
    assert t.availability_problem("mpich", "tcp", inv, t.NetConfig(tcp_interfaces=("eth9",))) \
        == "UCX_NET_DEVICES eth9 (partition extras) not among the tcp devices here (eth2, ib0)"


def ucx_info_cuda_build() -> None:
    text = _text("ucx_info/ucx9908-ucx1.16-cuda-gdrcopy-ucx_info-d-first-part.txt")
    found = inventory.ucx_transports(text)
    assert found == {"self": ["memory"], "tcp": ["ens21f0", "ib0", "lo"], "sysv": ["memory"],
                     "posix": ["memory"], "cuda_copy": ["cuda"], "cuda_ipc": ["cuda"],
                     "gdr_copy": ["cuda"]}
    assert gpu_support.ucx_cuda_transports(text) == ["cuda_copy", "cuda_ipc", "gdr_copy"]
    ucx = {k: tuple(v) for k, v in found.items()}
    # gdr_copy is listed, so device buffers get it too (UCX's "cuda" alias names all three).
    # (cuda_ipc only beside shared memory: see gpu_h100_perftest_tcp)
    assert t.ucx_tls("tcp", ucx=ucx, buffer="cuda") == "tcp,cuda_copy,gdr_copy,self"
    assert t.ucx_tls("tcp", ucx=ucx) == "tcp,self"


# --- UCX lane logs and ob1 BTL output: the transport verification --------------------------


def ucx_log_faq_cuda() -> None:
    text = _text("ucx_log/ucx-faq-osu_bw-cuda-ep_cfg.txt")
    # The loopback ep_cfg[2] (self, knem, cuda_copy) carries nothing between the ranks.
    assert [str(lane) for lane in ucx_lanes(text)] == ["rc_mlx5/mlx5_0:1"]
    assert evidence_hosts(text) == ["host2", "host1"]  # host1's thread field is "a"
    inv = t.Inventory("openmpi", ucx={"rc_mlx5": ("mlx5_0:1",), "cuda_copy": ("cuda",),
                                      "cuda_ipc": ("cuda",)})
    spec = t.launch_spec("openmpi", "ucx_rc", nodes=2, inventory=inv, buffer="cuda",
                         net=t.NetConfig(rdma_devices=("mlx5_0:1",)))
    assert dict(spec.env)["UCX_TLS"] == "rc_x,cuda_copy,self"  # one rank a node: no cuda_ipc
    v = t.verify(spec, text)
    assert (v.ok, v.used, v.evidence) == (True, "ucx_rc", ("UCX tag lanes: rc_mlx5/mlx5_0:1",))
    assert not t.verify(t.launch_spec("openmpi", "tcp", nodes=2), text).ok


def ucx_log_four_nodes() -> None:
    text = _text("ucx_log/ompi9080-parsec-4nodes-rc_mlx5.txt")
    assert [str(lane) for lane in ucx_lanes(text)] == ["rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1"]
    assert evidence_hosts(text) == ["r39c2t5n4", "r39c2t5n2", "r39c2t5n3", "r39c2t5n1"]
    v = t.verify(t.launch_spec("openmpi", "ucx_rc", nodes=4), text)
    assert (v.ok, v.used) == (True, "ucx_rc")
    devices = t.NetConfig(rdma_devices=("mlx5_0:1",))
    off = t.verify(t.launch_spec("openmpi", "ucx_rc", nodes=4, net=devices), text)
    assert off.problem == ("ucx_rc ran on rc_mlx5/mlx5_1:1, outside the partition's devices "
                           "(mlx5_0:1)")


def ucx_log_loopback_only() -> None:
    text = _text("ucx_log/ompi6883-one-host-self-cma.txt")
    assert ucx_lanes(text) == [] and evidence_hosts(text) == []
    v = t.verify(t.launch_spec("openmpi", "shm", nodes=1, ranks_per_node=2), text)
    assert not v.ok and v.problem.startswith("no evidence of the transport used")


def ucx_log_gpu_nodes() -> None:
    text = _text("ucx_log/parthenon1260-jsc-cuda_ipc-rc_mlx5.txt")
    lanes = [str(lane) for lane in ucx_lanes(text)]
    assert lanes[:4] == ["rc_mlx5/mlx5_2:1", "rc_mlx5/mlx5_0:1", "rc_mlx5/mlx5_1:1",
                         "rc_mlx5/mlx5_3:1"]
    assert lanes[4:] == ["sysv/memory", "cma/memory", "cuda_ipc/cuda"]
    assert evidence_hosts(text) == ["jpbo-007-31", "jpbo-007-24"]
    # Two nodes, several ranks each: rc between nodes, shared memory (cuda_ipc too) within.
    spec = t.launch_spec("openmpi", "ucx_rc", nodes=2, ranks_per_node=4, buffer="cuda")
    v = t.verify(spec, text)
    assert (v.ok, v.used) == (True, "ucx_rc+shm")


def ompi_smcuda() -> None:
    text = _text("ompi/ompi7460-smcuda-btl-verbose.txt")
    assert ob1_btls(text) == ["smcuda", "self"]
    spec = t.launch_spec("openmpi", "shm", nodes=1, ranks_per_node=3, buffer="cuda")
    assert dict(spec.mca)["btl"] == "smcuda,self"
    v = t.verify(spec, text)
    assert (v.ok, v.used, v.evidence) == (True, "shm", ("ob1 BTLs: smcuda, self",))


# --- MVAPICH2 ----------------------------------------------------------------------------

_MGPM7 = "mvapich2/mgpm7-mvapich2.3.4-"


def slurm_partitions() -> None:
    cpu, big = slurm.parse_partitions(_text(
        "slurm/fabreg-cluster-4nodes-2partitions-scontrol-show-partition.txt"))
    assert (cpu.name, cpu.nodes, cpu.total_nodes, cpu.default) == ("cpu", "node[1-2]", 2, True)
    assert (big.name, big.nodes, big.total_nodes, big.default) == ("big", "node[3-4]", 2, False)
    assert cpu.max_nodes is None  # MaxNodes=UNLIMITED


def slurm_nodes_with_a_drained_one() -> None:
    nodes = slurm.parse_nodes(_text(
        "slurm/fabreg-cluster-4nodes-drained-node2-scontrol-show-node.txt"))
    assert [(n.name, n.cpus, n.features, n.partitions) for n in nodes] == [
        ("node1", 1, ("cpu",), ("cpu",)), ("node2", 1, ("cpu",), ("cpu",)),
        ("node3", 2, ("big", "fat"), ("big",)), ("node4", 2, ("big", "fat"), ("big",))]
    assert [n.idle for n in nodes] == [True, False, True, True]
    assert nodes[1].state == "IDLE+DRAIN" and not nodes[1].usable
    assert nodes[1].reason.startswith("recabled switch 7 [root@")


def mvapich2_mpiname() -> None:
    text = _text(_MGPM7 + "cuda-mpiname-a.txt")
    assert inventory.hydra_device(text) == "ch3:mrail"
    mrail = t.Inventory("mvapich2", mpi_device=inventory.hydra_device(text),
                        rdma_devices=("mlx5_0",))
    assert t.availability_problem("mvapich2", "ucx_rc", mrail) is None
    assert t.availability_problem("mvapich2", "tcp", mrail) == (
        "MVAPICH2 runs TCP only from a socket build (ch3:sock or ch3:nemesis); "
        "this one is ch3:mrail")


# Only parts of issue 7's report could be retrieved: not its header, not its Parameters block
# (which tells the channel). The parts start inside a block, so they are no report by
# themselves; after the block's first line as MVAPICH2 prints it (mv2_show_all_params /
# mv2_show_cuda_params, not part of the posted text) their lines parse.
def mvapich2_all_parameters_part() -> None:
    text = _text(_MGPM7 + "all-parameters-qkey-to-eager-part.txt")
    assert mvapich2_report(text) is None
    rc = t.launch_spec("mvapich2", "ucx_rc", nodes=2)
    assert t.verify(rc, text).problem == (
        "no evidence of the transport used: MVAPICH2's environment report "
        "(MV2_SHOW_ENV_INFO=2), or a ch3:sock or ch3:nemesis device named by `mpiname -a` or "
        "`mpiexec -info` not found in the output")
    report = mvapich2_report(" MVAPICH2 All Parameters\n" + text)
    assert (report.version, report.fields, len(report.all_params)) == (None, {}, 26)
    assert report.all_params["MV2_DEFAULT_QP_OUS_RD_ATOM"] == "268701700"
    assert report.all_params["MV2_IBA_EAGER_THRESHOLD"] == "17408"
    # All Parameters lists the InfiniBand tunables even on an SMP-only run: no verdict.
    assert report.channel is None and report.smp_only is None
    v = t.verify(rc, " MVAPICH2 All Parameters\n" + text)
    assert v.evidence == ("MVAPICH2 report: no Parameters block, channel unknown",)
    assert v.problem.startswith("no evidence of the transport used")


def mvapich2_gdr_parameters_part() -> None:
    text = _text(_MGPM7 + "cuda-parameters-end-and-run-part.txt")
    assert mvapich2_report(text) is None
    report = mvapich2_report(" MVAPICH2 GDR Parameters\n" + text)
    assert len(report.all_params) == 16 and report.flag("MV2_CUDA_INIT_CONTEXT") is True
    assert report.all_params["MV2_CUDA_BCAST_NAIVE_LIMIT"] == "2097152"
    assert report.flag("MV2_CUDA_GATHERV_NAIVE_LIMIT") is False
    # The block ends at its rule: the program's output after it is not read as fields.
    assert list(report.all_params)[-1] == "MV2_CUDA_INIT_CONTEXT"


def mvapich2_x_psm2() -> None:
    text = _text("mvapich2/kisti-nurion-mvapich2-x2.3.3-psm2-knl-show-env-info.txt")
    report = mvapich2_report(text)
    assert report.version is None and len(report.fields) == 32
    assert report.fields["HCA NAME"] == "MV2_HCA_INTEL_HFI1"
    assert report.fields["Tuning Table"] == "MV2_ARCH_INTEL_XEON_PHI_7250 MV2_HCA_INTEL_HFI1"
    assert report.fields["MV2_USE_CMA_COLL_BCAST"] == "0"  # a " - " sub-item
    assert (report.channel, report.smp_only) == ("psm", False)
    v = t.verify(t.launch_spec("mvapich2", "ucx_rc", nodes=2), text)
    assert (v.used, v.problem) == ("psm", "asked for ucx_rc but traffic went over psm "
                                   "(MVAPICH2 report: PSM channel (Omni-Path) "
                                   "(HCA NAME=MV2_HCA_INTEL_HFI1))")


# --- ethtool, GPU support -----------------------------------------------------------------


def ethtool_mlx5() -> None:
    stats = ethtool.parse_ethtool_stats(_text("ethtool/ethq8-mlx5_core-ethtool-S.txt"))
    assert len(stats) == 23
    assert stats["rx_packets"] == 845320277 and stats["tx_bytes"] == 2655285206479
    assert stats["rx_csum_none"] == 49455


def ethtool_per_queue() -> None:
    stats = ethtool.parse_ethtool_stats(_text("ethtool/ethq6-bnx2x-ethtool-S-per-queue.txt"))
    assert len(stats) == 34
    assert stats["[0]: rx_bytes"] == 209487403324
    assert stats["[1]: tx_bcast_packets"] == 8249


def gpu_perftest_help_cuda() -> None:
    text = _text("gpu/ucx9338-ucx_perftest-h-cuda-loaded.txt")
    assert gpu_support.ucx_memory_types(text) == ["host", "cuda", "cuda-managed"]


def gpu_perftest_help_host_only() -> None:
    text = _text("gpu/ucx9338-ucx_perftest-h-cuda-not-loaded.txt")
    assert gpu_support.ucx_memory_types(text) == ["host"]
    assert gpu_support.ucx_cuda_transports(text) == []


def gpu_ompi_without_cuda() -> None:
    text = _text("gpu/ompi12048-ompi_info-cuda-false.txt")
    assert gpu_support.ompi_cuda_support(text) is False


# --- The GPU checks' own run on an NVIDIA H100 (ci/run-gpu-checks.sh) -----------------------

_H100 = "gpu/fabreg-h100-"


def gpu_h100_ucx_info() -> None:
    text = _text(_H100 + "ucx1.22-cu13-ucx_info-d.txt")
    assert inventory.ucx_transports(text) == {
        "self": ["memory"], "tcp": ["eth0", "lo"], "sysv": ["memory"], "posix": ["memory"],
        "cuda_copy": ["cuda"], "cuda_ipc": ["cuda"], "cma": ["memory"]}
    assert gpu_support.ucx_cuda_transports(text) == ["cuda_copy", "cuda_ipc"]


def gpu_h100_ompi_with_cuda() -> None:
    assert gpu_support.ompi_cuda_support(_text(_H100 + "ompi4.1.4-ompi_info-cuda-true.txt"))


def gpu_h100_latency_dd_ucx() -> None:
    name = _H100 + "osu5.9-latency-cuda-DD-pml-ucx-lanes.txt"
    _osu(name, "osu_latency", "Latency", "5.9", None, ["Latency (us)"], 1, 4194304,
         {0: 0.43, 8: 155.29, 1024: 156.11, 4194304: 152.47})
    text = _text(name)
    # Two ranks on one GPU: device to device through cuda_ipc, UCX 1.22's lane lines.
    assert [str(lane) for lane in ucx_lanes(text)] == ["sysv/memory", "cma/memory",
                                                        "cuda_ipc/cuda"]
    assert evidence_hosts(text) == ["vm"]
    spec = t.launch_spec("mpich", "shm", nodes=1, ranks_per_node=2, buffer="cuda")
    assert dict(spec.env)["UCX_TLS"] == "sm,cuda_copy,cuda_ipc,self"
    v = t.verify(spec, text)
    assert (v.ok, v.used) == (True, "shm"), v


def gpu_h100_bw_dd_smcuda() -> None:
    name = _H100 + "osu5.9-bw-cuda-DD-ob1-smcuda-verbose.txt"
    _osu(name, "osu_bw", "Bandwidth", "5.9", None, ["Bandwidth (MB/s)"], 1, 4194304,
         {1: 0.08, 1048576: 84667.65, 4194304: 333350.27})
    text = _text(name)
    # cuMemHostRegister failed on the VM (Open MPI's help text, between header and rows), and
    # the run went on: the help text is not a row.
    assert "cuMemHostRegister return value:  1" in text
    assert ob1_btls(text) == ["smcuda", "self"]
    spec = t.launch_spec("openmpi", "shm", nodes=1, ranks_per_node=2, buffer="cuda")
    assert dict(spec.mca)["btl"] == "smcuda,self"
    v = t.verify(spec, text)
    assert (v.ok, v.used, v.evidence) == (True, "shm", ("ob1 BTLs: smcuda, self",))


def gpu_h100_bw_hd() -> None:
    _osu(_H100 + "osu5.9-bw-cuda-HD-pml-ucx.txt", "osu_bw", "Bandwidth", "5.9", None,
         ["Bandwidth (MB/s)"], 1, 4194304, {1: 0.13, 1048576: 14573.85, 4194304: 13131.08})


def gpu_h100_allreduce() -> None:
    # 5.9's reductions run on floats and print no datatype line: the table starts at 4 B.
    name = _H100 + "osu5.9-allreduce-cuda-pml-ucx.txt"
    _osu(name, "osu_allreduce", "Allreduce Latency", "5.9", None, ["Avg Latency(us)"], 4,
         1048576, {4: 210.2, 1024: 182.53})
    assert osu.expected_sizes(osu.parse_osu(_text(name)), "osu_allreduce", 1, 1048576) == \
        osu.powers_of_two(4, 1048576)


def gpu_h100_perftest_tcp() -> None:
    text = _text(_H100 + "ucx_perftest-tag_bw-cuda-tcp-lanes.txt")
    r = ucx_perftest.parse_ucx_perftest(text)
    assert (r.kind, r.iterations, r.bandwidth_average_mbs) == ("overhead", 100, 3126.05)
    # Asked tcp without cuda_ipc, device memory crossed tcp, staged by cuda_copy (a copy within
    # the process, no evidence). With cuda_ipc in UCX_TLS the tag lane had been
    # "tcp/lo tcp/eth0 cuda_ipc/cuda" and the data never crossed tcp.
    lanes = ucx_lanes(text)
    assert [str(lane) for lane in lanes] == ["tcp/lo", "tcp/eth0"]
    assert {t.ucx_class(lane.transport) for lane in lanes} == {"tcp"}  # as the check reads it
    assert t.ucx_tls("tcp", buffer="cuda") == "tcp,cuda_copy,self"


EXPECTATIONS: dict[str, Callable[[], None]] = {
    "osu/archer2-osu7.5-allreduce-mpi_int.txt": osu_archer2_75,
    "osu/archer2-osu5.7-allreduce.txt": osu_archer2_57,
    "osu/ucx7245-hpcx2.7-osu5.7-bibw-connectx6.txt": osu_bibw_ib,
    "osu/ucx4274-osu5.6.2-bw-cuda-cray-ugni.txt": osu_bw_ugni,
    "osu/eessi716-osu7.2-bw-cuda-DD-a100-nvlink.txt": osu_bw_cuda,
    "osu/libfabric11231-osu7.5-bibw-cuda-DD-validation.txt": osu_bibw_cuda_validation,
    "osu/ompi12318-osu7.3-reduce-cuda-full.txt": osu_reduce_full,
    "osu/libfabric-cray859-osu5.0-latency-aries.txt": osu_latency_aries,
    "osu/aws-pcluster7035-osu5.7.1-mbw_mr-48pairs-efa.txt": osu_mbw_mr,
    "perftest/ucx8851-read_bw-a-ib.txt": perftest_read_bw,
    "perftest/perftest132-write_bw-a-gbits-ib.txt": perftest_write_bw_gbits,
    "perftest/perftest273-write_bw-D60-gbits.txt": perftest_duration_bw,
    "perftest/perftest132-server-couldnt-read-remote-address.txt": perftest_read_keys_server,
    "perftest/perftest132-client-failed-to-modify-qp.txt": perftest_modify_qp_client,
    "perftest/sparkrdma31-ib_read_bw-server-couldnt-read-remote-address.txt":
        perftest_read_keys_after_header,
    "perftest/perftest228-couldnt-connect.txt": perftest_no_server,
    "ucx_perftest/ucx10649-tag_bw-thread-and-final.txt": ucx_perftest_final_row,
    "ucx_perftest/rocm-docs-ucx-old-table-put_lat.txt": ucx_perftest_old_table,
    "ucx_info/hiroyuki-sato-ucx1.7-ucx_info-d.txt": ucx_info_old_layout,
    "ucx_info/ucx6264-ompi4.0.2-ucx_info-d-mlx5-old-layout.txt":
        ucx_info_one_transport_two_devices,
    "ucx_log/ucx-faq-osu_bw-cuda-ep_cfg.txt": ucx_log_faq_cuda,
    "ucx_log/ompi9080-parsec-4nodes-rc_mlx5.txt": ucx_log_four_nodes,
    "ucx_log/ompi6883-one-host-self-cma.txt": ucx_log_loopback_only,
    "ucx_log/parthenon1260-jsc-cuda_ipc-rc_mlx5.txt": ucx_log_gpu_nodes,
    "ompi/ompi7460-smcuda-btl-verbose.txt": ompi_smcuda,
    "ethtool/ethq8-mlx5_core-ethtool-S.txt": ethtool_mlx5,
    "ethtool/ethq6-bnx2x-ethtool-S-per-queue.txt": ethtool_per_queue,
    "gpu/ompi12048-ompi_info-cuda-false.txt": gpu_ompi_without_cuda,
    "gpu/ucx9338-ucx_perftest-h-cuda-loaded.txt": gpu_perftest_help_cuda,
    "gpu/ucx9338-ucx_perftest-h-cuda-not-loaded.txt": gpu_perftest_help_host_only,
    _H100 + "ucx1.22-cu13-ucx_info-d.txt": gpu_h100_ucx_info,
    _H100 + "ompi4.1.4-ompi_info-cuda-true.txt": gpu_h100_ompi_with_cuda,
    _H100 + "osu5.9-latency-cuda-DD-pml-ucx-lanes.txt": gpu_h100_latency_dd_ucx,
    _H100 + "osu5.9-bw-cuda-DD-ob1-smcuda-verbose.txt": gpu_h100_bw_dd_smcuda,
    _H100 + "osu5.9-bw-cuda-HD-pml-ucx.txt": gpu_h100_bw_hd,
    _H100 + "osu5.9-allreduce-cuda-pml-ucx.txt": gpu_h100_allreduce,
    _H100 + "ucx_perftest-tag_bw-cuda-tcp-lanes.txt": gpu_h100_perftest_tcp,
    "ucx_info/ucx9908-ucx1.16-cuda-gdrcopy-ucx_info-d-first-part.txt": ucx_info_cuda_build,
    "ucx_perftest/ucx4587-old-table-final-only-tag_lat-rocm.txt":
        ucx_perftest_old_table_final_only,
    _MGPM7 + "cuda-mpiname-a.txt": mvapich2_mpiname,
    _MGPM7 + "all-parameters-qkey-to-eager-part.txt": mvapich2_all_parameters_part,
    _MGPM7 + "cuda-parameters-end-and-run-part.txt": mvapich2_gdr_parameters_part,
    "mvapich2/kisti-nurion-mvapich2-x2.3.3-psm2-knl-show-env-info.txt": mvapich2_x_psm2,
    "slurm/fabreg-cluster-4nodes-2partitions-scontrol-show-partition.txt": slurm_partitions,
    "slurm/fabreg-cluster-4nodes-drained-node2-scontrol-show-node.txt":
        slurm_nodes_with_a_drained_one,
}


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_real_output(row):
    assert (REAL / row["file"]).is_file(), f"INDEX.md lists a missing file: {row['file']}"
    assert row["source"].strip(), row["file"]
    assert row["file"] in EXPECTATIONS, f"no expectations for {row['file']}"
    EXPECTATIONS[row["file"]]()


def test_index_lists_every_file_once():
    listed = [r["file"] for r in ROWS]
    assert len(listed) == len(set(listed))
    # A folder with an index of its own (perflogs/: test_real_perflogs.py) is listed there.
    own_index = [p.parent for p in REAL.rglob("INDEX.md") if p.parent != REAL]
    on_disk = sorted(str(p.relative_to(REAL)) for p in REAL.rglob("*") if p.is_file()
                     and p.name != "INDEX.md"
                     and not any(d in p.parents for d in own_index))
    assert sorted(listed) == on_disk
    assert len(listed) >= 25


def test_every_parser_and_the_verification_meet_real_outputs():
    parsers_dir = Path(t.__file__).parent / "parsers"
    parsers = {p.stem for p in parsers_dir.glob("*.py") if p.stem != "__init__"}
    covered = {word for r in ROWS for word in r["parser"].split()}
    # inventory and transport_log are what the transport module reads them with.
    assert parsers - OWN_FORMATS <= covered, parsers - OWN_FORMATS - covered
    assert "verify" in covered
    assert OWN_FORMATS <= parsers  # probes: fabreg's own programs print that format

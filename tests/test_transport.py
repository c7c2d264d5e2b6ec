"""fabreg.run.transport: the (MPI, transport) mapping, impossible combinations, availability, and
verification against real UCX / Open MPI output (golden files and live runs)."""

from __future__ import annotations

import pytest

from fabreg.errors import FabregError
from fabreg.run import transport as t
from fabreg.run.parsers.inventory import hydra_device, ucx_transports
from fabreg.run.parsers.transport_log import (
    UcxLane,
    evidence_hosts,
    mvapich2_no_hca,
    mvapich2_report,
    ob1_btls,
    ucx_lanes,
)

OMPI4 = t.Inventory("openmpi", mpi_version=(4, 1, 4))
OMPI5 = t.Inventory("openmpi", mpi_version=(5, 0, 3))

# (mpi, transport, nodes, ranks/node) -> (launcher options for Open MPI's mpirun, environment)
EXACT = {
    ("openmpi", "ucx_rc", 2, 1): (
        ["--mca", "pml", "ucx", "--mca", "btl_base_verbose", "100",
         "-x", "UCX_TLS", "-x", "UCX_LOG_LEVEL"],
        {"UCX_TLS": "rc,self", "UCX_LOG_LEVEL": "info"}),
    ("openmpi", "ucx_ud", 2, 1): (
        ["--mca", "pml", "ucx", "--mca", "btl_base_verbose", "100",
         "-x", "UCX_TLS", "-x", "UCX_LOG_LEVEL"],
        {"UCX_TLS": "ud,self", "UCX_LOG_LEVEL": "info"}),
    ("openmpi", "ucx_dc", 2, 1): (
        ["--mca", "pml", "ucx", "--mca", "btl_base_verbose", "100",
         "-x", "UCX_TLS", "-x", "UCX_LOG_LEVEL"],
        {"UCX_TLS": "dc_x,self", "UCX_LOG_LEVEL": "info"}),
    ("openmpi", "tcp", 2, 1): (
        ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any",
         "--mca", "btl_base_verbose", "100", "-x", "UCX_TLS", "-x", "UCX_LOG_LEVEL"],
        {"UCX_TLS": "tcp,self", "UCX_LOG_LEVEL": "info"}),
    ("openmpi", "tcp_ob1", 2, 1): (
        ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_base_verbose", "100",
         "-x", "UCX_LOG_LEVEL"],
        {"UCX_LOG_LEVEL": "info"}),
    ("openmpi", "shm", 1, 2): (
        ["--mca", "pml", "ob1", "--mca", "btl", "vader,self", "--mca", "btl_base_verbose", "100",
         "-x", "UCX_LOG_LEVEL"],
        {"UCX_LOG_LEVEL": "info"}),
    ("mpich", "ucx_rc", 2, 1): ([], {"UCX_TLS": "rc,self", "UCX_LOG_LEVEL": "info"}),
    ("mpich", "ucx_ud", 2, 1): ([], {"UCX_TLS": "ud,self", "UCX_LOG_LEVEL": "info"}),
    ("mpich", "ucx_dc", 2, 1): ([], {"UCX_TLS": "dc_x,self", "UCX_LOG_LEVEL": "info"}),
    ("mpich", "tcp", 2, 1): ([], {"UCX_TLS": "tcp,self", "UCX_LOG_LEVEL": "info"}),
    # one node: hydra starts its proxy itself, not through srun (transport.ONE_NODE_HYDRA)
    ("mpich", "shm", 1, 2): ([], {"UCX_TLS": "sm,self", "UCX_LOG_LEVEL": "info",
                                  "HYDRA_LAUNCHER": "fork"}),
    ("mvapich2", "ucx_rc", 2, 1): (
        [], {"MV2_USE_ONLY_UD": "0", "MV2_USE_UD_HYBRID": "0", "MV2_SHOW_ENV_INFO": "2"}),
    ("mvapich2", "ucx_ud", 2, 1): ([], {"MV2_USE_ONLY_UD": "1", "MV2_SHOW_ENV_INFO": "2"}),
    ("mvapich2", "tcp", 2, 1): ([], {"MV2_SHOW_ENV_INFO": "2"}),
    ("mvapich2", "shm", 1, 2): ([], {"MV2_USE_SHARED_MEM": "1", "MV2_SHOW_ENV_INFO": "2",
                                     "HYDRA_LAUNCHER": "fork"}),
}


def test_every_supported_pair_has_an_exact_expectation():
    pairs = {(mpi, tr) for mpi, trs in t.SUPPORTED.items() for tr in trs}
    assert pairs == {(mpi, tr) for mpi, tr, _, _ in EXACT}


@pytest.mark.parametrize("key", sorted(EXACT), ids=lambda k: f"{k[0]}-{k[1]}")
def test_exact_launch_options_and_environment(key):
    mpi, transport, nodes, rpn = key
    options, env = EXACT[key]
    inventory = OMPI4 if mpi == "openmpi" else t.Inventory(mpi)
    spec = t.launch_spec(mpi, transport, nodes=nodes, ranks_per_node=rpn, inventory=inventory)
    style = t.LAUNCHER_MPIRUN if mpi == "openmpi" else t.LAUNCHER_ENV
    assert spec.options(style) == options
    assert spec.environment(style) == env


def test_openmpi_under_another_launcher_gets_mca_parameters_as_environment():
    spec = t.launch_spec("openmpi", "tcp_ob1", nodes=2, inventory=OMPI4)
    assert spec.options(t.LAUNCHER_ENV) == []
    assert spec.environment(t.LAUNCHER_ENV) == {
        "UCX_LOG_LEVEL": "info", "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "tcp,self",
        "OMPI_MCA_btl_base_verbose": "100"}


def test_openmpi5_shared_memory_btl_is_sm():
    spec = t.launch_spec("openmpi", "shm", nodes=1, ranks_per_node=4, inventory=OMPI5)
    assert ("btl", "sm,self") in spec.mca
    # ompi_info's component list wins over the version number
    listed = t.Inventory("openmpi", ompi_components=frozenset({("btl", "sm"), ("pml", "ob1")}))
    assert ("btl", "sm,self") in t.launch_spec("openmpi", "shm", nodes=1, ranks_per_node=2,
                                               inventory=listed).mca


def test_open_mpi_before_4_1_gets_no_pml_ucx_tls():
    old = t.Inventory("openmpi", mpi_version=(4, 0, 7))
    spec = t.launch_spec("openmpi", "tcp", nodes=2, inventory=old)
    assert spec.mca == (("pml", "ucx"), ("btl_base_verbose", "100"))


def test_ranks_sharing_a_node_keep_shared_memory_next_to_the_transport():
    spec = t.launch_spec("mpich", "tcp", nodes=4, ranks_per_node=2)
    assert spec.environment(t.LAUNCHER_ENV)["UCX_TLS"] == "tcp,sm,self"
    ob1 = t.launch_spec("openmpi", "tcp_ob1", nodes=2, ranks_per_node=2, inventory=OMPI4)
    assert ("btl", "tcp,vader,self") in ob1.mca


def test_accelerated_ucx_aliases_when_ucx_has_mlx5():
    mlx5 = {"rc_mlx5": ("mlx5_0:1",), "ud_mlx5": ("mlx5_0:1",), "rc_verbs": ("mlx5_0:1",)}
    inv = t.Inventory("mpich", ucx=mlx5)
    assert t.launch_spec("mpich", "ucx_rc", nodes=2, inventory=inv).env[0] == (
        "UCX_TLS", "rc_x,self")
    assert t.launch_spec("mpich", "ucx_ud", nodes=2, inventory=inv).env[0] == (
        "UCX_TLS", "ud_x,self")
    verbs = t.Inventory("mpich", ucx={"rc_verbs": ("qib0:1",)})
    assert t.launch_spec("mpich", "ucx_rc", nodes=2, inventory=verbs).env[0] == (
        "UCX_TLS", "rc,self")


def test_partition_devices_become_ucx_net_devices_and_btl_tcp_if_include():
    net = t.NetConfig.from_extras({"rdma_devices": ["mlx5_0:1"], "tcp_interfaces": "fab0"})
    rc = t.launch_spec("openmpi", "ucx_rc", nodes=2, net=net, inventory=OMPI4)
    assert rc.environment(t.LAUNCHER_MPIRUN)["UCX_NET_DEVICES"] == "mlx5_0:1"
    assert "-x" in rc.options(t.LAUNCHER_MPIRUN) and "UCX_NET_DEVICES" in rc.options("mpirun")
    tcp = t.launch_spec("mpich", "tcp", nodes=2, net=net)
    assert tcp.environment(t.LAUNCHER_ENV)["UCX_NET_DEVICES"] == "fab0"
    ob1 = t.launch_spec("openmpi", "tcp_ob1", nodes=2, net=net, inventory=OMPI4)
    assert ("btl_tcp_if_include", "fab0") in ob1.mca
    mv2 = t.launch_spec("mvapich2", "ucx_ud", nodes=2, net=net)
    assert dict(mv2.env)["MV2_IBA_HCA"] == "mlx5_0"
    shm = t.launch_spec("mpich", "shm", nodes=1, ranks_per_node=2, net=net)
    assert "UCX_NET_DEVICES" not in dict(shm.env)


def test_bad_partition_devices_are_named():
    with pytest.raises(FabregError, match=r"partition: extras\['tcp_interfaces'\]: give a list"):
        t.NetConfig.from_extras({"tcp_interfaces": "eth0,eth1"})
    with pytest.raises(FabregError, match=r"extras\['rdma_devices'\]: expected a name"):
        t.NetConfig.from_extras({"rdma_devices": 3})


def test_verification_switches_can_be_left_out():
    spec = t.launch_spec("mpich", "tcp", nodes=2, verify=False)
    assert spec.environment(t.LAUNCHER_ENV) == {"UCX_TLS": "tcp,self"}


@pytest.mark.parametrize("mpi,transport,nodes,rpn,message", [
    ("openmpi", "shm", 2, 1, "shm works only within one node, not across 2 nodes"),
    ("mpich", "shm", 4, 2, "shm works only within one node"),
    ("openmpi", "tcp", 1, 2, "tcp is an inter-node transport: it needs 2 or more nodes, not 1"),
    ("mpich", "ucx_rc", 1, 4, "ucx_rc is an inter-node transport"),
    ("mvapich2", "ucx_ud", 1, 2, "ucx_ud is an inter-node transport"),
    ("mpich", "tcp_ob1", 2, 1, "tcp_ob1 is Open MPI's ob1 PML with its TCP BTL; mpich has no"),
    ("mvapich2", "tcp_ob1", 2, 1, "mvapich2 has no such path"),
    ("mvapich2", "ucx_dc", 2, 1, "mvapich2 has no DC transport"),
    ("openmpi", "shm", 1, 1, "at least 2 ranks"),
    ("intelmpi", "tcp", 2, 1, "unknown MPI 'intelmpi'"),
    ("openmpi", "infiniband", 2, 1, "unknown transport 'infiniband'"),
    ("openmpi", "tcp", 0, 1, "must be >= 1"),
])
def test_impossible_combinations_are_rejected(mpi, transport, nodes, rpn, message):
    assert message in t.combination_problem(mpi, transport, nodes, rpn)
    with pytest.raises(FabregError, match="node"):
        t.launch_spec(mpi, transport, nodes=nodes, ranks_per_node=rpn)


def test_every_valid_combination_is_accepted():
    for mpi, transports in t.SUPPORTED.items():
        for transport in transports:
            nodes = 1 if t.TRANSPORTS[transport] == t.INTRA_NODE else 2
            assert t.combination_problem(mpi, transport, nodes, 2) is None
            assert t.combination_problem(mpi, transport, nodes * 8, 2) is None or nodes == 1


@pytest.mark.parametrize("mpi,argv,style", [
    ("openmpi", ["mpirun.openmpi", "-np", "{num_tasks}"], "mpirun"),
    ("openmpi", ["/opt/ompi/bin/mpiexec", "-n", "2"], "mpirun"),
    ("openmpi", ["srun", "--mpi=pmix"], "env"),
    ("openmpi", None, "env"),
    ("mpich", ["mpiexec.mpich", "-n", "2"], "env"),
    ("mvapich2", ["mpirun"], "env"),
])
def test_launcher_style(mpi, argv, style):
    assert t.launcher_style(mpi, argv) == style


# --- parsers and verification on real outputs ---------------------------------------------


def _golden(golden, name):
    return (golden / "osu-7.2" / name).read_text()


def test_ucx_lanes_from_real_info_logs(golden):
    tcp = ucx_lanes(_golden(golden, "openmpi-ucx-tcp-loginfo-osu_latency.txt"))
    # ep_cfg[0] (each process's endpoint to itself: self/memory0 first) is left out.
    assert tcp == [UcxLane("tcp", "br0"), UcxLane("tcp", "lo")]
    shm = ucx_lanes(_golden(golden, "openmpi-ucx-shm-loginfo-osu_latency.txt"))
    assert [str(lane) for lane in shm] == ["sysv/memory", "cma/memory"]


def test_ucx_lanes_newer_log_format_and_non_tag_groups():
    # UCX >= 1.14 prints "<context> <scope> cfg#N"; MPICH's lines carry rma/am groups too.
    text = ("[1701292112.829711] [n1:162239:0] ucp_worker.c:1855 UCX  INFO    "
            "ucp_context_0 inter-node cfg#3 tag(rc_mlx5/mlx5_0:1 rc_mlx5/mlx5_0:1) "
            "rma(rc_mlx5/mlx5_0:1) am(rc_mlx5/mlx5_0:1) wireup(ud_mlx5/mlx5_0:1)\n"
            "[1] [n1:1:0] ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: "
            "tag(tcp/lo) rma_am(tcp/lo) am(tcp/lo tcp/eth0)\n"
            "8     1.23\n")
    assert [str(x) for x in ucx_lanes(text)] == ["rc_mlx5/mlx5_0:1", "tcp/lo"]


def test_ob1_btls_from_real_verbose_output(golden):
    assert ob1_btls(_golden(golden, "openmpi-ob1-tcp-btlverbose-osu_latency.txt")) == [
        "self", "tcp"]


def verify1(spec, text):
    """Verify a golden output: those runs put both ranks on one host, so no placement check."""
    return t.verify(spec, text, placement=False)


def test_verify_real_logs(golden):
    ucx_tcp = _golden(golden, "openmpi-ucx-tcp-loginfo-osu_latency.txt")
    ucx_shm = _golden(golden, "openmpi-ucx-shm-loginfo-osu_latency.txt")
    ob1_tcp = _golden(golden, "openmpi-ob1-tcp-btlverbose-osu_latency.txt")
    tcp = t.launch_spec("openmpi", "tcp", nodes=2, inventory=OMPI4)
    v = verify1(tcp, ucx_tcp)
    assert (v.ok, v.used) == (True, "tcp")
    assert v.evidence == ("UCX tag lanes: tcp/br0, tcp/lo",)

    v = verify1(tcp, ob1_tcp)
    assert not v.ok and v.used == "tcp_ob1"
    assert v.problem == ("asked for tcp but traffic went over tcp_ob1 (ob1 BTLs: self, tcp)")

    ob1 = t.launch_spec("openmpi", "tcp_ob1", nodes=2, inventory=OMPI4)
    assert verify1(ob1, ob1_tcp).ok
    v = verify1(ob1, ucx_tcp)
    assert not v.ok and "asked for tcp_ob1 but traffic went over tcp (UCX tag lanes" in v.problem

    shm = t.launch_spec("mpich", "shm", nodes=1, ranks_per_node=2)
    assert verify1(shm, ucx_shm).used == "shm" and verify1(shm, ucx_shm).ok
    assert "asked for shm but traffic went over tcp" in verify1(shm, ucx_tcp).problem


def test_failed_run_has_no_evidence(golden):
    # This golden run never started (mpiexec missing): nothing may be verified from it.
    text = _golden(golden, "mpich-ucx-tcp-loginfo-osu_latency.txt")
    v = verify1(t.launch_spec("mpich", "tcp", nodes=2), text)
    assert not v.ok and v.used == ""
    assert v.problem.startswith("no evidence of the transport used: UCX endpoint lanes")


def test_a_peer_line_forwarded_into_another_line_still_names_its_host():
    """MPICH's launcher put node2's only peer line after OSU's ``# Datatype:`` line (a
    healthy 4-node run): node2 still counts as a host that sent over the transport."""
    text = ("[1795797471.108022] [node1:8515 :0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: "
            "tag(tcp/fab0) rma_am(tcp/fab0) am(tcp/fab0)\n"
            "# Datatype: MPI_CHAR.[1795797471.108142] [node2:8516 :0]      ucp_worker.c:1763 UCX"
            "  INFO    ep_cfg[0]: tag(tcp/fab0) rma_am(tcp/fab0) am(tcp/fab0)\n")
    assert evidence_hosts(text) == ["node1", "node2"]


def test_shared_nodes_allow_shm_next_to_the_inter_node_transport(golden):
    both = (_golden(golden, "openmpi-ucx-tcp-loginfo-osu_latency.txt")
            + _golden(golden, "openmpi-ucx-shm-loginfo-osu_latency.txt"))
    shared = t.launch_spec("mpich", "tcp", nodes=2, ranks_per_node=2)
    v = verify1(shared, both)
    assert v.ok and v.used == "tcp+shm"
    alone = t.launch_spec("mpich", "tcp", nodes=2, ranks_per_node=1)
    assert verify1(alone, both).problem.startswith("asked for tcp but traffic went over tcp+shm")


def test_lanes_outside_the_partition_devices_fail(golden):
    text = _golden(golden, "openmpi-ucx-tcp-loginfo-osu_latency.txt")
    spec = t.launch_spec("mpich", "tcp", nodes=2, net=t.NetConfig(tcp_interfaces=("br0",)))
    v = verify1(spec, text)
    assert v.problem == "tcp ran on tcp/lo, outside the partition's devices (br0)"
    spec = t.launch_spec("mpich", "tcp", nodes=2, net=t.NetConfig(tcp_interfaces=("br0", "lo")))
    assert verify1(spec, text).ok


def test_placement_across_nodes_is_part_of_verification(golden):
    text = _golden(golden, "openmpi-ucx-tcp-loginfo-osu_latency.txt")
    spec = t.launch_spec("openmpi", "tcp", nodes=2, inventory=OMPI4)
    v = t.verify(spec, text)
    assert v.problem == (
        "the ranks ran on 1 host(s) (vm), not on 2 nodes: tcp was not exercised between nodes "
        "(check the launcher's placement options)")
    # The same log as two hosts would print it (rank 1's process on node2).
    two_hosts = text.replace("[vm:11256:0]", "[node2:11256:0]")
    assert t.verify(spec, two_hosts).ok
    ob1 = _golden(golden, "openmpi-ob1-tcp-btlverbose-osu_latency.txt")
    spec = t.launch_spec("openmpi", "tcp_ob1", nodes=2, inventory=OMPI4)
    assert "ran on 1 host(s) (vm)" in t.verify(spec, ob1).problem
    assert t.verify(spec, ob1.replace("[vm:11290]", "[node2:11290]")).ok
    shm = t.launch_spec("mpich", "shm", nodes=1, ranks_per_node=2)
    assert t.verify(shm, _golden(golden, "openmpi-ucx-shm-loginfo-osu_latency.txt")).ok


def test_evidence_hosts_with_padded_pids():
    # As UCX 1.13 printed them on the emulated cluster (pid padded to five columns).
    text = ("[1795242700.174695] [node1:3025 :0]      ucp_worker.c:1763 UCX  INFO    "
            "ep_cfg[1]: tag(tcp/fab0)\n"
            "[1795242700.180047] [node2:13026:0]      ucp_worker.c:1763 UCX  INFO    "
            "ep_cfg[1]: tag(tcp/fab0)\n"
            "[1795242700.180047] [node3:3027 :0]      parser.c:1916 UCX  INFO  UCX_* env\n"
            "[1795242700.174695] [node4:3028 :0]      ucp_worker.c:1763 UCX  INFO    "
            "ep_cfg[0]: tag(self/memory0 tcp/fab0)\n"
            "[node1:04184] mca: bml: Using tcp btl for send to [[23386,1],1] on node node2\n"
            "[node5:04185] mca: bml: Using self btl for send to [[23386,1],2] on node node5\n")
    # node4 printed only its endpoint to itself, node5 only its self BTL: neither is evidence.
    assert evidence_hosts(text) == ["node1", "node2"]
    spec = t.launch_spec("mpich", "tcp", nodes=2)
    assert t.verify(spec, text.split("[node1:04184]")[0]).ok
    no_prefix = "UCX  INFO    ep_cfg[1]: tag(tcp/fab0)\n"
    assert t.verify(spec, no_prefix).problem.startswith("cannot tell which hosts the ranks ran")
    assert t.verify(spec, no_prefix, placement=False).ok


# MVAPICH2 is not installed on the development machines; this text follows the format of
# mv2_print_env_info()/mv2_show_all_params() in MVAPICH2 2.3.7 (src/mpid/ch3/channels/mrail).
_MV2_HEAD = ("\n MVAPICH2-2.3.7 Parameters\n"
             "---------------------------------------------------------------------\n"
             "\tPROCESSOR ARCH NAME            : MV2_ARCH_INTEL_GENERIC\n"
             "\tHCA NAME                       : MV2_HCA_MLX_CX_EDR\n"
             "\tHETEROGENEOUS HCA              : NO\n")
_MV2_IB = ("\tMV2_VBUF_TOTAL_SIZE            : 8192\n"
           "\tMV2_IBA_EAGER_THRESHOLD        : 8192\n")
# mv2_show_all_params() lists every tunable, the InfiniBand ones even on an SMP-only run.
_MV2_TAIL = ("\tMV2_SMP_EAGERSIZE              : 8193\n"
             "\tTuning Table:                  : MV2_ARCH_INTEL_GENERIC MV2_HCA_MLX_CX_EDR\n"
             "---------------------------------------------------------------------\n"
             "\n MVAPICH2 All Parameters\n"
             "\tMV2_IBA_EAGER_THRESHOLD             : 8192\n"
             "\tMV2_USE_UD_HYBRID                   : {hybrid}\n"
             "\tMV2_USE_ONLY_UD                     : {only_ud}\n"
             "---------------------------------------------------------------------\n"
             "# OSU MPI Latency Test v7.2\n"
             "  ignored after the report  : 1\n")


def _mv2(ib: bool, only_ud: int = 0, hybrid: int = 0) -> str:
    return _MV2_HEAD + (_MV2_IB if ib else "") + _MV2_TAIL.format(only_ud=only_ud, hybrid=hybrid)


def test_mvapich2_report_parser():
    report = mvapich2_report("# OSU MPI Latency Test v7.2\n" + _mv2(ib=True, only_ud=1))
    assert report.version == "2.3.7"
    assert report.fields["HCA NAME"] == "MV2_HCA_MLX_CX_EDR"
    assert report.flag("MV2_USE_ONLY_UD") is True and report.flag("MV2_USE_UD_HYBRID") is False
    assert not report.smp_only and report.channel == "mrail"
    assert report.fields["Tuning Table"] == "MV2_ARCH_INTEL_GENERIC MV2_HCA_MLX_CX_EDR"
    assert report.all_params == {"MV2_IBA_EAGER_THRESHOLD": "8192", "MV2_USE_UD_HYBRID": "0",
                                 "MV2_USE_ONLY_UD": "1"}
    # SMP only: the Parameters block has no InfiniBand settings (All Parameters still does).
    smp = mvapich2_report(_mv2(ib=False))
    assert smp.smp_only and smp.channel == "smp"
    assert mvapich2_report("8 1.0\n") is None


def test_verify_mvapich2():
    rc = t.launch_spec("mvapich2", "ucx_rc", nodes=2)
    ud = t.launch_spec("mvapich2", "ucx_ud", nodes=2)
    shm = t.launch_spec("mvapich2", "shm", nodes=1, ranks_per_node=2)
    assert t.verify(rc, _mv2(ib=True)).ok
    assert t.verify(ud, _mv2(ib=True, only_ud=1)).used == "ucx_ud"
    assert t.verify(rc, _mv2(ib=True, only_ud=1)).problem.startswith(
        "asked for ucx_rc but traffic went over ucx_ud (MVAPICH2-2.3.7 report: HCA channel open")
    assert t.verify(rc, _mv2(ib=True, hybrid=1)).used == "ucx_rc+ucx_ud"
    assert t.verify(shm, _mv2(ib=False)).ok
    psm = t.Inventory("mvapich2", mpi_device="ch3:psm", rdma_devices=("hfi1_0",))
    assert t.availability_problem("mvapich2", "ucx_rc", psm) == (
        "MVAPICH2 here is a ch3:psm build (Omni-Path/TrueScale PSM): it has no InfiniBand "
        "verbs channel")
    sock = t.launch_spec("mvapich2", "tcp", nodes=2,
                         inventory=t.Inventory("mvapich2", mpi_device="ch3:sock"))
    assert t.verify(sock, "# OSU MPI Latency Test v7.2\n8 20.1\n").used == "tcp"
    mrail = t.launch_spec("mvapich2", "tcp", nodes=2)
    assert not t.verify(mrail, "8 20.1\n").ok


# --- availability ---------------------------------------------------------------------------


@pytest.fixture
def host_without_rdma(golden):
    """The transports of the golden `ucx_info -d` (a host with no RDMA devices)."""
    text = (golden / "ucx_perftest-1.13" / "ucx_info-d-transports.txt").read_text()
    return {k: tuple(v) for k, v in ucx_transports(text).items()}


def test_ucx_info_parser(host_without_rdma):
    assert host_without_rdma == {"self": ("memory0",), "tcp": ("br0", "lo", "eth0"),
                                 "sysv": ("memory",), "posix": ("memory",), "cma": ("memory",)}


def test_rdma_transports_are_unavailable_without_rdma_devices(host_without_rdma):
    inv = t.Inventory("mpich", ucx=host_without_rdma, mpi_device="ch4:ucx")
    assert t.availability_problem("mpich", "ucx_rc", inv) == (
        "ucx_rc needs UCX transport rc_mlx5 or rc_verbs; `ucx_info -d` here lists only "
        "cma, posix, self, sysv, tcp (no RDMA device)")
    assert "ucx_ud needs UCX transport ud_mlx5 or ud_verbs" in t.availability_problem(
        "mpich", "ucx_ud", inv)
    assert "dc_mlx5" in t.availability_problem("mpich", "ucx_dc", inv)
    assert t.availability_problem("mpich", "tcp", inv) is None
    assert t.availability_problem("mpich", "shm", inv) is None


def test_configured_devices_must_exist(host_without_rdma):
    inv = t.Inventory("mpich", ucx=host_without_rdma)
    net = t.NetConfig(tcp_interfaces=("fab0",))
    assert t.availability_problem("mpich", "tcp", inv, net) == (
        "UCX_NET_DEVICES fab0 (partition extras) not among the tcp devices here (br0, eth0, lo)")


def test_openmpi_components_and_mpich_device_decide():
    ob1_only = t.Inventory("openmpi", ucx={"tcp": ("lo",)},
                           ompi_components=frozenset({("pml", "ob1"), ("btl", "self")}))
    assert t.availability_problem("openmpi", "tcp", ob1_only) == (
        "Open MPI here has no UCX PML (ompi_info lists pml: ob1)")
    assert t.availability_problem("openmpi", "shm", ob1_only) == (
        "Open MPI here has no shared-memory BTL (vader/sm) (ompi_info lists btl: self)")
    assert "no TCP BTL" in t.availability_problem("openmpi", "tcp_ob1", ob1_only)
    ofi = t.Inventory("mpich", ucx={"tcp": ("lo",)}, mpi_device="ch4:ofi")
    assert "MPICH here is built with ch4:ofi" in t.availability_problem("mpich", "tcp", ofi)
    no_ucx = t.Inventory("mpich", ucx=None, ucx_problem="ucx_info not found on PATH")
    assert t.availability_problem("mpich", "shm", no_ucx) == (
        "cannot tell whether UCX offers shm: ucx_info not found on PATH")


def test_mvapich2_availability():
    mrail = t.Inventory("mvapich2", mpi_device="ch3:mrail", rdma_devices=())
    assert t.availability_problem("mvapich2", "ucx_rc", mrail) == (
        "no RDMA device on this host (/sys/class/infiniband is empty or absent)")
    assert "socket build (ch3:sock or ch3:nemesis); this one is ch3:mrail" in (
        t.availability_problem("mvapich2", "tcp", mrail))
    assert t.availability_problem("mvapich2", "shm", mrail) is None
    sock = t.Inventory("mvapich2", mpi_device="ch3:sock", rdma_devices=("mlx5_0",))
    assert t.availability_problem("mvapich2", "tcp", sock) is None
    assert "no InfiniBand channel" in t.availability_problem("mvapich2", "ucx_rc", sock)
    ib = t.Inventory("mvapich2", mpi_device="ch3:mrail", rdma_devices=("mlx5_0",))
    assert t.availability_problem("mvapich2", "ucx_ud", ib) is None
    assert "mlx5_1:1" in t.availability_problem(
        "mvapich2", "ucx_rc", ib, t.NetConfig(rdma_devices=("mlx5_1:1",)))


def test_mvapich2_nemesis_build():
    """ch3:nemesis prints no environment report: its device is the evidence, where it can be."""
    nemesis = t.Inventory("mvapich2", mpi_device="ch3:nemesis", rdma_devices=())
    assert "ch3:nemesis build: it has no InfiniBand channel" in t.availability_problem(
        "mvapich2", "ucx_rc", nemesis)
    assert t.availability_problem("mvapich2", "tcp", nemesis) is None
    tcp = t.launch_spec("mvapich2", "tcp", nodes=2, inventory=nemesis,
                        net=t.NetConfig(tcp_interfaces=("fab0",)))
    assert ("MPIR_CVAR_NEMESIS_NETMOD", "tcp") in tcp.env
    assert ("HYDRA_IFACE", "fab0") in tcp.env  # the netmod refuses an interface name too
    assert t.verify(tcp, "rank output\n").used == "tcp"
    shm = t.launch_spec("mvapich2", "shm", nodes=1, ranks_per_node=2, inventory=nemesis)
    result = t.verify(shm, "")
    assert result.ok and result.used == "shm"
    assert "nemesis' shared-memory queues" in result.evidence[0]
    # Without the device (no mpiname/mpiexec -info answer) there is no evidence at all.
    unknown = t.launch_spec("mvapich2", "shm", nodes=1, ranks_per_node=2)
    assert "no evidence of the transport used" in t.verify(unknown, "").problem


def test_declared_transports_override_detection():
    inv = t.Inventory("openmpi", declared=frozenset({"ucx_rc", "shm"}))
    assert t.availability_problem("openmpi", "ucx_rc", inv) is None
    assert t.availability_problem("openmpi", "tcp", inv) == (
        "tcp is not among the transports the partition declares "
        "(extras['transports']: shm, ucx_rc)")


def test_a_declared_transport_still_needs_a_build_that_carries_it():
    """A partition's extras say what its nodes offer, not what each MPI build can carry: an
    InfiniBand build of MVAPICH2 (ch3:mrail) on a partition that declares tcp is skipped
    before its job (seen on the emulated cluster: it ran, found no HCA and failed), a socket
    build runs it, and a build that names no device is left to the partition's word."""
    declared = frozenset({"shm", "tcp"})
    mrail = t.Inventory("mvapich2", mpi_device="ch3:mrail", declared=declared)
    assert t.availability_problem("mvapich2", "tcp", mrail) == (
        "MVAPICH2 runs TCP only from a socket build (ch3:sock or ch3:nemesis); this one is "
        "ch3:mrail")
    assert t.availability_problem("mvapich2", "shm", mrail) is None
    nemesis = t.Inventory("mvapich2", mpi_device="ch3:nemesis", declared=declared)
    assert t.availability_problem("mvapich2", "tcp", nemesis) is None
    unnamed = t.Inventory("mvapich2", declared=declared)
    assert t.availability_problem("mvapich2", "tcp", unnamed) is None
    ofi = t.Inventory("mpich", mpi_device="ch4:ofi", declared=declared)
    assert "needs a ch4:ucx build" in t.availability_problem("mpich", "tcp", ofi)


def test_detect_on_this_host():
    """The real inventory of this machine: UCX without RDMA, Open MPI with UCX and vader."""
    if not t.shutil.which("ucx_info"):
        pytest.skip("ucx_info not installed")
    inv = t.detect("openmpi", ["mpirun.openmpi"], rdma_sysfs="/nonexistent")
    assert "tcp" in inv.ucx and "self" in inv.ucx
    assert inv.rdma_devices == ()
    if inv.ompi_components is not None:
        assert ("pml", "ob1") in inv.ompi_components
        assert inv.mpi_version and inv.mpi_version >= (4,)
    if not inv.has_ucx("ucx_rc"):
        assert "needs UCX transport rc_mlx5 or rc_verbs" in t.availability_problem(
            "openmpi", "ucx_rc", inv)


def test_ucx_level_helpers_for_other_tools(host_without_rdma):
    """What ucx_perftest-style checks use: UCX_TLS, availability and lane classes, no MPI."""
    inv = t.Inventory("", ucx=host_without_rdma)
    assert t.ucx_tls("tcp") == "tcp,self" and t.ucx_tls("shm") == "sm,self"
    assert t.ucx_tls("ucx_rc", ucx={"rc_mlx5": ("mlx5_0:1",)}) == "rc_x,self"
    with pytest.raises(FabregError, match="'tcp_ob1' is not selected through UCX"):
        t.ucx_tls("tcp_ob1")
    assert t.ucx_problem("tcp", inv) is None
    assert "no RDMA device" in t.ucx_problem("ucx_rc", inv)
    assert [t.ucx_class(n) for n in ("rc_mlx5", "ud_verbs", "dc_mlx5", "tcp", "cma", "self",
                                     "cuda_ipc", "cuda_copy", "gdr_copy", "mm", "rc", "ud",
                                     "ugni_rdma")] == [
        "ucx_rc", "ucx_ud", "ucx_dc", "tcp", "shm", None, "shm", None, None, "shm", "ucx_rc",
        "ucx_ud", "ugni_rdma"]


def test_device_buffers_add_what_each_mpi_needs():
    # UCX FAQ: with UCX_TLS set, GPU memory is recognised only when the cuda transports are named.
    with_gdr = {"rc_mlx5": ("mlx5_0:1",), "cuda_copy": ("cuda",), "cuda_ipc": ("cuda",),
                "gdr_copy": ("gdr_copy",)}
    assert t.ucx_tls("ucx_rc", ucx=with_gdr, buffer="cuda") == "rc_x,cuda_copy,gdr_copy,self"
    assert t.ucx_tls("tcp", with_shm=True, buffer="cuda") == "tcp,sm,cuda_copy,cuda_ipc,self"
    # Two ucx_perftest processes on one H100 host, asked tcp with cuda_ipc allowed: UCX put
    # cuda_ipc beside tcp on the tag lane ("tag(tcp/lo tcp/eth0 cuda_ipc/cuda)"), and the
    # device data never crossed tcp. Without shared memory asked for, no cuda_ipc.
    assert t.ucx_tls("tcp", buffer="cuda") == "tcp,cuda_copy,self"
    assert t.ucx_tls("shm", buffer="host") == "sm,self"
    mpich = t.launch_spec("mpich", "shm", nodes=1, ranks_per_node=2, buffer="cuda")
    assert dict(mpich.env)["UCX_TLS"] == "sm,cuda_copy,cuda_ipc,self"
    ob1 = t.launch_spec("openmpi", "tcp_ob1", nodes=2, ranks_per_node=2, buffer="cuda")
    assert dict(ob1.mca)["btl"] == "tcp,smcuda,self"
    mv2 = t.launch_spec("mvapich2", "ucx_rc", nodes=2, buffer="cuda")
    assert dict(mv2.env)["MV2_USE_CUDA"] == "1"
    assert "MV2_USE_CUDA" not in dict(t.launch_spec("mvapich2", "ucx_rc", nodes=2).env)
    with pytest.raises(FabregError, match="unknown buffer kind 'rocm'"):
        t.launch_spec("mpich", "tcp", nodes=2, buffer="rocm")


def test_the_device_of_a_real_mvapich2_nemesis_build_is_read_from_its_mpiexec_info(golden):
    """Hydra's `mpiexec -info` of MVAPICH2 2.3.7 built by ci/build-mvapich2.sh names the device
    the verification rests on (nemesis prints no environment report)."""
    text = (golden / "mvapich2-2.3.7" / "nemesis-mpiexec-info.txt").read_text()
    assert hydra_device(text) == "ch3:nemesis"
    nemesis = t.Inventory("mvapich2", mpi_device=hydra_device(text), rdma_devices=())
    assert t.availability_problem("mvapich2", "shm", nemesis) is None
    assert "no InfiniBand channel" in t.availability_problem("mvapich2", "ucx_rc", nemesis)


def test_mvapich2_mrail_without_an_hca_is_told_by_its_own_line(golden):
    """MVAPICH2 2.3.7 ch3:mrail on a host without an HCA, made to open its network channel:
    MPI_Init fails at once; the first line that says so is the skip reason."""
    text = (golden / "mvapich2-2.3.7" / "mrail-no-hca-mpi_init.txt").read_text()
    assert mvapich2_no_hca(text) == "[vm:mpi_rank_0][rdma_open_hca] No HCAs found on the system."
    nemesis = (golden / "mvapich2-2.3.7" / "nemesis-shm-osu_bibw-abort.txt").read_text()
    assert mvapich2_no_hca(nemesis) is None


def test_mpich_ch4_and_mvapich2_infiniband_ranks_busy_poll_while_they_wait():
    """What the tail, collective and fan-in checks ask: whose waiting ranks keep their CPU."""
    assert t.busy_polls("mpich", t.Inventory(mpi="mpich", mpi_device="ch4:ucx")) == (
        "MPICH's ch4:ucx device polls for messages without yielding the CPU")
    assert t.busy_polls("mvapich2", t.Inventory(mpi="mvapich2", mpi_device="ch3:mrail")) == (
        "MVAPICH2's ch3:mrail device polls shared memory without yielding the CPU")
    for mpi, device in [("mpich", "ch3:nemesis"), ("mpich", None), ("mvapich2", "ch3:nemesis"),
                        ("openmpi", None)]:
        assert t.busy_polls(mpi, t.Inventory(mpi=mpi, mpi_device=device)) is None

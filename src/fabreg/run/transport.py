"""The one place that maps (MPI, transport) to launch options, decides availability, and verifies.

A *transport* names what carries the traffic between ranks; the perflog's
``transport`` column shows these names (see docs/transports.md for the table):

=========  ==========  ==============================================================
name       scope       meaning
=========  ==========  ==============================================================
ucx_rc     inter-node  RDMA reliable connected (UCX ``rc``/``rc_x``; MVAPICH2's default)
ucx_ud     inter-node  RDMA unreliable datagram (UCX ``ud``/``ud_x``; MVAPICH2 UD-only)
ucx_dc     inter-node  RDMA dynamically connected (UCX ``dc_x``, mlx5 only)
tcp        inter-node  TCP sockets (UCX ``tcp``; MVAPICH2 ch3:sock or ch3:nemesis build)
tcp_ob1    inter-node  TCP through Open MPI's ob1 PML and TCP BTL, no UCX at all
shm        intra-node  shared memory within one node (UCX ``cuda_ipc`` for GPU buffers)
=========  ==========  ==============================================================

Three jobs, one module, so a newcomer finds them together:

1. ``launch_spec``: the launcher options and environment that select a
   transport for one MPI, including the switches that make the MPI report what
   it chose (UCX info logging, ob1 BTL verbose output, MVAPICH2's env report).
2. ``detect`` + ``availability_problem``: whether a partition can run a
   transport at all, with a reason naming what is missing (``ucx_info -d``,
   ``ompi_info``, hydra's ``-info``, RDMA devices).
3. ``verify``: which transport actually carried the traffic, read from that
   output, and why a run fails when it is not the one asked for.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fabreg.errors import FabregError
from fabreg.run.parsers import inventory as inv
from fabreg.run.parsers.transport_log import (
    Mvapich2Report,
    evidence_hosts,
    mvapich2_report,
    ob1_btls,
    ucx_lanes,
)

INTRA_NODE = "intra-node"
INTER_NODE = "inter-node"

#: Every transport with its scope, in the order the matrix lists them.
TRANSPORTS: dict[str, str] = {
    "ucx_rc": INTER_NODE,
    "ucx_ud": INTER_NODE,
    "ucx_dc": INTER_NODE,
    "tcp": INTER_NODE,
    "tcp_ob1": INTER_NODE,
    "shm": INTRA_NODE,
}

MPIS = ("openmpi", "mpich", "mvapich2")

#: Which MPI can select which transport at all (availability on a host is separate).
SUPPORTED: dict[str, tuple[str, ...]] = {
    "openmpi": ("ucx_rc", "ucx_ud", "ucx_dc", "tcp", "tcp_ob1", "shm"),
    "mpich": ("ucx_rc", "ucx_ud", "ucx_dc", "tcp", "shm"),
    "mvapich2": ("ucx_rc", "ucx_ud", "tcp", "shm"),
}

_UNSUPPORTED_WHY = {
    "tcp_ob1": "tcp_ob1 is Open MPI's ob1 PML with its TCP BTL; {mpi} has no such path "
               "(use 'tcp')",
    "ucx_dc": "{mpi} has no DC transport",
}

#: UCX transport names (as ``ucx_info -d`` and the UCX log print them) per fabreg transport.
#: ``cuda_ipc`` moves device buffers between GPUs of one node, so it is shared memory too.
UCX_NAMES: dict[str, tuple[str, ...]] = {
    "ucx_rc": ("rc_mlx5", "rc_verbs"),
    "ucx_ud": ("ud_mlx5", "ud_verbs"),
    "ucx_dc": ("dc_mlx5",),
    "tcp": ("tcp",),
    "shm": ("posix", "sysv", "cma", "xpmem", "knem", "mm", "cuda_ipc"),
}
#: Names older UCX releases print for the same transports (verbs ``rc``/``ud``/``dc``).
_UCX_OLD_NAMES = {"ucx_rc": ("rc",), "ucx_ud": ("ud",), "ucx_dc": ("dc",)}
#: UCX transports that copy memory within one process (to itself, between host and GPU,
#: or through GDRCopy): they carry nothing between ranks, so they are no evidence.
UCX_LOCAL_COPY = ("self", "cuda_copy", "gdr_copy")
#: What ``UCX_TLS`` must add for device (CUDA) buffers, or UCX does not recognise them
#: (UCX FAQ: "must also specify cuda ... for GPU memory support"); ``gdr_copy`` where present,
#: ``cuda_ipc`` only beside shared memory (``ucx_tls``).
UCX_CUDA_TLS = ("cuda_copy", "cuda_ipc")
_UCX_CLASS = {name: t for names_of in (UCX_NAMES, _UCX_OLD_NAMES)
              for t, names in names_of.items() for name in names}


def _ucx_names(transport: str) -> tuple[str, ...]:
    """Every name UCX may print for ``transport``, current ones first."""
    return UCX_NAMES.get(transport, ()) + _UCX_OLD_NAMES.get(transport, ())
#: ``UCX_TLS`` alias per transport: generic, and the mlx5-accelerated one when UCX has it.
_UCX_TLS = {"ucx_rc": ("rc", "rc_x"), "ucx_ud": ("ud", "ud_x"), "ucx_dc": ("dc_x", "dc_x"),
            "tcp": ("tcp", "tcp"), "shm": ("sm", "sm")}
_RDMA = ("ucx_rc", "ucx_ud", "ucx_dc")
_OB1_CLASS = {"tcp": "tcp_ob1", "vader": "shm", "sm": "shm", "smcuda": "shm"}
_MV2_SOCKET_DEVICES = ("ch3:sock", "ch3:nemesis", "ch3:nemesis:tcp")
#: MVAPICH2's shared-memory-and-TCP device (``--with-device=ch3:nemesis``): it prints no
#: environment report; ranks of one node use its shared-memory queues, other nodes its TCP
#: netmod (the only one built), so the build's device is the evidence.
_MV2_NEMESIS = "ch3:nemesis"
#: MVAPICH2's InfiniBand device (OFA-IB-CH3): the build InfiniBand sites run.
_MV2_MRAIL = "ch3:mrail"
_OMPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun", "oshrun")

LAUNCHER_MPIRUN = "mpirun"  # Open MPI's own launcher: --mca options, -x to forward env vars
LAUNCHER_ENV = "env"  # anything else (hydra, srun): everything travels in the environment
#: The MPIs that launch through hydra's ``mpiexec``.
HYDRA_MPIS = frozenset({"mpich", "mvapich2"})
#: Hydra on one node starts its proxy itself, as a child of ``mpiexec``. In a Slurm job its
#: default launcher starts it through ``srun``: a job step whose daemon, not the launch,
#: waits for the ranks, so a launch shorter than the interference meter's sampling interval
#: (a 0.2 s confirmation run) left the ranks' CPU time uncounted, and an MPICH job's
#: confirmation runs read 0.47-0.76 of the host as other work where the job read 0.5 %.
ONE_NODE_HYDRA = ("HYDRA_LAUNCHER", "fork")


def combination_problem(mpi: str, transport: str, nodes: int,
                        ranks_per_node: int = 1) -> str | None:
    """Why (mpi, transport, nodes, ranks per node) can never be a valid run, or None."""
    if mpi not in SUPPORTED:
        return f"unknown MPI {mpi!r} (known: {', '.join(MPIS)})"
    if transport not in TRANSPORTS:
        return f"unknown transport {transport!r} (known: {', '.join(TRANSPORTS)})"
    if transport not in SUPPORTED[mpi]:
        return _UNSUPPORTED_WHY.get(transport, "{mpi} cannot select {transport}").format(
            mpi=mpi, transport=transport)
    if nodes < 1 or ranks_per_node < 1:
        return f"nodes ({nodes}) and ranks per node ({ranks_per_node}) must be >= 1"
    if TRANSPORTS[transport] == INTRA_NODE and nodes != 1:
        return f"{transport} works only within one node, not across {nodes} nodes"
    if TRANSPORTS[transport] == INTER_NODE and nodes < 2:
        return f"{transport} is an inter-node transport: it needs 2 or more nodes, not {nodes}"
    if nodes * ranks_per_node < 2:
        return "a transport needs at least 2 ranks to carry anything"
    return None


def check_combination(mpi: str, transport: str, nodes: int, ranks_per_node: int = 1) -> None:
    """Raise ``FabregError`` for a combination ``combination_problem`` rejects."""
    problem = combination_problem(mpi, transport, nodes, ranks_per_node)
    if problem:
        raise FabregError(f"{mpi} over {transport} on {nodes} node(s): {problem}")


def _names(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) and i for i in items):
        raise FabregError(f"{where}: expected a name or a list of names, got {value!r}")
    for item in items:
        if "," in item or " " in item:
            raise FabregError(f"{where}: give a list instead of {item!r}")
    return tuple(items)


@dataclass(frozen=True)
class NetConfig:
    """The network devices a partition's transports must use (from its ``extras``).

    ``rdma_devices`` (e.g. ``mlx5_0:1``) become ``UCX_NET_DEVICES`` for the RDMA
    transports and ``MV2_IBA_HCA`` for MVAPICH2; ``tcp_interfaces`` (e.g. ``fab0``)
    become ``UCX_NET_DEVICES`` for UCX's TCP and ``btl_tcp_if_include`` for ob1.
    """

    rdma_devices: tuple[str, ...] = ()
    tcp_interfaces: tuple[str, ...] = ()

    @classmethod
    def from_extras(cls, extras: Mapping[str, object], where: str = "partition") -> NetConfig:
        return cls(_names(extras.get("rdma_devices"), f"{where}: extras['rdma_devices']"),
                   _names(extras.get("tcp_interfaces"), f"{where}: extras['tcp_interfaces']"))

    def devices_for(self, transport: str) -> tuple[str, ...]:
        if transport in _RDMA:
            return self.rdma_devices
        if transport in ("tcp", "tcp_ob1"):
            return self.tcp_interfaces
        return ()


@dataclass(frozen=True)
class Inventory:
    """What one partition's software offers; ``None`` means "not detected"."""

    mpi: str
    #: UCX transport -> devices (``ucx_info -d``).
    ucx: Mapping[str, tuple[str, ...]] | None = None
    #: Why ``ucx`` is None.
    ucx_problem: str = "UCX was not probed"
    #: Open MPI components as (framework, name), from ``ompi_info --parsable``.
    ompi_components: frozenset[tuple[str, str]] | None = None
    mpi_version: tuple[int, ...] | None = None
    #: MPICH/MVAPICH2 device (``ch4:ucx``, ``ch3:mrail``, ``ch3:sock``), from hydra ``-info``
    #: or MVAPICH2's ``mpiname -a``.
    mpi_device: str | None = None
    #: RDMA devices of the host (``/sys/class/infiniband``).
    rdma_devices: tuple[str, ...] | None = None
    #: Transports the partition declares (``extras['transports']``); overrides detection.
    declared: frozenset[str] | None = None

    def has_ucx(self, transport: str) -> bool:
        return bool(self.ucx) and any(n in self.ucx for n in _ucx_names(transport))


def ucx_tls(transport: str, *, with_shm: bool = False,
            ucx: Mapping[str, Sequence[str]] | None = None, buffer: str = "host") -> str:
    """The ``UCX_TLS`` value that selects ``transport`` (plus ``self``, and ``sm`` if asked).

    The mlx5-accelerated alias (``rc_x``, ``ud_x``) is used when ``ucx`` (the
    ``ucx_info -d`` inventory) shows the mlx5 transport; else the generic one.
    For ``buffer="cuda"`` the CUDA transports follow (``cuda_copy``, and ``gdr_copy``
    when the inventory lists it): without them UCX takes a device pointer for host
    memory. ``cuda_ipc`` (GPU to GPU within a node) only where shared memory is
    asked for: beside a network transport it would carry the data of two ranks on
    one node itself, and the transport under test would move none of it.
    """
    if transport not in _UCX_TLS:
        raise FabregError(f"transport {transport!r} is not selected through UCX")
    generic, accelerated = _UCX_TLS[transport]
    tls = accelerated if ucx is not None and UCX_NAMES[transport][0] in ucx else generic
    parts = [tls] + (["sm"] if with_shm and transport != "shm" else [])
    if buffer == "cuda":
        shared = transport == "shm" or with_shm
        parts += [tl for tl in UCX_CUDA_TLS if shared or tl != "cuda_ipc"]
        parts += ["gdr_copy"] if ucx is not None and "gdr_copy" in ucx else []
    return ",".join([*parts, "self"])


@dataclass(frozen=True)
class LaunchSpec:
    """How to launch ranks so that they use one transport, and report which they used."""

    mpi: str
    transport: str
    nodes: int
    ranks_per_node: int
    #: Open MPI MCA parameters, in order.
    mca: tuple[tuple[str, str], ...] = ()
    #: Environment variables the ranks need, in order.
    env: tuple[tuple[str, str], ...] = ()
    #: Devices the transport's lanes must be on (empty: any).
    devices: tuple[str, ...] = ()
    #: MPICH/MVAPICH2 device of the build, when known (evidence for MVAPICH2's TCP).
    mpi_device: str | None = None
    #: What verification looks for, in words (for the "no evidence" message).
    evidence_hint: str = ""

    @property
    def shares_nodes(self) -> bool:
        """Ranks on the same node talk over shared memory, whatever the transport."""
        return self.ranks_per_node > 1 and self.transport != "shm"

    def options(self, style: str) -> list[str]:
        """Launcher arguments, placed before the executable."""
        if style != LAUNCHER_MPIRUN:
            return []
        out: list[str] = []
        for name, value in self.mca:
            out += ["--mca", name, value]
        for name, _ in self.env:
            out += ["-x", name]
        return out

    def environment(self, style: str) -> dict[str, str]:
        """Environment of the job; MCA parameters travel here unless mpirun takes them."""
        env = dict(self.env)
        if style != LAUNCHER_MPIRUN:
            env.update({f"OMPI_MCA_{name}": value for name, value in self.mca})
        return env


def launcher_style(mpi: str, argv: Sequence[str] | None) -> str:
    """``mpirun`` when Open MPI's own launcher starts the ranks, else ``env``."""
    if mpi == "openmpi" and argv:
        base = os.path.basename(str(argv[0]))
        if base.startswith(_OMPI_LAUNCHERS):
            return LAUNCHER_MPIRUN
    return LAUNCHER_ENV


def launch_spec(mpi: str, transport: str, *, nodes: int, ranks_per_node: int = 1,
                net: NetConfig | None = None, inventory: Inventory | None = None,
                verify: bool = True, buffer: str = "host") -> LaunchSpec:
    """The launch options and environment that run ``mpi`` over ``transport``.

    Raises ``FabregError`` for a combination that can never run (see
    ``combination_problem``). With ``ranks_per_node > 1`` an inter-node
    transport keeps shared memory for ranks on the same node, as production
    jobs do; verification then accepts ``shm`` next to the transport asked for.
    ``buffer="cuda"`` (device buffers) adds what each MPI needs to take them:
    UCX's CUDA transports, Open MPI's ``smcuda`` BTL, ``MV2_USE_CUDA=1``.
    """
    check_combination(mpi, transport, nodes, ranks_per_node)
    if buffer not in ("host", "cuda"):
        raise FabregError(f"unknown buffer kind {buffer!r} (known: host, cuda)")
    net = net or NetConfig()
    builder = {"openmpi": _openmpi, "mpich": _mpich, "mvapich2": _mvapich2}[mpi]
    mca, env, hint = builder(transport, ranks_per_node > 1, net, inventory or Inventory(mpi),
                             buffer)
    if verify:
        if mpi == "openmpi":
            mca.append(("btl_base_verbose", "100"))
            env.append(("UCX_LOG_LEVEL", "info"))
        elif mpi == "mpich":
            env.append(("UCX_LOG_LEVEL", "info"))
        else:
            env.append(("MV2_SHOW_ENV_INFO", "2"))
    if mpi in HYDRA_MPIS and nodes == 1:
        env.append(ONE_NODE_HYDRA)
    devices = net.devices_for(transport) if hint.startswith("UCX") else ()
    return LaunchSpec(mpi, transport, nodes, ranks_per_node, tuple(mca), tuple(env),
                      devices, inventory.mpi_device if inventory else None, hint)


_Built = tuple[list[tuple[str, str]], list[tuple[str, str]], str]
_UCX_HINT = "UCX endpoint lanes (UCX_LOG_LEVEL=info: 'ep_cfg[N]: tag(...)')"
_OB1_HINT = "ob1 BTL selection (btl_base_verbose 100: 'mca: bml: Using <btl> btl')"
_MV2_HINT = ("MVAPICH2's environment report (MV2_SHOW_ENV_INFO=2), or a ch3:sock or "
             "ch3:nemesis device named by `mpiname -a` or `mpiexec -info`")


def _ucx_env(transport: str, shared: bool, net: NetConfig,
             inventory: Inventory, buffer: str) -> list[tuple[str, str]]:
    env = [("UCX_TLS", ucx_tls(transport, with_shm=shared, ucx=inventory.ucx, buffer=buffer))]
    devices = net.devices_for(transport)
    if devices:
        env.append(("UCX_NET_DEVICES", ",".join(devices)))
    return env


def _openmpi(transport: str, shared: bool, net: NetConfig, inventory: Inventory,
             buffer: str) -> _Built:
    version = inventory.mpi_version
    if transport in ("tcp_ob1", "shm"):
        # Open MPI 4 calls its shared-memory BTL vader; Open MPI 5 renamed it sm.
        shm_btl = "sm" if version and version >= (5,) else "vader"
        comps = inventory.ompi_components or frozenset()
        if ("btl", "vader") in comps or ("btl", "sm") in comps:
            shm_btl = "vader" if ("btl", "vader") in comps else "sm"
        if buffer == "cuda":
            shm_btl = "smcuda"  # ob1's only shared-memory path for device buffers
        if transport == "shm":
            btls = [shm_btl, "self"]
        else:
            btls = ["tcp"] + ([shm_btl] if shared else []) + ["self"]
        mca = [("pml", "ob1"), ("btl", ",".join(btls))]
        if transport == "tcp_ob1" and net.tcp_interfaces:
            mca.append(("btl_tcp_if_include", ",".join(net.tcp_interfaces)))
        return mca, [], _OB1_HINT
    mca = [("pml", "ucx")]
    if transport == "tcp" and (version is None or version >= (4, 1)):
        # Open MPI's UCX PML only accepts RDMA devices unless told otherwise.
        mca += [("pml_ucx_tls", "any"), ("pml_ucx_devices", "any")]
    return mca, _ucx_env(transport, shared, net, inventory, buffer), _UCX_HINT


def _mpich(transport: str, shared: bool, net: NetConfig, inventory: Inventory,
           buffer: str) -> _Built:
    # Debian's MPICH is ch4:ucx: UCX_TLS alone selects the transport, shm included.
    return [], _ucx_env(transport, shared, net, inventory, buffer), _UCX_HINT


def _mvapich2(transport: str, shared: bool, net: NetConfig, inventory: Inventory,
              buffer: str) -> _Built:
    hca = [("MV2_IBA_HCA", ":".join(d.split(":")[0] for d in net.rdma_devices))] \
        if net.rdma_devices else []
    if transport == "ucx_rc":
        env = [("MV2_USE_ONLY_UD", "0"), ("MV2_USE_UD_HYBRID", "0"), *hca]
    elif transport == "ucx_ud":
        env = [("MV2_USE_ONLY_UD", "1"), *hca]
    elif transport == "shm":
        env = [("MV2_USE_SHARED_MEM", "1")]
    elif (inventory.mpi_device or "").startswith(_MV2_NEMESIS):
        # tcp on a nemesis build: its TCP netmod, on the partition's interface if it names one.
        # Hydra tells the ranks their address (MPIR_CVAR_CH3_INTERFACE_HOSTNAME), and the
        # netmod refuses an interface name beside it: so hydra picks the interface.
        env = [("MPIR_CVAR_NEMESIS_NETMOD", "tcp")]
        if net.tcp_interfaces:
            env.append(("HYDRA_IFACE", net.tcp_interfaces[0]))
    else:  # tcp on ch3:sock: a socket-channel build has nothing to select
        env = []
    if buffer == "cuda":
        env.append(("MV2_USE_CUDA", "1"))  # off by default in MVAPICH2(-GDR)
    return [], env, _MV2_HINT


# --- availability -------------------------------------------------------------------------


@functools.cache
def _run(argv: tuple[str, ...]) -> tuple[int, str]:
    """Run a short inventory command once per session; (exit status, output)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return 127, str(err)
    return proc.returncode, proc.stdout + proc.stderr


def _sibling(launcher: str | None, tool: str) -> str | None:
    """``tool`` next to the launcher (same install), else on PATH."""
    if launcher:
        found = shutil.which(launcher)
        if found:
            candidate = Path(found).parent / tool
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return shutil.which(tool)


def detect(mpi: str = "", launcher_argv: Sequence[str] | None = None, *,
           declared: Sequence[str] | None = None,
           rdma_sysfs: str = "/sys/class/infiniband") -> Inventory:
    """Probe this host for what ``mpi`` and UCX offer (commands run once per session).

    Without ``mpi`` only UCX and the RDMA devices are probed (for UCX-level tools).
    """
    launcher = str(launcher_argv[0]) if launcher_argv else None
    ucx: dict[str, tuple[str, ...]] | None = None
    ucx_problem = ""
    tool = shutil.which("ucx_info")
    if tool is None:
        ucx_problem = "ucx_info not found on PATH (install UCX's tools, e.g. ucx-utils)"
    else:
        status, out = _run((tool, "-d"))
        if status != 0:
            first = out.strip().splitlines()[:1]
            ucx_problem = f"`ucx_info -d` failed (exit {status}): {first[0] if first else ''}"
        else:
            ucx = {t: tuple(d) for t, d in inv.ucx_transports(out).items()}
    components = version = device = None
    if mpi == "openmpi":
        ompi_info = _sibling(launcher, "ompi_info")
        if ompi_info:
            status, out = _run((ompi_info, "--parsable"))
            if status == 0:
                components = frozenset(inv.ompi_components(out))
                version = inv.ompi_version(out)
    else:
        # MVAPICH2's `mpiname -a` names the device whatever the launcher (mpirun_rsh, srun).
        mpiname = _sibling(launcher, "mpiname") if mpi == "mvapich2" else None
        if mpiname:
            status, out = _run((mpiname, "-a"))
            if status == 0:
                device = inv.hydra_device(out)
        if device is None and launcher and os.path.basename(launcher).startswith("mpiexec"):
            status, out = _run((launcher, "-info"))
            if status == 0:
                device = inv.hydra_device(out)
    rdma = tuple(sorted(os.listdir(rdma_sysfs))) if os.path.isdir(rdma_sysfs) else ()
    return Inventory(mpi, ucx, ucx_problem, components, version, device, rdma,
                     frozenset(declared) if declared is not None else None)


def availability_problem(mpi: str, transport: str, inventory: Inventory,
                         net: NetConfig | None = None) -> str | None:
    """Why ``mpi`` cannot run ``transport`` on the partition ``inventory`` describes, or None."""
    net = net or NetConfig()
    if inventory.declared is not None:
        if transport not in inventory.declared:
            return (f"{transport} is not among the transports the partition declares "
                    f"(extras['transports']: {', '.join(sorted(inventory.declared)) or 'none'})")
        # The partition declares what its nodes offer; what the MPI's build can carry is
        # the build's own (the same on every node), where the build names its device.
        return _build_problem(mpi, transport, inventory) if inventory.mpi_device else None
    if mpi == "openmpi":
        return _openmpi_problem(transport, inventory, net)
    if mpi == "mpich":
        return _build_problem(mpi, transport, inventory) or ucx_problem(transport, inventory, net)
    if mpi == "mvapich2":
        return _mvapich2_problem(transport, inventory, net)
    return f"unknown MPI {mpi!r}"


def _openmpi_problem(transport: str, inventory: Inventory, net: NetConfig) -> str | None:
    comps = inventory.ompi_components

    def listed(framework: str) -> str:
        names = sorted(c for f, c in comps or () if f == framework)
        return f"ompi_info lists {framework}: {', '.join(names) or 'none'}"

    if transport in ("shm", "tcp_ob1"):
        if comps is None:
            return None  # ob1 and its BTLs are part of every Open MPI build
        if ("pml", "ob1") not in comps:
            return f"Open MPI here has no ob1 PML ({listed('pml')})"
        if transport == "shm" and not comps & {("btl", "vader"), ("btl", "sm")}:
            return f"Open MPI here has no shared-memory BTL (vader/sm) ({listed('btl')})"
        if transport == "tcp_ob1" and ("btl", "tcp") not in comps:
            return f"Open MPI here has no TCP BTL ({listed('btl')})"
        return None
    if comps is not None and ("pml", "ucx") not in comps:
        return f"Open MPI here has no UCX PML ({listed('pml')})"
    return ucx_problem(transport, inventory, net)


def ucx_problem(transport: str, inventory: Inventory, net: NetConfig | None = None) -> str | None:
    """Why UCX itself cannot run ``transport`` here (for UCX tools, e.g. ucx_perftest)."""
    net = net or NetConfig()
    names = UCX_NAMES[transport]
    if inventory.ucx is None:
        return f"cannot tell whether UCX offers {transport}: {inventory.ucx_problem}"
    have = [n for n in _ucx_names(transport) if n in inventory.ucx]
    if not have:
        lists = ", ".join(sorted(inventory.ucx)) or "nothing"
        why = " (no RDMA device)" if transport in _RDMA and not any(
            inventory.has_ucx(t) for t in _RDMA) else ""
        return (f"{transport} needs UCX transport {' or '.join(names)}; "
                f"`ucx_info -d` here lists only {lists}{why}")
    wanted = net.devices_for(transport)
    offered = sorted({d for n in have for d in inventory.ucx[n]})
    missing = [d for d in wanted if d not in offered]
    if missing:
        return (f"UCX_NET_DEVICES {', '.join(missing)} (partition extras) not among the "
                f"{'/'.join(have)} devices here ({', '.join(offered)})")
    return None


def _build_problem(mpi: str, transport: str, inventory: Inventory) -> str | None:
    """Why the MPI's build (its device) cannot carry ``transport`` on any node, or None."""
    device = inventory.mpi_device
    if mpi == "mpich" and device and "ucx" not in device:
        return (f"MPICH here is built with {device}; fabreg selects MPICH transports through "
                f"UCX, which needs a ch4:ucx build")
    if mpi != "mvapich2":
        return None
    if transport in ("ucx_rc", "ucx_ud"):
        if device in _MV2_SOCKET_DEVICES:
            return f"MVAPICH2 here is a {device} build: it has no InfiniBand channel"
        if device and device.startswith("ch3:psm"):
            return (f"MVAPICH2 here is a {device} build (Omni-Path/TrueScale PSM): it has no "
                    "InfiniBand verbs channel")
    if transport == "tcp" and device not in _MV2_SOCKET_DEVICES:
        what = (f"this one is {device}" if device
                else "neither `mpiname -a` nor `mpiexec -info` names ch3:sock or ch3:nemesis")
        return f"MVAPICH2 runs TCP only from a socket build (ch3:sock or ch3:nemesis); {what}"
    return None


def _mvapich2_problem(transport: str, inventory: Inventory, net: NetConfig) -> str | None:
    if build := _build_problem("mvapich2", transport, inventory):
        return build
    if transport in ("ucx_rc", "ucx_ud"):
        if not inventory.rdma_devices:
            return "no RDMA device on this host (/sys/class/infiniband is empty or absent)"
        missing = [d for d in net.rdma_devices if d.split(":")[0] not in inventory.rdma_devices]
        if missing:
            return (f"RDMA device(s) {', '.join(missing)} (partition extras) not present "
                    f"(have: {', '.join(inventory.rdma_devices)})")
    return None


# --- verification -------------------------------------------------------------------------


@dataclass(frozen=True)
class Verification:
    """What carried the traffic of one run, against what was asked."""

    asked: str
    #: Transports seen, ``+``-joined (``tcp``, ``tcp+shm``); empty when nothing was seen.
    used: str
    #: The log evidence, e.g. ``("UCX tag lanes: tcp/lo, tcp/eth0",)``.
    evidence: tuple[str, ...] = field(default=())
    #: Why the run fails verification; None when it passes.
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def ucx_class(ucx_transport: str) -> str | None:
    """The fabreg transport a UCX transport name belongs to (``rc_mlx5`` -> ``ucx_rc``).

    Copies within one process (``self``, ``cuda_copy``, ``gdr_copy``) belong to
    none; ``cuda_ipc`` is shared memory; unknown names stay as they are.
    """
    if ucx_transport in UCX_LOCAL_COPY:
        return None
    return _UCX_CLASS.get(ucx_transport, ucx_transport)


def _order(classes: set[str]) -> str:
    return "+".join(sorted(classes, key=lambda c: (c == "shm", c)))


def observed(spec: LaunchSpec, output: str) -> tuple[set[str], list[str], list[str]]:
    """(transports seen, evidence lines, lanes on unexpected devices) in a run's output."""
    classes: set[str] = set()
    evidence: list[str] = []
    off_device: list[str] = []
    lanes = ucx_lanes(output)
    if lanes:
        evidence.append("UCX tag lanes: " + ", ".join(map(str, lanes)))
        for lane in lanes:
            cls = ucx_class(lane.transport)
            if cls is None:
                continue
            classes.add(cls)
            if cls == spec.transport and spec.devices and lane.device not in spec.devices:
                off_device.append(str(lane))
    btls = ob1_btls(output)
    if btls:
        evidence.append("ob1 BTLs: " + ", ".join(btls))
        classes.update(_OB1_CLASS.get(b, f"btl:{b}") for b in btls if b != "self")
    if spec.mpi == "mvapich2":
        report = mvapich2_report(output)
        if report:
            evidence.append(_describe_mv2(report))
            classes.update(_mvapich2_classes(report))
        elif spec.transport == "tcp" and spec.mpi_device in _MV2_SOCKET_DEVICES:
            evidence.append(f"MVAPICH2 {spec.mpi_device} build (sockets are its only channel)")
            classes.add("tcp")
        elif (spec.transport == "shm" and spec.nodes == 1
              and (spec.mpi_device or "").startswith(_MV2_NEMESIS)):
            evidence.append(f"MVAPICH2 {spec.mpi_device} build on one node (its ranks talk "
                            "through nemesis' shared-memory queues; it has no other local "
                            "channel)")
            classes.add("shm")
    return classes, evidence, off_device


def busy_polls(mpi: str, inventory: Inventory) -> str | None:
    """Why ``mpi``'s ranks keep their CPU while they wait for a message, or None where
    they give it away.

    A rank that busy-polls for a message from a rank that has no CPU holds its core until
    the OS scheduler takes it away, so each step of a collective waits for a time slice, and
    a fan-in's streams get the CPU time the scheduler gives them. Open MPI yields when
    oversubscribed or told to (``mpi_yield_when_idle``), MVAPICH2's nemesis device after a
    number of polls; MPICH's ch4 device progresses its netmod in a loop that never yields
    (``MPIR_CVAR_POLLS_BEFORE_YIELD=1`` changed nothing on the emulated cluster); MVAPICH2's
    InfiniBand device (``ch3:mrail``) spins on its shared-memory queues and yields only
    between threads (``MV2_USE_THREAD_YIELD``), and its blocking mode (``MV2_USE_BLOCKING``)
    turns shared memory off.
    """
    device = inventory.mpi_device or ""
    if mpi == "mpich" and device.startswith("ch4"):
        return f"MPICH's {device} device polls for messages without yielding the CPU"
    if mpi == "mvapich2" and device.startswith(_MV2_MRAIL):
        return f"MVAPICH2's {device} device polls shared memory without yielding the CPU"
    return None


def _mvapich2_classes(report: Mvapich2Report) -> set[str]:
    """The transports the report shows; none when it lacks its Parameters block."""
    channel = report.channel
    if channel is None:
        return set()
    if channel == "smp":
        return {"shm"}
    if channel == "psm":
        return {"psm"}  # Omni-Path/TrueScale: none of fabreg's transports
    if report.flag("MV2_USE_ONLY_UD"):
        return {"ucx_ud"}
    if report.flag("MV2_USE_UD_HYBRID"):
        return {"ucx_rc", "ucx_ud"}
    return {"ucx_rc"}


_MV2_MODES = {"smp": "SMP only", "mrail": "HCA channel open", "psm": "PSM channel (Omni-Path)",
              None: "no Parameters block, channel unknown"}


def _describe_mv2(report: Mvapich2Report) -> str:
    keys = ("HCA NAME", "MV2_USE_ONLY_UD", "MV2_USE_UD_HYBRID", "MV2_USE_SHARED_MEM")
    values = {**report.fields, **report.all_params}
    shown = [f"{k}={values[k]}" for k in keys if k in values]
    name = f"MVAPICH2-{report.version}" if report.version else "MVAPICH2"
    return (f"{name} report: {_MV2_MODES[report.channel]}"
            + (f" ({', '.join(shown)})" if shown else ""))


def verify(spec: LaunchSpec, output: str, *, placement: bool = True) -> Verification:
    """Check that the run whose stdout+stderr is ``output`` used ``spec.transport``.

    With ``placement``, a run over several nodes must also show evidence from as
    many hosts: TCP between two ranks that landed on one host proves nothing
    about the network. (UCX and ob1 prefix their lines with the host; MVAPICH2's
    report comes from rank 0 only and is not checked.)
    """
    classes, evidence, off_device = observed(spec, output)
    used = _order(classes)
    if not classes:
        hint = spec.evidence_hint or "the MPI's transport report"
        return Verification(spec.transport, "", tuple(evidence),
                            f"no evidence of the transport used: {hint} not found in the output")
    relevant = classes - {"shm"} if spec.shares_nodes else classes
    if relevant != {spec.transport}:
        return Verification(spec.transport, used, tuple(evidence),
                            f"asked for {spec.transport} but traffic went over {used} "
                            f"({'; '.join(evidence)})")
    if off_device:
        return Verification(spec.transport, used, tuple(evidence),
                            f"{spec.transport} ran on {', '.join(off_device)}, outside the "
                            f"partition's devices ({', '.join(spec.devices)})")
    if not placement or spec.nodes < 2 or not (ucx_lanes(output) or ob1_btls(output)):
        return Verification(spec.transport, used, tuple(evidence))
    hosts = evidence_hosts(output)
    if not hosts:
        return Verification(spec.transport, used, tuple(evidence),
                            "cannot tell which hosts the ranks ran on: the UCX/ob1 lines carry "
                            "no [host:pid] prefix")
    if len(hosts) < spec.nodes:
        return Verification(spec.transport, used, tuple(evidence),
                            f"the ranks ran on {len(hosts)} host(s) ({', '.join(hosts)}), not "
                            f"on {spec.nodes} nodes: {spec.transport} was not exercised "
                            f"between nodes (check the launcher's placement options)")
    return Verification(spec.transport, used, tuple(evidence))

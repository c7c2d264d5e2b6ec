"""``fabreg site init``: a site configuration drawn from the live cluster, not written by hand.

Slurm describes the partitions (``scontrol show partition|node``: nodes, CPUs, features, GRES,
states); one short ``srun`` on an idle node of each partition says what a compute node has,
which the login node cannot: UCX's transports and devices (``ucx_info -d``), RDMA devices,
network interfaces, GPUs, and which MPIs answer (on ``PATH``, as modules, in Spack). The
result is a commented ``site.py`` in the form of docs/site.md, and a report of what was found
and what could not be probed, with why. Nothing on the cluster changes besides those jobs.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fabreg.errors import FabregError
from fabreg.run.parsers.inventory import ucx_transports
from fabreg.run.parsers.slurm import Node, Partition, parse_nodes, parse_partitions

#: What one probe job runs on a compute node (a login shell, so `module` is defined there).
PROBE_SCRIPT = r"""
echo "### host"; hostname
echo "### ucx_info"
if command -v ucx_info >/dev/null; then ucx_info -d 2>&1 | head -2000; else echo "(none)"; fi
echo "### infiniband"; ls /sys/class/infiniband 2>/dev/null
echo "### net"
for i in /sys/class/net/*; do n=${i##*/}; [ "$n" = lo ] && continue
  echo "$n $(cat $i/operstate 2>/dev/null) $(cat $i/type 2>/dev/null)"; done
echo "### gpu"; command -v nvidia-smi >/dev/null && nvidia-smi -L 2>&1 | head -16
echo "### mpi"
for c in mpicc.openmpi mpicc.mpich mpicc.mvapich2 mpicc; do
  p=$(command -v $c) && echo "$c $p $($c -show 2>&1 | head -1 | cut -c1-200)"; done
command -v ompi_info >/dev/null && echo "ompi_info $(ompi_info --version 2>&1 | head -1)"
command -v mpichversion >/dev/null && echo "mpichversion $(mpichversion 2>&1 | head -1)"
echo "### modules"
type module >/dev/null 2>&1 && module -t avail 2>&1 \
  | grep -iE '^(openmpi|mpich|mvapich2|hpcx|intel-?mpi)' | head -40
echo "### spack"
command -v spack >/dev/null \
  && spack find --format '{name}@{version}' openmpi mpich mvapich2 2>/dev/null | head -20
echo "### end"
"""
#: How long one probe job may take, queueing included.
PROBE_SECONDS = 120
MPI_NAMES = ("openmpi", "mpich", "mvapich2")


@dataclass
class Probe:
    """What one compute node said about itself."""

    node: str
    ucx: dict[str, tuple[str, ...]] = field(default_factory=dict)  # transport -> devices
    ucx_missing: bool = False
    rdma_devices: tuple[str, ...] = ()
    interfaces: tuple[str, ...] = ()  # up, not loopback: IPoIB first
    gpus: int = 0
    mpis_on_path: dict[str, str] = field(default_factory=dict)  # mpi -> mpicc path
    modules: tuple[str, ...] = ()
    spack: tuple[str, ...] = ()


@dataclass
class PartitionSurvey:
    partition: Partition
    nodes: list[Node]
    probe: Probe | None = None
    unprobed: str = ""  # why no node was probed
    findings: list[str] = field(default_factory=list)

    @property
    def cpus(self) -> int:
        usable = [n.cpus for n in self.nodes if n.cpus]
        return min(usable) if usable else 0


Runner = Callable[[Sequence[str], float], subprocess.CompletedProcess]


def run_command(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"timed out after {timeout:g} s")
    except OSError as err:
        return subprocess.CompletedProcess(list(argv), 127, "", str(err))


def read_slurm(run: Runner = run_command) -> tuple[list[Partition], list[Node]]:
    if shutil.which("scontrol") is None or shutil.which("srun") is None:
        raise FabregError("no Slurm here: scontrol and srun are not on PATH (site init reads "
                          "the partitions from Slurm; write site.py by hand: docs/site.md)")
    parts = run(["scontrol", "show", "partition", "--oneliner"], 30)
    nodes = run(["scontrol", "show", "node", "--oneliner"], 30)
    for done in (parts, nodes):
        if done.returncode != 0:
            first = (done.stderr or done.stdout).strip().splitlines()[:1]
            raise FabregError(f"`{' '.join(done.args)}` failed: "
                              f"{first[0] if first else f'exit {done.returncode}'}")
    try:
        return parse_partitions(parts.stdout), parse_nodes(nodes.stdout)
    except ValueError as err:
        raise FabregError(str(err)) from None


def parse_probe(node: str, text: str) -> Probe:
    """The probe script's output -> what the node has."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("### "):
            current = line[4:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    if "end" not in sections:
        raise ValueError("the probe's output stops before its end")
    probe = Probe(node)
    ucx_text = "\n".join(sections.get("ucx_info", []))
    if ucx_text.strip() == "(none)":
        probe.ucx_missing = True
    else:
        probe.ucx = {t: tuple(d) for t, d in ucx_transports(ucx_text).items()}
    probe.rdma_devices = tuple(sorted(x.strip() for x in sections.get("infiniband", [])
                                      if x.strip()))
    ipoib, ether = [], []
    for line in sections.get("net", []):
        parts = line.split()
        if len(parts) >= 3 and parts[1] in ("up", "unknown"):
            (ipoib if parts[2] == "32" else ether).append(parts[0])
    probe.interfaces = tuple(ipoib + ether)
    probe.gpus = sum(1 for x in sections.get("gpu", []) if x.startswith("GPU "))
    for line in sections.get("mpi", []):
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0].startswith("mpicc"):
            mpi = _mpi_of(parts[0], parts[2] if len(parts) > 2 else "")
            if mpi and mpi not in probe.mpis_on_path:
                probe.mpis_on_path[mpi] = parts[1]
    probe.modules = tuple(x.strip() for x in sections.get("modules", []) if x.strip())
    probe.spack = tuple(x.strip() for x in sections.get("spack", []) if x.strip())
    return probe


def _mpi_of(command: str, show: str) -> str | None:
    suffix = command.partition(".")[2]
    if suffix in MPI_NAMES:
        return suffix
    lowered = show.lower()
    for mpi in ("mvapich2", "openmpi", "mpich"):
        if mpi in lowered:
            return mpi
    return None


def probe_node(partition: str, node: str, run: Runner = run_command) -> Probe:
    """One short job on ``node``; FabregError with Slurm's or the shell's reason."""
    argv = ["srun", f"--partition={partition}", f"--nodelist={node}", "--nodes=1",
            "--ntasks=1", "--time=2", "--job-name=fabreg-site-init", "bash", "-lc",
            PROBE_SCRIPT]
    done = run(argv, PROBE_SECONDS)
    if done.returncode != 0 and "### end" not in done.stdout:
        first = (done.stderr or done.stdout).strip().splitlines()[:1]
        raise FabregError(first[0] if first else f"srun exited {done.returncode}")
    try:
        return parse_probe(node, done.stdout)
    except ValueError as err:
        raise FabregError(str(err)) from None


def check_partitions(partitions: list[Partition], wanted: Sequence[str]) -> None:
    """FabregError naming Slurm's partitions when one of ``wanted`` is not among them."""
    have = sorted(p.name for p in partitions)
    unknown = [w for w in wanted if w not in have]
    if unknown:
        raise FabregError(f"no partition {', '.join(unknown)} in Slurm (have: "
                          f"{', '.join(have) or 'none'})")


def survey(partitions: list[Partition], nodes: list[Node], wanted: Sequence[str] = (),
           run: Runner = run_command) -> list[PartitionSurvey]:
    check_partitions(partitions, wanted)
    out = []
    for partition in partitions:
        if wanted and partition.name not in wanted:
            continue
        members = [n for n in nodes if partition.name in n.partitions]
        entry = PartitionSurvey(partition, members)
        down = [f"{n.name} ({n.state}{': ' + n.reason if n.reason else ''})"
                for n in members if not n.usable]
        if down:
            entry.findings.append(f"not usable now: {', '.join(down)}")
        idle = [n for n in members if n.idle]
        if not idle:
            entry.unprobed = ("no idle node to probe (" + ", ".join(
                f"{n.name} {n.state}" for n in members) + ")") if members else "no nodes"
        else:
            probes = []
            for node in idle[:2]:  # a second node tells a heterogeneous partition
                try:
                    probes.append(probe_node(partition.name, node.name, run))
                except FabregError as err:
                    if not probes:
                        entry.unprobed = f"the probe job on {node.name} failed: {err}"
                    break
            if probes:
                entry.probe = probes[0]
                if len(probes) == 2 and _ucx_set(probes[0]) != _ucx_set(probes[1]):
                    entry.findings.append(
                        f"heterogeneous partition: {probes[0].node} and {probes[1].node} "
                        f"differ in `ucx_info -d` ({_ucx_text(probes[0])} against "
                        f"{_ucx_text(probes[1])})")
        out.append(entry)
    return out


def _ucx_set(probe: Probe) -> set[tuple[str, str]]:
    """What UCX offers, order aside (ucx_info lists a transport's devices in any order)."""
    return {(t, d) for t, devices in probe.ucx.items() for d in devices}


def _ucx_text(probe: Probe) -> str:
    return ", ".join(f"{t}/{'/'.join(sorted(d))}" for t, d in sorted(probe.ucx.items())) or "none"


def _py_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


def render(system: str, surveys: list[PartitionSurvey], login_host: str,
           scheduler: str = "slurm") -> str:
    """The site configuration, commented with what was found."""
    mpis = sorted({m for s in surveys if s.probe for m in s.probe.mpis_on_path},
                  key=MPI_NAMES.index)
    lines = [
        f'"""fabreg site configuration for {system}: written by `fabreg site init`.',
        "",
        "Use it beside the suite's own: reframe -C reframe-config.py -C site.py -c checks/ -r",
        "What Slurm and one probe job per partition said is in the comments; edit freely",
        '(docs/site.md)."""',
        "",
        "import os",
        "",
        "from fabreg.run.siteconfig import slurm_partition",
        "",
        *([
            "# No Slurm accounting here: ReFrame polls with squeue, which lists a finished job",
            "# (its state, its nodes) only when asked for all states.",
            "os.environ.setdefault('SQUEUE_STATES', 'all')",
            "",
        ] if scheduler != "slurm" else []),
        f"MPIS = {mpis!r}",
        "",
        "site_configuration = {",
        "    'systems': [{",
        f"        'name': {system!r},",
        f"        'descr': {('Slurm cluster ' + system + ' (fabreg site init)')!r},",
        f"        'hostnames': [{('^' + re.escape(login_host) + '$')!r}],",
        "        'modules_system': "
        f"{'lmod' if any(s.probe and s.probe.modules for s in surveys) else 'nomod'!r},",
        "        'partitions': [",
    ]
    for s in surveys:
        p = s.partition
        max_nodes = len([n for n in s.nodes if n.usable]) or p.total_nodes or 1
        if p.max_nodes:
            max_nodes = min(max_nodes, p.max_nodes)
        features = sorted({f for n in s.nodes for f in n.features})
        gres = sorted({g for n in s.nodes for g in n.gres})
        lines.append(f"            # {p.name}: {p.total_nodes} node(s) {p.nodes}, "
                     f"{s.cpus or '?'} CPUs per node, features {','.join(features) or 'none'}, "
                     f"GRES {','.join(gres) or 'none'}")
        for finding in s.findings:
            lines.append(f"            # finding: {finding}")
        extras: dict[str, object] = {}
        if s.probe is None:
            lines.append(f"            # not probed: {s.unprobed}; transports left to "
                         "detection at run time")
        else:
            pr = s.probe
            lines.append(f"            # probed on {pr.node}: UCX {_ucx_text(pr)}; RDMA "
                         f"{', '.join(pr.rdma_devices) or 'none'}; interfaces "
                         f"{', '.join(pr.interfaces) or 'none'}; GPUs {pr.gpus}")
            if pr.rdma_devices:
                extras["rdma_devices"] = [f"{d}:1" for d in pr.rdma_devices]
            if pr.interfaces:
                extras["tcp_interfaces"] = [pr.interfaces[0]]
            # The login node cannot see the compute nodes' devices: declare what they have.
            transports = ["shm"]
            if pr.ucx.get("tcp") or pr.interfaces:
                transports.append("tcp")
            for ucx, name in (("rc_mlx5", "ucx_rc"), ("rc_verbs", "ucx_rc"),
                              ("ud_mlx5", "ucx_ud"), ("ud_verbs", "ucx_ud"),
                              ("dc_mlx5", "ucx_dc")):
                if pr.ucx.get(ucx) and name not in transports:
                    transports.append(name)
            extras["transports"] = transports
        # One partition is one node type: its baseline is its own (references calibrate
        # --partition), not the login node's host key.
        extras["references_by_partition"] = True
        if scheduler != "slurm":
            lines.append("            # no Slurm accounting here (sacct): jobs are polled "
                         "with squeue")
        lines.append(f"            dict(slurm_partition({p.name!r}, environs=MPIS, "
                     f"max_nodes={max_nodes}, scheduler={scheduler!r},")
        lines.append(f"                                 extras={extras!r}),")
        lines.append(f"                 processor={{'num_cpus': {s.cpus or 1}}}),")
    lines += ["        ],", "    }],", "    'environments': ["]
    for mpi in mpis:
        where = {s.probe.mpis_on_path[mpi] for s in surveys
                 if s.probe and mpi in s.probe.mpis_on_path}
        mpicc = sorted(where)[0]
        bindir = os.path.dirname(mpicc)
        suffix = "." + mpi if mpicc.endswith("." + mpi) else ""
        launcher = (["mpirun" + suffix, "--npernode", "{num_tasks_per_node}", "-np",
                     "{num_tasks}"] if mpi == "openmpi" else
                    ["mpiexec" + suffix, "-ppn", "{num_tasks_per_node}", "-n", "{num_tasks}"])
        launcher[0] = os.path.join(bindir, launcher[0])
        lines.append(f"        # {mpi}: {mpicc} on the compute nodes")
        lines.append(f"        {{'name': {mpi!r}, 'target_systems': [{system!r}], "
                     f"'cc': {mpicc!r}, 'features': ['mpi'],")
        env_vars = ("[['OMPI_ALLOW_RUN_AS_ROOT', '1'], ['OMPI_ALLOW_RUN_AS_ROOT_CONFIRM', '1']]"
                    if mpi == "openmpi" else "[]")
        lines.append(f"         'env_vars': {env_vars},")
        lines.append(f"         'extras': {{'mpi': {mpi!r}, 'launcher': {launcher!r}}}}},")
    lines += ["    ],", "}", ""]
    mods = sorted({m for s in surveys if s.probe for m in s.probe.modules})
    spack = sorted({m for s in surveys if s.probe for m in s.probe.spack})
    if mods or spack:
        lines.insert(5, "Also found (not used above; load one in an environment's 'modules'): "
                     + ", ".join([*mods, *(f"spack {x}" for x in spack)]))
    return "\n".join(lines)


def report(surveys: list[PartitionSurvey]) -> list[str]:
    """What was found, partition by partition, for the terminal."""
    out = []
    for s in surveys:
        head = f"{s.partition.name}: {s.partition.total_nodes} node(s), {s.cpus or '?'} CPUs"
        if s.probe:
            pr = s.probe
            mpis = ", ".join(sorted(pr.mpis_on_path)) or "none on PATH"
            ucx = "UCX not found" if pr.ucx_missing else f"UCX {_ucx_text(pr)}"
            out.append(f"{head}; probed {pr.node}: {ucx}; RDMA "
                       f"{', '.join(pr.rdma_devices) or 'none'}; interfaces "
                       f"{', '.join(pr.interfaces) or 'none'}; GPUs {pr.gpus}; MPIs {mpis}")
        else:
            out.append(f"{head}; not probed: {s.unprobed}")
        out += [f"  finding: {f}" for f in s.findings]
    return out


def refuse_existing(path: Path, force: bool) -> None:
    """An existing site configuration is the site's own: kept unless ``force``."""
    if path.exists() and not force:
        raise FabregError(f"{path} exists: not overwritten (--force replaces it)")


def write_site(path: Path, text: str, force: bool) -> None:
    """Write atomically; an existing file is kept unless ``force``."""
    refuse_existing(path, force)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def slurm_config(run: Runner = run_command) -> dict[str, str]:
    """``scontrol show config`` as a mapping (empty if Slurm does not answer)."""
    done = run(["scontrol", "show", "config"], 30)
    if done.returncode != 0:
        return {}
    out = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def scheduler_for(config: dict[str, str]) -> str:
    """ReFrame's ``slurm`` scheduler polls with sacct; without accounting only squeue works."""
    storage = config.get("AccountingStorageType", "")
    return "squeue" if storage in ("", "accounting_storage/none") else "slurm"


def login_host() -> str:
    return socket.gethostname()

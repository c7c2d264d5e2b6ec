"""Bringing the emulated cluster up, reporting on it, and taking it down without leftovers."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from fabreg.cluster import network, preflight, processes, slurmclient, slurmconf
from fabreg.cluster import state as statefile
from fabreg.cluster.layout import BRIDGE, SLURM_PARTITION, Layout, Paths
from fabreg.cluster.processes import Daemon
from fabreg.cluster.state import ClusterState
from fabreg.errors import FabregError
from fabreg.run import procfs

Say = Callable[[str], None]

IDLE_TIMEOUT = 90.0


def _say(message: str) -> None:
    print(message, flush=True)


# --- up -----------------------------------------------------------------------------


def up(
    paths: Paths, wanted: Layout, say: Say = _say, timeout: float = IDLE_TIMEOUT
) -> ClusterState:
    """Create whatever is missing of the cluster ``wanted`` and wait until its nodes are idle.

    Running it again on a complete cluster changes nothing; on a half-started one
    (or after `kill NODE`) it starts only what is missing.
    """
    preflight.require_root("up")
    preflight.require_tools()
    if foreign := _foreign_nodes(paths):
        raise FabregError(f"{_foreign_text(foreign, paths)}: this machine has room for one "
                          f"emulated cluster; take that one down first (`fabreg cluster "
                          f"--state-dir {_owner(foreign)} down`) or use it (--state-dir)")
    current = statefile.load(paths)
    if current and current.layout != wanted and _anything_running(current):
        raise FabregError(
            f"a cluster with {current.layout.nodes} node(s) on {current.layout.subnet} is "
            f"already up (state in {paths.root}); run `fabreg cluster down` first"
        )
    st = current if current and current.layout == wanted else ClusterState(layout=wanted)
    if current is None and paths.logs.is_dir():
        # A new cluster starts with new logs (`down` keeps the last ones for post-mortems).
        shutil.rmtree(paths.logs)
    layout = st.layout
    ctld = st.daemons.get("slurmctld")
    if not (ctld and ctld.alive()):
        preflight.require_port(layout)
    preflight.require_subnet(layout)

    _prepare_files(paths, layout)
    statefile.save(paths, st)

    say(f"network: bridge {BRIDGE} {layout.bridge_ip}/{layout.prefixlen}, "
        f"{layout.nodes} node namespace(s)")
    network.create_bridge(layout)
    for index in range(1, layout.nodes + 1):
        network.create_namespace(layout.namespace(index))
        network.connect_node(layout, index)

    _ensure(paths, st, "munged", lambda: _start_munged(paths), say)
    _wait_for(lambda: paths.munge_socket.exists(), 10, "munged did not create its socket",
              st.daemons["munged"])
    _ensure(paths, st, "slurmctld", lambda: _start_slurmctld(paths), say)
    _wait_for(lambda: slurmclient.controller_up(paths), 30,
              "slurmctld does not answer `scontrol ping`", st.daemons["slurmctld"])
    for index, node in enumerate(layout.node_names(), start=1):
        restarted = _ensure(paths, st, f"slurmd-{node}",
                            lambda i=index, n=node: _start_slurmd(paths, layout, i, n), say)
        if restarted and current is not None:
            slurmclient.resume(paths, node)
    _wait_idle(paths, st, say, timeout)
    return st


def _anything_running(st: ClusterState) -> bool:
    return any(d.alive() for d in st.daemons.values()) or bool(network.namespaces())


def _prepare_files(paths: Paths, layout: Layout) -> None:
    for directory in (paths.root, paths.logs, paths.run, paths.spool, paths.ctld_state,
                      paths.munge):
        directory.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.root, 0o755)
    # Others may reach the socket (a normal user's srun and sbatch authenticate through it)
    # but not list the folder; the key itself stays 0600.
    os.chmod(paths.munge, 0o711)
    for node in layout.node_names():
        paths.node_spool(node).mkdir(parents=True, exist_ok=True)
    if not paths.munge_key.exists():
        # A key of our own: the cluster never depends on (or changes) the machine's munge.
        fd = os.open(paths.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as key:
            key.write(os.urandom(1024))
    paths.slurm_conf.write_text(slurmconf.render(layout, paths))
    base = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
    paths.hosts_file.write_text(slurmconf.hosts_file(layout, base))


def _ensure(paths: Paths, st: ClusterState, name: str, start: Callable[[], Daemon],
            say: Say) -> bool:
    """Start daemon ``name`` unless the one we recorded is still running; True if started."""
    known = st.daemons.get(name)
    if known and known.alive():
        return False
    daemon = start()
    st.daemons[name] = daemon
    statefile.save(paths, st)
    say(f"started {name} (pid {daemon.pid})")
    return True


def _start_munged(paths: Paths) -> Daemon:
    paths.munge_socket.unlink(missing_ok=True)
    argv = [
        shutil.which("munged") or "munged", "--foreground", "--force",
        f"--socket={paths.munge_socket}", f"--key-file={paths.munge_key}",
        f"--pid-file={paths.munge / 'munged.pid'}", f"--log-file={paths.logs / 'munged.log'}",
        f"--seed-file={paths.munge / 'munged.seed'}",
    ]
    return processes.spawn("munged", argv, paths.logs / "munged.out")


def _start_slurmctld(paths: Paths) -> Daemon:
    argv = [shutil.which("slurmctld") or "slurmctld", "-D", "-i", "-f", str(paths.slurm_conf)]
    return processes.spawn("slurmctld", argv, paths.logs / "slurmctld.out",
                           env=slurmclient.env(paths))


def _start_slurmd(paths: Paths, layout: Layout, index: int, node: str) -> Daemon:
    """slurmd of ``node`` in its network namespace, with its own host name, /etc/hosts and /sys.

    ``nsenter`` rather than ``ip netns exec``: the latter remounts /sys and so hides the
    cgroup tree, and slurmd then fails to start. A private mount namespace instead gets
    a fresh sysfs (so /sys/class/net lists the node's own interfaces, which UCX's TCP
    transport needs) with the machine's cgroup tree moved back under it, and the
    node's /etc/hosts.
    """
    slurmd = shutil.which("slurmd") or "slurmd"
    hold = paths.run / f"cgroup-{node}"
    hold.mkdir(parents=True, exist_ok=True)
    script = " && ".join([
        f"hostname {node}",
        f"mount --bind {paths.hosts_file} /etc/hosts",
        f"mount --rbind /sys/fs/cgroup {hold}",
        "mount -t sysfs sysfs /sys",
        f"mount --move {hold} /sys/fs/cgroup",
        f"exec {slurmd} -D -N {node} -f {paths.slurm_conf}",
    ])
    argv = network.in_namespace(
        layout.namespace(index),
        ["unshare", "--uts", "--ipc", "--mount", "--propagation", "private", "sh", "-c", script],
    )
    return processes.spawn(f"slurmd-{node}", argv, paths.logs / f"slurmd-{node}.out",
                           env=slurmclient.env(paths))


def _wait_for(ready: Callable[[], bool], timeout: float, failure: str, daemon: Daemon) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if not daemon.alive():
            processes.reap(daemon)
            raise FabregError(f"{daemon.name} exited at start: {_last_line(daemon.log)}; "
                              "`fabreg cluster down` removes what was started")
        time.sleep(0.3)
    raise FabregError(f"{failure} after {timeout:.0f}s (log: {daemon.log}); "
                      "`fabreg cluster down` removes what was started")


def _last_line(log: str) -> str:
    try:
        lines = [ln for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return f"see {log}"
    return f"{lines[-1].strip()} (log: {log})" if lines else f"no output (log: {log})"


def _wait_idle(paths: Paths, st: ClusterState, say: Say, timeout: float) -> None:
    """Progress lines until ``sinfo`` shows every node idle."""
    nodes = st.layout.node_names()
    start = time.monotonic()
    last = ""
    while True:
        states = slurmclient.node_states(paths)
        report = ", ".join(f"{n} {states.get(n, '?')}" for n in nodes)
        if all(states.get(n, "").rstrip("*~#") in ("idle", "mixed", "allocated") and
               not states.get(n, "").endswith("*") for n in nodes):
            say(f"nodes ready: {report}")
            return
        elapsed = time.monotonic() - start
        if report != last or int(elapsed) % 10 == 0:
            say(f"waiting for sinfo to show all nodes idle ({elapsed:.0f}s): {report}")
            last = report
        for name, daemon in st.daemons.items():
            if not daemon.alive():
                processes.reap(daemon)
                raise FabregError(f"{name} exited: {_last_line(daemon.log)}; "
                                  "`fabreg cluster down` removes what was started")
        if elapsed > timeout:
            raise FabregError(f"nodes not idle after {timeout:.0f}s ({report}); "
                              f"see the logs in {paths.logs}")
        time.sleep(1.0)


def usage(paths: Paths, st: ClusterState) -> str:
    """How to use a running cluster (printed at the end of `up`)."""
    n = st.layout.nodes
    parts = ", ".join(f"{p.name} ({p.hostlist()})" for p in st.layout.partitions)
    if st.layout.name:
        return "\n".join([
            f"cluster up: {st.layout.name}, {n} node(s), partitions {parts or 'compute'}, "
            f"state in {paths.root}",
            "it plays a site the suite has never seen; describe it as a site would:",
            f"  export SLURM_CONF={paths.slurm_conf}",
            f"  .venv/bin/fabreg site init --system {st.layout.name} --out site.py",
            f"  .venv/bin/reframe -C reframe-config.py -C site.py -c checks/ -r "
            f"--system {st.layout.name}",
            "nodes: fabreg cluster drain node2 | resume node2; tear down: fabreg cluster down",
        ])
    return "\n".join([
        f"cluster up: {n} node(s) {st.layout.nodelist()}, partition compute, "
        f"state in {paths.root}",
        "use it:",
        f"  export SLURM_CONF={paths.slurm_conf}",
        "  sinfo; srun -N 1 hostname",
        *([f"  salloc -N {n} -n {n} mpirun.openmpi --bind-to none ./a.out",
           f"  salloc -N {n} -n {n} mpiexec.mpich -iface {BRIDGE} ./a.out"] if n > 1 else []),
        "  .venv/bin/reframe -C reframe-config.py -c checks/ -r --system minicluster",
        "faults: fabreg cluster degrade node2 --rate 1gbit | restore | kill node2",
        "tear down: fabreg cluster down",
    ])


# --- status ---------------------------------------------------------------------------


def status(paths: Paths) -> tuple[str, bool]:
    """A report of the cluster and whether it is fully up."""
    st = statefile.load(paths)
    lines = [f"state directory: {paths.root}"]
    foreign = _foreign_nodes(paths)
    leftovers = _leftovers(paths, st, foreign)
    if st is None:
        lines.append("cluster: not started")
        if foreign:
            lines.append(_foreign_text(foreign, paths))
        if leftovers:
            lines.append(f"leftovers (remove with `fabreg cluster down`): {', '.join(leftovers)}")
        return "\n".join(lines), False
    layout = st.layout
    lines.append(f"layout: {layout.nodes} node(s) {layout.nodelist()}, subnet {layout.subnet}, "
                 f"controller {layout.controller} {layout.bridge_ip}:{layout.ctld_port}")
    lines.append(f"slurm.conf: {paths.slurm_conf}")
    healthy = True
    for name, daemon in st.daemons.items():
        alive = daemon.alive()
        healthy &= alive
        lines.append(f"  {name:<16} pid {daemon.pid:<8} {'running' if alive else 'NOT RUNNING'}")
    expected = {"munged", "slurmctld", *(f"slurmd-{n}" for n in layout.node_names())}
    for name in sorted(expected - set(st.daemons)):
        healthy = False
        lines.append(f"  {name:<16} never started")
    states = slurmclient.node_states(paths) if st.daemons.get("slurmctld") else {}
    reasons = slurmclient.node_reasons(paths) if states else {}
    for index, node in enumerate(layout.node_names(), start=1):
        ns = layout.namespace(index)
        present = ns in network.namespaces()
        healthy &= present
        link = network.qdisc(layout.host_veth(index))
        slurm = states.get(node, "unreachable")
        healthy &= slurm.rstrip("*") in ("idle", "mixed", "allocated")
        extra = f" reason: {reasons[node]}" if node in reasons else ""
        lines.append(
            f"  {node}: {layout.node_ip(index)} netns {ns}{'' if present else ' MISSING'}, "
            f"slurm {slurm}{extra}, link "
            + (f"DEGRADED to {st.degraded.get(node, '?')}" if link else "full speed")
        )
    for key, rate in sorted(st.degraded.items()):
        if "<->" in key:
            lines.append(f"  link {key}: DEGRADED to {rate}")
    return "\n".join(lines), healthy


# --- down ------------------------------------------------------------------------------


def down(paths: Paths, say: Say = _say, purge: bool = False) -> list[str]:
    """Stop what `up` started and remove what it created; returns anything left behind.

    Works from the state file when there is one and by our names otherwise, so a
    half-started cluster (or one whose state file was lost) comes down too.
    """
    preflight.require_root("down")
    st = statefile.load(paths)
    if st and st.daemons.get("slurmctld", None) and st.daemons["slurmctld"].alive():
        slurmclient.cancel_all(paths, [p.name for p in st.layout.partitions] or
                               [SLURM_PARTITION])

    daemons = dict(st.daemons) if st else {}
    order = sorted(daemons, key=lambda n: (not n.startswith("slurmd-"), n == "munged"))
    for name in order:
        if processes.stop(daemons[name]):
            say(f"stopped {name} (pid {daemons[name].pid})")
    for pid, started, what in _unrecorded_daemons(paths):
        if processes.terminate(pid, started):
            say(f"stopped unrecorded {what} (pid {pid})")

    if foreign := _foreign_nodes(paths):
        say(f"{_foreign_text(foreign, paths)}: its network namespaces, links and bridge are "
            "left as they are")
    else:
        _remove_network(say)

    statefile.remove(paths)
    for directory in (paths.spool, paths.ctld_state, paths.run, paths.munge):
        shutil.rmtree(directory, ignore_errors=True)
    for path in (paths.slurm_conf, paths.hosts_file):
        path.unlink(missing_ok=True)
    if purge:
        shutil.rmtree(paths.logs, ignore_errors=True)
        _rmdir(paths.root)
    return _leftovers(paths, None, foreign)


def _remove_network(say: Say) -> None:
    """Remove the node namespaces (and what jobs left running in them), their links and the
    bridge, by our names: they are this machine's only ones."""
    for ns in network.namespaces():
        for pid in network.namespace_pids(ns):
            started = procfs.start_time(pid)
            if started is not None and processes.terminate(pid, started, timeout=5):
                say(f"stopped pid {pid} left in {ns} by a job")
        if network.remove_namespace(ns):
            say(f"removed network namespace {ns}")
    for link in network.host_veths():
        if network.remove_link(link):
            say(f"removed link {link}")
    if network.remove_link(BRIDGE):
        say(f"removed bridge {BRIDGE}")


def _foreign_nodes(paths: Paths) -> dict[str, tuple[int, Path]]:
    """Node namespace -> (pid, slurm.conf) of a slurmd in it that another state directory's
    cluster started: the namespaces, links and bridge have one set of names per machine, so
    they are that cluster's, and neither `up` nor `down` of this one may touch them."""
    ours = paths.slurm_conf.resolve()
    found = {}
    for ns in network.namespaces():
        for pid in network.namespace_pids(ns):
            argv = procfs.cmdline(pid) or []
            if not argv or Path(argv[0]).name != "slurmd" or "-f" not in argv[:-1]:
                continue
            conf = Path(argv[argv.index("-f") + 1])
            if conf.resolve() != ours:
                found[ns] = (pid, conf)
                break
    return found


def _owner(foreign: dict[str, tuple[int, Path]]) -> Path:
    return next(iter(foreign.values()))[1].parent


def _foreign_text(foreign: dict[str, tuple[int, Path]], paths: Paths) -> str:
    ns, (pid, _) = next(iter(foreign.items()))
    return (f"the emulated cluster of another state directory, {_owner(foreign)}, is up (its "
            f"slurmd pid {pid} in {ns}), not that of {paths.root}")


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _unrecorded_daemons(paths: Paths) -> list[tuple[int, int, str]]:
    """Daemons started with this state directory's files but missing from the state file.

    A process is ours if its command line names our slurm.conf or munge socket:
    those paths exist only under our state directory.
    """
    markers = (str(paths.slurm_conf), str(paths.munge_socket))
    found = []
    for pid in procfs.pids():
        text = procfs.cmdline(pid) if pid != os.getpid() else None
        if text and any(any(m in a for m in markers) for a in text):
            name = Path(text[0]).name
            if name in ("munged", "slurmctld", "slurmd", "slurmstepd"):
                started = procfs.start_time(pid)
                if started is not None:
                    found.append((pid, started, name))
    return found


def _leftovers(paths: Paths, st: ClusterState | None,
               foreign: dict[str, tuple[int, Path]]) -> list[str]:
    """What of this cluster exists on the machine (nothing after a clean `down`); the network
    of another state directory's cluster (``foreign``, :func:`_foreign_nodes`) is not this
    one's."""
    found = []
    if not foreign:
        found += [f"netns {ns}" for ns in network.namespaces()]
        found += [f"link {link}" for link in network.host_veths()]
        if network.link_exists(BRIDGE):
            found.append(f"bridge {BRIDGE}")
    if st is None:
        found += [f"{what} pid {pid}" for pid, _, what in _unrecorded_daemons(paths)]
    return found

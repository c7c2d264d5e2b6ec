"""Stress mode: large allreduce/alltoall traffic for a bounded time, with rolling latencies.

``start`` builds the ``fabreg_stress`` probe with the chosen MPI and launches it
either as a local process group (under ``timeout``) or as a Slurm batch job
(with ``--time``); either way the run ends by itself: the probe stops at its
duration, and ``timeout``/Slurm end it shortly after if it does not. ``stop``
ends only what ``start`` recorded: its own process group (checked against the
recorded process start time, so a reused PID is never hit) or its own job.

Files in the state directory (format in docs/workloads.md, "Stress mode"):

- ``state.json``: what was started, where, and until when;
- ``latency.jsonl``: one JSON object per collective per window, appended live;
- ``stress.out``: the launcher's own output.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fabreg.errors import FabregError
from fabreg.run import procfs, providers

STATE = "state.json"
LOG = "latency.jsonl"
OUT = "stress.out"
PROBE = "fabreg_stress"

#: Longest run ``start`` accepts, seconds: stress is a bounded experiment.
MAX_DURATION = 24 * 3600
#: Extra time after the duration before timeout / Slurm end a run that did not stop.
GRACE = 30

#: Compiler wrapper and launcher per MPI when not given (``{ranks}`` is filled in).
MPI_TOOLS: dict[str, tuple[str, list[str]]] = {
    "openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--oversubscribe", "-np", "{ranks}"]),
    "mpich": ("mpicc.mpich", ["mpiexec.mpich", "-n", "{ranks}"]),
}
_OMPI_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
_SIZE = re.compile(r"^(\d+)\s*([KMG]?)B?$", re.IGNORECASE)


def default_state_dir() -> Path:
    """``$FABREG_STRESS_DIR``, else ``$XDG_STATE_HOME/fabreg/stress`` (``~/.local/state``)."""
    if env := os.environ.get("FABREG_STRESS_DIR"):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fabreg" / "stress"


def parse_size(text: str) -> int:
    """``4194304``, ``4MB``, ``64K`` -> bytes (binary multiples)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise FabregError(f"bad message size {text!r} (e.g. 65536, 64KB, 4MB)")
    return int(m[1]) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m[2].upper()]


@dataclass
class StressRun:
    """What ``start`` launched (``state.json``)."""

    mode: str  # "local" or "slurm"
    started: float
    deadline: float  # the probe stops by itself at this Unix time
    duration: float
    ranks: int
    size: int
    ops: list[str]
    mpi: str
    log: str
    out: str
    command: list[str]
    pid: int | None = None  # local: session/process-group leader
    pid_start: int | None = None  # its start time in clock ticks (/proc/PID/stat field 22)
    jobid: str | None = None  # slurm
    stopped: float | None = None

    def save(self, state_dir: Path) -> None:
        (state_dir / STATE).write_text(json.dumps(asdict(self), indent=1) + "\n")


@dataclass(frozen=True)
class StressSample:
    """One line of ``latency.jsonl``: one collective over one window."""

    time: float
    op: str
    size: int
    ranks: int
    window_s: float
    iterations: int
    p50_us: float
    p99_us: float
    max_us: float
    mean_us: float


@dataclass
class StressStatus:
    run: StressRun | None
    running: bool
    state: str  # running, finished, stopped, none, or Slurm's job state
    latest: dict[str, StressSample] = field(default_factory=dict)


def load_run(state_dir: Path) -> StressRun | None:
    path = state_dir / STATE
    if not path.is_file():
        return None
    try:
        return StressRun(**json.loads(path.read_text()))
    except (ValueError, TypeError) as err:
        raise FabregError(f"{path}: not a fabreg stress state file ({err})") from None


def read_samples(path: Path) -> list[StressSample]:
    """Every complete line of a latency log (a line being written is skipped)."""
    if not path.is_file():
        return []
    out = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(StressSample(**json.loads(line)))
        except (ValueError, TypeError):
            if number < len(lines):  # the last line may still be being written
                raise FabregError(f"{path}:{number}: not a stress latency record") from None
    return out


def latest_samples(path: Path) -> dict[str, StressSample]:
    """The newest window of each collective."""
    latest: dict[str, StressSample] = {}
    for sample in read_samples(path):
        latest[sample.op] = sample
    return latest


def _is_ours(run: StressRun) -> bool:
    """Is the recorded leader still the process we started, and not a zombie?"""
    stat = procfs.read_stat(run.pid) if run.pid is not None else None
    if stat is None or stat.start != run.pid_start:
        return False
    if stat.zombie:
        _reap(run.pid)
        return False
    return True


def build_probe(cc: str, state_dir: Path) -> Path:
    """Build ``fabreg_stress`` with ``cc`` in ``build-<cc>/`` of the state directory.

    Through the probes' Makefile, as every other probe build: the probe links the
    shared helpers (libprobe.a), and make rebuilds only what changed.
    """
    makefile = providers.probes_source_dir() / "Makefile"
    if shutil.which(cc) is None:
        raise FabregError(f"MPI compiler {cc} not found; install the MPI or pass --cc")
    make = shutil.which("make")
    if make is None:
        raise FabregError(f"make not found; it builds the {PROBE} probe")
    build = state_dir / f"build-{Path(cc).name}"
    build.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([make, "-f", str(makefile), f"CC={cc}", PROBE], cwd=build,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise FabregError(f"building {PROBE}.c with {cc} failed: {last}")
    return build / PROBE


def _check_request(duration: float, ranks: int, ops: Sequence[str]) -> None:
    if not 0 < duration <= MAX_DURATION:
        raise FabregError(f"--duration must be between 1 and {MAX_DURATION} seconds, "
                          f"got {duration:g}")
    if ranks < 2:
        raise FabregError(f"--ranks must be at least 2, got {ranks}")
    bad = [op for op in ops if op not in ("allreduce", "alltoall")]
    if bad or not ops:
        raise FabregError(f"--ops takes allreduce and/or alltoall, got {','.join(ops)!r}")


def _refuse_if_active(state_dir: Path) -> None:
    status = get_status(state_dir)
    if status.running and status.run:
        where = f"PID {status.run.pid}" if status.run.mode == "local" else \
            f"Slurm job {status.run.jobid}"
        raise FabregError(f"a stress run is already active in {state_dir} ({where}, until "
                          f"{time.strftime('%H:%M:%S', time.localtime(status.run.deadline))}); "
                          "stop it first: fabreg stress stop")


def probe_argv(binary: Path, duration: float, size: int, ops: Sequence[str], window: float,
               log: Path) -> list[str]:
    return [str(binary), "-t", f"{duration:g}", "-s", str(size), "-o", ",".join(ops),
            "-w", f"{window:g}", "--log", str(log)]


def start(state_dir: Path, *, mpi: str = "openmpi", ranks: int = 2, duration: float = 60,
          size: int = 4 << 20, ops: Sequence[str] = ("allreduce", "alltoall"),
          window: float = 1.0, cc: str | None = None, launcher: Sequence[str] | None = None,
          slurm: bool = False, nodes: int = 1, partition: str | None = None) -> StressRun:
    """Launch a stress run; returns what was recorded in ``state.json``."""
    _check_request(duration, ranks, ops)
    if mpi not in MPI_TOOLS and (cc is None or launcher is None):
        raise FabregError(f"unknown MPI {mpi!r} (known: {', '.join(MPI_TOOLS)}); "
                          "or give both --cc and --launcher")
    state_dir.mkdir(parents=True, exist_ok=True)
    _refuse_if_active(state_dir)
    default_cc, default_launcher = MPI_TOOLS.get(mpi, ("", []))
    binary = build_probe(cc or default_cc, state_dir)
    log, out = state_dir / LOG, state_dir / OUT
    log.unlink(missing_ok=True)
    launch = [a.format(ranks=ranks, nodes=nodes) for a in (launcher or default_launcher)]
    if shutil.which(launch[0]) is None:
        raise FabregError(f"launcher {launch[0]} not found")
    command = [*launch, *probe_argv(binary, duration, size, ops, window, log)]
    now = time.time()
    run = StressRun(mode="slurm" if slurm else "local", started=now, deadline=now + duration,
                    duration=duration, ranks=ranks, size=size, ops=list(ops), mpi=mpi,
                    log=str(log), out=str(out), command=command)
    if slurm:
        run.jobid = _submit(command, duration, ranks, nodes, partition, out)
    else:
        run.pid, run.pid_start = _spawn(command, duration, out, mpi)
    run.save(state_dir)
    return run


def _spawn(command: list[str], duration: float, out: Path, mpi: str) -> tuple[int, int]:
    timeout = shutil.which("timeout")
    if timeout is None:
        raise FabregError("coreutils 'timeout' not found; it bounds local stress runs")
    env = dict(os.environ)
    if mpi == "openmpi" and os.geteuid() == 0:
        env.update(_OMPI_AS_ROOT)
    guard = [timeout, "--kill-after=10", str(math.ceil(duration) + GRACE)]
    with open(out, "w") as sink:
        proc = subprocess.Popen([*guard, *command], stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    start_ticks = procfs.start_time(proc.pid)
    if start_ticks is None:
        raise FabregError(f"stress launcher exited at once; see {out}")
    return proc.pid, start_ticks


def sbatch_argv(command: Sequence[str], duration: float, ranks: int, nodes: int,
                partition: str | None, out: Path) -> list[str]:
    """The ``sbatch`` call of a Slurm stress run: its ``--time`` bounds it."""
    minutes = math.ceil((duration + GRACE) / 60)
    argv = ["sbatch", "--parsable", "--job-name=fabreg-stress", f"--time={minutes}",
            f"--nodes={nodes}", f"--ntasks={ranks}", f"--output={out}"]
    if partition:
        argv.append(f"--partition={partition}")
    return [*argv, "--wrap", " ".join(shlex.quote(a) for a in command)]


def _submit(command: list[str], duration: float, ranks: int, nodes: int,
            partition: str | None, out: Path) -> str:
    if shutil.which("sbatch") is None:
        raise FabregError("sbatch not found: --slurm needs a Slurm cluster")
    proc = subprocess.run(sbatch_argv(command, duration, ranks, nodes, partition, out),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise FabregError(f"sbatch refused the stress job: {proc.stderr.strip()}")
    return proc.stdout.strip().split(";")[0]


def _slurm_state(jobid: str) -> str | None:
    if shutil.which("squeue") is None:
        return None
    proc = subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%T"], capture_output=True,
                          text=True)
    state = proc.stdout.strip()
    return state.lower() if proc.returncode == 0 and state else None


def get_status(state_dir: Path) -> StressStatus:
    run = load_run(state_dir)
    if run is None:
        return StressStatus(None, False, "none")
    latest = latest_samples(Path(run.log))
    if run.mode == "local":
        running = _is_ours(run)
    else:
        slurm_state = _slurm_state(run.jobid or "")
        running = slurm_state in ("pending", "running", "configuring", "completing")
        if running:
            return StressStatus(run, True, slurm_state or "running", latest)
    if running:
        return StressStatus(run, True, "running", latest)
    return StressStatus(run, False, "stopped" if run.stopped else "finished", latest)


def stop(state_dir: Path, wait: float = 10.0) -> str:
    """End the recorded run (its own process group or Slurm job); say what was done."""
    run = load_run(state_dir)
    if run is None:
        raise FabregError(f"no stress run recorded in {state_dir}")
    if run.mode == "slurm":
        if not get_status(state_dir).running:
            return f"Slurm job {run.jobid} already ended"
        subprocess.run(["scancel", str(run.jobid)], check=False)
        run.stopped = time.time()
        run.save(state_dir)
        return f"cancelled Slurm job {run.jobid}"
    if not _is_ours(run):
        return "stress run already ended"
    assert run.pid is not None
    # MPI launchers may put proxies and ranks in process groups of their own:
    # note every descendant (with its start time) before signalling anything.
    family = {p: procfs.start_time(p) for p in _descendants(run.pid)}
    os.killpg(run.pid, signal.SIGTERM)
    deadline = time.time() + wait
    while time.time() < deadline and (_group_alive(run.pid) or _alive(family)):
        _reap(run.pid)
        time.sleep(0.1)
    if _group_alive(run.pid):
        os.killpg(run.pid, signal.SIGKILL)
    for pid in _alive(family):
        os.kill(pid, signal.SIGKILL)
    _reap(run.pid)
    run.stopped = time.time()
    run.save(state_dir)
    return f"stopped stress process group {run.pid}"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies of our own children still count as group members: reap them.
    stats = (procfs.read_stat(p) for p in procfs.pids())
    return any(s is not None and s.pgid == pgid and not s.zombie for s in stats)


def _alive(family: dict[int, int | None]) -> list[int]:
    """Members of ``family`` still running as the same processes (not reused PIDs)."""
    return [p for p, started in family.items()
            if started is not None and procfs.start_time(p) == started]


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` in the parent tree."""
    children: dict[int, list[int]] = {}
    for pid in procfs.pids():
        stat = procfs.read_stat(pid)
        if stat is not None:
            children.setdefault(stat.ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _reap(pid: int) -> None:
    """Collect the exit status of our direct child (when started from this process)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def exposition(state_dir: Path) -> list[str]:
    """Prometheus text lines for the newest stress window (for ``fabreg serve-metrics``).

    ``fabreg_stress_running`` (1/0) and, per collective, ``fabreg_stress_latency_us``
    with ``quantile`` 0.5, 0.99 and 1 (the maximum), plus the window's time. Empty
    when no run was ever recorded there.
    """
    status = get_status(state_dir)
    if status.run is None:
        return []
    lines = [
        "# HELP fabreg_stress_running 1 while a fabreg stress run is going.",
        "# TYPE fabreg_stress_running gauge",
        f"fabreg_stress_running {int(status.running)}",
    ]
    if status.latest:
        lines += ["# HELP fabreg_stress_latency_us Call latency of the stress traffic over "
                  "its latest window, microseconds.",
                  "# TYPE fabreg_stress_latency_us gauge"]
        for op, s in sorted(status.latest.items()):
            labels = f'op="{op}",size="{s.size}",ranks="{s.ranks}"'
            for quantile, value in (("0.5", s.p50_us), ("0.99", s.p99_us), ("1", s.max_us)):
                lines.append(f'fabreg_stress_latency_us{{{labels},quantile="{quantile}"}} '
                             f"{value!r}")
        lines += ["# HELP fabreg_stress_window_timestamp_seconds End of the latest window.",
                  "# TYPE fabreg_stress_window_timestamp_seconds gauge"]
        for op, s in sorted(status.latest.items()):
            lines.append(f'fabreg_stress_window_timestamp_seconds{{op="{op}"}} {s.time!r}')
    return lines

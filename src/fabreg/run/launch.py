"""One launch of a benchmark inside the job, ended once it hangs after printing its results.

MPICH 4.0 with UCX 1.13 over TCP can hang in ``MPI_Finalize`` after a benchmark printed
everything: waiting for the job's time limit would lose the results and minutes of the
nightly. The in-job drivers (``fabreg.run.measure`` for OSU, ``fabreg.run.tail_environment``
for the tail-latency probe) launch through here: the output is copied to a file as it comes,
and a launch whose output is complete but which does not exit within a grace period is ended
(its process group, by PID) with its results kept; once one launch of a job hung so, the
job's later launches get a short grace (``grace_after``), and so do the later jobs of the
same ReFrame run that launch the same way: a launch that hung leaves a *hang note* (a file
the check names, one per MPI and transport in the run, whatever the node count), and a job
that finds it starts with the short grace.

A check that launches its benchmark once, without a driver of its own (the sweep), runs it
through this module's command line::

    python -m fabreg.run.launch --until '# end fabreg_sweep' [--grace 20] [--hang-note FILE]
        [--output FILE] [--result FILE] -- mpiexec -n 4 fabreg_sweep ...

The launch's output goes to ``--output`` (default: this process's stdout); its status is the
benchmark's, or 0 when it was ended after its complete results (said on stderr); ``--result``
gets the launch as JSON (``summary``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fabreg.errors import FabregError
from fabreg.run import counters

#: Says, line by line, whether the output is complete (the line that ends it was seen).
Completion = Callable[[bytes], bool]


@dataclass
class Launch:
    """One run of the benchmark."""

    output: str
    options: list[str]
    returncode: int
    seconds: float
    #: The output was complete but the process did not exit within the grace period.
    hung_after_results: bool = False
    #: When it started (seconds since the epoch): spells of a slow host show up in time.
    started: float = 0.0
    #: Seconds from its start to its complete output (None: never complete): what its
    #: results cost, its start included and a hang after them not.
    results_s: float | None = None


class _Watch:
    """Copies a launch's output to a file, noting when it became complete."""

    def __init__(self, proc: subprocess.Popen[bytes], path: Path, complete: Completion,
                 echo: bool) -> None:
        self.proc, self.path, self.complete, self.echo = proc, path, complete, echo
        self.complete_at: float | None = None
        self.thread = threading.Thread(target=self._copy, daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        assert self.proc.stdout is not None
        with open(self.path, "wb") as sink:
            for line in self.proc.stdout:
                sink.write(line)
                sink.flush()
                if self.echo:
                    sys.stdout.buffer.write(line)
                    sys.stdout.flush()
                if self.complete_at is None and self.complete(line):
                    self.complete_at = time.monotonic()


#: The grace of a launch once an earlier launch of the same job hung after its results: the
#: same command in the same allocation hangs the same way (MPICH 4.0 with UCX 1.13 over TCP
#: on 4 nodes: most launches), and the full grace for every launch of a calibration ladder
#: and its runs cost a 4-node tail-latency case 20 s a launch. The launches of a complete
#: 4-node run that exited by themselves did so within 0.25 s of their complete results (582
#: of them, and 468 on a 2-vCPU AMD VM: Open MPI's within 0.24 s, MPICH's within 0.07 s),
#: so 1 s ends only a hang; 3 s cost each known hang 2 s more for nothing.
KNOWN_HANG_GRACE_S = 1.0


def grace_after(launches: Iterable[Launch], grace_s: float, hang_note: str = "") -> float:
    """``grace_s``, or ``KNOWN_HANG_GRACE_S`` once one of ``launches`` hung after its
    results or ``hang_note`` exists (an earlier job of the run, launching the same way,
    hung). Without either, the first hang is waited out in full: in session 13's 4-node
    run, 27 jobs (MPICH's) did so, 17 s more each than with the short grace."""
    if any(x.hung_after_results for x in launches) or (hang_note and
                                                        os.path.exists(hang_note)):
        return min(grace_s, KNOWN_HANG_GRACE_S)
    return grace_s


def note_hang(done: Launch, hang_note: str) -> None:
    """Leave ``hang_note`` (if named) when ``done`` hung after its results: what it says is
    that the file exists; it holds the first such launch, for whoever reads the stage."""
    if not (hang_note and done.hung_after_results) or os.path.exists(hang_note):
        return
    try:
        Path(hang_note).parent.mkdir(parents=True, exist_ok=True)
        Path(hang_note).write_text(json.dumps(asdict(done)) + "\n")
    except OSError as err:  # a note is an economy: the job's own results do not depend on it
        print(f"fabreg: could not leave the hang note {hang_note}: {err}", file=sys.stderr)


#: How often a running launch is looked at for a hang after its results. Its exit is seen
#: at once (within ``Popen.wait``'s own few milliseconds), not at the next look: a job makes
#: up to dozens of launches of a fraction of a second each, and a fixed 0.1-s sleep cost
#: each of them 0.05 s on average.
WATCH_S = 0.1


def _exited(proc: subprocess.Popen[bytes], within_s: float) -> bool:
    """Whether ``proc`` exits within ``within_s`` seconds (returns as soon as it does)."""
    try:
        proc.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def run_once(command: list[str], options: list[str], output: Path, complete: Completion,
             grace_s: float, env: dict[str, str], echo: bool = False,
             hang_note: str = "", errors: Path | None = None) -> Launch:
    """Run ``command + options`` once; end it ``grace_s`` after its output is complete
    (and leave ``hang_note`` if it had to be ended so).

    Its stderr goes to ``errors`` where given, else into ``output`` as the launch wrote it:
    apart, the MPI's own logs on stderr (Open MPI's BTL selection, abort lines) stay out of
    the table. UCX writes its log lines to stdout, so those still reach ``output``; the
    parsers take them out of any line they land in
    (``fabreg.run.parsers.transport_log.benchmark_lines``).
    """
    start, started = time.monotonic(), time.time()
    with open(errors, "wb") if errors else contextlib.nullcontext() as stderr:
        proc = subprocess.Popen([*command, *options], stdout=subprocess.PIPE,
                                stderr=stderr or subprocess.STDOUT, env=env,
                                start_new_session=True)
    watch = _Watch(proc, output, complete, echo)
    hung = False
    while not _exited(proc, WATCH_S):
        done = watch.complete_at
        if done is not None and time.monotonic() - done > grace_s:
            hung = True
            end_group(proc)
            break
    proc.wait()
    watch.thread.join(timeout=5)
    seconds = time.monotonic() - start
    # to the millisecond, never past the whole launch (a launch of 0.9 ms is not done at 1 ms)
    complete = (None if watch.complete_at is None
                else min(round(watch.complete_at - start, 3), seconds))
    done = Launch(output.name, list(options), proc.returncode, seconds, hung,
                  round(started, 3), complete)
    note_hang(done, hang_note)
    return done


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the launch's process group, SIGKILL what is left after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def summary(launches: list[Launch]) -> dict[str, Any]:
    """What a driver's result file says of its launches."""
    return {"launches": [asdict(x) for x in launches],
            "hung_after_results": any(x.hung_after_results for x in launches)}


class JsonPlan:
    """What a check writes for its in-job driver (a dataclass), saved and loaded as JSON."""

    @classmethod
    def load(cls, path: Path) -> Any:
        return cls(**cls.decoded(json.loads(path.read_text())))

    @classmethod
    def decoded(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The fields from their JSON form (JSON object keys are always strings)."""
        return data

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")  # type: ignore[call-overload]


def plan_argument(module: str, argv: list[str] | None) -> Path | None:
    """The PLAN.json argument of ``python -m <module> PLAN.json``; None (usage printed) else."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} PLAN.json", file=sys.stderr)
        return None
    return Path(args[0])


def driver_main(module: str, argv: list[str] | None, plan_type: type[JsonPlan],
                run: Callable[[Any, Path], dict[str, Any]]) -> int:
    """The ``main`` of an in-job driver, ``python -m <module> PLAN.json``: ``run(plan,
    workdir)`` returns the driver's result; a FabregError is one line and status 1, a launch
    ended after its complete results is said, and the status is the result's ``returncode``
    (default 0). Where the check hands it the fabric counters' snapshots
    (:data:`fabreg.run.counters.SNAPSHOTS_VARIABLE`), it takes them around ``run``."""
    path = plan_argument(module, argv)
    if path is None:
        return 2
    interfaces = counters.snapshot_interfaces(os.environ)
    if interfaces is not None:
        counters.write_snapshot(path.parent / counters.BEFORE, interfaces)
    try:
        result = run(plan_type.load(path), path.parent)
    except FabregError as err:
        print(f"fabreg: {err}", file=sys.stderr)
        return 1
    finally:
        if interfaces is not None:
            counters.write_snapshot(path.parent / counters.AFTER, interfaces)
    if result.get("hung_after_results"):
        print("fabreg: a benchmark run printed its complete results and then did not exit; "
              "ended it, results kept", file=sys.stderr)
    return int(result.get("returncode", 0))


def main(argv: list[str] | None = None) -> int:
    """``python -m fabreg.run.launch --until TEXT ... -- COMMAND...`` (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m fabreg.run.launch",
        description="Run a benchmark once; end it GRACE s after it printed a line starting "
                    "with TEXT (its results are complete) if it has not exited by then.")
    parser.add_argument("--until", required=True, metavar="TEXT",
                        help="the start of the line that ends the benchmark's output")
    parser.add_argument("--grace", type=float, default=20.0, metavar="SECONDS")
    parser.add_argument("--hang-note", default="", metavar="FILE",
                        help="left when the launch hangs; when it exists, the grace is "
                             f"{KNOWN_HANG_GRACE_S:g} s")
    parser.add_argument("--output", type=Path, metavar="FILE",
                        help="where the output goes (default: stdout)")
    parser.add_argument("--result", type=Path, metavar="FILE", help="the launch, as JSON")
    parser.add_argument("command", nargs="+", help="the launch (after --)")
    args = parser.parse_args(argv)
    until = args.until.encode()
    grace = grace_after([], args.grace, args.hang_note)
    try:
        done = run_once(args.command, [], args.output or Path(os.devnull),
                        lambda line: line.startswith(until),
                        grace, dict(os.environ),
                        echo=args.output is None, hang_note=args.hang_note)
    except OSError as err:
        print(f"fabreg: cannot launch {args.command[0]}: {err}", file=sys.stderr)
        return 127
    if args.output is None:
        done.output = "stdout"
    if args.result:
        args.result.write_text(json.dumps(summary([done]), indent=1) + "\n")
    if done.hung_after_results:
        print(f"fabreg: {args.command[0]} printed its complete results and did not exit "
              f"within {grace:g} s of them; ended it, "
              "results kept", file=sys.stderr)
        return 0
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

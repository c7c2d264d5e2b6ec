"""``fabreg stress start|status|stop``: bounded background collective traffic."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from dataclasses import asdict
from pathlib import Path

from fabreg.run import stress


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir) if args.state_dir else stress.default_state_dir()


def _start(args: argparse.Namespace) -> int:
    run = stress.start(
        _state_dir(args), mpi=args.mpi, ranks=args.ranks, duration=args.duration,
        size=stress.parse_size(args.size), ops=args.ops.split(","), window=args.window,
        cc=args.cc, launcher=shlex.split(args.launcher) if args.launcher else None,
        slurm=args.slurm, nodes=args.nodes, partition=args.partition,
    )
    where = f"Slurm job {run.jobid}" if run.mode == "slurm" else f"process group {run.pid}"
    print(f"stress: {','.join(run.ops)} of {run.size} B on {run.ranks} ranks ({run.mpi}), "
          f"{where}, stops by itself after {run.duration:g} s")
    print(f"latencies: {run.log}")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = stress.get_status(_state_dir(args))
    if args.json:
        print(json.dumps({
            "state": status.state, "running": status.running,
            "run": asdict(status.run) if status.run else None,
            "latest": {op: asdict(s) for op, s in status.latest.items()},
        }, indent=1))
        return 0
    if status.run is None:
        print(f"stress: no run recorded in {_state_dir(args)}")
        return 0
    run = status.run
    left = max(0.0, run.deadline - time.time())
    tail = f", {left:.0f} s left" if status.running else ""
    print(f"stress: {status.state}{tail} ({','.join(run.ops)}, {run.size} B, {run.ranks} ranks)")
    for op, s in sorted(status.latest.items()):
        age = time.time() - s.time
        print(f"  {op:9s} p50 {s.p50_us:10.1f} us  p99 {s.p99_us:10.1f} us  "
              f"max {s.max_us:10.1f} us  ({s.iterations} calls in {s.window_s:.1f} s, "
              f"{age:.0f} s ago)")
    return 0


def _stop(args: argparse.Namespace) -> int:
    print("stress: " + stress.stop(_state_dir(args)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stress", help="keep allreduce/alltoall traffic going for a bounded time")
    sub = parser.add_subparsers(dest="stress_command", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", help="where the run's state and latency log live "
                        "(default: $FABREG_STRESS_DIR or ~/.local/state/fabreg/stress)")

    start = sub.add_parser("start", parents=[common], help="start a bounded stress run")
    start.add_argument("--duration", type=float, default=60.0,
                       help="seconds; the run always stops by itself after this (default 60)")
    start.add_argument("--ranks", type=int, default=2, help="MPI ranks (default 2)")
    start.add_argument("--size", default="4MB", help="message size (default 4MB)")
    start.add_argument("--ops", default="allreduce,alltoall",
                       help="collectives, comma-separated (default allreduce,alltoall)")
    start.add_argument("--window", type=float, default=1.0,
                       help="seconds per logged latency window (default 1)")
    start.add_argument("--mpi", default="openmpi", help="openmpi or mpich (default openmpi)")
    start.add_argument("--cc", help="MPI compiler wrapper (default from --mpi)")
    start.add_argument("--launcher", help="launcher command, {ranks} and {nodes} filled in "
                       "(default from --mpi)")
    start.add_argument("--slurm", action="store_true", help="submit as a Slurm batch job")
    start.add_argument("--nodes", type=int, default=1, help="Slurm nodes (default 1)")
    start.add_argument("--partition", help="Slurm partition")
    start.set_defaults(func=_start)

    status = sub.add_parser("status", parents=[common], help="is it running; latest latencies")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_status)

    stop = sub.add_parser("stop", parents=[common], help="end the recorded run now")
    stop.set_defaults(func=_stop)

#!/usr/bin/env python3
"""Benchmark: what ReFrame's deprecation warnings cost a session that loads the suite's checks.

ReFrame 4.10 walks the whole stack with ``inspect.stack()`` (every frame's source line, every
frame's module looked up by file) twice for each test case it instantiates, also where the
warning is suppressed; ``fabreg.testlib.reframe_warnings`` gives it a frame walk that reads
neither. Each session is timed both ways, alternating, ``--rounds`` times, nothing else
running: ReFrame's own walk (the suite's ``install`` made a no-op) and the frame walk.
Printed side by side per session: the median wall time of each, the ratio, and what each
listed (the cases and the deprecation warnings it printed: the same, or the walk changed
what ReFrame says).

Sessions: the ``make run`` checks listed (``-c checks/ -l``), their concretized cases (``-lC``:
every partition and environment, what a run instantiates) and one family's file (``-c
checks/osu.py -l``: the sessions of the tests).

Usage (repository root):

    .venv/bin/python ci/bench/reframe_load_bench.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: ReFrame's command line, in a process where ``walk`` says whose stack walk warns.
RUNNER = """
import sys
from fabreg.testlib import reframe_warnings
if sys.argv[1] == "reframe":
    reframe_warnings.install = lambda: None
from reframe.frontend.cli import main
sys.argv = ["reframe", *sys.argv[2:]]
sys.exit(main())
"""

SESSIONS = {
    "all checks, listed (-l)": ["-c", str(REPO / "checks"), "-l"],
    "all checks, concretized (-lC)": ["-c", str(REPO / "checks"), "-lC"],
    "osu.py, listed (-l)": ["-c", str(REPO / "checks" / "osu.py"), "-l"],
}
WALKS = ("reframe", "frame walk")


def session(walk: str, args: list[str], workdir: Path) -> tuple[float, str]:
    """One ReFrame session; its wall time and output."""
    env = dict(os.environ, FABREG_PERFLOG_DIR=str(workdir / "perflogs"),
               TMPDIR=str(workdir))
    env.pop("RFM_CONFIG_FILES", None)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUNNER, walk, "-C",
                           str(REPO / "reframe-config.py"), "--prefix", str(workdir), *args],
                          cwd=workdir, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"reframe_load_bench: {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout + proc.stderr


def listed(output: str) -> str:
    """What a listing says: its cases found, and ReFrame's deprecation warnings."""
    found = re.search(r"(?:Found|Concretized) (\d+) (check|test case)\(s\)", output)
    warned = len(re.findall(r"deprecated", output))
    return (f"{found.group(1)} {found.group(2)}s" if found else "nothing found") + (
        f", {warned} deprecation warnings")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    times: dict[tuple[str, str], list[float]] = {}
    said: dict[tuple[str, str], set[str]] = {}
    with tempfile.TemporaryDirectory(prefix="fabreg-load-bench-") as tmp:
        for k in range(args.rounds):
            for name, rfm_args in SESSIONS.items():
                for walk in (WALKS if k % 2 == 0 else WALKS[::-1]):
                    seconds, output = session(walk, rfm_args, Path(tmp))
                    times.setdefault((name, walk), []).append(seconds)
                    said.setdefault((name, walk), set()).add(listed(output))
            print(f"# round {k + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"# ReFrame session wall time, median of {args.rounds} (s); ratio = frame walk / "
          "ReFrame's own")
    print(f"{'session':32} | {'ReFrame own':>11} | {'frame walk':>10} | {'ratio':>5} | listed")
    for name in SESSIONS:
        own, walk = (statistics.median(times[(name, w)]) for w in WALKS)
        same = said[(name, WALKS[0])] == said[(name, WALKS[1])]
        what = "; ".join(sorted(said[(name, WALKS[1])]))
        print(f"{name:32} | {own:11.2f} | {walk:10.2f} | {walk / own:5.2f} | {what}"
              + ("" if same else f" (ReFrame's own: {'; '.join(sorted(said[(name, WALKS[0])]))})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark: what the suite's own tests cost, per test module, now and at a revision.

``make test`` is the whole suite, and CI's 90 minutes hold it; its tests should cost what
they prove. This runs a selection of the tests (pytest arguments: paths, ``-k``, ``-m``)
with the tests and the ``fabreg`` package of this checkout and, with ``--before REV``, of a
git worktree at REV, in turn (REV first, then now, ``--runs`` times), and prints each
module's seconds (its tests' setup, call and teardown, as pytest's JUnit report gives them)
side by side with their ratio, then each run's wall time and outcome. A test that failed
is named: a cheaper run that fails proves nothing.

Usage:
  python ci/bench/tests_bench.py [--before REV] [--runs N] [-- PYTEST_ARGS...]
  python ci/bench/tests_bench.py --before 4262502 -- tests/test_probes.py -m slow
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from worktree import checked_out, with_package

REPO = Path(__file__).resolve().parents[2]


def run_tests(tree: Path, pytest_args: list[str], report: Path) -> dict:
    """One pytest run of ``tree``'s tests on ``tree``'s package: seconds per module, the
    run's wall time, its outcome counts and the tests that failed."""
    env = with_package(dict(os.environ), tree)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           f"--junitxml={report}", *pytest_args]
    print(f"# running ({tree}): pytest {' '.join(pytest_args)}", file=sys.stderr, flush=True)
    began = time.monotonic()
    subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    wall = time.monotonic() - began
    modules: dict[str, float] = defaultdict(float)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed = []
    if report.is_file():
        for case in ET.parse(report).getroot().iter("testcase"):
            module = case.get("classname", "?").split(".")[-1]
            modules[module] += float(case.get("time") or 0)
            if case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
                failed.append(f"{module}::{case.get('name')}")
            elif case.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
    return {"modules": dict(modules), "wall": wall, "counts": counts, "failed": failed,
            "reported": report.is_file()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV",
                        help="also run the tests of this git revision, on its package")
    parser.add_argument("--runs", type=int, default=1, metavar="N",
                        help="runs of each (default 1; the median is printed)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    results: dict[str, list[dict]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="fabreg-tests-bench-") as tmp:
        work = Path(tmp)

        def run_all(trees: dict[str, Path]) -> None:
            for k in range(args.runs):
                for label, tree in trees.items():
                    results[label].append(run_tests(tree, args.pytest_args,
                                                    work / f"{label}-{k}.xml"))

        if args.before:
            with checked_out(REPO, args.before, work / "before") as before:
                run_all({args.before: before, "now": REPO})
        else:
            run_all({"now": REPO})
    labels = list(results)
    modules = sorted({m for runs in results.values() for r in runs for m in r["modules"]})

    def median(label: str, module: str | None = None) -> float:
        return statistics.median(r["wall"] if module is None else r["modules"].get(module, 0.0)
                                 for r in results[label])

    print(f"# seconds per test module (median of {args.runs} run(s); setup + call + "
          "teardown of its tests), and the whole run's wall time")
    header = f"{'module':34}" + "".join(f" {label:>12}" for label in labels)
    if len(labels) == 2:
        header += f" {'now/before':>11}"
    print(header)
    rows = [(m, [median(label, m) for label in labels]) for m in modules]
    rows.append(("(wall time of the run)", [median(label) for label in labels]))
    for name, figures in rows:
        line = f"{name:34}" + "".join(f" {f:12.1f}" for f in figures)
        if len(figures) == 2:
            line += f" {figures[1] / figures[0]:10.2f}x" if figures[0] > 0 else f" {'-':>11}"
        print(line)
    print("\n# each run: wall time, outcome")
    bad = 0
    for label in labels:
        for k, r in enumerate(results[label]):
            c = r["counts"]
            print(f"{label:12} run {k + 1}: {r['wall']:7.1f} s  {c['passed']} passed, "
                  f"{c['failed']} failed, {c['skipped']} skipped"
                  + ("" if r["reported"] else "  (pytest wrote no report)"))
            for name in r["failed"]:
                print(f"    failed: {name}")
            bad += c["failed"] + (not r["reported"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Which ucx_perftest figures measure the transport: their spread over back-to-back runs.

A figure worth a reference moves little between healthy runs, so that the band around it can
be tight enough to catch a fault. This bench runs each ucx_perftest test the suite judges
``--runs`` times back to back on loopback through the check's own driver
(``fabreg.run.client_server``, nothing else running) and prints, per test, transport and
figure, side by side: the lowest, median and highest value, the highest over the lowest, and
the share of runs more than 2x the lowest (a second mode). Usage (repository root):

    .venv/bin/python ci/bench/ucx_figure_stability_bench.py --runs 30 [--transports tcp,shm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from fabreg.run import client_server
from fabreg.run import transport as tx
from fabreg.run.client_server import Figure, Plan

#: test -> (message size, iterations, the time figure's name): what checks/ucx_perftest.py runs.
TESTS = {
    "tag_lat": (8, 10000, "latency"), "ucp_am_lat": (8, 10000, "latency"),
    "tag_bw": (65536, 2000, "overhead"), "ucp_put_bw": (65536, 2000, "overhead"),
    "ucp_am_bw": (65536, 2000, "overhead"),
}
FIELDS = {"p50": ("p50_usec", True), "average": ("average_usec", True),
          "bandwidth": ("bandwidth_average_decimal_mbs", False),
          "msgrate": ("msgrate_average", False)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--transports", default="tcp,shm")
    parser.add_argument("--tests", default=",".join(TESTS))
    args = parser.parse_args()
    if not shutil.which("ucx_perftest"):
        print("ucx_perftest is not installed (apt-get install ucx-utils)", file=sys.stderr)
        return 2
    print(f"{'test':<11} {'transport':<9} {'figure':<10} {'lowest':>9} {'median':>9} "
          f"{'highest':>9} {'high/low':>9} {'>2x low':>8}")
    for transport in args.transports.split(","):
        for test in args.tests.split(","):
            size, iterations, kind = TESTS[test]
            figures = {name: Figure("ucx_perftest", field, low)
                       for name, (field, low) in FIELDS.items()}
            plan = Plan(server=["ucx_perftest", "-p", "{port}"],
                        client=["ucx_perftest", "{server_host}", "-p", "{port}", "-t", test,
                                "-s", str(size), "-n", str(iterations)],
                        figures=figures, repeats=args.runs)
            os.environ["UCX_TLS"] = tx.ucx_tls(transport)
            work = Path(tempfile.mkdtemp(prefix="fabreg-ucx-bench-"))
            try:
                result = client_server.run(plan, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            for name, (_, lower_is_better) in FIELDS.items():
                values = sorted(result["values"][name])
                if not values:
                    continue
                best = values[0] if lower_is_better else values[-1]
                worst = values[-1] if lower_is_better else values[0]
                ratio = (worst / best if lower_is_better else best / worst) if min(
                    best, worst) > 0 else float("inf")
                modes = sum(1 for v in values if (v > 2 * best if lower_is_better
                                                   else v < best / 2)) / len(values)
                label = f"{kind} p50" if name == "p50" else (
                    f"{kind} avg" if name == "average" else name)
                print(f"{test:<11} {transport:<9} {label:<10} {values[0]:>9.3g} "
                      f"{statistics.median(values):>9.3g} {values[-1]:>9.3g} {ratio:>9.1f} "
                      f"{modes:>8.0%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark: the store at sweep scale, the current layout side by side with the first one.

Generates nightly perflogs of the `Sweep` check (``pair_table`` in the layout the check logs,
from the header of the real ``tests/data/sweep/healthy.log``) for a fabric of N nodes swept
with the ``xor`` pattern (ceil(log2 N) rounds of N ordered pairs; bandwidth, latency and
median latency per pair, loopback and memory controls per node; 2 % lognormal noise), with
one link at half speed in the newest night. For each N and each layout, through the real CLI:
the first ingest of all nights but the newest, the newest night appended, ``fabreg isolate``
and ``fabreg trends`` on the result, and (current layout) the nightly
``fabreg trends --incremental`` after the appended night (its state made by a first run before
it, whose wall time and peak memory are printed: it reads every series whole);
(with the open regressions and suspects it counts: the newest night's capped link is 6
series, both directions' bandwidth and latencies; the rest are false alarms on noise),
the suspects ``fabreg isolate`` names beside those the sweep job's own verdict names (its
localisation over the newest night's pair table),
then (current layout) ``fabreg report`` and ``fabreg export prometheus``, which read the
verdicts that nightly run kept; the store's bytes per value, and a year projected: the
store as it is plus the appended night's growth for each night to a year (the series,
written once, are not counted again).

The first layout runs from a git worktree of ``--baseline`` (the last commit that wrote it),
so both columns come from one run of this script on one machine.

Also a year of nightly check perflogs (``fabreg.review.synthetic``, 1,000 series per
``--checks-scale``): ingest, trends and bytes per value in both layouts.

Usage: python ci/bench/store_scale_bench.py [--nodes 1000,10000] [--nights 30,3]
       [--checks-scale 1] [--baseline 272b8d8] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from worktree import checked_out

ROOT = Path(__file__).resolve().parents[2]
HEADER_SOURCE = ROOT / "tests" / "data" / "sweep" / "healthy.log"
DAY = 86400.0
START = 1767232800.0  # 2026-01-01T02:00:00Z


def xor_pairs(n: int) -> list[tuple[int, int, int]]:
    """(round, sender, receiver) of the xor pattern on n nodes."""
    out = []
    for k in range(1, 1 << max(1, math.ceil(math.log2(n)))):
        if k >= n:
            break
        out += [(k, i, i ^ k) for i in range(n) if (i ^ k) < n]
        if len({r for r, _, _ in out}) >= math.ceil(math.log2(n)):
            break
    return out


def night_line(template: list[str], n: int, night: int, pairs, rng, slow: tuple[int, int] | None
               ) -> str:
    names = [f"nid{i:05d}" for i in range(n)]
    rows: list[list[object]] = []
    for i in range(n):
        rows.append([0, "loopback", names[i], names[i], round(3000 * rng.lognormal(0, 0.02), 3),
                     round(5.4 * rng.lognormal(0, 0.02), 3), None])
        rows.append([0, "memory", names[i], names[i], round(20000 * rng.lognormal(0, 0.02), 3),
                     None, None])
    bw = 12000 * rng.lognormal(0, 0.02, len(pairs))
    lat = 1.8 * rng.lognormal(0, 0.02, len(pairs))
    for j, (r, a, b) in enumerate(pairs):
        factor = 0.5 if slow is not None and {a, b} == set(slow) else 1.0
        rows.append([r, "xor", names[a], names[b], round(float(bw[j]) * factor, 3),
                     round(float(lat[j]) / factor, 3), round(float(lat[j]) * 0.98 / factor, 3)])
    fields = list(template)
    when = START + night * DAY
    fields[0] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(when))
    fields[2] = f"Sweep %transport=ucx_rc %nodes={n}"
    fields[3], fields[4] = "bench", "compute"
    fields[6] = str(100000 + night)
    fields[7] = f"nid[00000-{n - 1:05d}]"
    fields[20] = fields[21] = fields[22] = str(n)
    fields[24] = json.dumps({"fields": ["round", "pattern", "node_a", "node_b", "bandwidth",
                                        "latency", "latency_p50"], "rows": rows},
                            separators=(",", ":"))
    fields[25] = "xor"
    fields[30] = ""  # suspects_named: the check's own verdict is not what is measured here
    return "|".join(fields) + "\n"


def generate(root: Path, n: int, nights: int, seed: int = 1) -> tuple[Path, str, int]:
    """The perflog of all nights but the newest, the newest night's line, values per night."""
    header, line = HEADER_SOURCE.read_text().splitlines()[:2]
    template = line.split("|")
    pairs = xor_pairs(n)
    rng = np.random.default_rng(seed)
    log = root / "bench" / "compute" / "Sweep.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        out.write(header + "\n")
        for night in range(nights - 1):
            out.write(night_line(template, n, night, pairs, rng, None))
    newest = night_line(template, n, nights - 1, pairs, rng, (1, 3))
    per_night = 3 * len(pairs) + 3 * n
    return log, newest, per_night


def in_job_suspects(newest: str) -> list[str]:
    """What the sweep check's own verdict names in the newest night: the job's localisation
    (``fabreg.run.sweep_suspects.localise_sweep``) over the pair table it logged (the table
    keeps no rank numbers: the localisation reads none)."""
    from fabreg import isolation
    from fabreg.run.parsers.probes import SweepResult, SweepRow
    from fabreg.run.sweep_suspects import localise_sweep

    table = json.loads(newest.split("|")[24])
    rows = [dict(zip(table["fields"], row)) for row in table["rows"]]
    nan = float("nan")
    result = SweepResult("xor", len(rows), 0, 0, 0.0, [
        SweepRow(r["round"], r["pattern"], r["node_a"], r["node_b"], 0, 0, r["bandwidth"],
                 nan if r["latency"] is None else r["latency"],
                 nan if r["latency_p50"] is None else r["latency_p50"]) for r in rows])
    suspects = isolation.suspects_of(localise_sweep(result))
    return sorted({f"{s.kind} {' <-> '.join(s.nodes)}" for s in suspects})


#: Seconds one command may take (``--timeout``); one that takes longer is reported as inf.
TIMEOUT = 900.0


def fabreg(python_path: Path, args: list[str], db: Path) -> tuple[float, str, float]:
    """(wall seconds, stdout, peak resident MB of the command's main process)."""
    env = dict(os.environ, PYTHONPATH=str(python_path), FABREG_DB=str(db))
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fabreg.cli", *args], env=env,
                                stdout=out, stderr=err, text=True)
        timer = threading.Timer(TIMEOUT, proc.kill)
        timer.start()
        try:  # wait4: this command's own usage (the processes it waited for included)
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if wall >= TIMEOUT:
            return math.inf, "", math.nan
        peak = usage.ru_maxrss / 1024
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode not in (0, 1):
        sys.exit(f"fabreg {' '.join(args)} ({python_path}) failed ({proc.returncode}): "
                 f"{stderr[-1500:]}")
    return wall, stdout, peak


def store_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def measure(src: Path, work: Path, log: Path, newest: str, values: int,
            with_trends: bool, incremental: bool) -> dict[str, object]:
    db = work / "fabreg.db"
    head = log.stat().st_size  # a year at 10,000 nodes is a 3.2 GB perflog: not read here
    first = fabreg(src, ["ingest", "-q", str(log.parent.parent.parent)], db)[0]
    first_trends = first_peak = math.nan
    if incremental:  # the state the nightly trends starts from (this run reads all)
        first_trends, _, first_peak = fabreg(
            src, ["trends", "--incremental", "-q", "--format", "json"], db)
    before = store_bytes(db)
    with log.open("a") as out:
        out.write(newest)
    append = fabreg(src, ["ingest", "-q", str(log.parent.parent.parent)], db)[0]
    nightly, alarms = math.nan, "-"
    if incremental:
        nightly, said, _ = fabreg(src, ["trends", "--incremental", "-q"], db)
        found = re.search(r"(\d+) open regression\(s\), (\d+) suspect\(s\)", said)
        alarms = f"{found[1]}/{found[2]}" if found else "?"
    report = exported = math.nan
    if incremental:  # the readers after the nightly gate (the verdicts it kept)
        report = fabreg(src, ["report", "-q", "--out", str(work / "report")], db)[0]
        exported = fabreg(src, ["export", "prometheus", "--out", str(work / "fabreg.prom")],
                          db)[0]
    os.truncate(log, head)  # the next layout starts from the same files
    isolate, out, _ = fabreg(src, ["isolate"], db)
    trends = fabreg(src, ["trends", "--format", "json"], db)[0] if with_trends else math.nan
    suspects = sorted({line.split("SUSPECT", 1)[1].strip().split(":")[0]
                       for line in out.splitlines() if "SUSPECT" in line})
    size = store_bytes(db)
    return {"first": first, "append": append, "isolate": isolate, "trends": trends,
            "first_trends": first_trends, "first_peak": first_peak,
            "nightly": nightly, "alarms": alarms, "report": report, "export": exported,
            "bytes": size, "per_value": size / values, "night_bytes": size - before,
            "suspects": suspects}


def measure_checks(src: Path, work: Path, perflogs: Path, values: int) -> dict[str, float]:
    """A year of nightly check perflogs (``synthetic.generate``): ingest, trends, size."""
    db = work / "fabreg.db"
    first = fabreg(src, ["ingest", "-q", str(perflogs)], db)[0]
    trends = fabreg(src, ["trends", "--format", "json"], db)[0]
    size = store_bytes(db)
    return {"first": first, "trends": trends, "bytes": size, "per_value": size / values}


def checks_year(base: Path, layouts: dict[str, Path], scale: int) -> None:
    from fabreg.review.synthetic import generate as generate_checks

    perflogs = base / f"checks{scale}" / "perflogs"
    data = generate_checks(perflogs, sessions=365, partitions=scale, fmt="reframe")
    values = sum(int((~np.isnan(t.values)).sum()) for t in data.series)
    rows = {}
    for name, src in layouts.items():
        work = base / f"checks{scale}" / name.replace(" ", "-")
        work.mkdir(parents=True, exist_ok=True)
        for old in work.glob("fabreg.db*"):
            old.unlink()
        rows[name] = r = measure_checks(src, work, perflogs, values)
        print(f"{'checks':>6} {365:>6} {values:>10}  {name:<13} {r['per_value']:>8.1f} "
              f"{r['bytes'] / 1e6:>9.1f} {r['first']:>9.1f} {'':>10} {'':>9} "
              f"{r['trends']:>9.1f}", flush=True)
    if len(rows) < 2:
        return
    old, new = rows["first layout"], rows["current"]
    print(f"{'':>25}  {'ratio':<13} {new['per_value'] / old['per_value']:>8.2f} {'':>9} "
          f"{new['first'] / old['first']:>9.2f} {'':>10} {'':>9} "
          f"{new['trends'] / old['trends']:>9.2f}", flush=True)
    print(f"{'':>25}  a year of nightly check perflogs: {len(data.series)} series", flush=True)


def main() -> int:
    global TIMEOUT
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="1000,10000")
    parser.add_argument("--nights", default="30,3",
                        help="nights generated per node count (the newest is the appended one)")
    parser.add_argument("--baseline", default="272b8d8",
                        help="the commit whose code writes the first layout")
    parser.add_argument("--checks-scale", type=int, default=1,
                        help="also a year of check perflogs, 1,000 series per 1 (0: none)")
    parser.add_argument("--trends-max-nodes", type=int, default=1000,
                        help="time `fabreg trends` only on sweeps of at most this many nodes "
                             "(it reads every value: a year at 10,000 nodes, 190 s)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT,
                        help="seconds one fabreg command may take; longer prints inf")
    parser.add_argument("--layouts", default="first layout,current",
                        help="which layouts to measure (comma-separated)")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    args = parser.parse_args()
    nodes = [int(x) for x in args.nodes.split(",")]
    nights = [int(x) for x in args.nights.split(",")]
    if len(nights) != len(nodes):
        sys.exit("store_scale_bench: give one --nights value per --nodes value")
    base = Path(args.keep or tempfile.mkdtemp(prefix="fabreg-store-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    old_tree = base / "baseline"
    baseline = ExitStack()  # the worktree, removed in the ``finally`` below
    baseline.enter_context(checked_out(ROOT, args.baseline, old_tree))
    TIMEOUT = args.timeout
    layouts = {name: src for name, src in
               {"first layout": old_tree / "src", "current": ROOT / "src"}.items()
               if name in args.layouts.split(",")}
    print(f"{'nodes':>6} {'nights':>6} {'values':>10}  {'layout':<13} {'B/value':>8} "
          f"{'store MB':>9} {'ingest s':>9} {'+1 night s':>10} {'isolate s':>9} "
          f"{'trends s':>9} {'nightly s':>9} {'open/susp':>9} {'report s':>8} {'export s':>8} "
          f"{'MB/night':>8} "
          f"{'year GB':>8} {'1st trends s':>12} {'1st peak MB':>11}  suspects (isolate; the job's)")
    try:
        if args.checks_scale:
            checks_year(base, layouts, args.checks_scale)
        for n, k in zip(nodes, nights):
            data = base / f"n{n}"
            log, newest, per_night = generate(data / "perflogs", n, k)
            in_job = ", ".join(in_job_suspects(newest)) or "-"
            values = per_night * k
            rows = {}
            for name, src in layouts.items():
                work = data / name.replace(" ", "-")
                work.mkdir(exist_ok=True)
                for old in work.glob("fabreg.db*"):
                    old.unlink()
                rows[name] = r = measure(src, work, log, newest, values,
                                         n <= args.trends_max_nodes, name == "current")
                # what the store holds now, plus one night's growth for each night to a year
                year = (r["bytes"] + r["night_bytes"] * (365 - k)) / 1e9
                print(f"{n:>6} {k:>6} {values:>10}  {name:<13} {r['per_value']:>8.1f} "
                      f"{r['bytes'] / 1e6:>9.1f} {r['first']:>9.1f} {r['append']:>10.2f} "
                      f"{r['isolate']:>9.2f} {r['trends']:>9.1f} {r['nightly']:>9.1f} "
                      f"{r['alarms']:>9} {r['report']:>8.1f} {r['export']:>8.1f} "
                      f"{r['night_bytes'] / 1e6:>8.1f} "
                      f"{year:>8.2f} {r['first_trends']:>12.1f} {r['first_peak']:>11.0f}  "
                      f"{', '.join(r['suspects']) or '-'}; {in_job}", flush=True)
            if len(rows) == 2:
                old, new = rows["first layout"], rows["current"]
                print(f"{'':>25}  {'ratio':<13} {new['per_value'] / old['per_value']:>8.2f} "
                      f"{'':>9} {new['first'] / old['first']:>9.2f} "
                      f"{new['append'] / old['append']:>10.2f} "
                      f"{new['isolate'] / old['isolate']:>9.2f} "
                      f"{new['trends'] / old['trends']:>9.2f}", flush=True)
            print(f"{'':>25}  a year of nightly sweeps of {n} nodes: {per_night} values a "
                  f"night, {per_night * 365 / 1e6:.1f} M values", flush=True)
    finally:
        baseline.close()
        if not args.keep:  # its stores and perflogs: gigabytes at 10,000 nodes
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

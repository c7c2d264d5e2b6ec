#!/usr/bin/env python3
"""Benchmark: a site's ReFrame history, read before and after; and the rate of reading it.

1. **Values read of values present**, per collected layout: every file of
   tests/data/real/perflogs/ (public perflogs and run reports, INDEX.md gives the values a
   person counts in each) read by the perflog reader of a given commit (``--before``, default
   the last commit without the layouts of issue 33) and by the current one, side by side.
2. **Ingest rate**: a five-year headerless history (ReFrame 3.x default layout, 100 series,
   one value each per night: 182,500 lines) against the same values in ReFrame 4.x's default
   header layout, through the real ``fabreg ingest`` into a fresh store, values per second.

Usage: python ci/bench/history_formats_bench.py [--before REV] [--years 5] [--series 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from fabreg.review import perflog, run_report

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "real" / "perflogs"
#: The last commit whose reader knew header perflogs in '|' columns and results DBs only.
BEFORE = "738f071"


def old_reader(rev: str):
    """The perflog module as it was at ``rev`` (loaded beside the current one)."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:src/fabreg/review/perflog.py"],
                            capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader(f"perflog_{rev}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(source, f"{rev}:perflog.py", "exec"), module.__dict__)  # noqa: S102
    return module


def index_rows() -> list[tuple[str, str, int]]:
    """(file, layout, values a person counts) from the corpus index."""
    rows = []
    for line in (CORPUS / "INDEX.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) >= 4 and cells[0].startswith("`") and cells[3].isdigit():
            rows.append((cells[0].strip("`"), cells[2], int(cells[3])))
    return rows


def read_count(module, path: Path) -> int:
    if path.suffix == ".json":
        if not hasattr(module, "Inputs"):  # before: a run report was read as a perflog
            return len(module.read_perflog_file(path)[0])
        return len(run_report.read_run_report(path).samples)
    return len(module.read_perflog_file(path)[0])


def corpus_table(before_rev: str) -> None:
    before = old_reader(before_rev)
    rows = index_rows()
    print(f"# values read of values present, per file of {CORPUS.relative_to(REPO)} "
          f"(before = the reader at {before_rev})")
    print(f"{'file':58} {'present':>8} {'before':>7} {'after':>6}")
    totals = [0, 0, 0]
    for name, _layout, present in rows:
        path = CORPUS / name
        b, a = read_count(before, path), read_count(perflog, path)
        totals = [totals[0] + present, totals[1] + b, totals[2] + a]
        print(f"{name:58} {present:>8} {b:>7} {a:>6}")
    print(f"{'all ' + str(len(rows)) + ' files':58} {totals[0]:>8} {totals[1]:>7} "
          f"{totals[2]:>6}")


def write_history(root: Path, years: int, series: int, headerless: bool) -> int:
    """One value per series per night; return the number of values written."""
    start = datetime(2020, 1, 1, 2, 0, tzinfo=timezone.utc)
    nights = 365 * years
    part = root / "site" / "batch"
    part.mkdir(parents=True)
    header = ("job_completion_time|version|display_name|system|partition|environ|jobid|result|"
              "bw_value|bw_unit|bw_ref|bw_lower_thres|bw_upper_thres|bw_result")
    per_file = 10  # 10 tests of 10 parameter values each
    for f in range(series // per_file):
        lines = [] if headerless else [header]
        for night in range(nights):
            when = (start + timedelta(days=night)).isoformat()
            for p in range(per_file):
                value = 1000.0 + 10 * f + p + (night % 7) * 0.5
                name = f"Stream{f}"
                if headerless:
                    lines.append(f"{when}|reframe 3.12.0|{name} %size={p} on site:batch using "
                                 f"gnu|jobid={night * 1000 + f}|bw={value}|"
                                 f"ref=1000 (l=-0.1, u=0.1)|MB/s")
                else:
                    lines.append(f"{when}|4.10.4|{name} %size={p}|site|batch|gnu|"
                                 f"{night * 1000 + f}|pass|{value}|MB/s|1000|-0.1|0.1|pass")
        (part / f"Stream{f}.log").write_text("\n".join(lines) + "\n")
    return nights * (series // per_file) * per_file


def ingest_rate(years: int, series: int) -> None:
    print(f"\n# ingest rate: {years} years x {series} series, one value per series per night, "
          "real `fabreg ingest` into a fresh store")
    print(f"{'layout':44} {'values':>9} {'stored':>9} {'seconds':>8} {'values/s':>9}")
    rates = {}
    for label, headerless in (("ReFrame 3.x default, headerless", True),
                              ("ReFrame 4.x default, header", False)):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            values = write_history(root / "logs", years, series, headerless)
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "fabreg.cli", "ingest", "-q",
                                   "--db", str(root / "f.db"), str(root / "logs")],
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - t0
            stored = re.search(r"(\d+) new value\(s\)", proc.stdout)
            rates[label] = values / seconds
            print(f"{label:44} {values:>9} {stored.group(1) if stored else '?':>9} "
                  f"{seconds:>8.1f} {values / seconds:>9.0f}")
    first, second = rates.values()
    print(f"ratio headerless / header: {first / second:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="commit of the 'before' reader")
    parser.add_argument("--years", type=int, default=5)
    parser.add_argument("--series", type=int, default=100)
    args = parser.parse_args()
    corpus_table(args.before)
    ingest_rate(args.years, args.series)


if __name__ == "__main__":
    main()

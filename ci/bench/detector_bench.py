#!/usr/bin/env python3
"""Benchmark: the trend detector's false alarms and detection power, by series length, at
two revisions side by side.

A sweep gives every link its own series, and a new link (a recabled switch) or a young
store has few runs: at 450,000 link series a night, a false alarm rate of 0.3 % is 1,350
false regressions. Series of pure lognormal noise (``--noise``, 2 % by default, as the
sweep's links show) of 10 to 90 runs: the share the detector calls a regression, a suspect
or an improvement. Then series with one worse level at the end (a shift of 3 to 20 %,
3 to 10 runs after it): the share it calls a regression, or at least a suspect. Each
figure from ``--series`` series (the same seeded values at both revisions), through
``fabreg.review.trends.analyse``.

The code at ``--before`` runs from a git worktree (``PYTHONPATH``), so both columns come
from one run of this script on one machine.

Last, at this revision only: one night of ``--family`` links of one sweep figure (450,000, a
10,000-node sweep), pure noise at 14 and 62 runs, judged alone and as a family
(``fabreg.review.trends.family_wise``): the open regressions a night; and the share of worse
links (half speed, and 5 to 20 % less) each way calls a regression.

Usage: python ci/bench/detector_bench.py [--before REV] [--series 10000] [--noise 0.02]
       [--family 450000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from worktree import checked_out

ROOT = Path(__file__).resolve().parents[2]

#: (runs) of the series of pure noise
NULL_LENGTHS = (10, 14, 30, 62, 90)
#: (shift, runs after it, runs in all) of the series with one worse level at the end
SHIFTS = ((0.20, 3, 14), (0.10, 3, 20), (0.10, 5, 30), (0.05, 5, 30), (0.05, 10, 62),
          (0.03, 10, 62))
#: (runs) of a family's links of pure noise; (shift, runs after it, runs in all) of its
#: worse links: a link at half speed, and smaller drops a few nights on and later
FAMILY_LENGTHS = (14, 62)
FAMILY_SHIFTS = ((0.50, 3, 14), (0.20, 3, 14), (0.20, 6, 17), (0.20, 3, 30), (0.10, 3, 30),
                 (0.10, 10, 37), (0.05, 10, 62), (0.05, 20, 72))


def measure(series: int, noise: float, seed: int, family: int = 0) -> dict[str, object]:
    """Run in the child: the figures of the ``fabreg`` on ``sys.path``."""
    import numpy as np

    from fabreg.review import trends
    from fabreg.review.store import SeriesData, SeriesKey

    rng = np.random.default_rng(seed)

    def series_of(i: int, values: np.ndarray) -> SeriesData:
        n = len(values)
        return SeriesData(i, SeriesKey("Sweep", (), "s", "p", "e", "link_bandwidth"), "MB/s",
                          np.arange(n) * 86400.0, values, np.full(n, np.nan),
                          np.full(n, np.nan), np.full(n, np.nan), [""] * n,
                          [f"s{j}" for j in range(n)], [""] * n)

    def verdict(values: np.ndarray) -> str:
        return trends.analyse([series_of(0, values)])[0].verdict

    null = {}
    for n in NULL_LENGTHS:
        said = [verdict(12000 * np.exp(rng.normal(0, noise, n))) for _ in range(series)]
        null[n] = {v: said.count(v) / series * 100
                   for v in (trends.REGRESSION, trends.SUSPECT, trends.IMPROVEMENT)}
    power = {}
    for shift, after, n in SHIFTS:
        said = []
        for _ in range(series // 4):
            values = 12000 * np.exp(rng.normal(0, noise, n))
            values[n - after:] *= 1 - shift
            said.append(verdict(values))
        power[f"{shift}/{after}/{n}"] = {
            "regression": said.count(trends.REGRESSION) / len(said) * 100,
            "flagged": (said.count(trends.REGRESSION) + said.count(trends.SUSPECT))
            / len(said) * 100}
    out: dict[str, object] = {"null": null, "power": power}
    if family and hasattr(trends, "family_wise"):
        out["family"] = family_figures(family, noise, rng, make=series_of)
    return out


def family_figures(family: int, noise: float, rng, make) -> dict[str, object]:
    """One night of ``family`` links of one sweep figure, judged alone and as a family: the
    open regressions of pure noise, and the share of worse links caught."""
    import numpy as np

    from fabreg.review import trends

    def judged(values: list) -> tuple[list[str], list[str]]:
        series = [make(i, v) for i, v in enumerate(values)]
        alone = [v.verdict for v in trends.analyse(series)]
        sizes = dict.fromkeys(range(len(series)), family)
        return alone, [v.verdict for v in trends.analyse(series, families=sizes)]

    null = {}
    for n in FAMILY_LENGTHS:
        alone = together = 0
        for start in range(0, family, 50000):  # in parts: the values of one part in memory
            part = [12000 * np.exp(rng.normal(0, noise, n))
                    for _ in range(min(50000, family - start))]
            a, t = judged(part)
            alone += a.count(trends.REGRESSION)
            together += t.count(trends.REGRESSION)
        null[n] = {"alone": alone, "family": together}
    power = {}
    for shift, after, n in FAMILY_SHIFTS:
        part = []
        for _ in range(2000):
            values = 12000 * np.exp(rng.normal(0, noise, n))
            values[n - after:] *= 1 - shift
            part.append(values)
        a, t = judged(part)
        power[f"{shift}/{after}/{n}"] = {"alone": a.count(trends.REGRESSION) / 20,
                                         "family": t.count(trends.REGRESSION) / 20}
    return {"null": null, "power": power}


def run_at(src: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    proc = subprocess.run([sys.executable, __file__, "--child", "--series", str(args.series),
                           "--noise", str(args.noise), "--seed", str(args.seed),
                           "--family", str(args.family)],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="5f230aa~1",
                        help="the revision to compare with (default: the normal tail)")
    parser.add_argument("--series", type=int, default=10000)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--family", type=int, default=450000,
                        help="links of one sweep figure judged as a family, now only "
                             "(default 450,000: a 10,000-node sweep; 0: none)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.series, args.noise, args.seed, args.family)))
        return 0
    with tempfile.TemporaryDirectory(prefix="fabreg-detector-bench-") as tmp:
        with checked_out(ROOT, args.before, Path(tmp) / "before") as tree:
            before = run_at(tree / "src", args)
    now = run_at(ROOT / "src", args)
    print(f"pure noise ({args.noise:.0%} lognormal, {args.series} series each): % of series "
          f"called regression / suspect / improvement, at {args.before} and now")
    print(f"{'runs':>5}  {'before':>20}  {'now':>20}  {'false regressions+suspects':>27}")
    for n in NULL_LENGTHS:
        b, c = before["null"][str(n)], now["null"][str(n)]
        bad_b, bad_c = b["regression"] + b["suspect"], c["regression"] + c["suspect"]
        ratio = f"{bad_c / bad_b:.2f}x" if bad_b else "-"
        print(f"{n:>5}  {b['regression']:>6.2f} {b['suspect']:>6.2f} {b['improvement']:>6.2f}"
              f"  {c['regression']:>6.2f} {c['suspect']:>6.2f} {c['improvement']:>6.2f}"
              f"  {bad_b:>9.2f} -> {bad_c:<6.2f} {ratio:>7}")
    print(f"\none worse level at the end ({args.series // 4} series each): % called a "
          "regression / a regression or suspect")
    print(f"{'shift/after/runs':>17}  {'before':>13}  {'now':>13}")
    for shift, after, n in SHIFTS:
        key = f"{shift}/{after}/{n}"
        b, c = before["power"][key], now["power"][key]
        print(f"{f'{shift:.0%} / {after} / {n}':>17}  {b['regression']:>6.1f} {b['flagged']:>6.1f}"
              f"  {c['regression']:>6.1f} {c['flagged']:>6.1f}")
    if "family" in now:
        fam = now["family"]
        print(f"\none night of a family of {args.family:,} links of one sweep figure (now): "
              "open regressions of pure noise, judged alone / as a family")
        for n in FAMILY_LENGTHS:
            f = fam["null"][str(n)]
            print(f"{n:>5} runs  {f['alone']:>7,} / {f['family']:<7,}")
        print("worse links (2,000 each): % called a regression, alone / as a family")
        for shift, after, n in FAMILY_SHIFTS:
            f = fam["power"][f"{shift}/{after}/{n}"]
            print(f"{f'{shift:.0%} / {after} / {n}':>17}  {f['alone']:>6.1f} "
                  f"{f['family']:>6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

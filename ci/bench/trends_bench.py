#!/usr/bin/env python3
"""Benchmark: ingest (first, unchanged, one more night) + trends on a year of nightly
perflogs, and detection quality vs Apache Otava.

Generates 365 nightly sessions for 1,000 series per 1x in ReFrame's default perflog format
(`--format fabreg` for reframe-config.py's): 3 % noise, 1 % lone outliers, 0.2 % gaps, a
quarter of the series with one known shift of 10-30 %, 5 % with two odd values at the very
end. Runs the real CLI (`fabreg ingest`, `fabreg trends --format json`, `fabreg report`) as
child processes. Per scale (default 1x and 10x): the first ingest of the year but its last
night, the same ingest again on the unchanged tree, the last night appended and ingested,
trends on the whole year; wall and CPU time, peak memory, ratios to the first ingest.
Detection quality at 1x next to Apache Otava's on the same series. With ``--nightly N``, the
year's last N nights replayed one at a time into a store of the rest: each night's
``trends --incremental`` against a full ``trends`` on the same store, the wall times and the
verdicts of both (recall and false alarms at 1x) side by side.

Otava is a benchmark-only tool: it runs from its own virtualenv, never a dependency
of fabreg. Give its interpreter with OTAVA_PYTHON, or let this script create a venv
(`--otava-venv DIR`, default under the temp dir) with `pip install apache-otava`.

Usage: python ci/bench/trends_bench.py [--scales 1,10] [--repeat 2] [--no-otava] [--no-report]
       [--nightly N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fabreg.review import trend_state, trends
from fabreg.review.synthetic import DAY, EPOCH, Dataset, generate

HERE = Path(__file__).resolve().parent
FABREG = [sys.executable, "-m", "fabreg.cli"]
WINDOW = 3  # a shift counts as found when reported within this many runs of the truth

OTAVA_SCRIPT = r"""
import json, sys, time
from otava.analysis import compute_change_points
series = json.load(open(sys.argv[1]))
configs = json.loads(sys.argv[2])
out = []
for cfg in configs:
    t0 = time.process_time(); w0 = time.perf_counter()
    found = []
    for values in series:
        cps, _ = compute_change_points(values, window_len=cfg["window_len"],
                                       max_pvalue=cfg["max_pvalue"],
                                       min_magnitude=cfg["min_magnitude"])
        found.append([[int(c.index), float(c.stats.forward_change_percent())] for c in cps])
    out.append({"config": cfg, "cpu": time.process_time() - t0,
                "wall": time.perf_counter() - w0, "found": found})
json.dump(out, sys.stdout)
"""


class ChildTimer:
    """CPU time and peak RSS of the children started since the last call."""

    def __init__(self) -> None:
        self.last = resource.getrusage(resource.RUSAGE_CHILDREN)

    def lap(self) -> tuple[float, float]:
        now = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (now.ru_utime + now.ru_stime) - (self.last.ru_utime + self.last.ru_stime)
        self.last = now
        return cpu, now.ru_maxrss / 1024


def fabreg(args: list[str], env: dict[str, str]) -> tuple[float, int, bytes]:
    start = time.perf_counter()
    proc = subprocess.run(FABREG + args, env=env, capture_output=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"fabreg {' '.join(args)} failed ({proc.returncode}): "
                 f"{proc.stderr.decode()[-2000:]}")
    return time.perf_counter() - start, proc.returncode, proc.stdout


def session_index(iso: str) -> int:
    from fabreg.review.perflog import parse_time

    return int((parse_time(iso) - EPOCH) // DAY)


def truth_key(t) -> tuple:
    return (t.check, t.perfvar, t.mpi, t.transport, str(t.nodes), t.partition)


def score(found: dict[tuple, list[tuple[int, bool]]], data: Dataset) -> dict[str, float]:
    """found: truth key -> [(session index of the new level, is_regression)]."""
    hits = shifted = alarms = unchanged = extra = 0
    for t in data.series:
        reports = found.get(truth_key(t), [])
        if t.shift == 0.0:
            unchanged += 1
            alarms += bool(reports)
            continue
        shifted += 1
        regression = (t.shift > 0) == t.lower_is_better
        good = [r for r in reports if abs(r[0] - t.shift_session) <= WINDOW
                and r[1] == regression]
        hits += bool(good)
        extra += len(reports) - len(good[:1])
    return {"recall": hits / max(shifted, 1), "false_alarm": alarms / max(unchanged, 1),
            "extra": extra, "shifted": shifted, "unchanged": unchanged}


def fabreg_found(trends_json: bytes) -> tuple[dict[tuple, list[tuple[int, bool]]],
                                               dict[tuple, str]]:
    """(changes that count: regressions and improvements; verdict of the last change, by
    series, suspects included). A suspect fails no gate unless asked (--fail-on suspect)."""
    found: dict[tuple, list[tuple[int, bool]]] = {}
    last: dict[tuple, str] = {}
    for change in json.loads(trends_json):
        s = change["series"]
        key = (s["test"], s["perfvar"], s["environ"], s["parameters"].get("transport"),
               s["parameters"].get("num_nodes"), s["partition"])
        last[key] = change["verdict"]
        if change["verdict"] == "suspect":
            continue
        found.setdefault(key, []).append((session_index(change["time"]),
                                          change["verdict"] == "regression"))
    return found, last


def clean(t) -> tuple[np.ndarray, np.ndarray]:
    """Values without gaps and their session indices."""
    ok = ~np.isnan(t.values)
    return t.values[ok], np.flatnonzero(ok)


def online_fabreg(data: Dataset) -> float:
    """Share of shifts flagged once exactly 3 runs at the new level exist."""
    hits = total = 0
    for t in data.series:
        if t.shift == 0.0:
            continue
        values, idx = clean(t)
        cut = int(np.searchsorted(idx, t.shift_session)) + 3
        total += 1
        _, changes, _ = trends.detect_values(values[:cut], t.lower_is_better)
        regression = (t.shift > 0) == t.lower_is_better
        hits += any(abs(int(idx[c.index]) - t.shift_session) <= WINDOW
                    and (c.verdict == trends.REGRESSION) == regression for c in changes)
    return hits / max(total, 1)


def otava_python(args: argparse.Namespace) -> str | None:
    given = os.environ.get("OTAVA_PYTHON")
    if given:
        return given
    venv = Path(args.otava_venv)
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"# creating a throwaway virtualenv for Apache Otava in {venv} ...", flush=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(py), "-m", "pip", "install", "-q", "apache-otava"], check=True,
                           timeout=900)
        except (subprocess.SubprocessError, OSError) as err:
            print(f"# Apache Otava could not be installed ({err}): no Otava figures")
            return None
    return str(py)


def run_otava(py: str, data: Dataset, configs: list[dict], workdir: Path,
              truncate: bool = False) -> list[dict]:
    series = []
    for t in data.series:
        values, idx = clean(t)
        if truncate:
            if t.shift == 0.0:
                continue
            values = values[:int(np.searchsorted(idx, t.shift_session)) + 3]
        series.append([float(v) for v in values])
    path = workdir / ("otava-online.json" if truncate else "otava-series.json")
    path.write_text(json.dumps(series))
    proc = subprocess.run([py, "-c", OTAVA_SCRIPT, str(path), json.dumps(configs)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"# Apache Otava failed: {proc.stderr[-1500:]}")
        return []
    return json.loads(proc.stdout)


def otava_found(data: Dataset, found_lists: list, truncate: bool = False
                ) -> dict[tuple, list[tuple[int, bool]]]:
    out = {}
    series = [t for t in data.series if not truncate or t.shift != 0.0]
    for t, cps in zip(series, found_lists):
        _, idx = clean(t)
        out[truth_key(t)] = [(int(idx[i]), (pct > 0) == t.lower_is_better) for i, pct in cps]
    return out


def end_spikes(data: Dataset, last: dict[tuple, str]) -> tuple[int, int, int]:
    """(series with two odd values at the end, of them: open regressions, suspects)."""
    spiked = [truth_key(t) for t in data.series if t.end_spike]
    return (len(spiked), sum(last.get(k) == "regression" for k in spiked),
            sum(last.get(k) == "suspect" for k in spiked))


def otava_end_spikes(data: Dataset, found: dict[tuple, list[tuple[int, bool]]]) -> int:
    """End-spike series Otava reports a change on within the last 3 runs."""
    n = len(data.session_times)
    return sum(any(i >= n - 3 for i, _ in found.get(truth_key(t), []))
               for t in data.series if t.end_spike)


def cut_last_night(data: Dataset) -> dict[Path, bytes]:
    """Remove the last session's lines from each file; return them, to append later."""
    tails = {}
    for path, offset in data.last_session.items():
        raw = path.read_bytes()
        tails[path] = raw[offset:]
        with open(path, "r+b") as stream:
            stream.truncate(offset)
    return tails


def append(tails: dict[Path, bytes]) -> None:
    for path, tail in tails.items():
        with open(path, "ab") as stream:
            stream.write(tail)


def truncate(tails: dict[Path, bytes]) -> None:
    for path, tail in tails.items():
        with open(path, "r+b") as stream:
            stream.truncate(path.stat().st_size - len(tail))


def run_scale(scale: int, work: Path, repeat: int, fmt: str, noise: float,
              timer: ChildTimer) -> tuple[Dataset, dict, bytes, dict[str, str]]:
    """Generate the data of one scale and time the ingest steps and trends (best of N per
    step: other jobs on a shared machine only ever add time)."""
    root = work / f"x{scale}"
    t0 = time.perf_counter()
    data = generate(root / "perflogs", partitions=scale, seed=scale, fmt=fmt,
                    noise=(noise, noise), end_spikes=0.05)
    gen = time.perf_counter() - t0
    tails = cut_last_night(data)
    env = dict(os.environ, FABREG_DB=str(root / "fabreg.db"))
    best: dict[str, tuple[float, float]] = {}
    rss = 0.0
    out = b""
    new_values = 0
    for rep in range(repeat):
        Path(env["FABREG_DB"]).unlink(missing_ok=True)
        if rep:
            truncate(tails)
        steps = []
        for name in ("first", "again"):  # the year but its last night; the same, unchanged
            timer.lap()
            wall = fabreg(["ingest", "-q", str(root / "perflogs")], env)[0]
            steps.append((name, wall, *timer.lap()))
        append(tails)
        timer.lap()
        wall, _, stdout = fabreg(["ingest", "-q", str(root / "perflogs")], env)
        steps.append(("append", wall, *timer.lap()))
        new_values = int(stdout.decode().split(" new value(s)")[0].rsplit(" ", 1)[-1])
        timer.lap()
        wall, _, out = fabreg(["trends", "--format", "json", "-q"], env)
        steps.append(("trends", wall, *timer.lap()))
        for name, wall, cpu, peak in steps:
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
            rss = max(rss, peak)
    nvalues = sum(int((~np.isnan(t.values)).sum()) for t in data.series)
    return data, {"best": best, "rss": rss, "values": nvalues, "gen": gen,
                  "night": new_values}, out, env


def _verdicts(trends_json: bytes) -> dict[tuple, str]:
    return fabreg_found(trends_json)[1]


def nightly(data: Dataset, root: Path, nights: int, timer: ChildTimer) -> dict:
    """Replay the year's last ``nights`` nights one at a time into a store of the rest: each
    night ingested, then ``trends --incremental`` and a full ``trends`` (wall times), and
    the last night's verdicts of both."""
    sessions = len(data.session_times)
    cut = sessions - nights
    replay = root / "nightly"
    if replay.exists():
        shutil.rmtree(replay)
    full = {path: path.read_bytes() for path in data.session_offsets}

    def upto(path: Path, session: int) -> bytes:
        """The file as it stood before ``session``'s lines were written."""
        offsets = data.session_offsets[path]
        later = [o for s, o in offsets.items() if s >= session]
        return full[path][:min(later)] if later else full[path]

    for path in full:
        target = replay / path.relative_to(data.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(upto(path, cut))
    env = dict(os.environ, FABREG_DB=str(root / "nightly.db"))
    Path(env["FABREG_DB"]).unlink(missing_ok=True)
    fabreg(["ingest", "-q", str(replay)], env)
    timer.lap()
    first = fabreg(["trends", "--incremental", "--format", "json", "-q"], env)[0]
    first_cpu = timer.lap()[0]
    rows = []
    inc_out = full_out = b""
    for night in range(cut, sessions):
        for path in full:
            (replay / path.relative_to(data.root)).write_bytes(upto(path, night + 1))
        t_ing = fabreg(["ingest", "-q", str(replay)], env)[0]
        timer.lap()
        t_inc, _, inc_out = fabreg(["trends", "--incremental", "--format", "json", "-q"], env)
        c_inc = timer.lap()[0]
        t_full, _, full_out = fabreg(["trends", "--format", "json", "-q"], env)
        c_full = timer.lap()[0]
        rows.append((night, t_ing, t_inc, c_inc, t_full, c_full))
    inc, ful = _verdicts(inc_out), _verdicts(full_out)
    differ = sum(inc.get(k, "stable") != ful.get(k, "stable") for k in set(inc) | set(ful))
    return {"first": (first, first_cpu), "rows": rows, "inc_json": inc_out,
            "full_json": full_out, "differ": differ}


def print_nightly(nights: int, datasets: dict[int, Dataset], work: Path,
                  timer: ChildTimer) -> None:
    print()
    print(f"# nightly: the last {nights} nights replayed one at a time; after each, trends "
          f"--incremental (windows of {trend_state.WINDOW}-"
          f"{trend_state.WINDOW + trend_state.STEP} runs, state in the store) and a "
          "full trends on the same store")
    print(f"{'scale':>5} {'first (full + state)':>20} {'incremental wall':>16} {'cpu':>6} "
          f"{'full wall':>9} {'cpu':>6} {'ratio':>6} {'ingest':>7} {'verdicts differ':>15}")
    base = next(iter(datasets.values()))
    for scale, data in datasets.items():
        res = nightly(data, work / f"x{scale}", nights, timer)
        rows = res["rows"]
        inc = float(np.median([r[2] for r in rows]))
        inc_cpu = float(np.median([r[3] for r in rows]))
        full = float(np.median([r[4] for r in rows]))
        full_cpu = float(np.median([r[5] for r in rows]))
        ingest = float(np.median([r[1] for r in rows]))
        series = len(data.series)
        print(f"{scale:>4}x {res['first'][0]:>19.2f}s {inc:>15.2f}s {inc_cpu:>5.2f}s "
              f"{full:>8.2f}s {full_cpu:>5.2f}s {inc / full:>6.2f} {ingest:>6.2f}s "
              f"{res['differ']:>7} of {series:,}", flush=True)
        if data is base:
            for label, out in (("full", res["full_json"]), ("incremental", res["inc_json"])):
                found, last = fabreg_found(out)
                sc = score(found, base)
                spiked, opened, suspected = end_spikes(base, last)
                print(f"      {label:<12} recall {sc['recall']:.1%}, false alarms "
                      f"{sc['false_alarm']:.2%}, extra {sc['extra']}, end spikes "
                      f"alarm/suspect {opened}/{suspected}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scales", default="1,10")
    parser.add_argument("--format", default="reframe", choices=("reframe", "fabreg"),
                        help="perflog format written (default: ReFrame's own default)")
    parser.add_argument("--noise", type=float, default=0.03,
                        help="sigma of the multiplicative noise (default %(default)s)")
    parser.add_argument("--no-otava", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--otava-venv", default=os.path.join(tempfile.gettempdir(),
                                                             "fabreg-otava-venv"))
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    parser.add_argument("--nightly", type=int, default=0, metavar="N",
                        help="also replay the year's last N nights one at a time: each "
                             "night's `trends --incremental` against a full `trends`, wall "
                             "times and verdicts side by side (default: no replay)")
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs per scale; the fastest of each step is shown "
                             "(default %(default)s)")
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fabreg-bench-"))
    fmt_name = "ReFrame's default" if args.format == "reframe" else "fabreg's"
    print(f"# fabreg trends benchmark: 365 nightly sessions x 1,000 series per 1x, "
          f"{fmt_name} perflog format, {args.noise:.0%} noise; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    print(f"# wall = elapsed time; cpu = user+sys of the fabreg process; fastest of "
          f"{args.repeat} runs per step (the machine is shared: cpu is the steadier figure)")
    timer = ChildTimer()
    results = []
    datasets: dict[int, Dataset] = {}
    base: Dataset | None = None
    base_json = b""
    base_env: dict[str, str] = {}
    for scale in scales:
        data, res, out, env = run_scale(scale, work, args.repeat, args.format, args.noise,
                                        timer)
        results.append((scale, res))
        datasets[scale] = data
        print(f"# {scale}x generated in {res['gen']:.0f}s: {res['values']:,} values, "
              f"{len(data.series):,} series", flush=True)
        if base is None:
            base, base_json, base_env = data, out, env
    assert base is not None

    print()
    print("# ingest = first ingest of the year but its last night + ingest of that night")
    print(f"{'scale':>5} {'values':>10} {'ingest wall':>11} {'cpu':>6} {'trends wall':>11} "
          f"{'cpu':>6} {'total wall':>10} {'peak RSS':>9} {'wall/1k values':>15} "
          f"{'cpu/1k values':>14}")
    for scale, res in results:
        b = res["best"]
        t_ing = b["first"][0] + b["append"][0]
        c_ing = b["first"][1] + b["append"][1]
        t_tr, c_tr = b["trends"]
        wall, cpu = t_ing + t_tr, c_ing + c_tr
        n = res["values"]
        print(f"{scale:>4}x {n:>10,} {t_ing:>10.2f}s {c_ing:>5.2f}s {t_tr:>10.2f}s "
              f"{c_tr:>5.2f}s {wall:>9.2f}s {res['rss']:>7.0f}MiB "
              f"{wall / n * 1e6:>12.2f} ms {cpu / n * 1e6:>11.2f} ms")
    print()
    print("# incremental ingest: the same tree again (unchanged), then one more night "
          "appended to every file")
    print("# targets: unchanged < 5 % of the first ingest; one night < 1 s")
    print(f"{'scale':>5} {'first ingest':>12} {'cpu':>7} {'unchanged':>10} {'cpu':>6} "
          f"{'ratio':>7} {'one night':>10} {'cpu':>6} {'ratio':>7} {'night values':>13}")
    for scale, res in results:
        b = res["best"]
        first, again, night = b["first"], b["again"], b["append"]
        print(f"{scale:>4}x {first[0]:>11.2f}s {first[1]:>6.2f}s {again[0]:>9.2f}s "
              f"{again[1]:>5.2f}s {again[0] / first[0]:>6.1%} {night[0]:>9.2f}s "
              f"{night[1]:>5.2f}s {night[0] / first[0]:>6.1%} {res['night']:>13,}")
    if not args.no_report:
        timer.lap()
        t_rep, _, _ = fabreg(["report", "-q", "--out", str(work / "report")], base_env)
        c_rep, _ = timer.lap()
        print(f"report (1x): {t_rep:.2f}s wall, {c_rep:.2f}s cpu "
              f"({sum(1 for _ in (work / 'report' / 'plots').iterdir())} plots)")

    print()
    print(f"# detection quality at 1x: shifts of 10-30 % at {args.noise:.0%} noise, 1 % "
          "outliers, 0.2 % gaps;")
    print(f"# found = reported within {WINDOW} runs of the injected shift, right direction;")
    print("# false alarms = unchanged series with any reported change (a fabreg suspect, "
          "which fails no gate by default, is not one);")
    print("# online = shift flagged when only 3 runs at the new level exist.")
    found, last = fabreg_found(base_json)
    ours = score(found, base)
    t0 = time.process_time()
    for t in base.series:  # detection alone, same arrays as Otava gets
        trends.detect_values(clean(t)[0], t.lower_is_better)
    detect_cpu = time.process_time() - t0
    t0 = time.process_time()
    online = online_fabreg(base)
    t_online = time.process_time() - t0
    spiked, opened, suspected = end_spikes(base, last)
    rows = [("fabreg trends (alpha 0.001)", ours, online, detect_cpu, f"{opened}/{suspected}")]
    py = None if args.no_otava else otava_python(args)
    if args.no_otava:
        print("# Otava skipped (--no-otava)")
    elif py:
        configs = [{"window_len": 50, "max_pvalue": 0.001, "min_magnitude": 0.0}]
        configs += [{"window_len": 50, "max_pvalue": p, "min_magnitude": m}
                    for p, m in ((1e-3, 0.05), (1e-5, 0.05), (1e-7, 0.05), (1e-10, 0.08))]
        results_o = run_otava(py, base, configs, work)
        online_results = run_otava(py, base, configs, work, truncate=True)
        for res, onl in zip(results_o, online_results):
            got = otava_found(base, res["found"])
            sc = score(got, base)
            on = score(otava_found(base, onl["found"], truncate=True), base)["recall"]
            cfg = res["config"]
            label = (f"Otava p<{cfg['max_pvalue']:g} min_mag {cfg['min_magnitude']:g}"
                     + (" (default)" if cfg == configs[0] else ""))
            rows.append((label, sc, on, res["cpu"], f"{otava_end_spikes(base, got)}/-"))
    else:
        print("# Apache Otava is not installable here: no side-by-side figures")
    print(f"{'method':<38} {'recall':>7} {'false alarms':>12} {'extra':>6} {'online':>7} "
          f"{'detect cpu':>10} {'end spikes: alarm/suspect':>26}")
    for label, sc, on, cpu, spikes in rows:
        print(f"{label:<38} {sc['recall']:>6.1%} {sc['false_alarm']:>11.2%} {sc['extra']:>6} "
              f"{on:>6.1%} {cpu:>9.2f}s {spikes:>26}")
    print(f"# {ours['shifted']} shifted and {ours['unchanged']} unchanged series, "
          f"{spiked} of them with two values 20-50 % worse at the very end; fabreg online "
          f"check took {t_online:.2f}s cpu; work dir {work}")
    if args.nightly:
        print_nightly(args.nightly, datasets, work, timer)
    return 0


if __name__ == "__main__":
    sys.exit(main())

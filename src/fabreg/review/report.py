"""Markdown summary and a self-contained HTML page of what moved.

The HTML page embeds every plot as a base64 PNG and its CSS inline: it opens from a
file with no network (no CDN, no script, no external URL). The same PNGs are written
under ``plots/`` for the Markdown summary.
"""

from __future__ import annotations

import base64
import concurrent.futures
import html
import io
import os
import textwrap
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fabreg.metrics import split_perfvar  # noqa: E402
from fabreg.review import compare  # noqa: E402
from fabreg.review.store import SeriesData  # noqa: E402
from fabreg.review.trends import REGRESSION, SeriesVerdict  # noqa: E402
from fabreg.schema import lower_is_better  # noqa: E402

CSS = """
body{font-family:sans-serif;margin:1.5em;max-width:1100px;color:#222}
table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;padding:2px 6px}
td{white-space:nowrap}td:last-child{white-space:normal}
.regression{color:#b00020;font-weight:bold}.improvement{color:#1b7f2a}
img{max-width:100%;border:1px solid #eee}h2{border-bottom:2px solid #ddd}
.series{margin-bottom:1.5em}
"""


@dataclass
class Figure:
    name: str  # file name under plots/
    png: bytes
    title: str


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M")


def group_of(series: SeriesData) -> tuple[str, str, str, str]:
    """Report grouping: benchmark, MPI, transport, node count."""
    p = series.key.param
    return (p.get("benchmark", series.key.test), p.get("mpi", series.key.environ),
            p.get("transport", "-"), p.get("nodes", p.get("num_nodes", "-")))


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    plt.close(fig)
    return buf.getvalue()


def plot_series(verdict: SeriesVerdict) -> bytes:
    """Values over time, level of each segment, change points, reference band."""
    s = verdict.series
    days = s.time / 86400.0 + mdates.date2num(datetime(1970, 1, 1, tzinfo=timezone.utc))
    fig = plt.figure(figsize=(9, 2.8))
    ax = fig.add_axes((0.08, 0.2, 0.9, 0.62))
    failed = np.array([r == "fail" for r in s.result])
    ax.plot(days, s.value, ".", ms=3, color="#4060a0", label="run")
    if failed.any():
        ax.plot(days[failed], s.value[failed], "x", ms=4, color="#b00020",
                label="failed reference")
    bounds = [0] + [c.index for c in verdict.changes] + [len(s)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            level = float(np.median(s.value[a:b]))
            ax.plot([days[a], days[b - 1]], [level, level], "-", color="#333", lw=1.5)
    for c in verdict.changes:
        colour = "#b00020" if c.verdict == REGRESSION else "#1b7f2a"
        ax.axvline(days[c.index], color=colour, ls="--", lw=1)
        ax.annotate(f"{c.shift_pct:+.1f}%", (days[c.index], 1.0), xycoords=("data",
                    "axes fraction"), va="bottom", ha="center", fontsize=8, color=colour)
    ref, lo, hi = float(s.ref[-1]), float(s.lower[-1]), float(s.upper[-1])
    if np.isfinite(ref) and ref != 0:
        ymin, ymax = ax.get_ylim()
        low = ref * (1 + lo) if np.isfinite(lo) else min(ymin, ref)
        high = ref * (1 + hi) if np.isfinite(hi) else max(ymax, ref)
        ax.axhspan(low, high, color="#2a9d8f", alpha=0.12, label="reference band")
        ax.axhline(ref, color="#2a9d8f", lw=0.8)
        ax.set_ylim(min(ymin, low), max(ymax, high))
    ax.set_ylabel(s.unit)
    ax.set_title(textwrap.fill(s.key.text(), 130), fontsize=7, pad=12)
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(maxticks=8))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left", framealpha=0.6)
    return _png(fig)


def size_curves(all_series: list[SeriesData], base: compare.Selection,
                cand: compare.Selection, min_diff_pct: float = 0.0
                ) -> list[tuple[str, str, dict[str, list]]]:
    """(title, kind, {session: [(size, value, unit)]}) per test+parameters+kind with sizes.

    Only curves where some size differs by at least ``min_diff_pct`` between the two
    sessions are kept (0: all of them).
    """
    groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for s in all_series:
        metric, size = split_perfvar(s.key.perfvar)
        if size is None:
            continue
        what = "latency" if lower_is_better(s.key.perfvar, s.unit) else "bandwidth"
        gkey = (s.key.test, s.key.params, s.key.system, s.key.partition, s.key.environ,
                metric, what)
        for label, sel in (("baseline", base), ("candidate", cand)):
            vals = s.value[sel.mask(s)]
            if len(vals):
                groups[gkey][label].append((size, float(np.median(vals)), s.unit))
    out = []
    for gkey, by_session in sorted(groups.items()):
        sizes = {p[0] for pts in by_session.values() for p in pts}
        if len(sizes) < 2:
            continue
        if min_diff_pct > 0:
            b = {p[0]: p[1] for p in by_session.get("baseline", [])}
            c = {p[0]: p[1] for p in by_session.get("candidate", [])}
            diffs = [abs(c[k] / b[k] - 1) * 100 for k in b.keys() & c.keys() if b[k]]
            if not diffs or max(diffs) < min_diff_pct:
                continue
        test, params, system, partition, environ, k, what = gkey
        ptext = " ".join(f"{a}={b}" for a, b in params)
        out.append((f"{test} {ptext} {system}:{partition}+{environ} {k}", what, by_session))
    return out


def plot_curve(title: str, what: str, by_session: dict[str, list],
               labels: dict[str, str]) -> bytes:
    fig = plt.figure(figsize=(6, 3.2))
    ax = fig.add_axes((0.13, 0.15, 0.83, 0.68))
    unit = ""
    for name, style in (("baseline", "o-"), ("candidate", "s--")):
        pts = sorted(by_session.get(name, []))
        if pts:
            unit = pts[0][2]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, ms=4,
                    label=f"{name}: {labels[name]}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(f"{what} ({unit})")
    ax.set_title(textwrap.fill(title, 80), fontsize=7)
    ax.legend(fontsize=7, loc="upper left")
    return _png(fig)


def build(all_series: list[SeriesData], verdicts: list[SeriesVerdict], out: Path,
          curves: tuple[compare.Selection, compare.Selection] | None = None,
          progress: Callable[[int, int], None] | None = None,
          curve_min_diff_pct: float = 10.0, jobs: int | None = None) -> tuple[Path, Path]:
    """Write ``summary.md``, ``index.html`` and ``plots/`` under ``out``."""
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    moved = [v for v in verdicts if v.changes]
    curve_data = size_curves(all_series, *curves, curve_min_diff_pct) if curves else []
    total = len(moved) + len(curve_data)
    done = 0
    grouped: dict[tuple, list[tuple[SeriesVerdict, Figure]]] = defaultdict(list)
    labels = {"baseline": curves[0].text, "candidate": curves[1].text} if curves else {}
    tasks = [(plot_series, (v,)) for v in moved]
    tasks += [(plot_curve, (title, what, by_session, labels))
              for title, what, by_session in curve_data]
    pngs: list[bytes] = []
    # Plots are independent: draw them on every core (matplotlib is single-threaded).
    workers = min(jobs or os.cpu_count() or 1, len(tasks))
    if workers > 1:
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            for png in pool.map(_draw, tasks, chunksize=8):
                pngs.append(png)
                done += 1
                if progress:
                    progress(done, total)
    else:
        for task in tasks:
            pngs.append(_draw(task))
            done += 1
            if progress:
                progress(done, total)
    for v, png in zip(moved, pngs):
        fig = Figure(f"series-{v.series.id}.png", png, v.series.key.text())
        (plots / fig.name).write_bytes(fig.png)
        grouped[group_of(v.series)].append((v, fig))
    curve_figs = []
    for i, ((title, what, _), png) in enumerate(zip(curve_data, pngs[len(moved):])):
        fig = Figure(f"curve-{i}.png", png, title)
        (plots / fig.name).write_bytes(fig.png)
        curve_figs.append((what, fig))
    counts: dict[str, int] = defaultdict(int)
    for v in verdicts:
        counts[v.verdict] += 1
    md = _markdown(verdicts, grouped, curve_figs, counts, labels)
    page = _html(verdicts, grouped, curve_figs, counts, labels)
    (out / "summary.md").write_text(md, encoding="utf-8")
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "summary.md", out / "index.html"


def _draw(task: tuple[Callable[..., bytes], tuple]) -> bytes:
    function, args = task
    return function(*args)


def _change_rows(verdicts: list[SeriesVerdict]) -> list[tuple[SeriesVerdict, object]]:
    rows = [(v, c) for v in verdicts for c in v.changes]
    rows.sort(key=lambda vc: (vc[1].verdict != REGRESSION, -abs(vc[1].shift_pct)))
    return rows


def _markdown(verdicts, grouped, curve_figs, counts, labels) -> str:
    lines = ["# fabreg trend report", "",
             f"{len(verdicts)} series: " + ", ".join(f"{n} {k}" for k, n in sorted(
                 counts.items())), "", "## Changes", "",
             "| verdict | first run at new level | shift | 95 % CI | series |",
             "|---|---|---|---|---|"]
    for v, c in _change_rows(verdicts):
        t = _iso(float(v.series.time[c.index]))
        lines.append(f"| {c.verdict} | {t} | {c.shift_pct:+.1f} % | "
                     f"[{c.ci_low_pct:+.1f}, {c.ci_high_pct:+.1f}] | "
                     f"{v.series.key.text().replace('|', '/')} |")
    for group in sorted(grouped):
        lines += ["", "## benchmark {} / mpi {} / transport {} / nodes {}".format(*group), ""]
        for v, fig in grouped[group]:
            lines += [f"### {v.verdict}: {fig.title}", "", f"![{fig.title}](plots/{fig.name})",
                      ""]
    if curve_figs:
        lines += ["", f"## Size curves: {labels['baseline']} vs {labels['candidate']}", ""]
        for what, fig in curve_figs:
            lines += [f"### {what} vs size: {fig.title}", "", f"![{fig.title}](plots/{fig.name})",
                      ""]
    return "\n".join(lines) + "\n"


def _img(fig: Figure) -> str:
    data = base64.b64encode(fig.png).decode()
    return f'<img alt="{html.escape(fig.title)}" src="data:image/png;base64,{data}">'


def _html(verdicts, grouped, curve_figs, counts, labels) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>fabreg trend report</title>", f"<style>{CSS}</style></head><body>",
           "<h1>fabreg trend report</h1>",
           "<p>" + e(f"{len(verdicts)} series: " + ", ".join(
               f"{n} {k}" for k, n in sorted(counts.items()))) + "</p>",
           "<h2>Changes</h2>", "<table><tr><th>verdict</th><th>first run at new level</th>"
           "<th>shift</th><th>95 % CI</th><th>series</th></tr>"]
    for v, c in _change_rows(verdicts):
        t = _iso(float(v.series.time[c.index]))
        out.append(f'<tr><td class="{c.verdict}">{c.verdict}</td><td>{t}</td>'
                   f"<td>{c.shift_pct:+.1f} %</td><td>[{c.ci_low_pct:+.1f}, "
                   f"{c.ci_high_pct:+.1f}]</td><td>{e(v.series.key.text())}</td></tr>")
    out.append("</table>")
    for group in sorted(grouped):
        out.append("<h2>" + e("benchmark {} / mpi {} / transport {} / nodes {}".format(*group))
                   + "</h2>")
        for v, fig in grouped[group]:
            out.append(f'<div class="series"><h3 class="{v.verdict}">{e(v.verdict)}: '
                       f"{e(fig.title)}</h3>{_img(fig)}</div>")
    if curve_figs:
        out.append(f"<h2>Size curves: {e(labels['baseline'])} vs {e(labels['candidate'])}</h2>")
        for what, fig in curve_figs:
            out.append(f'<div class="series"><h3>{e(what)} vs size: {e(fig.title)}</h3>'
                       f"{_img(fig)}</div>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"

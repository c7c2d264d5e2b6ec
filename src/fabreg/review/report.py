"""Markdown summary and a self-contained HTML page of what moved, as an engineer reads it.

The page starts with the verdicts (open regressions, suspects, and the values the checks
themselves called inconclusive or flaky), then the changes (each regression says whether it
is still open), then one plot per series that moved or that the checks flagged, then the
size curves. The HTML embeds every plot as a base64 PNG and its CSS inline: it opens from a
file with no network (no CDN, no script, no external URL). The same PNGs are written under
``plots/`` for the Markdown summary.

Plots are drawn to be read at 100 % zoom: ``DPI`` pixels per inch, fonts of at least
``MIN_FONT_PT`` points (``MIN_FONT_PT * DPI / 72`` >= 10 px), images shown at their own
pixel size (``width``/``height`` attributes), legends outside the axes.
"""

from __future__ import annotations

import base64
import concurrent.futures
import html
import io
import math
import os
import struct
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
import matplotlib.ticker as mticker  # noqa: E402
import numpy as np  # noqa: E402

from fabreg.metrics import size_label, split_perfvar  # noqa: E402
from fabreg.review import compare  # noqa: E402
from fabreg.review.store import SeriesData  # noqa: E402
from fabreg.review.trends import (  # noqa: E402
    CONFIRM_RUNS,
    IMPROVEMENT,
    REGRESSION,
    STABLE,
    SUSPECT,
    TOO_FEW,
    Change,
    SeriesVerdict,
)
from fabreg.schema import lower_is_better  # noqa: E402

#: Pixels per inch of the PNGs; the page shows them at this size (1 image px = 1 CSS px).
DPI = 100
#: The smallest font in a plot, points: 9 pt at 100 dpi is 12.5 px.
MIN_FONT_PT = 9.0
STYLE = {"font.size": MIN_FONT_PT, "axes.titlesize": 10.5, "axes.labelsize": 10,
         "xtick.labelsize": MIN_FONT_PT, "ytick.labelsize": MIN_FONT_PT,
         "legend.fontsize": MIN_FONT_PT, "figure.dpi": DPI}
#: Inches: 1000 x 360 px and 1000 x 420 px, within the page's 1100 px column.
SERIES_SIZE = (10.0, 3.6)
CURVE_SIZE = (10.0, 4.2)
#: Check verdicts (``fabreg.schema.VERDICTS``) that give a series a plot and a summary line.
FLAGGED = ("fail", "flaky", "inconclusive")

COLOURS = {REGRESSION: "#b00020", SUSPECT: "#d06000", IMPROVEMENT: "#1b7f2a"}
CSS = """
body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:90%;margin-bottom:1em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
td{white-space:nowrap}td:last-child{white-space:normal}
.regression{color:#b00020;font-weight:bold}.suspect{color:#d06000;font-weight:bold}
.improvement{color:#1b7f2a}.flaky,.inconclusive{color:#6a3d9a;font-weight:bold}
.fail{color:#b00020}.counts td{font-size:120%;text-align:right}
img{max-width:100%;height:auto;border:1px solid #eee}h2{border-bottom:2px solid #ddd}
.series{margin-bottom:1.5em}li{margin:2px 0}
"""


@dataclass
class Figure:
    name: str  # file name under plots/
    png: bytes
    title: str

    @property
    def size(self) -> tuple[int, int]:
        return png_size(self.png)


@dataclass
class CurvePoint:
    """One message size of one session on a size curve."""

    size: int
    value: float  # median of the session's runs
    unit: str
    low: float  # the session's runs: smallest and largest
    high: float
    ref_low: float  # the reference band at this size (NaN: none)
    ref_high: float


@dataclass
class Summary:
    """The verdicts, as the report's first section lists them."""

    open_regressions: list[SeriesVerdict]
    suspects: list[SeriesVerdict]
    flagged: dict[str, list[SeriesVerdict]]  # check verdict -> series (newest value)
    counts: dict[str, int]  # trend verdict -> series


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's IHDR chunk."""
    return struct.unpack(">II", png[16:24])


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M")


def group_of(series: SeriesData) -> tuple[str, str, str, str]:
    """Report grouping: benchmark, MPI, transport, node count."""
    p = series.key.param
    return (p.get("benchmark", series.key.test), p.get("mpi", series.key.environ),
            p.get("transport", "-"), p.get("nodes", p.get("num_nodes", "-")))


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


def _title(fig: plt.Figure, text: str) -> None:
    """The series above the whole figure, left-aligned, so it never runs into the legend."""
    fig.suptitle(textwrap.fill(text, 112), x=0.005, ha="left",
                 fontsize=STYLE["axes.titlesize"])


def _legend(ax: plt.Axes) -> None:
    """Right of the axes, never over the data (constrained layout makes room for it)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)


def _band(ref: float, lower: float, upper: float) -> tuple[float, float] | None:
    """The reference band: from ``ref * (1 + lower)`` to ``ref * (1 + upper)``; a missing
    side ends at the reference itself."""
    if not np.isfinite(ref) or ref == 0:
        return None
    low = ref * (1 + lower) if np.isfinite(lower) else ref
    high = ref * (1 + upper) if np.isfinite(upper) else ref
    return min(low, high), max(low, high)


def plot_series(verdict: SeriesVerdict, check_verdict: str = "") -> bytes:
    """Values over time, level of each segment, change points, reference band."""
    s = verdict.series
    days = s.time / 86400.0 + mdates.date2num(datetime(1970, 1, 1, tzinfo=timezone.utc))
    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=SERIES_SIZE, layout="constrained")
        ax = fig.add_subplot()
        failed = np.array([r == "fail" for r in s.result])
        ax.plot(days, s.value, "o", ms=3.5, color="#4060a0", label="run")
        if failed.any():
            ax.plot(days[failed], s.value[failed], "x", ms=7, mew=1.6, color="#b00020",
                    label="failed its reference")
        bounds = [0] + [c.index for c in verdict.changes] + [len(s)]
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            if b > a:
                level = float(np.median(s.value[a:b]))
                ax.plot([days[a], days[b - 1]], [level, level], "-", color="#222", lw=2,
                        label="level (median)" if i == 0 else None)
        for c in verdict.changes:
            colour = COLOURS.get(c.verdict, "#444")
            ax.axvline(days[c.index], color=colour, ls="--", lw=1.4,
                       label=f"change: {c.verdict}" if c is verdict.changes[-1] else None)
            ax.annotate(f"{c.shift_pct:+.1f}%", (days[c.index], 1.0),
                        xycoords=("data", "axes fraction"), xytext=(0, 3),
                        textcoords="offset points", va="bottom", ha="center",
                        fontsize=MIN_FONT_PT + 0.5, color=colour, fontweight="bold")
        band = _band(float(s.ref[-1]), float(s.lower[-1]), float(s.upper[-1]))
        if band is not None:
            ymin, ymax = ax.get_ylim()
            ref, lo, hi = float(s.ref[-1]), float(s.lower[-1]), float(s.upper[-1])
            # An open side of the band reaches the edge of the plot.
            low = band[0] if np.isfinite(lo) else min(ymin, ref)
            high = band[1] if np.isfinite(hi) else max(ymax, ref)
            ax.axhspan(low, high, color="#2a9d8f", alpha=0.15, label="reference band")
            ax.axhline(ref, color="#2a9d8f", lw=1, label="reference")
            ax.set_ylim(min(ymin, low), max(ymax, high))
        ax.set_ylabel(s.unit or "value")
        state = verdict.verdict + (f"; newest value {check_verdict}" if check_verdict else "")
        _title(fig, f"{s.key.text()}  [{state}]")
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(maxticks=9))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
        ax.grid(True, color="#e6e6e6", lw=0.6)
        _legend(ax)
        return _png(fig)


def size_curves(all_series: list[SeriesData], base: compare.Selection,
                cand: compare.Selection, min_diff_pct: float = 0.0
                ) -> list[tuple[str, str, dict[str, list[CurvePoint]]]]:
    """(title, kind, {session: [CurvePoint]}) per test+parameters+kind with sizes.

    Only curves where some size differs by at least ``min_diff_pct`` between the two
    sessions are kept (0: all of them).
    """
    groups: dict[tuple, dict[str, list[CurvePoint]]] = defaultdict(lambda: defaultdict(list))
    for s in all_series:
        metric, size = split_perfvar(s.key.perfvar)
        if size is None:
            continue
        what = "latency" if lower_is_better(s.key.perfvar, s.unit) else "bandwidth"
        gkey = (s.key.test, s.key.params, s.key.system, s.key.partition, s.key.environ,
                metric, what)
        for label, sel in (("baseline", base), ("candidate", cand)):
            mask = sel.mask(s)
            vals = s.value[mask]
            if len(vals):
                band = _band(float(s.ref[mask][-1]), float(s.lower[mask][-1]),
                             float(s.upper[mask][-1])) or (math.nan, math.nan)
                groups[gkey][label].append(CurvePoint(
                    size, float(np.median(vals)), s.unit, float(vals.min()), float(vals.max()),
                    *band))
    out = []
    for gkey, by_session in sorted(groups.items()):
        sizes = {p.size for pts in by_session.values() for p in pts}
        if len(sizes) < 2:
            continue
        if min_diff_pct > 0:
            b = {p.size: p.value for p in by_session.get("baseline", [])}
            c = {p.size: p.value for p in by_session.get("candidate", [])}
            diffs = [abs(c[k] / b[k] - 1) * 100 for k in b.keys() & c.keys() if b[k]]
            if not diffs or max(diffs) < min_diff_pct:
                continue
        test, params, system, partition, environ, k, what = gkey
        ptext = " ".join(f"{a}={b}" for a, b in params)
        out.append((f"{test} {ptext} {system}:{partition}+{environ} {k}", what, by_session))
    return out


def plot_curve(title: str, what: str, by_session: dict[str, list[CurvePoint]],
               labels: dict[str, str]) -> bytes:
    """Both sessions' values against message size, with their run ranges and the
    reference band."""
    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=CURVE_SIZE, layout="constrained")
        ax = fig.add_subplot()
        unit = ""
        for name, style, colour in (("baseline", "o-", "#4060a0"),
                                    ("candidate", "s--", "#d06000")):
            pts = sorted(by_session.get(name, []), key=lambda p: p.size)
            if not pts:
                continue
            unit = pts[0].unit
            x = [p.size for p in pts]
            ax.plot(x, [p.value for p in pts], style, ms=5, color=colour,
                    label=f"{name}: {labels[name]}")
            ax.fill_between(x, [p.low for p in pts], [p.high for p in pts], color=colour,
                            alpha=0.15, lw=0, label=f"{name}: range of its runs")
        # The band the candidate is judged by (the baseline's where the candidate has none).
        judged = by_session.get("candidate") or by_session.get("baseline", [])
        ref = sorted((p for p in judged if np.isfinite(p.ref_low)), key=lambda p: p.size)
        if ref:
            ax.fill_between([p.size for p in ref], [p.ref_low for p in ref],
                            [p.ref_high for p in ref], color="#2a9d8f", alpha=0.25, lw=0,
                            label="reference band")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(mticker.FixedLocator(sorted({
            p.size for pts in by_session.values() for p in pts})))
        ax.xaxis.set_major_formatter(mticker.FuncFormatter(lambda x, _: size_label(int(x))))
        ax.xaxis.set_minor_locator(mticker.NullLocator())
        plain = mticker.FuncFormatter(lambda y, _: f"{y:.4g}")
        ax.yaxis.set_major_formatter(plain)
        low, high = ax.get_ylim()
        # Within a decade the minor ticks carry the only labels; across decades, clutter.
        ax.yaxis.set_minor_formatter(plain if high < 10 * low else mticker.NullFormatter())
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(f"{what} ({unit})")
        _title(fig, title)
        ax.grid(True, which="both", color="#e6e6e6", lw=0.6)
        _legend(ax)
        return _png(fig)


def newest_verdict(series: SeriesData, check_verdicts: dict[int, str]) -> str:
    """The check's own verdict on the series' newest value; for a check that logs none (a
    site's own), ReFrame's: ``fail`` when the value failed its reference, else nothing."""
    said = check_verdicts.get(series.id)
    if said:
        return said
    return "fail" if len(series) and series.result[-1] == "fail" else ""


def is_plotted(verdict: SeriesVerdict, check_verdicts: dict[int, str]) -> bool:
    """Whether the report plots the series: it moved, or the check flagged its newest value
    (the report draws these over their whole history)."""
    return bool(verdict.changes) or newest_verdict(verdict.series, check_verdicts) in FLAGGED


def summarise(verdicts: list[SeriesVerdict], check_verdicts: dict[int, str]) -> Summary:
    counts: dict[str, int] = defaultdict(int)
    for v in verdicts:
        counts[v.verdict] += 1
    flagged: dict[str, list[SeriesVerdict]] = {k: [] for k in FLAGGED}
    for v in verdicts:
        said = newest_verdict(v.series, check_verdicts)
        if said in flagged:
            flagged[said].append(v)
    worst_first = sorted(verdicts, key=lambda v: -abs(v.deciding.shift_pct)
                         if v.deciding else 0.0)
    return Summary([v for v in worst_first if v.verdict == REGRESSION],
                   [v for v in worst_first if v.verdict == SUSPECT], flagged, dict(counts))


def still_open(v: SeriesVerdict, c: Change) -> str:
    """Whether a change is what the series shows now, in words for the changes table."""
    if c.verdict == IMPROVEMENT:
        return "-"
    last = v.changes[-1]
    if c is last:
        if c.verdict == SUSPECT:
            return f"suspect: {c.confirming} of {CONFIRM_RUNS} runs confirm the new level"
        return "open"
    following = v.changes[v.changes.index(c) + 1]
    if c is v.deciding:  # a regression that a suspect worsening follows
        return f"open; then a suspect {following.shift_pct:+.1f} %"
    when = _iso(float(v.series.time[following.index]))[:10]
    return f"no: {following.verdict} {following.shift_pct:+.1f} % on {when}"


def build(all_series: list[SeriesData], verdicts: list[SeriesVerdict], out: Path,
          curves: tuple[compare.Selection, compare.Selection] | None = None,
          progress: Callable[[int, int], None] | None = None,
          curve_min_diff_pct: float = 10.0, jobs: int | None = None,
          check_verdicts: dict[int, str] | None = None,
          see_also: list[tuple[str, str]] | None = None) -> tuple[Path, Path]:
    """Write ``summary.md``, ``index.html`` and ``plots/`` under ``out``.

    ``see_also``: (file in ``out``, what it shows) pages linked under the title (the sweeps'
    ``isolation.html``).

    ``check_verdicts``: series id -> the check's own verdict on its newest value
    (:func:`fabreg.review.check_verdicts.newest`).
    """
    check_verdicts = check_verdicts or {}
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    shown = [v for v in verdicts if is_plotted(v, check_verdicts)]
    curve_data = size_curves(all_series, *curves, curve_min_diff_pct) if curves else []
    total = len(shown) + len(curve_data)
    done = 0
    grouped: dict[tuple, list[tuple[SeriesVerdict, Figure]]] = defaultdict(list)
    labels = {"baseline": curves[0].text, "candidate": curves[1].text} if curves else {}
    tasks = [(plot_series, (v, newest_verdict(v.series, check_verdicts))) for v in shown]
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
    for v, png in zip(shown, pngs):
        fig = Figure(f"series-{v.series.id}.png", png, v.series.key.text())
        (plots / fig.name).write_bytes(fig.png)
        grouped[group_of(v.series)].append((v, fig))
    curve_figs = []
    for i, ((title, what, _), png) in enumerate(zip(curve_data, pngs[len(shown):])):
        fig = Figure(f"curve-{i}.png", png, title)
        (plots / fig.name).write_bytes(fig.png)
        curve_figs.append((what, fig))
    summary = summarise(verdicts, check_verdicts)
    plotted = {v.series.id for v in shown}
    md = _markdown(verdicts, summary, grouped, curve_figs, labels, plotted)
    page = _html(verdicts, summary, grouped, curve_figs, labels, plotted, see_also)
    (out / "summary.md").write_text(md, encoding="utf-8")
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "summary.md", out / "index.html"


def _draw(task: tuple[Callable[..., bytes], tuple]) -> bytes:
    function, args = task
    return function(*args)


def _change_rows(verdicts: list[SeriesVerdict]) -> list[tuple[SeriesVerdict, Change]]:
    rows = [(v, c) for v in verdicts for c in v.changes]
    order = {REGRESSION: 0, SUSPECT: 1, IMPROVEMENT: 2}
    rows.sort(key=lambda vc: (still_open(*vc) != "open", order.get(vc[1].verdict, 3),
                              -abs(vc[1].shift_pct)))
    return rows


def _count_rows(verdicts: list[SeriesVerdict], summary: Summary) -> list[tuple[str, int, str]]:
    """(what, how many, css class) for the summary's count table."""
    return [
        ("open regressions", len(summary.open_regressions), REGRESSION),
        (f"suspects (a worse level not yet confirmed by {CONFIRM_RUNS} runs)",
         len(summary.suspects), SUSPECT),
        ("inconclusive newest value (the host interfered)", len(summary.flagged["inconclusive"]),
         "inconclusive"),
        ("flaky newest value (a failure that did not reproduce)", len(summary.flagged["flaky"]),
         "flaky"),
        ("newest value failed its reference", len(summary.flagged["fail"]), "fail"),
        ("improvements", summary.counts.get(IMPROVEMENT, 0), IMPROVEMENT),
        ("stable", summary.counts.get(STABLE, 0), ""),
        ("too few runs to judge", summary.counts.get(TOO_FEW, 0), ""),
        ("series in all", len(verdicts), ""),
    ]


def _summary_lists(summary: Summary) -> list[tuple[str, str, list[tuple[SeriesVerdict, str]]]]:
    """(heading, css class, [(series verdict, detail)]) for each non-empty list."""
    def moved(v: SeriesVerdict) -> str:
        c = v.deciding or v.changes[-1]
        return (f"{c.shift_pct:+.1f} % since {_iso(float(v.series.time[c.index]))} "
                f"({len(v.series) - c.index} run(s) since)")

    def newest(v: SeriesVerdict) -> str:
        return f"newest run {_iso(float(v.series.time[-1]))}, session {v.series.session[-1]}"

    lists = [("Open regressions", REGRESSION, [(v, moved(v)) for v in summary.open_regressions]),
             ("Suspects", SUSPECT, [(v, moved(v)) for v in summary.suspects])]
    for kind, heading in (("inconclusive", "Inconclusive (newest value)"),
                          ("flaky", "Flaky (newest value)"),
                          ("fail", "Failed its reference (newest value)")):
        lists.append((heading, kind, [(v, newest(v)) for v in summary.flagged[kind]]))
    return [item for item in lists if item[2]]


def _markdown(verdicts, summary: Summary, grouped, curve_figs, labels, plotted) -> str:
    lines = ["# fabreg trend report", "", "## Verdicts", "", "| | series |", "|---|---|"]
    lines += [f"| {what} | {n} |" for what, n, _ in _count_rows(verdicts, summary)]
    for heading, _, rows in _summary_lists(summary):
        lines += ["", f"### {heading}", ""]
        for v, detail in rows:
            link = f" ([plot](plots/series-{v.series.id}.png))" if v.series.id in plotted else ""
            lines.append(f"- {v.series.key.text()}: {detail}{link}")
    lines += ["", "## Changes", "",
              "| verdict | still open? | first run at new level | shift | 95 % CI | series |",
              "|---|---|---|---|---|---|"]
    for v, c in _change_rows(verdicts):
        t = _iso(float(v.series.time[c.index]))
        lines.append(f"| {c.verdict} | {still_open(v, c)} | {t} | {c.shift_pct:+.1f} % | "
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
    width, height = fig.size
    return (f'<img alt="{html.escape(fig.title)}" width="{width}" height="{height}" '
            f'src="data:image/png;base64,{data}">')


def _html(verdicts, summary: Summary, grouped, curve_figs, labels, plotted,
          see_also: list[tuple[str, str]] | None = None) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<title>fabreg trend report</title>", f"<style>{CSS}</style></head><body>",
           "<h1>fabreg trend report</h1>"]
    out += [f'<p>See also: <a href="{e(href)}">{e(text)}</a></p>' for href, text in see_also or []]
    out += ["<h2>Verdicts</h2>", '<table class="counts">']
    for what, n, css in _count_rows(verdicts, summary):
        cls = f' class="{css}"' if css and n else ""
        out.append(f"<tr><th>{e(what)}</th><td{cls}>{n}</td></tr>")
    out.append("</table>")
    for heading, css, rows in _summary_lists(summary):
        out.append(f'<h3 class="{css}">{e(heading)} ({len(rows)})</h3><ul>')
        for v, detail in rows:
            name = e(v.series.key.text())
            if v.series.id in plotted:
                name = f'<a href="#series-{v.series.id}">{name}</a>'
            out.append(f"<li>{name}: {e(detail)}</li>")
        out.append("</ul>")
    out += ["<h2>Changes</h2>", "<table><tr><th>verdict</th><th>still open?</th>"
            "<th>first run at new level</th><th>shift</th><th>95 % CI</th><th>series</th></tr>"]
    for v, c in _change_rows(verdicts):
        t = _iso(float(v.series.time[c.index]))
        state = still_open(v, c)
        cls = f' class="{c.verdict}"' if state == "open" or c.verdict == SUSPECT else ""
        out.append(f'<tr><td class="{c.verdict}">{c.verdict}</td><td{cls}>{e(state)}</td>'
                   f"<td>{t}</td><td>{c.shift_pct:+.1f} %</td><td>[{c.ci_low_pct:+.1f}, "
                   f"{c.ci_high_pct:+.1f}]</td><td>{e(v.series.key.text())}</td></tr>")
    out.append("</table>")
    for group in sorted(grouped):
        out.append("<h2>" + e("benchmark {} / mpi {} / transport {} / nodes {}".format(*group))
                   + "</h2>")
        for v, fig in grouped[group]:
            out.append(f'<div class="series" id="series-{v.series.id}">'
                       f'<h3 class="{v.verdict}">{e(v.verdict)}: {e(fig.title)}</h3>'
                       f"{_img(fig)}</div>")
    if curve_figs:
        out.append(f"<h2>Size curves: {e(labels['baseline'])} vs {e(labels['candidate'])}</h2>")
        for what, fig in curve_figs:
            out.append(f'<div class="series"><h3>{e(what)} vs size: {e(fig.title)}</h3>'
                       f"{_img(fig)}</div>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"

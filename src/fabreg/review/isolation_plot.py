"""The sweep's pair matrix as a heat map: each pair's value as a share of the run's healthy
level, so a bad node is a dark cross (its row and its column) and a bad link two dark cells.
A sweep too large to read as a matrix gets its worst nodes and its rounds as tables.

``write`` puts ``isolation.html`` (self-contained, PNGs inline) and one PNG per sweep next to
the report; ``fabreg report`` calls it (the main page should link it: see docs/isolation.md).
"""

from __future__ import annotations

import base64
import html
import io
import math
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fabreg import isolation  # noqa: E402
from fabreg.review.sweeps import MAX_LINK_NODES, Sweep  # noqa: E402

#: Larger sweeps get no matrix (n x n cells) but a table per node and per round.
MAX_MATRIX_NODES = MAX_LINK_NODES
#: Nodes listed in a large sweep's table: the worst first.
WORST_NODES = 20


def matrix(sweep: Sweep, loc: isolation.Localisation) -> tuple[list[str], np.ndarray]:
    """Nodes and the share of the healthy level per (sender, receiver); NaN = not measured."""
    nodes = sweep.nodes
    index = {n: i for i, n in enumerate(nodes)}
    grid = np.full((len(nodes), len(nodes)), np.nan)
    for p in sweep.pairs.get(loc.metric, []):
        grid[index[p.node_a], index[p.node_b]] = (
            1.0 - loc.pair_deficit.get((p.node_a, p.node_b), 0.0) / 100.0)
    return nodes, grid


def heatmap_png(sweep: Sweep, loc: isolation.Localisation) -> bytes:
    nodes, grid = matrix(sweep, loc)
    size = min(12.0, 2.5 + 0.35 * len(nodes))
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, label=f"{loc.metric}: share of the healthy level")
    if len(nodes) <= 40:
        ax.set_xticks(range(len(nodes)), nodes, rotation=90)
        ax.set_yticks(range(len(nodes)), nodes)
    slow = {(p.node_a, p.node_b) for p in loc.slow}
    for i, a in enumerate(nodes):
        for j, b in enumerate(nodes):
            if (a, b) in slow and len(nodes) <= 40:
                ax.text(j, i, "slow", ha="center", va="center", fontsize=7)
    ax.set_xlabel("receiver (node_b)")
    ax.set_ylabel("sender (node_a)")
    named = ", ".join(f"{s.kind} {'<->'.join(s.nodes)}" for s in loc.suspects) or "none"
    ax.set_title(f"{sweep.system}:{sweep.partition}+{sweep.environ} job {sweep.jobid}\n"
                 f"suspects: {named}", fontsize=9)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=72)
    plt.close(fig)
    return buf.getvalue()


def summary_tables(sweep: Sweep, loc: isolation.Localisation) -> list[str]:
    """A large sweep's ``WORST_NODES`` worst nodes and its rounds, as HTML tables."""
    nodes = sweep.node_summary(loc)
    rows = "".join(f"<tr><td>{html.escape(n.node)}</td><td>{n.measured}</td><td>{n.slow}</td>"
                   f"<td>{n.median_pct:.0f}%</td><td>{n.worst_pct:.0f}%</td></tr>"
                   for n in nodes[:WORST_NODES])
    rounds = "".join(f"<tr><td>{r.round}</td><td>{r.measured}</td><td>{r.slow}</td>"
                     f"<td>{r.median_value:.4g}</td></tr>" for r in sweep.round_summary(loc))
    return [f'<table class="nodes"><caption>the {min(WORST_NODES, len(nodes))} worst of '
            f"{len(nodes)} nodes</caption><tr><th>node</th><th>pairs</th><th>slow</th>"
            f"<th>median deficit</th><th>worst deficit</th></tr>{rows}</table>",
            '<table class="rounds"><caption>rounds</caption><tr><th>round</th><th>pairs</th>'
            f"<th>slow</th><th>median {html.escape(loc.metric)}</th></tr>{rounds}</table>"]


def write(sweeps: list[Sweep], out: Path) -> Path | None:
    """``out/isolation.html`` with every sweep's heat map and suspects; None without sweeps."""
    if not sweeps:
        return None
    out.mkdir(parents=True, exist_ok=True)
    parts = ["<!doctype html><meta charset=utf-8><title>fabreg: sweeps</title>",
             "<style>body{font-family:sans-serif;margin:2em}img{max-width:100%}"
             "table{border-collapse:collapse;margin:1em 0}td,th{padding:0 .6em}</style>",
             "<h1>Sweeps: bad node, bad link</h1>"]
    for k, sweep in enumerate(sweeps):
        when = datetime.fromtimestamp(sweep.time, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        parts.append(f"<h2>{html.escape(sweep.label)}</h2><p>job {html.escape(sweep.jobid)}, "
                     f"{when}, {len(sweep.nodes)} nodes</p>")
        for loc in sweep.localise():
            if math.isnan(loc.level):
                continue
            items = "".join(
                f"<li>{html.escape(s.text())}"
                + (f' <span class="flaky">not confirmed: {html.escape(why)}</span>'
                   if (why := sweep.unconfirmed(s)) else "") + "</li>" for s in loc.suspects)
            parts.append(f"<h3>{loc.metric}</h3><p>healthy level {loc.level:.4g}, spread "
                         f"{loc.spread:.0%}, a pair is slow from {loc.threshold_pct:.0f}% "
                         f"below it; suspects:</p><ul>{items or '<li>none</li>'}</ul>")
            if len(sweep.nodes) > MAX_MATRIX_NODES:
                parts.append(f"<p>{len(sweep.nodes)} nodes: no matrix drawn (more than "
                             f"{MAX_MATRIX_NODES}); the worst nodes and every round:</p>")
                parts += summary_tables(sweep, loc)
                continue
            png = heatmap_png(sweep, loc)
            (out / f"sweep-{k}-{loc.metric}.png").write_bytes(png)
            data = base64.b64encode(png).decode()
            parts.append(f'<img alt="{html.escape(loc.metric)} pair matrix" '
                         f'src="data:image/png;base64,{data}">')
    page = out / "isolation.html"
    page.write_text("\n".join(parts) + "\n")
    return page

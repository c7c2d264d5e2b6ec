"""``fabreg isolate``: the bad node or the bad link, from the newest sweep in the store.

Exit status: 1 when a suspect is named, 0 when none (or only suspects of a sweep that other
work disturbed: ``inconclusive``, as the check said), 2 on an error (no sweep in the store).
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime, timezone

from fabreg.cli.store_option import add_db_argument, db_path
from fabreg.errors import FabregError
from fabreg.review.gc_pause import collector_paused
from fabreg.review.store import Store
from fabreg.review.sweeps import Sweep, latest_sweeps


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "isolate", help="name the bad node or link from the newest sweep (exit 1 if any)",
        description="Judge every pair of the newest run of each sweep (checks/sweep.py) "
                    "against the other pairs of the same run: a node slow in most of its "
                    "pairs is a node suspect, a slow pair of two otherwise healthy nodes a "
                    "link suspect (docs/isolation.md). Run `fabreg ingest` first.")
    p.add_argument("--system", default=None, help="only sweeps of this system")
    p.add_argument("--format", choices=("text", "json"), default="text")
    add_db_argument(p)
    p.set_defaults(func=run)


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sweep_json(sweep: Sweep) -> dict[str, object]:
    metrics = {}
    for loc in sweep.localise():
        if math.isnan(loc.level):
            continue
        metrics[loc.metric] = {"level": loc.level, "spread": loc.spread,
                               "threshold_pct": loc.threshold_pct, "measured": loc.measured,
                               "slow": [[p.node_a, p.node_b] for p in loc.slow]}
    return {"test": sweep.test, "parameters": dict(sweep.params), "system": sweep.system,
            "partition": sweep.partition, "environ": sweep.environ, "jobid": sweep.jobid,
            "time": _when(sweep.time), "nodes": sweep.nodes, "metrics": metrics,
            "controls": sweep.controls, "inconclusive": sweep.inconclusive}


def _text(sweep: Sweep) -> list[str]:
    lines = [f"{sweep.label}: job {sweep.jobid} at {_when(sweep.time)}, "
             f"{len(sweep.nodes)} nodes"]
    if sweep.inconclusive:
        lines.append(f"  {sweep.inconclusive}: its suspects are not confirmed")
    elif sweep.flaky:
        lines.append(f"  {sweep.flaky.split(':', 1)[0]}: those suspects are not confirmed")
    for loc in sweep.localise():
        if math.isnan(loc.level):
            continue
        lines.append(f"  {loc.metric}: {loc.measured} pairs, healthy level {loc.level:.4g}, "
                     f"spread {loc.spread:.0%}, slow from {loc.threshold_pct:.0f}% below: "
                     f"{len(loc.slow)} slow")
        for s in loc.suspects:
            why = sweep.unconfirmed(s)
            lines.append(f"  suspect ({why.split(' (')[0]}) {s.text()}" if why
                         else f"  SUSPECT {s.text()}")
            for p in s.pairs:
                lines.append(f"    {p.node_a} -> {p.node_b}: {p.value:.4g} "
                             f"({p.deficit_pct:.0f}% below)")
            for node in s.nodes:
                ctl = sweep.controls.get(node)
                if ctl:
                    lines.append(f"    controls of {node} (no network path): " + ", ".join(
                        f"{k} {v:.4g}" for k, v in sorted(ctl.items())))
    return lines


def run(args: argparse.Namespace) -> int:
    with Store(db_path(args.db), create=False) as store, collector_paused():
        sweeps = latest_sweeps(store.newest_link_values(), system=args.system,
                               attributes=store.run_attributes)
        if not sweeps:
            raise FabregError("no sweep in the store: run the sweep (reframe ... --tag "
                              "sweep), then fabreg ingest perflogs")
        suspects = [(sweep, s) for sweep in sweeps for loc in sweep.localise()
                    for s in loc.suspects]
    confirmed = [x for x in suspects if not x[0].unconfirmed(x[1])]
    if args.format == "json":
        print(json.dumps({"suspects": [{**s.as_json_object(), "system": sweep.system,
                                        "partition": sweep.partition,
                                        "environ": sweep.environ, "jobid": sweep.jobid,
                                        "inconclusive": sweep.unconfirmed(s)}
                                       for sweep, s in suspects],
                          "sweeps": [_sweep_json(w) for w in sweeps]}, indent=2))
    else:
        for sweep in sweeps:
            print("\n".join(_text(sweep)))
        print(f"{len(confirmed)} suspect(s), {len(suspects) - len(confirmed)} not confirmed"
              if suspects else "no suspect")
    return 1 if confirmed else 0

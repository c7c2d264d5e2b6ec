"""Prometheus gauges of the newest sweeps: per link its value and deficit, per node and per
link whether it is a suspect (``fabreg.isolation``), so an alert can name the culprit.

A sweep of more than ``sweeps.MAX_LINK_NODES`` nodes (140,000 pairs per metric at 10,000) gets
per-link gauges only for its slow pairs and its suspects' evidence (per node and per round
for all): a scrape stays in proportion to the nodes and to what is wrong.

Rendered with prometheus-client's exposition format; ``fabreg export prometheus`` and
``serve-metrics`` add it to the store's collector (``fabreg.cli.export``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from fabreg.isolation import link
from fabreg.review.sweeps import Sweep

_WHERE = ("system", "partition", "environ")


def render(sweeps: list[Sweep]) -> str:
    """Exposition text of the sweeps' gauges ('' without sweeps)."""
    if not sweeps:
        return ""
    registry = CollectorRegistry()
    link_value = Gauge("fabreg_link_value", "Newest sweep: a link's value (MB/s or us)",
                       [*_WHERE, "metric", "node_a", "node_b"], registry=registry)
    link_deficit = Gauge("fabreg_link_deficit_percent",
                         "Newest sweep: a link's deficit against the run's healthy pairs",
                         [*_WHERE, "metric", "node_a", "node_b"], registry=registry)
    link_suspect = Gauge("fabreg_link_suspect",
                         "1 when the sweep names the link a suspect and confirms it",
                         [*_WHERE, "metric", "node_a", "node_b"], registry=registry)
    node_slow = Gauge("fabreg_node_slow_pairs_ratio",
                      "Newest sweep: share of a node's pairs that are slow",
                      [*_WHERE, "metric", "node"], registry=registry)
    node_suspect = Gauge("fabreg_node_suspect",
                         "1 when the sweep names the node a suspect and confirms it",
                         [*_WHERE, "metric", "node"], registry=registry)
    sweep_time = Gauge("fabreg_sweep_timestamp_seconds", "When the newest sweep finished",
                       list(_WHERE), registry=registry)
    sweep_pairs = Gauge("fabreg_sweep_pairs", "Newest sweep: pairs measured",
                        [*_WHERE, "metric"], registry=registry)
    sweep_slow = Gauge("fabreg_sweep_slow_pairs", "Newest sweep: pairs slow against the run's "
                       "healthy pairs", [*_WHERE, "metric"], registry=registry)
    round_slow = Gauge("fabreg_round_slow_pairs", "Newest sweep: slow pairs of one round",
                       [*_WHERE, "metric", "round"], registry=registry)
    round_median = Gauge("fabreg_round_median_value",
                         "Newest sweep: the median value of one round's pairs (MB/s or us)",
                         [*_WHERE, "metric", "round"], registry=registry)
    for sweep in sweeps:
        where = (sweep.system, sweep.partition, sweep.environ)
        summarised = sweep.summarised  # once: it counts the sweep's nodes
        sweep_time.labels(*where).set(sweep.time)
        for loc in sweep.localise():
            pairs = sweep.pairs.get(loc.metric, [])
            slow = {(p.node_a, p.node_b) for p in loc.slow}
            confirmed = [s for s in loc.suspects if not sweep.unconfirmed(s)]
            named_links = {tuple(s.nodes) for s in confirmed if s.kind == "link"}
            named_nodes = {s.nodes[0] for s in confirmed if s.kind == "node"}
            evidence = {(p.node_a, p.node_b) for s in loc.suspects for p in s.pairs}
            sweep_pairs.labels(*where, loc.metric).set(len(pairs))
            sweep_slow.labels(*where, loc.metric).set(len(slow))
            for p in pairs:
                key = (p.node_a, p.node_b)
                if summarised and key not in slow and key not in evidence:
                    continue  # a large sweep: per link only what is slow or evidence
                labels = (*where, loc.metric, p.node_a, p.node_b)
                link_value.labels(*labels).set(p.value)
                link_deficit.labels(*labels).set(loc.pair_deficit.get(key, 0.0))
                link_suspect.labels(*labels).set(float(link(*key) in named_links))
            for node in sweep.node_summary(loc):
                node_slow.labels(*where, loc.metric, node.node).set(node.slow / node.measured)
                node_suspect.labels(*where, loc.metric, node.node).set(
                    float(node.node in named_nodes))
            for r in sweep.round_summary(loc):
                round_slow.labels(*where, loc.metric, str(r.round)).set(r.slow)
                round_median.labels(*where, loc.metric, str(r.round)).set(r.median_value)
    return generate_latest(registry).decode()

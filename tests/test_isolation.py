"""Localisation without references (fabreg.isolation): a pair against the other pairs of its run.

Synthetic sweeps with log-normal noise: one bad node, one bad link, none; the rule must name
exactly the culprit, never a healthy node, and say what it judged by.
"""

from __future__ import annotations

import json
import random

import pytest

from fabreg.isolation import (
    NO_CONFIRMING_SWEEP,
    NOT_NAMED_AGAIN,
    PairValue,
    Suspect,
    inconclusive_suspects_named,
    localise,
    localise_all,
    read_suspects_named,
    suspects_named,
    suspects_of,
)


def sweep(n: int, bad_node: str | None = None, bad_link: tuple[str, str] | None = None,
          noise: float = 0.05, seed: int = 0, slow: float = 1 / 3,
          metric: str = "bandwidth", round_dip: float = 0.3) -> list[PairValue]:
    """Every ordered pair once (ring shifts), healthy 1000 MB/s (or 10 us), per-pair noise and
    whole rounds slowed by up to ``round_dip`` (the host's other work while they ran)."""
    rng = random.Random(seed)
    nodes = [f"node{i + 1}" for i in range(n)]
    out = []
    for shift in range(1, n):
        dip = 1 - rng.uniform(0, round_dip)
        for i, a in enumerate(nodes):
            b = nodes[(i + shift) % n]
            factor = rng.lognormvariate(0, noise) * dip
            if bad_node in (a, b) or (bad_link and {a, b} == set(bad_link)):
                factor *= slow
            value = 1000 * factor if metric == "bandwidth" else 10 / factor
            out.append(PairValue(a, b, value, shift))
    return out


def named(values, metric="bandwidth"):
    return [(s.kind, s.nodes) for s in localise(values, metric).suspects]


@pytest.mark.parametrize("n", [3, 4, 8, 16])
def test_a_bad_node_is_named_alone(n):
    right = sum(named(sweep(n, bad_node="node2", seed=s)) == [("node", ("node2",))]
                for s in range(50))
    assert right >= 48


@pytest.mark.parametrize("n", [3, 4, 8, 16])
def test_a_bad_link_is_named_not_its_nodes(n):
    right = sum(named(sweep(n, bad_link=("node1", "node3"), seed=s))
                == [("link", ("node1", "node3"))] for s in range(50))
    assert right >= 48


@pytest.mark.parametrize("n", [2, 4, 16])
def test_a_healthy_fabric_names_nobody(n):
    assert sum(bool(named(sweep(n, seed=s))) for s in range(100)) <= 1


def test_latency_is_judged_the_other_way():
    values = sweep(4, bad_node="node4", metric="latency", slow=0.4, round_dip=0)
    loc = localise(values, "latency")
    assert [(s.kind, s.nodes) for s in loc.suspects] == [("node", ("node4",))]
    assert 9 < loc.level < 11
    assert all(p.value > 20 for p in loc.suspects[0].pairs)


def test_two_nodes_cannot_tell_a_node_from_the_path():
    values = [PairValue("a", "b", 100.0), PairValue("b", "a", 900.0)]
    # one slow direction of two: nothing to compare with but each other
    assert [s.kind for s in localise(values).suspects] in ([], ["link"])


def test_a_small_deficit_is_not_a_suspect():
    """20 % below: within what the rule calls noise (30 % at least), however quiet the run."""
    assert named(sweep(8, bad_node="node5", noise=0.01, slow=0.8)) == []


def test_a_round_slowed_as_a_whole_is_nobody():
    """Other work during one round slows all its pairs: judged within the round, nobody."""
    values = [PairValue(p.node_a, p.node_b, p.value * (0.5 if p.round == 2 else 1), p.round)
              for p in sweep(4, noise=0.02, round_dip=0)]
    assert named(values) == []
    flat = [PairValue(p.node_a, p.node_b, p.value) for p in values]  # rounds unknown
    assert named(flat) != []


def test_a_noisy_run_needs_a_bigger_deficit():
    quiet = localise(sweep(8, noise=0.02, round_dip=0))
    noisy = localise(sweep(8, noise=0.25, round_dip=0))
    assert quiet.threshold_pct == pytest.approx(30.0)
    assert noisy.threshold_pct > quiet.threshold_pct


def test_evidence_is_json_with_the_issue_fields():
    found = suspects_of(localise_all({"bandwidth": sweep(4, bad_node="node3"),
                                      "latency": sweep(4, metric="latency")}))
    doc = json.loads(json.dumps({"suspects": [s.as_json_object() for s in found]}))
    (only,) = doc["suspects"]
    assert only["kind"] == "node" and only["nodes"] == ["node3"]
    assert only["metric"] == "bandwidth" and 60 < only["deficit_pct"] < 75
    assert len(only["pairs"]) == 6 and only["measured"] == 6
    assert {p["node_a"] for p in only["pairs"]} | {p["node_b"] for p in only["pairs"]} >= {"node3"}


def test_controls_and_gaps_are_not_pairs():
    values = sweep(4) + [PairValue("node1", "node1", 5.0), PairValue("node2", "node3",
                                                                     float("nan"))]
    loc = localise(values)
    assert loc.measured == 12 and loc.suspects == []


def test_a_round_trip_slow_one_way_only_is_not_a_link():
    """a -> b -> a and b -> a -> b cross the same path: one slow measurement is a rank that
    waited for its CPU, two are the link."""
    values = sweep(4, metric="latency", noise=0.02, round_dip=0)
    one_way = [PairValue(p.node_a, p.node_b, p.value * (50 if (p.node_a, p.node_b) ==
                                                        ("node1", "node2") else 1))
               for p in values]
    assert named(one_way, "latency") == []
    both = [PairValue(p.node_a, p.node_b, p.value * (50 if {p.node_a, p.node_b} ==
                                                     {"node1", "node2"} else 1))
            for p in values]
    assert named(both, "latency") == [("link", ("node1", "node2"))]
    # bandwidth is one way: one slow direction is a finding
    bw = [PairValue(p.node_a, p.node_b, p.value / (3 if (p.node_a, p.node_b) ==
                                                   ("node1", "node2") else 1))
          for p in sweep(4, noise=0.02, round_dip=0)]
    assert named(bw) == [("link", ("node1", "node2"))]


def _suspect(kind: str, *nodes: str) -> Suspect:
    return Suspect(kind, nodes, "bandwidth", 50.0, (), 3)


# confirmed, only first-sweep, why, contention note -> fails, untrusted prefix, flaky names
NAMED = [
    ([_suspect("node", "node3")], [], NOT_NAMED_AGAIN, "", True, "", ""),
    ([_suspect("node", "node3")], [_suspect("link", "node1", "node2")], NOT_NAMED_AGAIN, "",
     True, "", "link node1 <-> node2"),
    ([], [_suspect("link", "node1", "node2")], NO_CONFIRMING_SWEEP, "", False,
     NO_CONFIRMING_SWEEP, ""),
    ([_suspect("node", "node3")], [], NOT_NAMED_AGAIN, "other work took 40% of the CPU", False,
     "inconclusive (other work took 40% of the CPU)", ""),
    ([], [], NOT_NAMED_AGAIN, "", False, "", ""),
]


@pytest.mark.parametrize("confirmed,once,why,note,fails,untrusted,flaky", NAMED)
def test_the_suspects_named_column_reads_back_as_it_was_written(confirmed, once, why, note,
                                                                 fails, untrusted, flaky):
    text = suspects_named(confirmed, once, why)
    if note:
        text = inconclusive_suspects_named(text, note)
    said = read_suspects_named(text)
    assert said.fails() == fails and said.untrusted == untrusted, text
    assert (flaky in said.flaky) if flaky else said.flaky == "", (text, said)
    for suspect in confirmed:
        assert suspect.ident() in text

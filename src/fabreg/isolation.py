"""Which node or which link is bad, from one sweep's pair measurements and nothing else.

Shared by the sweep check (its verdict) and the review side (``fabreg isolate``, the report's
heat map, Prometheus gauges), so both name the same suspects from the same figures. Pure: no
I/O, no ReFrame, no store.

No reference is needed: a pair is judged against the other pairs of the same run, so what the
host did to all pairs at once (a busy CPU, a slow day) cancels. Interference only lowers
bandwidth and raises latency, so the healthy level is taken from the pairs that are not already
far below the best ones, not from all pairs (at 4 nodes one bad node is in half of them):

0. *Rounds*: each pair is first put against the pairs of its own round (measured at the same
   time): a round's best pairs are its reference, so what the host did during one round moves
   none of them (rounds of two links or more).
1. *Healthy pairs*: those within ``min_deficit`` of the run's upper quartile.
2. *Level and spread*: the median and the MAD (scaled to a standard deviation) of the healthy
   pairs, in log space (a deficit is a ratio).
3. *Slow pair*: at least ``min_deficit`` below the level, and more than ``spread_factor``
   spreads below it (a noisy run needs a bigger deficit before a pair is called slow).
4. *Node suspect*: its pairs judged together: more than half of them at least ``min_deficit``
   below the level and beyond ``spread_factor`` spreads of k pairs (spread / sqrt(k)); taken
   greedily, worst first; pairs with a named node are explained and judged no further.
5. *Link suspect*: a slow pair whose two nodes are otherwise healthy, or the link's two
   directions judged together like a node's pairs; for a round-trip metric (latency) both
   directions must be slow, as they measure the same path. With two nodes only, a slow pair
   cannot tell a node from the path: it is named as a link.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median

import numpy as np

#: A pair is slow only when it delivers less than this fraction below the healthy level.
MIN_DEFICIT = {"bandwidth": 0.30, "latency": 0.50}
#: ... and lies more than this many robust standard deviations below it.
SPREAD_FACTOR = 4.0
#: MAD -> standard deviation of a normal distribution.
MAD_SCALE = 1.4826
#: Which way is better, per metric the sweep measures.
HIGHER_IS_BETTER = {"bandwidth": True, "latency": False}
#: Metrics measured as a round trip: a -> b and b -> a both cross the link both ways, so they
#: are two measurements of one path, and a link is slow only when both say so (one alone is a
#: rank that waited for its CPU). Bandwidth is one way: one slow direction is a finding.
ROUND_TRIP = frozenset({"latency"})


@dataclass(frozen=True)
class PairValue:
    """One directed pair's figure in one sweep: ``node_a`` sent, ``node_b`` received."""

    node_a: str
    node_b: str
    value: float
    round: int = 0


@dataclass(frozen=True)
class SlowPair:
    node_a: str
    node_b: str
    value: float
    deficit_pct: float


@dataclass(frozen=True)
class Suspect:
    """A named node or link with the pairs that point at it."""

    kind: str  # "node" | "link"
    nodes: tuple[str, ...]
    metric: str
    deficit_pct: float
    pairs: tuple[SlowPair, ...]
    #: pairs of this node (or link) that were measured, slow or not
    measured: int

    def as_json_object(self) -> dict[str, object]:
        return {"kind": self.kind, "nodes": list(self.nodes), "metric": self.metric,
                "deficit_pct": round(self.deficit_pct, 1), "measured": self.measured,
                "pairs": [{"node_a": p.node_a, "node_b": p.node_b, "value": p.value,
                           "deficit_pct": round(p.deficit_pct, 1)} for p in self.pairs]}

    def ident(self) -> str:
        """What names this suspect at the start of its ``text()``: kind, nodes, metric."""
        return f"{self.kind} {' <-> '.join(self.nodes)}: {self.metric} "

    def text(self) -> str:
        what = " <-> ".join(self.nodes)
        if HIGHER_IS_BETTER.get(self.metric, True):
            how = f"{self.deficit_pct:.0f}% below"
        else:  # a deficit of d% is 1/(1-d) times the time
            how = f"{1 / max(1e-9, 1 - self.deficit_pct / 100):.1f}x that of"
        return (f"{self.kind} {what}: {self.metric} {how} the run's healthy pairs, slow in "
                f"{len(self.pairs)} of {self.measured} pairs")


@dataclass
class Localisation:
    """What one metric of one sweep says."""

    metric: str
    level: float  # the healthy pairs' median, in the metric's unit
    spread: float  # robust relative standard deviation of the healthy pairs
    threshold_pct: float  # deficit from which a pair is slow
    slow: list[SlowPair] = field(default_factory=list)
    suspects: list[Suspect] = field(default_factory=list)
    measured: int = 0
    #: (sender, receiver) -> percent below the healthy level, judged within its round
    pair_deficit: dict[tuple[str, str], float] = field(default_factory=dict)



def link(a: str, b: str) -> tuple[str, str]:
    """The link between two nodes, either way round: its nodes in order."""
    return (a, b) if a <= b else (b, a)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def localise(values: Iterable[PairValue], metric: str = "bandwidth",
             min_deficit: float | None = None,
             spread_factor: float = SPREAD_FACTOR) -> Localisation:
    """Slow pairs, node suspects and link suspects of one sweep for one metric (the pairs'
    figures as arrays: a 10,000-node sweep has 140,000 pairs a metric)."""
    higher = HIGHER_IS_BETTER.get(metric, True)
    floor = MIN_DEFICIT.get(metric, 0.3) if min_deficit is None else min_deficit
    pairs = [p for p in values if p.node_a != p.node_b and math.isfinite(p.value)
             and p.value > 0]
    if not pairs:
        return Localisation(metric, math.nan, math.nan, math.nan)
    # log "goodness": higher is better whatever the metric
    good = np.log(np.fromiter((p.value for p in pairs), dtype=float, count=len(pairs)))
    if not higher:
        good = -good
    _per_round(pairs, good)
    ordered = np.sort(good)
    top = _quantile(ordered, 0.75)
    healthy = ordered[ordered >= top + math.log(1.0 - floor)]
    centre = float(np.median(healthy))
    spread = MAD_SCALE * float(np.median(np.abs(healthy - centre)))
    cut = max(-math.log(1.0 - floor), spread_factor * spread)
    level = math.exp(centre if higher else -centre)
    out = Localisation(metric, level, spread, (1.0 - math.exp(-cut)) * 100.0,
                       measured=len(pairs))
    below = centre - good
    deficit = _pcts(below)
    out.pair_deficit = dict(zip(((p.node_a, p.node_b) for p in pairs), deficit.tolist()))
    slow: dict[int, SlowPair] = {}
    for i in np.flatnonzero(below >= cut).tolist():
        p = pairs[i]
        slow[id(p)] = SlowPair(p.node_a, p.node_b, p.value, float(deficit[i]))
    out.slow = list(slow.values())
    judge = _Judge(loc=out, below=dict(zip(map(id, pairs), below.tolist())),
                   floor=-math.log(1.0 - floor), spread=spread, factor=spread_factor)
    reach = [pairs[i] for i in np.flatnonzero(below >= judge.floor).tolist()]
    out.suspects = _suspects(pairs, reach, slow, judge)
    return out


def _pct(below: float) -> float:
    """log distance below the level -> percent of the rate lost."""
    return max(0.0, (1.0 - math.exp(-below)) * 100.0)


def _pcts(below: np.ndarray) -> np.ndarray:
    """:func:`_pct` of every pair at once."""
    return np.maximum(0.0, (1.0 - np.exp(-below)) * 100.0)


#: A round judged against its own best pairs needs this many links (with fewer, the best pair
#: of the round may be the slow link itself).
ROUND_MIN_LINKS = 2


def _per_round(pairs: list[PairValue], good: np.ndarray) -> None:
    """Judge each pair against the pairs measured at the same time: what the host did during
    one round (other work, the CPU a slow pair left to the others) moves all its pairs, and
    interference only lowers, so a round's reference is its best pairs (the maximum, the upper
    quartile from 8 pairs); every round is brought to the typical round's reference, in place
    (seen on minicluster: whole rounds 35 % apart on a healthy cluster, also the other pair of
    a round whose slow link left it the CPU)."""
    rounds: dict[int, list[int]] = {}
    for i, p in enumerate(pairs):
        rounds.setdefault(p.round, []).append(i)
    usable = {r: np.array(at) for r, at in rounds.items()
              if r > 0 and _links_at_least(pairs, at, ROUND_MIN_LINKS)}
    if len(usable) < 2:
        return
    ref = {}
    for r, at in usable.items():
        values = np.sort(good[at])
        ref[r] = float(values[-1]) if len(values) < 8 else _quantile(values, 0.75)
    typical = median(ref.values())
    for r, at in usable.items():
        good[at] += typical - ref[r]


def _links_at_least(pairs: list[PairValue], at: list[int], count: int) -> bool:
    """Whether the pairs at ``at`` measure at least ``count`` distinct links (stops as soon
    as they do: a round of a large sweep has thousands)."""
    seen: set[tuple[str, str]] = set()
    for i in at:
        seen.add(link(pairs[i].node_a, pairs[i].node_b))
        if len(seen) >= count:
            return True
    return False


@dataclass
class _Judge:
    """How far below the level each pair is (log), and when a group of pairs is slow."""

    loc: Localisation
    below: dict[int, float]
    floor: float
    spread: float
    factor: float

    def majority(self, group: list[PairValue]) -> float:
        """How far below the level more than half of the group's pairs are, at least."""
        return sorted((self.below[id(p)] for p in group), reverse=True)[len(group) // 2]

    def group_is_slow(self, group: list[PairValue]) -> bool:
        """More than half of the pairs at least the floor below the level, and beyond the
        spread of k pairs judged together (spread / sqrt(k)): a node's or a link's pairs."""
        if not group:
            return False
        effect = self.majority(group)
        return effect >= max(self.floor, self.factor * self.spread / math.sqrt(len(group)))

    def evidence(self, group: list[PairValue]) -> tuple[SlowPair, ...]:
        """The group's pairs at least the floor below the level."""
        return tuple(SlowPair(p.node_a, p.node_b, p.value, _pct(self.below[id(p)]))
                     for p in group if self.below[id(p)] >= self.floor)


def _suspects(pairs: list[PairValue], reach: list[PairValue], slow: dict[int, SlowPair],
              judge: _Judge) -> list[Suspect]:
    """Node suspects (greedy, worst first), then link suspects among the unexplained pairs.
    A group is slow only when its majority is at least the floor below the level, and so is
    a slow pair: a node or link none of whose pairs reach the floor (``reach``: those that
    do) is never named, so only those with one are judged (a 10,000-node sweep has 140,000
    pairs a metric and a handful within reach)."""
    loc = judge.loc
    first = (pairs[0].node_a, pairs[0].node_b)
    more_than_two = any(p.node_a not in first or p.node_b not in first for p in pairs)
    within = {n for p in reach for n in (p.node_a, p.node_b)}
    named: list[Suspect] = []
    explained: set[str] = set()
    by_node: dict[str, list[PairValue]] = {}
    for p in pairs:  # each node's pairs, found once: a sweep of n nodes has ~14 n pairs
        if p.node_a in within:
            by_node.setdefault(p.node_a, []).append(p)
        if p.node_b in within:
            by_node.setdefault(p.node_b, []).append(p)
    if more_than_two:  # with two nodes, a node cannot be told from the path
        while True:
            best = None
            for node in sorted(by_node):
                if node in explained:
                    continue
                mine = [p for p in by_node[node]
                        if p.node_a not in explained and p.node_b not in explained]
                if len(mine) >= 2 and judge.group_is_slow(mine):
                    effect = judge.majority(mine)
                    if best is None or effect > best[0]:
                        best = (effect, node, mine)
            if best is None:
                break
            effect, node, mine = best
            explained.add(node)
            named.append(Suspect("node", (node,), loc.metric,
                                 (1.0 - math.exp(-effect)) * 100.0, judge.evidence(mine),
                                 len(mine)))
    links = {link(p.node_a, p.node_b) for p in reach}
    by_link: dict[tuple[str, str], list[PairValue]] = {}
    for p in pairs:
        key = link(p.node_a, p.node_b)
        if key in links and p.node_a not in explained and p.node_b not in explained:
            by_link.setdefault(key, []).append(p)
    for nodes, mine in sorted(by_link.items()):
        together = judge.group_is_slow(mine)
        if loc.metric in ROUND_TRIP:
            # a -> b -> a and b -> a -> b measure one path: both must be slow
            found = together if len(mine) > 1 else id(mine[0]) in slow
        else:  # one way: one slow direction is a finding, or the two together
            found = together or any(id(p) in slow for p in mine)
        if found:
            bad = judge.evidence(mine)
            named.append(Suspect("link", nodes, loc.metric,
                                 median(b.deficit_pct for b in bad), bad, len(mine)))
    return named


def localise_all(table: dict[str, Iterable[PairValue]]) -> list[Localisation]:
    """``localise`` for each metric of a sweep (``{"bandwidth": [...], "latency": [...]}``)."""
    return [localise(values, metric) for metric, values in table.items()]


def suspects_of(localisations: Iterable[Localisation]) -> list[Suspect]:
    """Every suspect of every metric, a node or link named by several metrics once per metric."""
    return [s for loc in localisations for s in loc.suspects]


# --- the sweep's verdict as one perflog column (``suspects_named``) ------------------------

#: Why suspects the first sweep named are not confirmed.
NO_CONFIRMING_SWEEP = "flaky (no confirming sweep to name them again)"
NOT_NAMED_AGAIN = "flaky (not named again by the confirming sweep)"


def suspects_named(confirmed: Sequence[Suspect], unconfirmed: Sequence[Suspect] = (),
                   why: str = NOT_NAMED_AGAIN) -> str:
    """The ``suspects_named`` column: the confirmed suspects, then ``; <why>: `` and those
    only the first sweep named (``<why>: ...`` alone when none is confirmed)."""
    text = "; ".join(s.text() for s in confirmed)
    if unconfirmed:
        flaky = f"{why}: " + "; ".join(s.text() for s in unconfirmed)
        text = f"{text}; {flaky}" if text else flaky
    return text


def inconclusive_suspects_named(text: str, note: str) -> str:
    """``suspects_named`` of a sweep measured while other work took the CPUs."""
    return f"inconclusive ({note}): {text}"


@dataclass(frozen=True)
class NamedSuspects:
    """What a ``suspects_named`` column says about trusting its suspects."""

    #: Why none of them is trusted (``inconclusive (...)``, or ``flaky (...)`` when no suspect
    #: was confirmed), '' when the confirmed ones are.
    untrusted: str = ""
    #: The part naming the suspects the confirming sweep did not name again, after confirmed
    #: ones (``flaky (not named again ...): link node1 <-> node3: ...``), or ''.
    flaky: str = ""
    #: Does the column name confirmed suspects (trusted or not)?
    confirmed: bool = False

    def fails(self) -> bool:
        """Does the column name confirmed, trusted suspects: the sweep's failure?"""
        return self.confirmed and not self.untrusted


def read_suspects_named(text: str) -> NamedSuspects:
    """The reading of :func:`suspects_named` / :func:`inconclusive_suspects_named`."""
    if text.startswith(("inconclusive", "flaky")):
        return NamedSuspects(untrusted=text.split(":", 1)[0],
                             confirmed=text.startswith("inconclusive"))
    marker = "; flaky ("
    return NamedSuspects(flaky=text[text.index(marker) + 2:] if marker in text else "",
                         confirmed=bool(text))

"""The sweeps in the store: each sweep run's per-link values, put back together as one matrix.

The sweep check logs every pair as its own per-link series (``node_a``/``node_b`` parameters,
``fabreg.schema.PAIR_TABLE``). This module finds the newest run of each sweep (test case,
system, partition, environment) and gathers the values of its links, so ``fabreg isolate``,
the heat map and the Prometheus gauges judge exactly the pairs of one run with
``fabreg.isolation`` (the same rules the check applied).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from statistics import median

from fabreg import isolation
from fabreg.isolation import HIGHER_IS_BETTER
from fabreg.review.store import LinkValue, SeriesData, SeriesKey
from fabreg.schema import LINK_PARAMETERS, PAIR_METRIC_UNITS, PAIR_ROUNDS, PAIR_TABLE

#: (system, job id, time) -> the run's attributes (``Store.run_attributes``)
Attributes = Callable[[str, str, float], dict[str, str]]

#: Perf variable of a pair between two nodes -> the metric ``fabreg.isolation`` judges (the
#: median latency is evidence, not judged: on a shared host it measures waiting for a CPU).
LINK_PERFVARS = {f"link_{metric}": metric for metric in PAIR_METRIC_UNITS
                 if metric in HIGHER_IS_BETTER}


#: Above this many nodes a sweep is shown per node and per round (the heat map and the per-link
#: gauges would be n x n: 10^8 cells at 10,000 nodes); its slow pairs and suspects still are.
MAX_LINK_NODES = 256


@dataclass(frozen=True)
class NodeSummary:
    """One node's pairs in one metric of a sweep."""

    node: str
    measured: int
    slow: int
    #: the median and the largest deficit of its pairs (percent below the healthy level)
    median_pct: float
    worst_pct: float


@dataclass(frozen=True)
class RoundSummary:
    """The pairs one round measured at the same time, in one metric of a sweep."""

    round: int
    measured: int
    slow: int
    median_value: float  # in the metric's unit


@dataclass
class Sweep:
    """One sweep run: where, when, and its pairs' values per metric."""

    test: str
    params: tuple[tuple[str, str], ...]  # without node_a/node_b
    system: str
    partition: str
    environ: str
    time: float
    jobid: str
    pairs: dict[str, list[isolation.PairValue]] = field(default_factory=dict)
    #: per host: control perf variable (``loopback_bandwidth``...) -> value
    controls: dict[str, dict[str, float]] = field(default_factory=dict)
    #: why the check did not trust its suspects (other work took the CPUs while it measured,
    #: or the confirming sweep did not name them again: its ``suspects_named`` says
    #: ``inconclusive (...)`` or ``flaky (...)``), '' when it did
    inconclusive: str = ""
    #: the suspects the confirming sweep did not name again, as the check logged them after
    #: the confirmed ones (``...; flaky (not named again ...): link node1 <-> node3: ...``)
    flaky: str = ""
    _judged: list[isolation.Localisation] | None = field(default=None, repr=False,
                                                          compare=False)

    def unconfirmed(self, suspect: isolation.Suspect) -> str:
        """Why ``suspect`` is not confirmed (``inconclusive (...)``, ``flaky (...)``), or ''."""
        if self.inconclusive:
            return self.inconclusive
        if suspect.ident() in self.flaky:
            return self.flaky.split(":", 1)[0]
        return ""

    @property
    def summarised(self) -> bool:
        """Too many nodes for a matrix or per-link gauges (``MAX_LINK_NODES``)."""
        return len(self.nodes) > MAX_LINK_NODES

    def node_summary(self, loc: isolation.Localisation) -> list[NodeSummary]:
        """Per node: its pairs, how many are slow, their deficits; worst nodes first."""
        slow = {(p.node_a, p.node_b) for p in loc.slow}
        mine: dict[str, list[tuple[float, bool]]] = defaultdict(list)
        for p in self.pairs.get(loc.metric, []):
            key = (p.node_a, p.node_b)
            entry = (loc.pair_deficit.get(key, 0.0), key in slow)
            mine[p.node_a].append(entry)
            mine[p.node_b].append(entry)
        out = [NodeSummary(node, len(e), sum(s for _, s in e), median(d for d, _ in e),
                           max(d for d, _ in e)) for node, e in mine.items()]
        return sorted(out, key=lambda n: (-n.slow, -n.median_pct, n.node))

    def round_summary(self, loc: isolation.Localisation) -> list[RoundSummary]:
        """Per round (0: pairs without a round): its pairs, how many are slow, their median."""
        slow = {(p.node_a, p.node_b) for p in loc.slow}
        rounds: dict[int, list[isolation.PairValue]] = defaultdict(list)
        for p in self.pairs.get(loc.metric, []):
            rounds[p.round].append(p)
        return [RoundSummary(r, len(ps), sum((p.node_a, p.node_b) in slow for p in ps),
                             median(p.value for p in ps)) for r, ps in sorted(rounds.items())]

    @property
    def nodes(self) -> list[str]:
        return sorted({n for values in self.pairs.values() for p in values
                       for n in (p.node_a, p.node_b)} | set(self.controls))

    @property
    def label(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.params)
        return f"{self.test} {params} {self.system}:{self.partition}+{self.environ}"

    def localise(self) -> list[isolation.Localisation]:
        """The sweep judged (once: the text, JSON and gauges all read the same verdict)."""
        if self._judged is None:
            self._judged = isolation.localise_all(self.pairs)
        return self._judged


def newest_values(all_series: Iterable[SeriesData]) -> list[LinkValue]:
    """The newest value of each per-link series among ``all_series`` (a whole store read by
    ``Store.load``): what ``latest_sweeps`` takes (``Store.newest_link_values`` reads only
    those)."""
    out = []
    for s in all_series:
        link = link_of(s.key)
        if link is None or not len(s):
            continue
        out.append(LinkValue(link[0], link[1], link[2], float(s.time[-1]),
                             s.jobid[-1] if s.jobid else "", float(s.value[-1])))
    return out


def link_of(key: SeriesKey) -> tuple[SeriesKey, str, str] | None:
    """A per-link series' key without its node names, and the names (None for a series of
    no link). The parameters are sorted by name: the names are found by bisection, not by
    a scan (a 10,000-node sweep has 450,000 link series)."""
    params = key.params
    first, second = LINK_PARAMETERS
    at_a, at_b = bisect.bisect_left(params, (first,)), bisect.bisect_left(params, (second,))
    if at_b >= len(params) or params[at_a][0] != first or params[at_b][0] != second:
        return None
    rest = params[:at_a] + params[at_a + 1:at_b] + params[at_b + 1:]
    return (SeriesKey(key.test, rest, key.system, key.partition, key.environ, key.perfvar),
            params[at_a][1], params[at_b][1])


def link_families(keys: Iterable[tuple[int, SeriesKey]]) -> dict[int, int]:
    """Series id -> how many link series its sweep figure has (the same sweep, system,
    partition, environment and figure), for each per-link series of ``keys`` (series id,
    key): the family whose changes the trends gate judges together
    (``fabreg.review.trends.family_wise``)."""
    members: dict[SeriesKey, list[int]] = defaultdict(list)
    for sid, key in keys:
        link = link_of(key)
        if link is not None:
            members[link[0]].append(sid)
    return {i: len(ids) for ids in members.values() for i in ids}


def summarised_links(sweeps: Iterable[Sweep], but_slow: bool = False
                     ) -> Callable[[SeriesData], bool]:
    """Whether a series is a link of a sweep shown per node and per round (more than
    ``MAX_LINK_NODES`` nodes; ``but_slow``: a link slow in that sweep is not): the store's
    per-series gauges leave those out unless their trend is wrong, as the sweep's own gauges
    keep only its slow pairs and evidence; the report plots only the slow ones."""
    groups = {(s.test, s.params, s.system, s.partition, s.environ): s
              for s in sweeps if s.summarised}
    slow = {(group, p.node_a, p.node_b) for group, sweep in groups.items() if but_slow
            for loc in sweep.localise() for p in loc.slow}

    def summarised(series: SeriesData) -> bool:
        link = link_of(series.key) if groups else None
        if link is None:
            return False
        k, a, b = link
        group = (k.test, k.params, k.system, k.partition, k.environ)
        return group in groups and (group, a, b) not in slow

    return summarised


def _rounds(attrs: dict[str, str]) -> dict[tuple[str, str], int]:
    """(sender, receiver) -> round, from the run's pair rounds, or its whole pair table in a
    store written before the rounds were kept alone (empty when it has neither)."""
    if PAIR_ROUNDS in attrs:
        try:
            kept = json.loads(attrs[PAIR_ROUNDS])
            names = list(kept["nodes"])
            return {(names[pairs[i]], names[pairs[i + 1]]): int(r)
                    for r, pairs in kept["rounds"].items() for i in range(0, len(pairs) - 1, 2)}
        except (ValueError, TypeError, KeyError, IndexError):
            return {}
    try:
        table = json.loads(attrs.get(PAIR_TABLE) or "{}")
        fields = list(table["fields"])
        rows = [dict(zip(fields, row)) for row in table["rows"]]
    except (ValueError, TypeError, KeyError):
        return {}
    return {(str(r["node_a"]), str(r["node_b"])): int(r.get("round") or 0) for r in rows}


def latest_sweeps(links: Iterable[LinkValue], system: str | None = None,
                  attributes: Attributes | None = None) -> list[Sweep]:
    """The newest run of every sweep in the store (optionally of one system): one per test,
    system, partition, environment and transport, from each link's newest value
    (``Store.newest_link_values``, or ``newest_values`` of a loaded store). ``attributes``
    (``Store.run_attributes``) gives each pair its round, from the run's pair rounds."""
    # by key object first: the links of one sweep read from the store share a handful of
    # keys, and a key's hash is taken of all its parameters (450,000 links at 10,000 nodes)
    by_key: dict[int, tuple[SeriesKey, list[LinkValue]]] = {}
    for s in links:
        found = by_key.get(id(s.key))
        if found is None:
            found = by_key[id(s.key)] = (s.key, [])
        found[1].append(s)
    groups: dict[tuple, list[LinkValue]] = defaultdict(list)
    for k, members in by_key.values():
        if not system or k.system == system:
            groups[(k.test, k.params, k.system, k.partition, k.environ)] += members
    sweeps = []
    for (test, params, sys_name, part, env), members in sorted(groups.items()):
        newest = max(s.time for s in members)
        jobid = next((s.jobid for s in members if s.time == newest and s.jobid), "")
        sweep = Sweep(test, params, sys_name, part, env, newest, jobid)
        # which round measured each pair: pairs are judged against their round (isolation)
        attrs = attributes(sys_name, jobid, newest) if attributes else {}
        rounds = _rounds(attrs)
        said = isolation.read_suspects_named(attrs.get("suspects_named", ""))
        sweep.inconclusive, sweep.flaky = said.untrusted, said.flaky
        for s in members:
            if s.time != newest:
                continue  # this link was not measured by the newest run
            a, b = s.node_a, s.node_b
            perfvar = s.key.perfvar
            if perfvar in LINK_PERFVARS and a != b:
                sweep.pairs.setdefault(LINK_PERFVARS[perfvar], []).append(
                    isolation.PairValue(a, b, s.value, rounds.get((a, b), 0)))
            elif a == b:
                sweep.controls.setdefault(a, {})[perfvar] = s.value
        for values in sweep.pairs.values():
            values.sort(key=lambda p: (p.node_a, p.node_b))
        sweeps.append(sweep)
    # A sweep pinned to other nodes (FABREG_NODELIST) is another series of the same sweep:
    # only the newest run per place, environment and transport speaks for the fabric now.
    newest: dict[tuple, Sweep] = {}
    for w in sorted(sweeps, key=lambda w: w.time):
        newest[(w.test, w.system, w.partition, w.environ, dict(w.params).get("transport"))] = w
    return sorted(newest.values(), key=lambda w: w.time)

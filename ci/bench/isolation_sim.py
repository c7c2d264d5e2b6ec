#!/usr/bin/env python3
"""How many rounds and pair measurements does it take to find one bad node or one bad link?

A synthetic fabric: n nodes on a two-level fat tree (leaves of ``m`` nodes, ``m`` spines,
destination-mod-k routing, as static InfiniBand routing does), each node on one cable to its
leaf, each leaf on one cable to every spine. One element is made bad (its traffic at a third
of the healthy rate), then each scheme measures rounds of concurrent directed pairs with
realistic noise: per measurement a log-normal jitter (5 %) and, one time in ten, interference
that takes up to half the rate (interference only lowers a rate), best of 3 repeats.

Faults: ``node`` (a node's cable or NIC), ``cable`` (one leaf-spine cable, both directions:
it carries many node pairs) and ``pair`` (only the traffic between two given nodes, what
``fabreg cluster degrade --peer`` emulates; no physical element carries exactly that), and
``none`` (a healthy fabric: every name is a false alarm).

Schemes:
- ``all-pairs``: n-1 ring shifts, every ordered pair (mpiGraph's matrix);
- ``ring-log``: the first ceil(log2 n) ring shifts;
- ``adaptive``: ceil(log2 n) recursive-halving rounds (rank i <-> i XOR 2^k), then one
  confirmation round that re-measures every suspect against fresh partners (one in its leaf,
  one in another leaf through another spine) before it is named.

The decoder is the sweep's rule (``fabreg.isolation``) made topology-aware: an element (node
cable, leaf-spine cable) on whose routes most measured pairs are slow, at least two, is named,
worst first; slow pairs no named element explains are named as node-pair links. Prints
accuracy (exactly the bad element named) and cost per scheme, fault and size.

    .venv/bin/python ci/bench/isolation_sim.py [--sizes 16,1000,10000] [--trials 20]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

SLOW_FACTOR = 1 / 3
JITTER = 0.05
INTERFERENCE_P = 0.10
REPEATS = 3
MIN_DEFICIT = 0.30  # fabreg.isolation.MIN_DEFICIT["bandwidth"]
SPREAD_FACTOR = 4.0  # fabreg.isolation.SPREAD_FACTOR
CONFIRM_PER_NODE = 2


@dataclass(frozen=True)
class Fabric:
    n: int
    m: int  # nodes per leaf = spines

    @property
    def leaves(self) -> int:
        return -(-self.n // self.m)

    # element ids: node cables 0..n-1, then leaf-spine cables leaf * m + spine
    def cable(self, leaf: np.ndarray, spine: np.ndarray) -> np.ndarray:
        return self.n + leaf * self.m + spine

    @property
    def elements(self) -> int:
        return self.n + self.leaves * self.m

    def routes(self, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        """Elements on the route a -> b: 4 arrays (the cable ones -1 within a leaf)."""
        la, lb = a // self.m, b // self.m
        spine = b % self.m
        cross = la != lb
        up = np.where(cross, self.cable(la, spine), -1)
        down = np.where(cross, self.cable(lb, spine), -1)
        return [a, b, up, down]


def fabric_for(n: int) -> Fabric:
    return Fabric(n, 16 if n >= 32 else max(2, n // 2))


def measure(fab: Fabric, a: np.ndarray, b: np.ndarray, bad: int | None,
            bad_pair: tuple[int, int] | None, rng: np.random.Generator) -> np.ndarray:
    rate = np.ones(len(a))
    if bad is not None:
        hit = np.zeros(len(a), bool)
        for el in fab.routes(a, b):
            hit |= el == bad
        rate[hit] = SLOW_FACTOR
    if bad_pair is not None:
        x, y = bad_pair
        rate[((a == x) & (b == y)) | ((a == y) & (b == x))] = SLOW_FACTOR
    best = np.zeros(len(a))
    for _ in range(REPEATS):
        noise = np.exp(rng.normal(0.0, JITTER, len(a)))
        hit = rng.random(len(a)) < INTERFERENCE_P
        noise[hit] *= rng.uniform(0.5, 1.0, hit.sum())
        best = np.maximum(best, rate * noise)
    return best


def judge(values: np.ndarray) -> tuple[float, float]:
    """The sweep's rule (fabreg.isolation.localise) on one round: (healthy log level, cut)."""
    logs = np.log(values)
    top = np.quantile(logs, 0.75)
    healthy = logs[logs >= top + math.log(1 - MIN_DEFICIT)]
    centre = float(np.median(healthy))
    spread = 1.4826 * float(np.median(np.abs(healthy - centre)))
    return centre, max(-math.log(1 - MIN_DEFICIT), SPREAD_FACTOR * spread)


def rounds_for(a: np.ndarray, b: np.ndarray) -> int:
    """Rounds to measure these directed pairs: a node sends to one and receives from one."""
    if len(a) == 0:
        return 0
    return int(max(np.bincount(a).max(), np.bincount(b).max()))


class Evidence:
    """Per element: pairs measured through it, and slow ones; plus the slow pairs themselves."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        self.measured = np.zeros(fab.elements + 1, np.int64)  # last slot: "no element" (-1)
        self.slow = np.zeros(fab.elements + 1, np.int64)
        self.slow_pairs: list[tuple[int, int]] = []
        self.pairs = 0

    def add(self, a: np.ndarray, b: np.ndarray, slow: np.ndarray) -> None:
        size = self.fab.elements + 1
        for el in self.fab.routes(a, b):
            el = np.where(el < 0, size - 1, el)
            self.measured += np.bincount(el, minlength=size)
            self.slow += np.bincount(el[slow], minlength=size)
        self.slow_pairs += list(zip(a[slow].tolist(), b[slow].tolist()))
        self.pairs += len(a)

    def decode(self) -> list[tuple[str, object]]:
        """Named elements (``node``/``cable``) and unexplained slow pairs (``pair``)."""
        named: list[tuple[str, object]] = []
        left = list(self.slow_pairs)
        measured = self.measured[:-1].astype(float)
        slow = self.slow[:-1].astype(float)
        while left:
            ratio = np.where(measured > 0, slow / np.maximum(measured, 1), 0.0)
            ok = (slow >= 2) & (ratio > 0.5)
            if not ok.any():
                break
            score = np.where(ok, ratio * 1e9 + slow, -1.0)
            el = int(np.argmax(score))
            named.append(("node", el) if el < self.fab.n else ("cable", el - self.fab.n))
            a = np.array([p[0] for p in left])
            b = np.array([p[1] for p in left])
            on = np.zeros(len(left), bool)
            for r in self.fab.routes(a, b):
                on |= r == el
            for r in self.fab.routes(a[on], b[on]):  # explained: judged no further
                keep = r >= 0
                np.subtract.at(slow, r[keep], 1)
            slow[el] = 0
            measured[el] = 0
            left = [p for p, hit in zip(left, on) if not hit]
        named += [("pair", tuple(sorted(p))) for p in sorted({tuple(sorted(p)) for p in left})]
        return named


def shift_round(n: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(n)
    return a, (a + r) % n


def xor_round(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(n)
    b = a ^ (1 << k)
    keep = b < n
    return a[keep], b[keep]


def run_scheme(scheme: str, fab: Fabric, bad: int | None, bad_pair: tuple[int, int] | None,
               rng: np.random.Generator) -> tuple[list, int, int]:
    """(named, rounds, pair measurements).

    Confirm before naming: pairs found slow are measured again (after the scheme's rounds, at
    most CONFIRM_PER_NODE per sender and receiver) and one that is not slow again against its
    round's level is not slow. The adaptive scheme's confirmation also pairs every suspect node with
    fresh partners (one in its leaf, one in another leaf through another spine).
    """
    n = fab.n
    logn = max(1, math.ceil(math.log2(n)))
    if scheme == "all-pairs":
        plan = [shift_round(n, r) for r in range(1, n)]
    elif scheme == "ring-log":
        plan = [shift_round(n, r) for r in range(1, logn + 1)]
    else:
        plan = [xor_round(n, k) for k in range(logn)]
    measured, suspect_a, suspect_b, levels = [], [], [], []
    pairs = 0
    for a, b in plan:
        values = measure(fab, a, b, bad, bad_pair, rng)
        centre, cut = judge(values)
        slow = centre - np.log(values) >= cut
        measured.append((a, b, slow))
        suspect_a.append(a[slow])
        suspect_b.append(b[slow])
        levels.append(np.full(int(slow.sum()), centre - cut))
        pairs += len(a)
    sa, sb, floor = (np.concatenate(x) for x in (suspect_a, suspect_b, levels))
    ev = Evidence(fab)
    for a, b, slow in measured:
        ev.add(a, b, slow)
    named = ev.decode()
    # Confirm: every slow pair named as a pair, and CONFIRM_PER_NODE slow pairs of each named
    # element, measured again; one not slow again against its round's level is refuted.
    pick, per_element = [], {}
    pair_named = {w for k, w in named if k == "pair"}
    for i in rng.permutation(len(sa)):
        x, y = int(sa[i]), int(sb[i])
        if tuple(sorted((x, y))) in pair_named:
            pick.append(i)
            continue
        for kind, what in named:
            if kind == "pair":
                continue
            el = what if kind == "node" else fab.n + what
            if any(int(r[0]) == el for r in fab.routes(np.array([x]), np.array([y]))) \
                    and per_element.get(el, 0) < CONFIRM_PER_NODE:
                per_element[el] = per_element.get(el, 0) + 1
                pick.append(i)
                break
    extra_rounds = 0
    if pick:
        ca, cb, cf = sa[pick], sb[pick], floor[pick]
        again = np.log(measure(fab, ca, cb, bad, bad_pair, rng)) <= cf
        pairs += len(ca)
        extra_rounds = rounds_for(ca, cb)
        refuted = {(int(x), int(y)) for x, y, ok in zip(ca, cb, again) if not ok}
        if refuted:
            ev = Evidence(fab)
            for a, b, slow in measured:
                ev.add(a, b, slow & ~np.array([(int(x), int(y)) in refuted
                                               for x, y in zip(a, b)]))
            named = ev.decode()
    if scheme == "adaptive" and named:
        nodes = set()
        for kind, what in named:
            if kind == "node":
                nodes.add(what)
            elif kind == "pair":
                nodes.update(what)
            else:  # a cable: the node of that index in that leaf uses it in the XOR rounds
                leaf, spine = divmod(what, fab.m)
                nodes.add(min(n - 1, leaf * fab.m + spine))
        a_list, b_list = [], []
        for x in sorted(nodes):
            leaf, idx = divmod(x, fab.m)
            same = leaf * fab.m + (idx + 1 + rng.integers(fab.m - 1)) % fab.m
            other_leaf = (leaf + 1 + rng.integers(max(1, fab.leaves - 1))) % fab.leaves
            other = other_leaf * fab.m + (idx + 1 + rng.integers(fab.m - 1)) % fab.m
            for y in (same, other):
                if y < n and y != x:
                    a_list += [x, y]
                    b_list += [y, x]
        if a_list:
            a, b = np.array(a_list), np.array(b_list)
            # judged against the level of a full round measured alongside (shift 1)
            ref_a, ref_b = shift_round(n, 1)
            values = measure(fab, np.concatenate([a, ref_a]), np.concatenate([b, ref_b]),
                             bad, bad_pair, rng)
            centre, cut = judge(values[len(a):])
            ev.add(a, b, centre - np.log(values[:len(a)]) >= cut)
            pairs += len(a)
            extra_rounds = max(extra_rounds, rounds_for(a, b))
            named = ev.decode()
    return named, len(plan) + extra_rounds, pairs


def inject(kind: str, fab: Fabric, rng: np.random.Generator):
    """(bad element, bad pair, what a correct answer names)."""
    n = fab.n
    if kind == "none":
        return None, None, []
    if kind == "node":
        x = int(rng.integers(n))
        return x, None, [("node", x)]
    if kind == "cable":
        leaf = int(rng.integers(fab.leaves))
        spine = int(rng.integers(fab.m))
        return fab.n + leaf * fab.m + spine, None, [("cable", leaf * fab.m + spine)]
    x, y = (int(v) for v in rng.choice(n, 2, replace=False))
    return None, (x, y), [("pair", tuple(sorted((x, y))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="16,1000,10000")
    parser.add_argument("--trials", type=int, default=20, help="trials per size, fault, scheme")
    parser.add_argument("--all-pairs-max-nodes", type=int, default=2000,
                        help="simulate all-pairs up to this size (10,000 nodes: 10^8 pair "
                             "measurements per trial); larger: its cost only")
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{'nodes':>6} {'scheme':10} {'fault':6} {'right':>9} {'jobs':>4} {'rounds':>7} "
          f"{'pairs measured':>15} {'sim s':>6}  wrong answers (first)")
    for n in (int(s) for s in args.sizes.split(",")):
        fab = fabric_for(n)
        for scheme in ("all-pairs", "ring-log", "adaptive"):
            for kind in ("none", "node", "cable", "pair"):
                trials = args.trials
                if scheme == "all-pairs" and n > args.all_pairs_max_nodes:
                    print(f"{n:>6} {scheme:10} {kind:6} {'-':>9} {1:>4} {n - 1:>7} "
                          f"{n * (n - 1):>15,} {'-':>6}  not simulated (cost only)")
                    continue
                right, rounds, pairs, wrong = 0, 0, 0, []
                start = time.monotonic()
                for _ in range(trials):
                    bad, bad_pair, expect = inject(kind, fab, rng)
                    named, r, p = run_scheme(scheme, fab, bad, bad_pair, rng)
                    right += named == expect
                    if named != expect and len(wrong) < 1:
                        wrong.append(named[:3])
                    rounds, pairs = r, p
                jobs = 2 if rounds > {"all-pairs": n - 1}.get(scheme, math.ceil(math.log2(n))) \
                    else 1
                secs = time.monotonic() - start
                print(f"{n:>6} {scheme:10} {kind:6} {right:>4} of {trials:<3} {jobs:>4} "
                      f"{rounds:>7} {pairs:>15,} {secs:>6.1f}  {wrong[0] if wrong else ''}",
                      flush=True)
    print(f"(fat tree: leaves of 16 nodes and 16 spines from 32 nodes up, else 2 leaves; a "
          f"bad element at {SLOW_FACTOR:.2f} of the rate; jitter {JITTER:.0%}, interference "
          f"p={INTERFERENCE_P}, best of {REPEATS}; rounds and pairs include the confirmation "
          "(the last trial's); jobs: 1 when the confirmation runs in the sweep's job, else 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

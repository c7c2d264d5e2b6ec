#!/usr/bin/env python3
"""What a host control rule excuses in real sessions: the false alarms it removes and the
faults it would mask, replayed over the perflogs of kept healthy sessions.

``host_control_bench.py`` meets a slow host only when one happens during its own rounds. A
round's healthy sessions (``healthy_runs_bench.py``, which keeps them) log every judged
value of every check with its job's host control, and a baseline (``cost_bench.py
--calibrate N --keep``) holds the rows that judged them: this bench judges each logged value
again by its row, and, when it fails, by the control of its job, under each rule: the
current one (a figure on the value's path beyond its own failure limit, by enough to
explain the value) and three candidates that also count a figure beyond its warning band
(``warn``: by enough to bring the value back inside its failure limit, as the current rule;
``graded``: inside its warning band; ``whole``: to its reference or better, the control
explaining the whole deviation). With ``--calibration``, a fifth, ``followed``: the current
rule, but a figure explains a value only as far as values of the same check and metric ran
slower than their rows in the calibration's jobs whose control read that figure beyond its
failure limit (a figure that never read slow in those jobs explains as it does now): a
figure whose slow state the value does not follow excuses nothing. Each value doubled in
time (halved, for a rate) is the smallest fault worth catching, in a job whose host read
what that job's host read: a fault the band catches and a rule explains is masked
(``inconclusive`` instead of ``fail``).

A passing job's control is one sample, a failing job's the best of
``host_control.FAILING_SAMPLES``: a faulty job would have read its host no slower than this
replay assumes, so the masked counts are upper bounds, alike for every rule.

Usage (repository root; the directories the two benches keep):

    .venv/bin/python ci/bench/control_replay_bench.py \\
        --references /tmp/cost-bench-XXXX/checks-local-now/references/local \\
        --references checks/references/local.yaml /tmp/fabreg-healthy-XXXX \\
        [--calibration /tmp/cost-bench-XXXX/local-calibration1 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from healthy_runs_bench import perflog_rows  # noqa: E402
from host_control_bench import at_warning  # noqa: E402

from fabreg.errors import FabregError  # noqa: E402
from fabreg.run import host_control  # noqa: E402
from fabreg.run.references import Assessment, Reference, ReferenceTable  # noqa: E402
from fabreg.schema import HOST_CONTROL_BENCHMARK, HOST_CONTROL_FIGURES, control_path  # noqa: E402

RULES = ("now", "warn", "graded", "whole")
#: The candidate that ``--calibration`` adds: figures weighed by what the values followed.
FOLLOWED = "followed"
#: (check, metric, figure) -> the worst factor by which such values ran slower than their rows
#: in calibration jobs whose control read that figure beyond its failure limit, and the jobs.
Followed = dict[tuple[str, str, str], tuple[float, int]]


@dataclass
class Tally:
    """What one check's logged values came to, per rule in the order of :data:`RULES`."""

    values: int = 0
    with_control: int = 0
    #: Values whose control read a figure on the path between its warning band and its
    #: failure limit: the case the candidates are for.
    between: int = 0
    failed: int = 0
    explained: list[int] = field(default_factory=lambda: [0] * (len(RULES) + 1))
    caught: int = 0
    masked: list[int] = field(default_factory=lambda: [0] * (len(RULES) + 1))

    def add(self, other: Tally) -> None:
        for name in ("values", "with_control", "between", "failed", "caught"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.explained = [a + b for a, b in zip(self.explained, other.explained)]
        self.masked = [a + b for a, b in zip(self.masked, other.masked)]

    def row(self, name: str, rules: int) -> str:
        return (f"{name:<26}{self.values:>8}{self.with_control:>9}{self.between:>9}"
                f"{self.failed:>8}{' / '.join(map(str, self.explained[:rules])):>24}"
                f"{self.caught:>8}{' / '.join(map(str, self.masked[:rules])):>30}")


def explained(rule: str, assessment: Assessment, now: host_control.SlowHost | None,
              warn: host_control.SlowHost | None,
              followed: host_control.SlowHost | None = None) -> bool:
    """Would ``rule`` leave this failing value ``inconclusive``? ``now`` / ``warn``: what of
    its job's control lay beyond its failure limit / its warning band (None: nothing);
    ``followed``: ``now`` with each figure's factor cut to what the value's kind followed."""
    if rule == FOLLOWED:
        return followed is not None and followed.explains(assessment)
    if now is not None and now.explains(assessment):
        return True  # every rule excuses what the current one does
    if rule == "now" or warn is None:
        return False
    if rule == "warn":
        return warn.explains(assessment)
    ref = assessment.ref
    corrected = (assessment.value / warn.factor if ref.lower_is_better
                 else assessment.value * warn.factor)
    if rule == "graded":
        return ref.verdict(corrected) == "ok"
    return corrected <= ref.value if ref.lower_is_better else corrected >= ref.value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", required=True, type=Path, action="append",
                        help="a reference file, or a directory of them, that judged the "
                             "sessions (repeatable, first match first, as the checks: the "
                             "host's baseline, then checks/references/SYSTEM.yaml)")
    parser.add_argument("--calibration", type=Path, action="append", default=[],
                        help="a directory of the calibration sessions that drew the "
                             "baseline (repeatable): how far each check's values followed "
                             "each control figure there weighs that figure (rule 'followed')")
    parser.add_argument("sessions", nargs="+", type=Path,
                        help="directories of kept sessions (their perflogs anywhere below)")
    args = parser.parse_args()
    paths = []
    for given in args.references:
        found = sorted(given.glob("*.yaml")) if given.is_dir() else [given]
        if not found:
            print(f"{given}: no reference file (*.yaml)", file=sys.stderr)
            return 2
        paths += found
    try:
        tables = [ReferenceTable.load(p) for p in paths]
    except FabregError as err:
        print(err, file=sys.stderr)
        return 2
    judged_by = ", ".join(map(str, args.references))

    def lookup(**key: object) -> Reference | None:
        return next((r for t in tables if (r := t.lookup(**key))), None)

    baseline = {name: r for name in HOST_CONTROL_FIGURES
                if (r := lookup(benchmark=HOST_CONTROL_BENCHMARK, metric=name))}
    if not baseline:
        print(f"{judged_by}: no host control rows", file=sys.stderr)
        return 2
    warning = at_warning(baseline)
    rules = (*RULES, FOLLOWED) if args.calibration else RULES
    follow: Followed | None = None
    if args.calibration:
        calibration = [d for c in args.calibration for d in sorted(c.rglob("perflogs"))
                       if d.is_dir()]
        if not calibration:
            print("no perflogs under " + ", ".join(map(str, args.calibration)),
                  file=sys.stderr)
            return 2
        follow = followed_figures(calibration, lookup, baseline)
    counts: dict[str, Tally] = defaultdict(Tally)
    alarms: list[str] = []
    perflogs = [d for s in args.sessions for d in sorted(s.rglob("perflogs")) if d.is_dir()]
    lines = 0
    for directory in perflogs:
        for line in perflog_rows(directory):
            lines += 1
            family = (line.get("name") or "?").split()[0]
            replay_line(line, family, lookup, baseline, warning, counts, alarms, follow)
    if not lines:
        print("no perflog line under " + ", ".join(map(str, args.sessions)), file=sys.stderr)
        return 2

    print(f"{lines} perflog lines of {len(perflogs)} sessions, judged by {judged_by}")
    print("per check: values judged, those with a host control, those whose control read a "
          "figure on the path between its warning band and its failure limit (between); "
          "healthy values that failed and those each rule explains; faults (each value of a "
          "job with a control at twice its time, a rate at half) the band caught and those "
          f"each rule would mask; rules {' / '.join(rules)}")
    print(f"{'check':<26}{'values':>8}{'control':>9}{'between':>9}{'failed':>8}"
          f"{'explained':>24}{'caught':>8}{'masked':>30}")
    total = Tally()
    for family in sorted(counts):
        total.add(counts[family])
        print(counts[family].row(family, len(rules)))
    print(total.row("all", len(rules)))
    for text in alarms:
        print("  failed: " + text)
    if follow is not None:
        print_followed(follow, f"{len(calibration)} calibration sessions")
        print_followed(followed_figures(perflogs, lookup, baseline),
                       f"the {len(perflogs)} replayed sessions")
    return 0


def slower_by(value: float, ref: Reference) -> float:
    """How many times slower than its reference ``value`` ran (below 1: faster)."""
    if ref.lower_is_better:
        return value / ref.value if ref.value else 1.0
    return ref.value / value if value else float("inf")


def logged_values(line: dict[str, str], lookup: Callable[..., Reference | None]
                  ) -> list[tuple[str, dict[str, object], float, Reference]]:
    """A perflog line's judged values that have a row: variable, key, value, row."""
    try:
        keys = json.loads(line.get("ref_keys") or "{}")
    except ValueError:
        return []
    out = []
    for var, key in keys.items():
        if not isinstance(key, dict) or key.get("benchmark") == HOST_CONTROL_BENCHMARK:
            continue
        try:
            value = float(line.get(f"{var}_value", ""))
        except ValueError:
            continue
        ref = lookup(**key)
        if ref is not None and value == value:
            out.append((var, key, value, ref))
    return out


def followed_figures(perflogs: list[Path], lookup: Callable[..., Reference | None],
                     baseline: dict[str, Reference]) -> Followed:
    """For each check, metric and control figure on its path: how much slower than their rows
    its values ran, at worst, in the calibration jobs whose control read that figure (alone)
    beyond its failure limit, and in how many such jobs."""
    worst: dict[tuple[str, str, str], float] = {}
    jobs: dict[tuple[str, str, str], int] = defaultdict(int)
    for directory in perflogs:
        for line in perflog_rows(directory):
            try:
                control = json.loads(line.get("host_control") or "{}")
            except ValueError:
                continue
            if not control:
                continue
            family = (line.get("name") or "?").split()[0]
            slow = slow_figures(control, baseline)
            for var, key, value, ref in logged_values(line, lookup):
                for figure in control_path(control, key.get("transport")):
                    if slow.get(figure) is None:
                        continue
                    at = (family, var, figure)
                    worst[at] = max(worst.get(at, 1.0), slower_by(value, ref))
                    jobs[at] += 1
    return {at: (worst[at], jobs[at]) for at in worst}


def slow_figures(control: dict[str, object], baseline: dict[str, Reference]
                 ) -> dict[str, host_control.SlowHost | None]:
    """Each control figure of a job alone, beyond its failure limit (None: inside it): one
    job's, the same for every value it logged."""
    return {figure: host_control.slow_host(control, baseline, (figure,))
            for figure in HOST_CONTROL_FIGURES}


def followed_host(family: str, var: str, slow_alone: dict[str, host_control.SlowHost | None],
                  figures: tuple[str, ...], follow: Followed) -> host_control.SlowHost | None:
    """The job's slow host as rule ``followed`` weighs it: each figure beyond its failure limit
    (``slow_alone``, :func:`slow_figures`) counts by its own factor, cut to what values of this
    check and metric followed of it in the calibration (as now where it never read slow
    there); None: nothing slow."""
    factor, texts = 0.0, []
    for figure in figures:
        slow = slow_alone.get(figure)
        if slow is None:
            continue
        seen = follow.get((family, var, figure))
        factor = max(factor, slow.factor if seen is None else min(slow.factor, seen[0]))
        texts.append(slow.text)
    return host_control.SlowHost(max(factor, 1.0), ", ".join(texts)) if texts else None


def print_followed(follow: Followed, where: str) -> None:
    """What each check's values followed of each figure's slow state in ``where``."""
    print(f"what the values followed of a figure beyond its failure limit, in {where}: "
          "check, figure, values in such jobs, the worst slowdown against their rows "
          "(metric)")
    by: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
    for (family, var, figure), (worst, n) in follow.items():
        by[(family, figure)].append((worst, n, var))
    for (family, figure), found in sorted(by.items()):
        worst, _, var = max(found)
        print(f"  {family:<24}{figure:<20}{sum(n for _, n, _ in found):>6}"
              f"{worst:>8.2f}x ({var})")


def replay_line(line: dict[str, str], family: str,
                lookup: Callable[..., Reference | None], baseline: dict[str, Reference],
                warning: dict[str, Reference], counts: dict[str, Tally],
                alarms: list[str], follow: Followed | None = None) -> None:
    """Judge every value of one perflog line again, healthy and as a fault."""
    try:
        control = json.loads(line.get("host_control") or "{}")
    except ValueError:
        return
    rules = (*RULES, FOLLOWED) if follow is not None else RULES
    slow_alone = slow_figures(control, baseline) if control and follow is not None else {}
    for var, key, value, ref in logged_values(line, lookup):
        tally = counts[family]
        tally.values += 1
        figures = control_path(control, key.get("transport"))
        now = host_control.slow_host(control, baseline, figures) if control else None
        warn = host_control.slow_host(control, warning, figures) if control else None
        followed = (followed_host(family, var, slow_alone, figures, follow)
                    if control and follow is not None else None)
        if control:
            tally.with_control += 1
            tally.between += warn is not None and now is None
        healthy = Assessment(var, value, ref.unit, ref)
        if healthy.verdict == "fail":
            tally.failed += 1
            excused = [explained(rule, healthy, now, warn, followed) for rule in rules]
            tally.explained = [t + e for t, e in zip(tally.explained, excused)]
            alarms.append(f"{family} {var} {value:g} {ref.unit} against {ref.value:g} "
                          f"(limit {ref.failure_limit:g}); explained by "
                          f"{', '.join(r for r, e in zip(rules, excused) if e) or 'none'}")
        fault = Assessment(var, 2 * value if ref.lower_is_better else value / 2, ref.unit, ref)
        if control and fault.verdict == "fail":
            tally.caught += 1
            tally.masked = [t + explained(rule, fault, now, warn, followed)
                            for t, rule in zip(tally.masked, rules)]


if __name__ == "__main__":
    sys.exit(main())

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
explaining the whole deviation). Each value doubled in time (halved, for a rate) is the
smallest fault worth catching, in a job whose host read what that job's host read: a fault
the band catches and a rule explains is masked (``inconclusive`` instead of ``fail``).

A passing job's control is one sample, a failing job's the best of
``host_control.FAILING_SAMPLES``: a faulty job would have read its host no slower than this
replay assumes, so the masked counts are upper bounds, alike for every rule.

Usage (repository root; the directories the two benches keep):

    .venv/bin/python ci/bench/control_replay_bench.py \\
        --references /tmp/cost-bench-XXXX/checks-local-now/references/local \\
        --references checks/references/local.yaml /tmp/fabreg-healthy-XXXX
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


@dataclass
class Tally:
    """What one check's logged values came to, per rule in the order of :data:`RULES`."""

    values: int = 0
    with_control: int = 0
    #: Values whose control read a figure on the path between its warning band and its
    #: failure limit: the case the candidates are for.
    between: int = 0
    failed: int = 0
    explained: list[int] = field(default_factory=lambda: [0] * len(RULES))
    caught: int = 0
    masked: list[int] = field(default_factory=lambda: [0] * len(RULES))

    def add(self, other: Tally) -> None:
        for name in ("values", "with_control", "between", "failed", "caught"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.explained = [a + b for a, b in zip(self.explained, other.explained)]
        self.masked = [a + b for a, b in zip(self.masked, other.masked)]

    def row(self, name: str) -> str:
        return (f"{name:<26}{self.values:>8}{self.with_control:>9}{self.between:>9}"
                f"{self.failed:>8}{' / '.join(map(str, self.explained)):>16}{self.caught:>8}"
                f"{' / '.join(map(str, self.masked)):>20}")


def explained(rule: str, assessment: Assessment, now: host_control.SlowHost | None,
              warn: host_control.SlowHost | None) -> bool:
    """Would ``rule`` leave this failing value ``inconclusive``? ``now`` / ``warn``: what of
    its job's control lay beyond its failure limit / its warning band (None: nothing)."""
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
    counts: dict[str, Tally] = defaultdict(Tally)
    alarms: list[str] = []
    perflogs = [d for s in args.sessions for d in sorted(s.rglob("perflogs")) if d.is_dir()]
    lines = 0
    for directory in perflogs:
        for line in perflog_rows(directory):
            lines += 1
            family = (line.get("name") or "?").split()[0]
            replay_line(line, family, lookup, baseline, warning, counts, alarms)
    if not lines:
        print("no perflog line under " + ", ".join(map(str, args.sessions)), file=sys.stderr)
        return 2

    print(f"{lines} perflog lines of {len(perflogs)} sessions, judged by {judged_by}")
    print("per check: values judged, those with a host control, those whose control read a "
          "figure on the path between its warning band and its failure limit (between); "
          "healthy values that failed and those each rule explains; faults (each value of a "
          "job with a control at twice its time, a rate at half) the band caught and those "
          f"each rule would mask; rules {' / '.join(RULES)}")
    print(f"{'check':<26}{'values':>8}{'control':>9}{'between':>9}{'failed':>8}"
          f"{'explained':>16}{'caught':>8}{'masked':>20}")
    total = Tally()
    for family in sorted(counts):
        total.add(counts[family])
        print(counts[family].row(family))
    print(total.row("all"))
    for text in alarms:
        print("  failed: " + text)
    return 0


def replay_line(line: dict[str, str], family: str,
                lookup: Callable[..., Reference | None], baseline: dict[str, Reference],
                warning: dict[str, Reference], counts: dict[str, Tally],
                alarms: list[str]) -> None:
    """Judge every value of one perflog line again, healthy and as a fault."""
    try:
        keys = json.loads(line.get("ref_keys") or "{}")
        control = json.loads(line.get("host_control") or "{}")
    except ValueError:
        return
    for var, key in keys.items():
        if not isinstance(key, dict) or key.get("benchmark") == HOST_CONTROL_BENCHMARK:
            continue
        try:
            value = float(line.get(f"{var}_value", ""))
        except ValueError:
            continue
        ref = lookup(**key)
        if ref is None or value != value:
            continue
        tally = counts[family]
        tally.values += 1
        figures = control_path(control, key.get("transport"))
        now = host_control.slow_host(control, baseline, figures) if control else None
        warn = host_control.slow_host(control, warning, figures) if control else None
        if control:
            tally.with_control += 1
            tally.between += warn is not None and now is None
        healthy = Assessment(var, value, ref.unit, ref)
        if healthy.verdict == "fail":
            tally.failed += 1
            excused = [explained(rule, healthy, now, warn) for rule in RULES]
            tally.explained = [t + e for t, e in zip(tally.explained, excused)]
            alarms.append(f"{family} {var} {value:g} {ref.unit} against {ref.value:g} "
                          f"(limit {ref.failure_limit:g}); explained by "
                          f"{', '.join(r for r, e in zip(RULES, excused) if e) or 'none'}")
        fault = Assessment(var, 2 * value if ref.lower_is_better else value / 2, ref.unit, ref)
        if control and fault.verdict == "fail":
            tally.caught += 1
            tally.masked = [t + explained(rule, fault, now, warn)
                            for t, rule in zip(tally.masked, RULES)]


if __name__ == "__main__":
    sys.exit(main())

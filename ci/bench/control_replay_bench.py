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
        /tmp/fabreg-healthy-XXXX
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from healthy_runs_bench import perflog_rows  # noqa: E402
from host_control_bench import at_warning  # noqa: E402

from fabreg.errors import FabregError  # noqa: E402
from fabreg.run import host_control  # noqa: E402
from fabreg.run.references import Assessment, Reference, ReferenceTable  # noqa: E402
from fabreg.schema import HOST_CONTROL_BENCHMARK, HOST_CONTROL_FIGURES, control_path  # noqa: E402

RULES = ("now", "warn", "graded", "whole")


def explained(rule: str, assessment: Assessment, control: dict, baseline: dict[str, Reference],
              warning: dict[str, Reference], figures: tuple[str, ...]) -> bool:
    """Would ``rule`` leave this failing value ``inconclusive``?"""
    slow = host_control.slow_host(control, baseline, figures)
    if slow is not None and slow.explains(assessment):
        return True  # every rule excuses what the current one does
    if rule == "now" or (slow := host_control.slow_host(control, warning, figures)) is None:
        return False
    if rule == "warn":
        return slow.explains(assessment)
    ref = assessment.ref
    corrected = (assessment.value / slow.factor if ref.lower_is_better
                 else assessment.value * slow.factor)
    if rule == "graded":
        return ref.verdict(corrected) == "ok"
    return corrected <= ref.value if ref.lower_is_better else corrected >= ref.value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", required=True, type=Path,
                        help="the baseline's reference directory that judged the sessions")
    parser.add_argument("sessions", nargs="+", type=Path,
                        help="directories of kept sessions (their perflogs anywhere below)")
    args = parser.parse_args()
    try:
        tables = [ReferenceTable.load(p) for p in sorted(args.references.glob("*.yaml"))]
    except FabregError as err:
        print(err, file=sys.stderr)
        return 2
    if not tables:
        print(f"{args.references}: no reference file (*.yaml)", file=sys.stderr)
        return 2

    def lookup(**key: object) -> Reference | None:
        return next((r for t in tables if (r := t.lookup(**key))), None)

    baseline = {name: r for name in HOST_CONTROL_FIGURES
                if (r := lookup(benchmark=HOST_CONTROL_BENCHMARK, metric=name))}
    if not baseline:
        print(f"{args.references}: the baseline has no host control rows", file=sys.stderr)
        return 2
    warning = at_warning(baseline)
    # family -> [values, with a control, between warning and failure, failed,
    #            explained per rule..., caught, masked per rule...]
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * (5 + 2 * len(RULES)))
    alarms = []
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

    n = len(RULES)
    print(f"{lines} perflog lines of {len(perflogs)} sessions, judged by {args.references}")
    print("per check: values judged, those with a host control, those whose control read a "
          "figure on the path between its warning band and its failure limit (between); "
          "healthy values that failed and those each rule explains; faults (each value at "
          "twice its time) the band caught and those each rule would mask; "
          f"rules {' / '.join(RULES)}")
    print(f"{'check':<26}{'values':>8}{'control':>9}{'between':>9}{'failed':>8}"
          f"{'explained':>16}{'caught':>8}{'masked':>20}")
    total = [0] * (5 + 2 * n)
    for family in sorted(counts):
        c = counts[family]
        total = [t + v for t, v in zip(total, c)]
        print(row_text(family, c, n))
    print(row_text("all", total, n))
    for text in alarms:
        print("  failed: " + text)
    return 0


def row_text(name: str, c: list[int], n: int) -> str:
    explained_text = " / ".join(map(str, c[4:4 + n]))
    masked_text = " / ".join(map(str, c[5 + n:]))
    return (f"{name:<26}{c[0]:>8}{c[1]:>9}{c[2]:>9}{c[3]:>8}{explained_text:>16}"
            f"{c[4 + n]:>8}{masked_text:>20}")


def replay_line(line: dict[str, str], family: str, lookup, baseline: dict[str, Reference],
                warning: dict[str, Reference], counts: dict[str, list[int]],
                alarms: list[str]) -> None:
    """Judge every value of one perflog line again, healthy and as a fault."""
    try:
        keys = json.loads(line.get("ref_keys") or "{}")
        control = json.loads(line.get("host_control") or "{}")
    except ValueError:
        return
    n = len(RULES)
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
        c = counts[family]
        c[0] += 1
        if not control:
            continue
        c[1] += 1
        figures = control_path(control, key.get("transport"))
        c[2] += (host_control.slow_host(control, warning, figures) is not None
                 and host_control.slow_host(control, baseline, figures) is None)
        fault = 2 * value if ref.lower_is_better else value / 2
        for judged, is_fault in ((value, False), (fault, True)):
            a = Assessment(var, judged, ref.unit, ref)
            if a.verdict != "fail":
                continue
            c[3 + (n + 1) * is_fault] += 1
            excused = [explained(rule, a, control, baseline, warning, figures)
                       for rule in RULES]
            for k, e in enumerate(excused):
                c[4 + (n + 1) * is_fault + k] += e
            if not is_fault:
                alarms.append(f"{family} {var} {value:g} {ref.unit} against {ref.value:g} "
                              f"(limit {ref.failure_limit:g}); explained by "
                              f"{', '.join(r for r, e in zip(RULES, excused) if e) or 'none'}")


if __name__ == "__main__":
    sys.exit(main())

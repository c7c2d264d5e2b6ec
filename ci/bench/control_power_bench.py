#!/usr/bin/env python3
"""Does the host control tell the jobs that ran slow from those that did not, in real sessions?

The host control (``fabreg.run.host_control``) turns a confirmed failure into
``inconclusive`` when its figure lies beyond a limit drawn from the host's healthy controls.
Where that limit sits trades two things, both printed here side by side, per candidate limit:

- **catches**: of the jobs whose values ran slow on a quiet host (a verdict ``warn``,
  ``flaky`` or ``fail``: a first measurement or the best beyond a band), the share whose
  control crossed the limit: the false alarms it could have turned into ``inconclusive``
  (jobs judged ``inconclusive`` are left out: other work explains them already);
- **false masks**: of the jobs whose values were all ``ok``, the share whose control crossed
  it. A fabric fault does not move the control, so this is the chance that a real, confirmed
  failure would be reported ``inconclusive`` instead of failing.

A limit worth having catches far more than it masks. The candidates: the one
``fabreg references calibrate`` writes (1.5x the worst calibration control's distance from
their median, at least 25 %), and quantiles of the calibration controls.

Input: session folders of ``healthy_runs_bench.py`` (their ``perflogs/``), the first
``--calibration`` of them calibrating, the rest judged (their verdicts come from a baseline
calibrated on the first ones). Usage (repository root):

    .venv/bin/python ci/bench/control_power_bench.py --calibration 3 /tmp/fabreg-healthy-A/run* \\
        /tmp/fabreg-healthy-B/run*
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from healthy_runs_bench import perflog_rows  # noqa: E402

from fabreg.review import suggest  # noqa: E402
from fabreg.schema import HOST_CONTROL_FIGURES, lower_is_better  # noqa: E402

SLOW_VERDICTS = {"warn", "flaky", "fail"}
QUANTILES = (0.8, 0.9, 0.95, 0.99)


def jobs(session: Path) -> list[tuple[dict[str, float], set[str]]]:
    """(control figures, verdicts) of every job of a session that logged a quiet control."""
    out = []
    for row in perflog_rows(session / "perflogs"):
        try:
            control = json.loads(row.get("host_control") or "{}")
            verdicts = json.loads(row.get("verdicts") or "{}")
        except ValueError:
            continue
        if not isinstance(control, dict) or control.get("contended"):
            continue
        figures = {n: float(v) for n in HOST_CONTROL_FIGURES
                   if isinstance(v := control.get(n), (int, float))}
        if figures:
            out.append((figures, {str(v) for v in verdicts.values()}))
    return out


def crossed(value: float, limit: float, lower_better: bool) -> bool:
    return value > limit if lower_better else value < limit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=int, default=3,
                        help="how many of the sessions calibrate (default %(default)s)")
    parser.add_argument("sessions", nargs="+", type=Path)
    args = parser.parse_args()
    if not 0 < args.calibration < len(args.sessions):
        print("give more sessions than --calibration", file=sys.stderr)
        return 2
    calibration = [j for s in args.sessions[:args.calibration] for j in jobs(s)]
    judged = [j for s in args.sessions[args.calibration:] for j in jobs(s)]
    slow = [figures for figures, verdicts in judged if verdicts & SLOW_VERDICTS]
    fine = [figures for figures, verdicts in judged if verdicts and verdicts <= {"ok"}]
    print(f"{len(calibration)} calibration controls; judged jobs: {len(slow)} ran slow "
          f"(a verdict in {', '.join(sorted(SLOW_VERDICTS))}), {len(fine)} all ok")
    print(f"{'figure':<21}{'limit':<22}{'value':>9}{'catches':>16}{'false masks':>16}")
    for name, unit in HOST_CONTROL_FIGURES.items():
        lower = lower_is_better(name, unit)
        values = sorted(f[name] for f, _ in calibration if name in f)
        if not values:
            continue
        median = statistics.median(values)
        worst = suggest.worst_deviation(values, median, lower)
        _, fail = suggest.baseline_tolerances(worst, lower, 0.10, 0.25)
        limits = [("calibrate (worst)", median * (1 + fail) if lower else median * (1 - fail))]
        for q in QUANTILES:
            at = q if lower else 1 - q
            limits.append((f"{q:.0%} of healthy", values[min(len(values) - 1,
                                                              int(at * len(values)))]))
        for label, limit in limits:
            caught = sum(crossed(f[name], limit, lower) for f in slow if name in f)
            masked = sum(crossed(f[name], limit, lower) for f in fine if name in f)
            print(f"{name + ' ' + unit:<21}{label:<22}{limit:>9.3f}"
                  f"{f'{caught}/{len(slow)} ({caught / max(1, len(slow)):.0%})':>16}"
                  f"{f'{masked}/{len(fine)} ({masked / max(1, len(fine)):.0%})':>16}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reference rows suggested from what a system measured (``fabreg references suggest``).

Every run logs, per performance variable, the key its reference row is looked up by
(the perflog's ``ref_keys`` column, docs/perflog-format.md). Grouping a system's
stored values by that key gives each row of ``checks/references/<system>.yaml`` its
sample of runs:

- ``value`` is the median: one odd slow run does not move it;
- ``warn``/``fail`` follow the run-to-run spread in the *worse* direction (see
  :func:`worse_side_spread` and :func:`tolerances`), never tighter than the floors
  given on the command line.

The output is the reference file itself, loadable by :class:`fabreg.run.references.ReferenceTable`,
with a comment per row saying how many runs it rests on and how they spread.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Union

import yaml

from fabreg.review.store import RunValue
from fabreg.schema import (
    CONTENDED_SHARE,
    HOST_CONTROL_BENCHMARK,
    HOST_CONTROL_FIGURES,
    KEY_FIELDS,
    MEASUREMENT_METHOD,
    control_path,
    lower_is_better,
)

#: A reference key as a hashable value: (field, value) pairs in KEY_FIELDS order,
#: fields without a value left out (they become wildcards in the row).
Key = tuple[tuple[str, Union[str, int, float, bool]], ...]

#: Tolerance = K x the worse-side spread (a normal sigma): warn at 3 sigma, fail at 6.
K_WARN = 3.0
K_FAIL = 6.0
#: Median absolute deviation -> standard deviation of a normal distribution.
MAD_TO_SIGMA = 1.4826
#: A higher-is-better value cannot drop by more than 100 %: a derived band stops here
#: (such a row only catches a collapse; see the ucx_perftest rows of local.yaml).
HIGHER_IS_BETTER_CAP = 0.95
VALUE_DIGITS = 3
TOLERANCE_DIGITS = 2
#: A host's baseline (``fabreg references calibrate``) judges best-of-k values, whose healthy
#: runs spread little and one-sidedly: its bands are a multiple of the worst healthy run's
#: distance from the median, so that what it catches is explicit ("a drop of 1.5x the worst
#: healthy run"), instead of a sigma guessed from a handful of runs. (3x made one slow healthy
#: job of five, at -26 % on the emulated cluster, widen the band past half speed.)
WORST_WARN = 1.0
WORST_FAIL = 1.5
#: A baseline's smallest bands: a 25 % drop fails, half the smallest fault worth catching
#: (a link at half speed), so a lucky quiet calibration cannot make healthy runs fail.
BASELINE_WARN = 0.10
BASELINE_FAIL = 0.25
#: A baseline whose runs span less than this (seconds) saw one of a host's modes at most: on
#: the 2-core VM a baseline from 3 sessions within 11 minutes failed 1 of 4 later healthy
#: sessions, one from 8 sessions over 55 minutes none of 10 (docs/references.md).
BASELINE_SPAN_S = 3600.0
#: A host baseline's row needs this many runs: its band comes from the worst of them, and a
#: row drawn from 3 runs (the other 14 of 17 sessions measured under interference) failed a
#: healthy session on its 4th run (docs/references.md, session 11).
BASELINE_MIN_RUNS = 5
DEFAULT_WARN = 0.05
DEFAULT_FAIL = 0.15
DEFAULT_MIN_RUNS = 3


@dataclass
class Group:
    """The values of one reference key."""

    key: Key
    values: list[float] = field(default_factory=list)
    units: set[str] = field(default_factory=set)
    tests: set[str] = field(default_factory=set)


@dataclass
class Grouped:
    """A system's values by reference key, and what could not be keyed."""

    groups: dict[Key, Group]
    unkeyed: int  # values of runs or variables without a logged reference key
    runs: int
    first: float
    last: float


@dataclass(frozen=True)
class Suggestion:
    """One suggested row and the statistics behind it."""

    key: Key
    unit: str
    n: int
    median: float
    low: float
    high: float
    spread: float  # worse-side relative spread (a sigma, fraction of the median)
    lower_is_better: bool
    value: float  # the median, rounded
    warn: float
    fail: float
    beyond_warn: int  # observed runs that the row would report (warn) or fail
    beyond_fail: int


@dataclass(frozen=True)
class Skipped:
    """A key that gets no row, and why."""

    key: Key
    reason: str
    #: The key's runs, where too few of them are why it has no row.
    few_runs: int | None = None


def key_of(raw: Any) -> Key | None:
    """A logged lookup key -> hashable row key; None if it is not a mapping of scalars.

    Only KEY_FIELDS count: they are all a reference row can match on.
    """
    if not isinstance(raw, dict):
        return None
    out = []
    for name in KEY_FIELDS:
        value = raw.get(name)
        if value is None:
            continue
        if not isinstance(value, (str, int, float, bool)):
            return None
        out.append((name, value))
    if not {"benchmark", "metric"} <= {name for name, _ in out}:
        return None  # a row needs both (fabreg.run.references)
    return tuple(out)


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        loaded = json.loads(text or "{}")
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def measured_under_interference(rv: RunValue) -> bool:
    """Was ``rv`` judged ``inconclusive``, or measured while other work took more than
    ``CONTENDED_SHARE`` of its host's CPU? (A first run on a new host has no reference, so
    no verdict: only its ``interference`` column tells.)"""
    if _json_object(rv.attrs.get("verdicts")).get(rv.perfvar) == "inconclusive":
        return True
    share = _json_object(rv.attrs.get("interference")).get("other_share")
    return isinstance(share, (int, float)) and share > CONTENDED_SHARE


def current_method(rv: RunValue) -> bool:
    """Was ``rv`` measured by the suite's current measurement generation (its run's
    ``method`` column; a run without one predates it)?"""
    return rv.attrs.get("method") == str(MEASUREMENT_METHOD)


def baseline_values(values: Iterable[RunValue], host: str) -> list[RunValue]:
    """The values a host's baseline rests on: measured on ``host`` and not under interference
    (a value measured while other work took the host's CPUs says nothing about the fabric,
    and one such run widens the baseline's bands past the faults it must catch)."""
    return [rv for rv in values
            if rv.attrs.get("host_key") == host and not measured_under_interference(rv)]


def host_control_values(values: Iterable[RunValue]) -> list[RunValue]:
    """One value per run and host-control figure (the run's ``host_control`` column), keyed
    as a host baseline's control rows (``benchmark: host_control``): what a job's control is
    judged against. A control that waited for a quiet host in vain (``contended``) is left out."""
    out = []
    seen: set[str] = set()
    for rv in values:
        if rv.run_key in seen:
            continue
        seen.add(rv.run_key)
        control = _json_object(rv.attrs.get("host_control"))
        if control.get("contended"):
            continue
        for name, unit in HOST_CONTROL_FIGURES.items():
            value = control.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                perfvar = f"host_{name}"
                keys = {perfvar: {"benchmark": HOST_CONTROL_BENCHMARK, "metric": name}}
                out.append(replace(rv, perfvar=perfvar, value=float(value), unit=unit,
                                   attrs={**rv.attrs, "ref_keys": json.dumps(keys)}))
    return out


def control_rows(values: Sequence[RunValue], warn_floor: float, fail_floor: float,
                 min_runs: int) -> dict[str, Suggestion]:
    """Figure -> the ``host_control`` row a host baseline drawn from ``values`` gets."""
    rows, _ = suggest(group_values(host_control_values(values)), warn_floor, fail_floor,
                      min_runs, baseline=True)
    return {str(dict(row.key)["metric"]): row for row in rows}


def worse_by(value: float, reference: float, lower_better: bool) -> float:
    """How much worse than ``reference`` ``value`` is, as a fraction (negative: better)."""
    sign = 1.0 if lower_better else -1.0
    return sign * (value - reference) / reference


def beyond_fail(row: Suggestion, value: float) -> bool:
    """Does ``value`` lie beyond ``row``'s failure limit?"""
    return worse_by(value, row.value, row.lower_is_better) > row.fail


def slow_host_values(values: Sequence[RunValue], controls: dict[str, Suggestion]
                     ) -> list[RunValue]:
    """The fabric values of ``values`` whose job read a host-control figure on the value's
    path (``FIGURES_ON_PATH``, by the transport of its reference key) beyond that figure's
    own failure limit in ``controls``: measured while the host itself ran slow.

    Why a calibration sets them aside: a baseline's band follows its worst healthy run
    (:func:`baseline_tolerances`), and a job measured while the host was in a slow state
    (on the 2-core VM, a placement of its vCPUs in which TCP loopback runs at half its usual
    rate) widens it past the faults it must catch. The control rows are drawn from every
    job's control by their median deviation, which a minority of slow jobs does not move, so
    they can tell those jobs apart while they are being calibrated; a nightly value measured
    so is ``inconclusive`` by the same rows (``fabreg.run.host_control``)."""
    out = []
    for rv in values if controls else ():
        key = dict(key_of(_json_object(rv.attrs.get("ref_keys")).get(rv.perfvar)) or ())
        if key.get("benchmark") == HOST_CONTROL_BENCHMARK:
            continue
        control = _json_object(rv.attrs.get("host_control"))
        if control.get("contended"):
            continue
        figures = control_path(control, str(key.get("transport", "")))
        if any(name in controls and isinstance(v := control.get(name), (int, float))
               and not isinstance(v, bool) and beyond_fail(controls[name], float(v))
               for name in figures):
            out.append(rv)
    return out


def group_values(values: Iterable[RunValue]) -> Grouped:
    """Group values by the reference key their run logged for their performance variable."""
    groups: dict[Key, Group] = {}
    unkeyed = 0
    runs: set[str] = set()
    first, last = math.inf, -math.inf
    parsed: dict[str, dict[str, Any]] = {}
    for rv in values:
        if not math.isfinite(rv.value):
            continue
        text = rv.attrs.get("ref_keys", "")
        if text not in parsed:
            try:
                loaded = json.loads(text) if text else {}
            except ValueError:
                loaded = {}
            parsed[text] = loaded if isinstance(loaded, dict) else {}
        key = key_of(parsed[text].get(rv.perfvar))
        if key is None:
            unkeyed += 1
            continue
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(key)
        group.values.append(rv.value)
        group.units.add(rv.unit)
        group.tests.add(rv.test)
        runs.add(rv.run_key)
        first, last = min(first, rv.time), max(last, rv.time)
    return Grouped(groups, unkeyed, len(runs), first, last)


def worse_side_spread(values: Sequence[float], median: float, lower_better: bool) -> float:
    """Relative run-to-run spread on the worse side of the median, as a normal sigma.

    Why one-sided: noise on a shared host or a busy fabric slows runs down far more
    often than it speeds them up, so a symmetric spread understates the tail a
    band must allow. Why the median of the worse-side deviations (scaled by
    1.4826, i.e. the worse half's MAD): the worst run may itself be a bad run,
    and the range would let one such run widen the band without bound.
    """
    if median <= 0:
        return 0.0
    worse = [worse_by(v, median, lower_better) for v in values]
    worse = [d for d in worse if d > 0]
    return MAD_TO_SIGMA * statistics.median(worse) if worse else 0.0


def usual_spread(values: Sequence[float], median: float) -> float:
    """Relative spread of ``values`` around their median, both sides, as a normal sigma (the
    median absolute deviation x 1.4826). Why both sides: it stays the spread of the usual
    state while fewer than half of the values come from another (a VM's slow placement in
    30 % of a baseline's controls made the worse-side spread 20 times wider)."""
    if median <= 0:
        return 0.0
    return MAD_TO_SIGMA * statistics.median(abs(v - median) / median for v in values)


def tolerances(spread: float, lower_better: bool, warn_floor: float,
               fail_floor: float) -> tuple[float, float]:
    """``(warn, fail)`` = the floors, or K_WARN / K_FAIL x ``spread`` where that is wider.

    A quiet system gets the floors (its noise is smaller than any change worth
    reporting); a noisy one gets bands its own healthy runs rarely cross. Derived
    bands are rounded up, so rounding never makes them tighter than computed.
    """
    cap = math.inf if lower_better else HIGHER_IS_BETTER_CAP
    warn = max(warn_floor, min(cap, ceil_significant(K_WARN * spread, TOLERANCE_DIGITS)))
    fail = max(fail_floor, min(cap, ceil_significant(K_FAIL * spread, TOLERANCE_DIGITS)),
               warn)
    return warn, fail


def worst_deviation(values: Sequence[float], median: float, lower_better: bool) -> float:
    """How far the worst run lies from the median on the worse side (a fraction)."""
    if median <= 0:
        return 0.0
    return max([0.0] + [worse_by(v, median, lower_better) for v in values])


def baseline_tolerances(worst: float, lower_better: bool, warn_floor: float,
                        fail_floor: float) -> tuple[float, float]:
    """``(warn, fail)`` of a host baseline: WORST_WARN / WORST_FAIL x ``worst``, or the floors."""
    cap = math.inf if lower_better else HIGHER_IS_BETTER_CAP
    warn = max(warn_floor, min(cap, ceil_significant(WORST_WARN * worst, TOLERANCE_DIGITS)))
    fail = max(fail_floor, min(cap, ceil_significant(WORST_FAIL * worst, TOLERANCE_DIGITS)),
               warn)
    return warn, fail


def baseline_band(values: Sequence[float], median: float, lower_better: bool,
                  warn_floor: float, fail_floor: float, control: bool) -> tuple[float, float]:
    """``(warn, fail)`` of a host baseline's row: from its worst healthy run
    (:func:`baseline_tolerances`), or for a host-control row (``control``) from the runs'
    usual noise (:func:`usual_spread`, then :func:`tolerances`). A control row rests on
    every job's control, hundreds of them: its worst run is the host's worst state, and a
    band that wide calls nothing slow (the round trip's reached +290 %). Nor does a control
    row's band reach a figure at half speed (:data:`HALF_SPEED`): a host whose own path runs
    at half its usual rate is slow whatever its calibration's spread (seen: 8 TCP loopback
    controls split between two placements, 4.97-6.73 GB/s, drew a band of -94 %, which
    passed a host at a twelfth of its rate)."""
    if control:
        warn, fail = tolerances(usual_spread(values, median), lower_better, warn_floor,
                                fail_floor)
        half = HALF_SPEED[lower_better]
        return min(warn, half), min(fail, half)
    return baseline_tolerances(worst_deviation(values, median, lower_better), lower_better,
                               warn_floor, fail_floor)


def short_span(grouped: Grouped) -> str:
    """Why a baseline drawn from ``grouped`` may be too narrow for the host, or ``""``."""
    span = grouped.last - grouped.first
    if span >= BASELINE_SPAN_S:
        return ""
    return (f"the baseline rests on {grouped.runs} run(s) within {span / 60:.0f} min: a host "
            f"has slow modes that last minutes to an hour, and a baseline taken in one fails "
            f"healthy runs in the next; run the suite again over at least "
            f"{BASELINE_SPAN_S / 3600:g} h, ingest, and calibrate again with --force")


#: The smallest fault the suite exists to catch: a link at half speed. It halves a
#: bandwidth (-50 %) and doubles a time (+100 %); a row whose ``fail`` band reaches that
#: deviation passes the fault.
HALF_SPEED = {False: 0.5, True: 1.0}  # keyed on lower_is_better


def blind_rows(rows: Sequence[Suggestion]) -> list[Suggestion]:
    """The fabric rows whose failure band is too wide to fail a link at half speed (host
    control rows judge the host, not a link, and are not among them)."""
    return [s for s in rows if dict(s.key)["benchmark"] != HOST_CONTROL_BENCHMARK
            and s.fail >= HALF_SPEED[s.lower_is_better]]


def blind_warning(rows: Sequence[Suggestion]) -> str:
    """Why a baseline cannot catch a link at half speed, naming its rows, or ``""``.

    A baseline's band follows its worst healthy run (:func:`baseline_tolerances`); one run
    taken in a slow spell of the host (on the 2-core VM, a job at -33 % in every repeat
    while the host control moved by -17 %) widens it past the fault it is there to catch,
    and nothing else says so: the baseline would pass that fault every night."""
    blind = blind_rows(rows)
    if not blind:
        return ""
    shown = []
    for s in blind[:3]:
        worst = ((s.high - s.median) if s.lower_is_better else (s.low - s.median)) / s.median
        shown.append(f"{_flow(dict(s.key))} (fail {s.fail:.0%}, its worst of {s.n} runs "
                     f"{worst:+.0%})")
    more = f" and {len(blind) - 3} more" if len(blind) > 3 else ""
    return (f"{len(blind)} row(s) cannot catch a link at half speed (their fail band reaches "
            f"the -50 % of a halved bandwidth or the +100 % of a doubled time): "
            f"{'; '.join(shown)}{more}. A run taken while the "
            "host ran slow widened them: run these checks again while the host is quiet, "
            "ingest, and calibrate again with --force --since the time the new runs began")


def round_significant(x: float, digits: int = VALUE_DIGITS) -> float:
    """``x`` to ``digits`` significant digits (1234.5 -> 1230.0)."""
    return float(f"{x:.{digits}g}") if x else 0.0


def ceil_significant(x: float, digits: int = TOLERANCE_DIGITS) -> float:
    """``x`` rounded *up* to ``digits`` significant digits (0.1234 -> 0.13)."""
    if x <= 0:
        return 0.0
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(x)))
    # The small slack keeps 0.15 (stored as 0.1500000002) from becoming 0.16.
    return round(math.ceil(x * scale - 1e-9) / scale, 12)


def suggest(grouped: Grouped, warn_floor: float = DEFAULT_WARN,
            fail_floor: float = DEFAULT_FAIL, min_runs: int = DEFAULT_MIN_RUNS,
            baseline: bool = False) -> tuple[list[Suggestion], list[Skipped]]:
    """One row per key with at least ``min_runs`` values; the other keys, with reasons.

    ``baseline``: a host's calibrated baseline, whose bands follow the worst healthy run, or a
    host-control row's the runs' usual noise (``baseline_band``); otherwise the bands follow
    the worse-side spread (``tolerances``).
    """
    rows: list[Suggestion] = []
    skipped: list[Skipped] = []
    for key in sorted(grouped.groups, key=sort_key):
        group = grouped.groups[key]
        n = len(group.values)
        median = statistics.median(group.values)
        unit = next(iter(group.units)) if len(group.units) == 1 else ""
        if len(group.units) > 1:
            skipped.append(Skipped(key, f"mixed units {', '.join(sorted(group.units))}"))
            continue
        shown = f"median {format_number(round_significant(median))} {unit}".rstrip()
        if n < min_runs:
            skipped.append(Skipped(key, f"{n} run{'s' * (n != 1)} < {min_runs}, {shown}", n))
            continue
        if median <= 0:
            skipped.append(Skipped(key, f"{shown}: a reference must be positive"))
            continue
        metric = str(dict(key)["metric"])
        lower = lower_is_better(metric, unit)
        spread = worse_side_spread(group.values, median, lower)
        if baseline:
            warn, fail = baseline_band(group.values, median, lower, warn_floor, fail_floor,
                                       control=dict(key)["benchmark"] == HOST_CONTROL_BENCHMARK)
        else:
            warn, fail = tolerances(spread, lower, warn_floor, fail_floor)
        value = round_significant(median)
        worse = [worse_by(v, value, lower) for v in group.values]
        rows.append(Suggestion(
            key=key, unit=unit, n=n, median=median, low=min(group.values),
            high=max(group.values), spread=spread, lower_is_better=lower, value=value,
            warn=warn, fail=fail, beyond_warn=sum(d > warn for d in worse),
            beyond_fail=sum(d > fail for d in worse)))
    return rows, skipped


def sort_key(key: Key) -> tuple:
    """Rows grouped like a hand-written file: benchmark, metric, size, then the rest."""
    d = dict(key)
    order = ("benchmark", "metric", "nodes", "transport", "size", "mpi")
    return tuple((0, v, "") if isinstance(v := d.get(name), (int, float)) else (1, 0, str(v))
                 for name in order)


def format_number(x: float) -> str:
    """A number as a reference file shows it: ``8510``, ``1.02``, ``0.000312``."""
    return f"{int(x)}" if x.is_integer() and abs(x) >= 10 else f"{x:g}"


def _yaml_value(x: float) -> int | float:
    return int(x) if x.is_integer() and abs(x) >= 10 else x


def _flow(mapping: dict[str, Any]) -> str:
    """One flow-style YAML mapping on one line; YAML does the quoting."""
    return yaml.safe_dump(mapping, default_flow_style=True, sort_keys=False,
                          width=1 << 20).strip()


def row_text(s: Suggestion) -> str:
    """The row, its fields in the order of the hand-written files."""
    row: dict[str, Any] = dict(s.key)
    row.update(value=_yaml_value(s.value), unit=s.unit, warn=s.warn, fail=s.fail)
    return _flow(row)


def render(system: str, grouped: Grouped, rows: list[Suggestion], skipped: list[Skipped],
           warn_floor: float, fail_floor: float, min_runs: int, baseline: str = "") -> str:
    """The reference file for ``system``: header, defaults, one commented row per key.

    ``baseline``: the host key when this is a host's calibrated baseline.
    """

    def day(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")

    rule = (f"{WORST_WARN:g}x / {WORST_FAIL:g}x the worst run's distance from the median "
            f"(host_control rows: {K_WARN:g}x / {K_FAIL:g}x the runs' median absolute "
            "deviation)" if baseline else
            f"{K_WARN:g}x / {K_FAIL:g}x the runs' worse-side spread")
    lines = [
        f"# Baseline of {baseline if baseline.startswith('partition ') else 'host ' + baseline}"
        f" for the `{system}` system, written by `fabreg "
        "references calibrate`" if baseline else
        f"# References for the `{system}` system suggested by `fabreg references suggest`",
        f"# from {grouped.runs} run(s) between {day(grouped.first)} and {day(grouped.last)}.",
        "# value: the median of the runs. warn/fail (fractions in the worse direction): the",
        f"# defaults below, or {rule} where that is wider",
        "# (docs/references.md). Review before committing: a busy host measures slower than "
        "a quiet one.",
    ]
    if grouped.unkeyed:
        lines.append(f"# {grouped.unkeyed} value(s) without a logged reference key (runs "
                     "older than the ref_keys perflog column) were not used.")
    lines.append(_flow({"system": system}).strip("{}"))
    if baseline:
        lines += ["# the suite's measurement generation these runs rest on (fabreg.schema)",
                  f"method: {MEASUREMENT_METHOD}"]
    lines += ["defaults:",
              f"  warn: {warn_floor:g}", f"  fail: {fail_floor:g}"]
    lines.append("references:" if rows else "references: []")
    benchmark = None
    for s in rows:
        bench = dict(s.key)["benchmark"]
        if bench != benchmark:
            lines.append(f"  # {bench}")
            benchmark = bench
        unit = f" {s.unit}" if s.unit else ""
        note = (f"  # {s.n} runs, {format_number(round_significant(s.low))}.."
                f"{format_number(round_significant(s.high))}{unit}, worse-side spread "
                f"{s.spread:.1%}")
        if s.beyond_fail:
            note += f"; {s.beyond_fail} run(s) beyond fail"
        elif s.beyond_warn:
            note += f"; {s.beyond_warn} run(s) beyond warn"
        lines += [note, f"  - {row_text(s)}"]
    if skipped:
        lines.append(f"# No row (at least {min_runs} runs needed, one unit, a positive median):")
        lines += [f"#   {_flow(dict(k.key))}  # {k.reason}" for k in skipped]
    return "\n".join(lines) + "\n"

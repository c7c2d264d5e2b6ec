"""Per-system performance references, kept as data in ``checks/references/<system>.yaml``.

A reference row names what it applies to (benchmark, metric, message size, MPI,
transport, node count; ``'*'`` matches anything) and gives the reference value,
its unit and two tolerances, both fractions in the *worse* direction:

- ``warn``: beyond this the value is reported as a warning, the test still passes;
- ``fail``: beyond this the test fails (this band is what ReFrame asserts).

"Worse" follows the metric: higher latency, lower bandwidth (``fabreg.metrics``).
When several rows match, the most specific one (fewest wildcards) wins.
"""

from __future__ import annotations

import math
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabreg.errors import FabregError
from fabreg.schema import KEY_FIELDS, VERDICTS, lower_is_better

WILDCARD = "*"
VALUE_FIELDS = ("value", "unit", "warn", "fail", "better")
_DEFAULTS = {"warn": 0.2, "fail": 0.5}


@dataclass(frozen=True)
class Reference:
    """One reference value with its warning and failure bands."""

    value: float
    unit: str
    warn: float
    fail: float
    lower_is_better: bool
    source: str

    def deviation(self, measured: float) -> float:
        """Signed relative deviation from the reference; positive is always better."""
        rel = (measured - self.value) / self.value
        return -rel if self.lower_is_better else rel

    def _limit(self, tolerance: float) -> float:
        if self.lower_is_better:
            return self.value * (1 + tolerance)
        return self.value * (1 - min(tolerance, 1.0))

    @property
    def failure_limit(self) -> float:
        """The value beyond which a result fails (the edge of ReFrame's band)."""
        return self._limit(self.fail)

    @property
    def warning_limit(self) -> float:
        """The value beyond which a result is a warning: a value inside it passes with the
        margin between the two bands, however many more measurements were made."""
        return self._limit(self.warn)

    def verdict(self, measured: float) -> str:
        """``ok``, ``warn`` or ``fail`` for a measured value."""
        worse_by = -self.deviation(measured)
        if worse_by > self.fail:
            return "fail"
        if worse_by > self.warn:
            return "warn"
        return "ok"

    def reframe_tuple(self) -> tuple[float, float | None, float | None, str]:
        """ReFrame's ``(ref, lower, upper, unit)`` for the failure band."""
        if self.lower_is_better:
            return (self.value, None, self.fail, self.unit)
        return (self.value, -min(self.fail, 1.0), None, self.unit)


@dataclass(frozen=True)
class _Row:
    key: dict[str, Any]
    ref: Reference

    def matches(self, query: dict[str, Any]) -> bool:
        for name in KEY_FIELDS:
            want = self.key.get(name, WILDCARD)
            if want != WILDCARD and str(want) != str(query.get(name)):
                return False
        return True

    @property
    def specificity(self) -> int:
        return sum(1 for name in KEY_FIELDS if self.key.get(name, WILDCARD) != WILDCARD)


class ReferenceTable:
    """All reference rows of one system."""

    def __init__(self, rows: list[_Row], source: str, method: int = 1) -> None:
        self._rows = rows
        self.source = source
        #: The measurement generation a calibrated baseline rests on (1: the file does not
        #: say, as no baseline did before generations were recorded).
        self.method = method

    def __len__(self) -> int:
        return len(self._rows)

    @classmethod
    def load(cls, path: str | Path) -> ReferenceTable:
        import yaml  # here: every in-job driver imports this module and never reads a file

        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            raise FabregError(f"{path}: reference file not found") from None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f":{mark.line + 1}" if mark else ""
            raise FabregError(f"{path}{where}: not valid YAML: {err}") from None
        return cls.from_document(doc, str(path))

    @classmethod
    def from_document(cls, doc: Any, source: str) -> ReferenceTable:
        if doc is None:
            return cls([], source)
        if not isinstance(doc, dict):
            raise FabregError(f"{source}: expected a mapping with 'defaults' and 'references'")
        unknown = set(doc) - {"system", "method", "defaults", "references"}
        if unknown:
            raise FabregError(f"{source}: unknown top-level key(s): {', '.join(sorted(unknown))}")
        defaults = dict(_DEFAULTS)
        defaults.update(_check_defaults(doc.get("defaults") or {}, source))
        rows = doc.get("references") or []
        if not isinstance(rows, list):
            raise FabregError(f"{source}: 'references' must be a list of rows")
        method = 1 if doc.get("method") is None else doc["method"]
        if isinstance(method, bool) or not isinstance(method, int) or method < 1:
            raise FabregError(f"{source}: 'method' must be a positive whole number (the "
                              f"measurement generation), got {method!r}")
        return cls([_parse_row(i, row, defaults, source) for i, row in enumerate(rows)], source,
                   method)

    def lookup(self, **query: Any) -> Reference | None:
        """The most specific row matching ``query`` (keys from ``KEY_FIELDS``), if any."""
        best: _Row | None = None
        for row in self._rows:
            if row.matches(query) and (best is None or row.specificity > best.specificity):
                best = row
        return best.ref if best else None


def _check_defaults(defaults: Any, source: str) -> dict[str, float]:
    if not isinstance(defaults, dict):
        raise FabregError(f"{source}: 'defaults' must be a mapping")
    out = {}
    for name, val in defaults.items():
        if name not in ("warn", "fail"):
            raise FabregError(f"{source}: defaults: unknown key {name!r} (expected warn, fail)")
        out[name] = _fraction(val, f"{source}: defaults.{name}")
    return out


def _fraction(val: Any, where: str) -> float:
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
        raise FabregError(f"{where}: expected a number, got {val!r}")
    if val < 0:
        raise FabregError(f"{where}: tolerance must be >= 0, got {val}")
    return float(val)


def _parse_row(index: int, row: Any, defaults: dict[str, float], source: str) -> _Row:
    where = f"{source}: references[{index}]"
    if not isinstance(row, dict):
        raise FabregError(f"{where}: expected a mapping, got {row!r}")
    unknown = set(row) - set(KEY_FIELDS) - set(VALUE_FIELDS)
    if unknown:
        raise FabregError(
            f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
            f"(allowed: {', '.join(KEY_FIELDS + VALUE_FIELDS)})"
        )
    for name in ("benchmark", "metric", "value", "unit"):
        if name not in row:
            raise FabregError(f"{where}: missing key {name!r}")
    value = row["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise FabregError(f"{where}: 'value' must be a positive number, got {value!r}")
    warn = _fraction(row.get("warn", defaults["warn"]), f"{where}.warn")
    fail = _fraction(row.get("fail", defaults["fail"]), f"{where}.fail")
    if warn > fail:
        raise FabregError(f"{where}: warn ({warn}) must not exceed fail ({fail})")
    better = row.get("better")
    if better not in (None, "lower", "higher"):
        raise FabregError(f"{where}.better: expected 'lower' or 'higher', got {better!r}")
    lower = lower_is_better(row["metric"], row["unit"]) if better is None else better == "lower"
    key = {name: row[name] for name in KEY_FIELDS if name in row}
    ref = Reference(float(value), str(row["unit"]), warn, fail, lower, f"{source}#{index}")
    return _Row(key, ref)


def reference_file(checks_dir: str | Path, system: str) -> Path:
    """Where the references of ``system`` as a whole live (a cluster's nodes are alike)."""
    return Path(checks_dir) / "references" / f"{system}.yaml"


def host_reference_file(checks_dir: str | Path, system: str, host: str) -> Path:
    """Where one host's baseline of ``system`` lives (``fabreg references calibrate``)."""
    return Path(checks_dir) / "references" / system / f"{host}.yaml"


def partition_reference_file(checks_dir: str | Path, system: str, partition: str) -> Path:
    """Where a site partition's baseline lives: one partition is one node type
    (``fabreg references calibrate --partition``)."""
    return Path(checks_dir) / "references" / system / f"partition-{partition}.yaml"


#: Overrides the host key (e.g. to share one baseline between identical machines).
HOST_KEY_VARIABLE = "FABREG_HOST_KEY"


def host_key(cpuinfo: str | None = None, cpus: int | None = None) -> str:
    """What identifies a host's baseline: its CPU model and CPU count, as a file name.

    Not the host name: a CI runner or a VM gets a new name on every boot, while the same
    kind of machine measures alike. ``$FABREG_HOST_KEY`` overrides it.
    """
    override = os.environ.get(HOST_KEY_VARIABLE)
    if override:
        return _slug(override)
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    model = ""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("model name", "Model", "cpu model", "Processor") and value.strip():
            model = value.strip()
            break
    model = re.sub(r"\((?:R|TM|tm|r)\)|\bCPU\b|\bProcessor\b", " ", model or platform.machine())
    return _slug(f"{model} {cpus or os.cpu_count() or 1}cpu")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "unknown-host"


@dataclass(frozen=True)
class Assessment:
    """One measured value against its reference (``ref`` is None when there is none)."""

    name: str
    value: float
    unit: str
    ref: Reference | None

    @property
    def verdict(self) -> str:
        return "missing" if self.ref is None else self.ref.verdict(self.value)

    @property
    def deviation(self) -> float | None:
        """Signed relative deviation, positive = better; None without a reference."""
        return None if self.ref is None else round(self.ref.deviation(self.value), 4)

    def describe(self, verdict: str | None = None) -> str:
        """One line for logs and the perflog (never contains the perflog's ``|``)."""
        verdict = verdict or self.verdict
        if self.ref is None:
            return f"{self.name}: no reference"
        ref = self.ref
        return (f"{self.name}: {self.value:g} {self.unit} vs {ref.value:g} {ref.unit} "
                f"({self.deviation:+.1%}; warn beyond -{ref.warn:.0%}, fail beyond "
                f"-{ref.fail:.0%}): {verdict}")


@dataclass(frozen=True)
class Summary:
    """What a test reports about its references: worst verdict, per-value verdicts and
    deviations, notes."""

    status: str
    deviations: dict[str, float | None]
    notes: str
    verdicts: dict[str, str]

    @property
    def missing(self) -> list[str]:
        return [name for name, dev in self.deviations.items() if dev is None]


def summarize(assessments: list[Assessment],
              qualified: dict[str, tuple[str, str]] | None = None) -> Summary:
    """Fold per-value assessments into the test's status; notes name what is not ``ok``.

    ``qualified`` replaces the band's verdict of some values with what the measurement
    itself showed (``inconclusive``, ``flaky``; ``fabreg.schema.VERDICTS``) and says why.
    """
    if not assessments:
        return Summary("", {}, "", {})
    qualified = qualified or {}
    verdicts = {a.name: qualified.get(a.name, (a.verdict, ""))[0] for a in assessments}
    status = min(verdicts.values(), key=VERDICTS.index)
    notes = []
    for a in assessments:
        if verdicts[a.name] != "ok":
            why = qualified.get(a.name, ("", ""))[1]
            notes.append(a.describe(verdicts[a.name]) + (f" ({why})" if why else ""))
    return Summary(status, {a.name: a.deviation for a in assessments}, "; ".join(notes),
                   verdicts)

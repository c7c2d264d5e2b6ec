"""Per-system references inside a check: two bands, a deviation per value, visible gaps.

``checks/references/<system>.yaml`` (``fabreg.run.references``) gives each value a
reference and two tolerances. In a check:

- the *failure* band becomes ReFrame's ``reference`` tuple, so ReFrame asserts it
  and the perflog's ``V_ref``/``V_*_thres``/``V_result`` columns carry it;
- the *warning* band is judged here: the test passes, the run output gets a
  ``WARNING`` line and the perflog's ``ref_status`` column says ``warn``;
- every value gets a signed relative deviation from its reference, positive is
  always better, in the perflog's ``deviation`` column (JSON: ``{"latency_8B":
  -0.031}``, ``null`` where there is no reference);
- every value's lookup key is logged too, in the perflog's ``ref_keys`` column (JSON:
  ``{"latency_8B": {"benchmark": "osu_latency", "metric": "latency", "size": 8, ...}}``),
  so ``fabreg references suggest`` can turn a system's runs into reference rows;
- a value without a reference is logged as ``missing`` (``ref_status``, a
  ``WARNING`` line, ``V_ref`` 0); with ``references_required`` (the
  ``acceptance`` mode sets it) the test fails, naming the file and the key.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import reframe as rfm
import reframe.utility.osext as osext
import reframe.utility.typecheck as typ
from reframe.core.builtins import run_after, run_before, variable
from reframe.core.exceptions import PerformanceError, ReframeError
from reframe.core.logging import getlogger

from fabreg.errors import FabregError
from fabreg.run.references import (
    Assessment,
    Reference,
    ReferenceTable,
    host_key,
    host_reference_file,
    partition_reference_file,
    reference_file,
    summarize,
)
from fabreg.schema import HOST_CONTROL_BENCHMARK, HOST_CONTROL_FIGURES, MEASUREMENT_METHOD

#: What a check's performance variable is looked up by, and whether a reference is required.
ReferenceKeys = dict[str, tuple[dict[str, Any], bool]]


@functools.cache
def _table(path: str, mtime: float) -> ReferenceTable:
    return ReferenceTable.load(path)


def load_table(path: Path) -> ReferenceTable | None:
    """The reference table at ``path`` (None if there is no file); errors as ReframeError."""
    if not path.is_file():
        return None
    try:
        return _table(str(path), path.stat().st_mtime)
    except FabregError as err:
        raise ReframeError(str(err)) from None


class ReferencesMixin(rfm.RegressionTestPlugin):
    """Judge a check's performance variables against ``checks/references/<system>.yaml``.

    A partition with ``extras['references_by_host']`` (``local``, ``minicluster``: one
    machine, not a cluster of like nodes) is judged first by this host's baseline,
    ``checks/references/<system>/<host key>.yaml`` (``fabreg references calibrate``); a
    value neither file has a row for is ``missing``, a warning, never a failure on figures
    measured elsewhere.
    """

    #: Fail when a required value has no reference (the ``acceptance`` mode sets this).
    #:
    #: :type: ``bool``
    #: :default: ``False``
    references_required = variable(typ.Bool, value=False, loggable=False)
    #: Worst verdict over the values: ``ok``, ``warn``, ``missing`` or ``fail`` (perflog).
    #:
    #: :type: ``str``
    #: :default: ``""``
    ref_status = variable(str, value="", loggable=True)
    #: Signed relative deviation per value, positive = better, None = no reference (perflog).
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    deviation = variable(dict, value={}, loggable=True)
    #: The values that are not ``ok``, in words (perflog).
    #:
    #: :type: ``str``
    #: :default: ``""``
    ref_notes = variable(str, value="", loggable=True)
    #: Perf variable -> the key its reference row is looked up by (perflog, JSON).
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    ref_keys = variable(dict, value={}, loggable=True)
    #: Perf variable -> its verdict (``fabreg.schema.VERDICTS``) (perflog, JSON).
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    verdicts = variable(dict, value={}, loggable=True)
    #: The host's baseline key (``fabreg.run.references.host_key``) where the partition
    #: keys its references by host, else empty (perflog).
    #:
    #: :type: ``str``
    #: :default: ``""``
    host_key = variable(str, value="", loggable=True)
    #: The suite's measurement generation the values were measured by (perflog): a baseline
    #: is drawn from runs of the current one only (``fabreg.schema.MEASUREMENT_METHOD``).
    #:
    #: :type: ``int``
    #: :default: ``fabreg.schema.MEASUREMENT_METHOD``
    method = variable(int, value=MEASUREMENT_METHOD, loggable=True)

    def reference_keys(self) -> ReferenceKeys:
        """Performance variable -> (lookup key for ``ReferenceTable.lookup``, required?)."""
        return {}

    def unjudged_reason(self) -> str:
        """Why this case's figures are logged but judged by no reference ('' where they are
        judged): a figure that measures something other than the fabric, such as the OS
        scheduler's time slices, has no band both quiet and sensitive to a fault. Known
        from setup on."""
        return ""

    def unjudged_figures(self) -> tuple[list[str], str]:
        """The figures of this case that are logged but judged by no reference, and why
        (``([], '')`` where every figure is judged): a tail that the host's other wake-ups
        make, where the case's median is still the fabric's. Known from setup on."""
        return [], ""

    def judged_keys(self) -> ReferenceKeys:
        """:meth:`reference_keys`, none for a case whose figures are not judged and none
        for the figures :meth:`unjudged_figures` names."""
        if self.unjudged_reason():
            return {}
        unjudged, _ = self.unjudged_figures()
        return {var: key for var, key in self.reference_keys().items() if var not in unjudged}

    def reference_path(self) -> Path:
        """The file a missing value belongs in: the host's baseline or the system's file."""
        return self.reference_paths()[0]

    def reference_paths(self) -> list[Path]:
        """The files that judge this run, first match wins."""
        system = self.current_system.name
        paths = [reference_file(self.prefix, system)]
        if self.current_partition.extras.get("references_by_host"):
            self.host_key = host_key()
            paths.insert(0, host_reference_file(self.prefix, system, self.host_key))
        elif self.current_partition.extras.get("references_by_partition"):
            # A site's partition is one node type: its nodes, not the login node that runs
            # ReFrame, decide its figures (fabreg site init sets this).
            paths.insert(0, partition_reference_file(self.prefix, system,
                                                     self.current_partition.name))
        return paths

    @run_after("setup")
    def check_reference_file(self) -> None:
        """A broken reference file fails the test before anything runs."""
        for path in self.reference_paths():
            load_table(path)

    def baseline_path(self) -> Path | None:
        """This run's calibrated baseline (the host's or the partition's), if it has one."""
        paths = self.reference_paths()
        return paths[0] if len(paths) > 1 else None

    def stale_baseline(self) -> ReferenceTable | None:
        """The baseline, when it rests on an older measurement generation than this suite's
        (``fabreg.schema.MEASUREMENT_METHOD``): its values were measured another way, and
        judging by them would fail or pass what the suite measures now."""
        path = self.baseline_path()
        table = load_table(path) if path else None
        if table is not None and table.method < MEASUREMENT_METHOD:
            return table
        return None

    def reference_tables(self) -> list[ReferenceTable]:
        """The tables of ``reference_paths`` that exist, first match first; a stale baseline
        is set aside (its values are ``missing``, and the notes say why)."""
        stale = self.stale_baseline()
        return [t for t in map(load_table, self.reference_paths())
                if t is not None and t is not stale]

    def references(self) -> dict[str, Reference | None]:
        """Perf variable -> its reference row (None without one); known from setup on."""
        tables = self.reference_tables()
        return {var: next((r for t in tables if (r := t.lookup(**key))), None)
                for var, (key, _) in self.judged_keys().items()}

    def host_control_references(self) -> dict[str, Reference]:
        """Host control figure -> its row in this host's baseline (``fabreg.run.host_control``;
        ``fabreg references calibrate`` writes them), for the figures that have one."""
        tables = self.reference_tables()
        found = {name: next((r for t in tables
                             if (r := t.lookup(benchmark=HOST_CONTROL_BENCHMARK, metric=name))),
                            None) for name in HOST_CONTROL_FIGURES}
        return {name: ref for name, ref in found.items() if ref}

    def failure_limits(self, names: Iterable[str]) -> dict[str, float]:
        """Perf variable -> its failure limit, for those of ``names`` with a reference: what
        an in-job driver confirms a failing value against."""
        return {name: ref.failure_limit for name, ref in self._judged(names).items()}

    def warning_limits(self, names: Iterable[str]) -> dict[str, float]:
        """Perf variable -> its warning limit, for those of ``names`` with a reference: a
        value an in-job driver measured inside it needs no more measurements."""
        return {name: ref.warning_limit for name, ref in self._judged(names).items()}

    def _judged(self, names: Iterable[str]) -> dict[str, Reference]:
        """Perf variable -> its reference row, for those of ``names`` that have one."""
        refs = self.references()
        return {name: ref for name in names if (ref := refs.get(name))}

    def qualify(self, assessments: list[Assessment]) -> dict[str, tuple[str, str]]:
        """Verdicts the measurement itself overrides, with why (``inconclusive``, ``flaky``).

        The band alone decides here; a check that measures robustly (``RepeatedMeasurement``)
        knows when a failing value was measured under interference or did not reproduce.
        """
        return {}

    @run_before("performance", always_last=True)
    def judge_against_references(self) -> None:
        path = self.reference_path()
        keys = self.judged_keys()
        refs = self.references()
        bands = {var: ref.reframe_tuple() for var, ref in refs.items() if ref}
        # Logged whether or not a reference exists: it is what a new system's rows are made of.
        self.ref_keys = {var: dict(key) for var, (key, _) in keys.items()
                         if var in self.perf_variables}
        assessments = []
        with osext.change_dir(self.stagedir):
            for var, fn in self.perf_variables.items():
                if var not in keys or (refs[var] is None and not keys[var][1]):
                    continue
                try:
                    value = float(fn.evaluate())
                except Exception:  # ReFrame reports the evaluation failure itself
                    continue
                assessments.append(Assessment(var, value, fn.unit, refs[var]))
        summary = summarize(assessments, self.qualify(assessments))
        self.ref_status, self.deviation, self.ref_notes, self.verdicts = (
            summary.status, summary.deviations, summary.notes, summary.verdicts)
        for var, verdict in summary.verdicts.items():
            if verdict == "inconclusive":  # judged by the measurement, not by ReFrame's band
                value, _, _, unit = bands[var]
                bands[var] = (value, None, None, unit)
        self.reference = {"*": bands}
        if summary.missing and not any(p.is_file() for p in self.reference_paths()):
            self.ref_notes = f"no reference file {self._shown(path)}; " + self.ref_notes
        by_partition = self.current_partition.extras.get("references_by_partition")
        if summary.missing and (stale := self.stale_baseline()) is not None:
            self.ref_notes += (
                f"; the baseline {self._shown(path)} rests on the suite's measurement "
                f"generation {stale.method}, not {MEASUREMENT_METHOD} "
                "(docs/references.md), and is set aside: record it again from runs of this "
                f"generation with fabreg references calibrate --system "
                f"{self.current_system.name}"
                + (f" --partition {self.current_partition.name}" if by_partition else "")
                + " --force")
        elif summary.missing and self.host_key and not path.is_file():
            self.ref_notes += (f"; no baseline for this host ({self._shown(path)}): record one "
                               f"with fabreg references calibrate --system "
                               f"{self.current_system.name}")
        elif summary.missing and not path.is_file() and by_partition:
            self.ref_notes += (f"; no baseline for this partition ({self._shown(path)}): "
                               f"record one with fabreg references calibrate --system "
                               f"{self.current_system.name} --partition "
                               f"{self.current_partition.name}")
        if unjudged := self.unjudged_reason():
            self.ref_notes = f"not judged: {unjudged}"
        names, why = self.unjudged_figures()
        if names := [n for n in names if n in self.perf_variables]:
            self.ref_notes = "; ".join(filter(None, (
                self.ref_notes, f"{', '.join(names)} not judged: {why}")))
        if summary.notes:
            getlogger().warning(f"{self.display_name}: {self.ref_notes}")

    @run_after("performance")
    def require_references(self) -> None:
        missing = [name for name, dev in self.deviation.items() if dev is None]
        if self.references_required and missing:
            key = {k: v for k, v in self.judged_keys()[missing[0]][0].items()
                   if k not in ("metric", "size")}
            raise PerformanceError(
                f"references are required (acceptance mode) but "
                f"{self._shown(self.reference_path())} has none for {', '.join(missing)} "
                f"({', '.join(f'{k}={v}' for k, v in key.items())})")

    def _shown(self, path: Path) -> str:
        """The reference file relative to the checks directory's parent (no host paths)."""
        try:
            return str(path.relative_to(Path(self.prefix).parent))
        except ValueError:
            return path.name

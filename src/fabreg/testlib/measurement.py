"""Values measured by an in-job driver that confirms failures; the check judges the best.

Two drivers measure this way (docs/references.md, "How a value is judged"):
``fabreg.run.measure`` (OSU: the whole size curve once for sanity, then repeats at the
asserted sizes; :class:`RepeatedMeasurement`) and ``fabreg.run.client_server`` (perftest and
ucx_perftest: the server/client pair ``repeats`` times). Either way a value still beyond its
failure limit is measured again (``fabreg.run.confirm``). The check judges the best value
(interference cannot fake it) and qualifies the band's verdict (:class:`ConfirmedValues`):

- ``inconclusive``: the value fails, but other work took more than ``contended_share`` of
  the host's CPU time while it was measured: not a regression, a warning with the figure;
- ``flaky``: the first measurements failed, the confirmation did not: a warning with both
  values;
- ``fail``: the failure reproduced on a quiet host: the test fails. The confirmation runs
  are spread over ``confirm_span`` seconds (a spell in which a virtual host runs slow as a
  whole ends within it), wait for a quiet host and are metered by themselves, so a failure
  they confirm is a failure even when other work took the CPUs during the rest of the job;
- ``inconclusive`` too: the failure reproduced, but a figure of the host control measured
  right after it, on the value's own software path (``fabreg.run.host_control``: a TCP
  loopback stream for TCP; a core-to-core round trip and a memory copy for shared memory),
  lay beyond its own failure limit in the host's baseline, by enough to explain the value:
  the host itself ran slow, not the fabric. A slow control that cannot explain the value
  leaves the failure standing, and says so.

Logged per run: ``spread`` (how far the worst of a value's measurements lay from its best),
``interference`` (other work's CPU time), ``exclusive`` (did Slurm give the nodes to this
job alone), ``confirmation`` (the first value of each re-measured figure) and
``host_control`` (the control's figures).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import reframe as rfm
import reframe.utility.typecheck as typ
from reframe.core.backends import getlauncher
from reframe.core.builtins import run_before, variable
from reframe.core.logging import getlogger

from fabreg.run import measure
from fabreg.run.confirm import CONFIRM_RUNS, CONTROL_GAP_S
from fabreg.run.host_control import SlowHost, slow_host
from fabreg.run.interference import (
    CONTENDED_SHARE,
    HARNESS_VARIABLE,
    contention_text,
    process_identity,
)
from fabreg.run.launch import KNOWN_HANG_GRACE_S
from fabreg.run.references import Assessment
from fabreg.schema import control_on_path, figures_on_path
from fabreg.testlib.base import RUN_ID, stage_json
from fabreg.testlib.counters import FabricCounters


class ConfirmationSettings(rfm.RegressionTestPlugin):
    """Mixin: how a job's in-job driver confirms a failing value, and what the perflog says
    of it. Shared by every check that confirms (:class:`ConfirmedValues`, and the tail latency
    check's quiet figures); each brings its own ``repeats`` and ``contended_share``."""

    #: Seconds the confirmation of a failing value may wait, in all, for a quiet host.
    #:
    #: :type: ``float``
    #: :default: ``30.0``
    quiet_wait = variable(float, value=30.0, loggable=False)
    #: Seconds over which the confirmation runs of a failing value are spread (the first
    #: ``repeats - 1`` at once): a spell in which a virtual host runs slow as a whole ends
    #: within it, a fault does not.
    #:
    #: :type: ``float``
    #: :default: ``60.0``
    confirm_span = variable(float, value=60.0, loggable=False)
    #: Confirmation runs of a failing value at most (they stop at the first that passes).
    #:
    #: :type: ``int``
    #: :default: ``fabreg.run.confirm.CONFIRM_RUNS`` (10)
    confirm_runs = variable(int, value=CONFIRM_RUNS, loggable=False)
    #: Seconds the confirmations of all the run's jobs may take in all (0: no bound); then a
    #: failure is confirmed by one run on a quiet host (``fabreg.run.confirm``).
    #:
    #: :type: ``float``
    #: :default: ``600.0``
    confirm_budget = variable(float, value=600.0, loggable=False)
    #: Seconds between the samples of the host control that judges a job's failing values
    #: (three samples; each figure's best judges).
    #:
    #: :type: ``float``
    #: :default: ``fabreg.run.confirm.CONTROL_GAP_S`` (3.0)
    control_gap = variable(float, value=CONTROL_GAP_S, loggable=False)
    #: Perf variable -> how many measurements its value rests on, confirmation runs included
    #: (perflog): one when the first lay inside its warning band, ``repeats`` when it was
    #: within reach of its limit or had no reference, more when it was confirmed.
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    measurements = variable(dict, value={}, loggable=True)
    #: Perf variable -> its best first value, for values measured again because they failed.
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    confirmation = variable(dict, value={}, loggable=True)
    #: The host control measured at the end of the job (perflog: ``round_trip`` in us,
    #: ``copy_bandwidth``, ``tcp_loopback`` and ``handoff_bandwidth`` in GB/s,
    #: ``shared_compute`` in ms; ``fabreg.run.host_control``), and ``on_path``: the figures
    #: that judge this check's values, which a calibration goes by too. Empty where the
    #: driver measures it only for a failing value (tail latency) and none failed.
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    host_control = variable(dict, value={}, loggable=True)

    def confirmation_settings(self) -> dict[str, Any]:
        """How the in-job driver repeats and confirms: the fields every driver's plan shares
        (``fabreg.run.confirm.ConfirmationPlan``, ``repeats`` among them)."""
        return {"repeats": self.repeats, "contended_share": self.contended_share,
                "quiet_wait_s": self.quiet_wait, "confirm_span_s": self.confirm_span,
                "confirm_runs": self.confirm_runs, "lasting_failures": self.lasting_failures(),
                "confirm_budget_s": self.confirm_budget, "control_gap_s": self.control_gap,
                "control_figures": list(self.host_control_figures()),
                "off_path": list(self.off_path_figures()),
                "control_limits": self.control_limits()}

    def control_limits(self) -> dict[str, float]:
        """Host control figure on the job's path -> its failure limit in the host's
        baseline: a job whose control read one beyond it leaves its confirmed failure
        unnoted (``fabreg.run.confirm.Confirmation.leave_note``)."""
        figures = set(self.host_control_figures())
        return {name: ref.failure_limit for name, ref in self.host_control_references().items()
                if name in figures}

    def lasting_failures(self) -> str:
        return lasting_failures_dir(self.stagedir)

    def hand_to_driver(self, module: str, plan: str, kept: Sequence[str]) -> None:
        """Run the job as ``python -m module plan``: the in-job driver launches, repeats and
        confirms the benchmark itself, so the job runs it with the local launcher, naming
        ReFrame's process as the harness. ``kept``: what the driver writes that the job
        keeps, beside ``plan``."""
        self.env_vars[HARNESS_VARIABLE] = process_identity()
        self.job.launcher = getlauncher("local")()
        self.executable = sys.executable
        self.executable_opts = ["-m", module, plan]
        self.keep_files = [*self.keep_files, plan, *kept]
        if isinstance(self, FabricCounters):
            self.leave_counters_to_driver()

    def host_control_figures(self) -> tuple[str, ...]:
        """The host control figures the job measures, those that judge any of its values:
        by default its ``transport``'s path's."""
        return figures_on_path(getattr(self, "transport", None))

    def off_path_figures(self) -> tuple[str, ...]:
        """The figures (the driver's keys) whose failure is not this check's path's: they
        neither join nor note a lasting failure of the path (``fabreg.run.confirm``); none
        by default."""
        return ()

    def figures_judging(self, variable: str) -> tuple[str, ...]:
        """The host control figures that judge perf variable ``variable``: by default all
        the job measures (:meth:`host_control_figures`)."""
        return self.host_control_figures()

    def logged_host_control(self, control: dict[str, Any]) -> dict[str, Any]:
        """The host control a driver measured, as the perflog logs it (with ``on_path``)."""
        return control_on_path(control, self.host_control_figures())

    def slow_hosts(self, assessments: Sequence[Assessment]) -> dict[str, SlowHost]:
        """Perf variable -> what of the host control that judges it ran slow, for the
        variables of ``assessments`` whose control did (:meth:`figures_judging`)."""
        baseline = self.host_control_references()
        slow = {a.name: slow_host(self.host_control, baseline, self.figures_judging(a.name))
                for a in assessments}
        return {name: s for name, s in slow.items() if s}


class ConfirmedValues(ConfirmationSettings):
    """Mixin: an in-job driver measured and confirmed the values; qualify their verdicts."""

    #: Measurements of each asserted value at most before confirmation; the best one is
    #: judged. One where the first lies inside its warning band
    #: (``fabreg.run.confirm.settled``).
    #:
    #: :type: ``int``
    #: :default: ``3``
    repeats = variable(int, value=3, loggable=False)
    #: Other work's share of the host's CPU time above which a failing value is
    #: ``inconclusive``.
    #:
    #: :type: ``float``
    #: :default: ``fabreg.run.interference.CONTENDED_SHARE`` (0.10)
    contended_share = variable(float, value=CONTENDED_SHARE, loggable=False)
    #: Perf variable -> relative distance of its worst measurement from its best (perflog).
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    spread = variable(dict, value={}, loggable=True)
    #: Other work's CPU time while the job measured (perflog: ``other_share`` of the
    #: host's CPU capacity, CPU-seconds, wall seconds, CPUs).
    #:
    #: :type: ``dict``
    #: :default: ``{}``
    interference = variable(dict, value={}, loggable=True)
    #: ``yes``/``no``: did Slurm give the job its nodes alone; ``local`` without Slurm.
    #:
    #: :type: ``str``
    #: :default: ``''``
    exclusive = variable(str, value="", loggable=True)

    def measured(self) -> dict[str, Any] | None:
        """What the driver's JSON says, or None (no driver ran: one plain run, a dry run)."""
        raise NotImplementedError

    def driver_result(self, name: str) -> dict[str, Any] | None:
        """The driver's JSON file ``name`` in the stage directory, or None (none written)."""
        return stage_json(self.stagedir, name)

    def variables_of(self, key: str) -> list[str]:
        """The perf variables a key of the driver's JSON stands for (itself by default)."""
        return [key]

    @run_before("performance")
    def log_measurement(self) -> None:
        result = self.measured()
        if result is None:
            return
        self.interference = dict(result["interference"])
        self.exclusive = str(result["exclusive"])
        self.spread = {var: result["spread"][key] for key in result["spread"]
                       for var in self.variables_of(key)}
        self.measurements = {var: count for key, count in result["measurements"].items()
                             for var in self.variables_of(key)}
        self.confirmation = {var: first for key, first in result["confirmation"].items()
                             for var in self.variables_of(key)}
        self.host_control = self.logged_host_control(result.get("host_control", {}))
        say_how_confirmed(self, result)

    def qualify(self, assessments: list[Assessment]) -> dict[str, tuple[str, str]]:
        result = self.measured()
        if result is None:
            return {}
        quiet = {var: int(n) for key, n in result.get("quiet_confirmations", {}).items()
                 for var in self.variables_of(key)}
        return confirmed_verdicts(assessments, result["interference"], bool(result["contended"]),
                                  self.confirmation, quiet, self.slow_hosts(assessments))


def lasting_failures_dir(stagedir: str) -> str:
    """Where this run's jobs of a partition note a lasting failure they confirmed, one file
    per node list (``fabreg.run.confirm``): a capped link slows every MPI, transport and
    check over it, so the nodes are the path. In the partition's stage directory, which the
    job can write."""
    return str(Path(stagedir).parents[1] / f".fabreg-lasting-{RUN_ID}")


def say_how_confirmed(check: Any, result: dict[str, Any]) -> None:
    """Warn when a driver confirmed ``check``'s failure by one run instead of its
    ``confirm_runs``: it joined an earlier job's lasting failure on the same nodes, or the
    run's confirmations had taken ``confirm_budget``; and say when a confirmed failure was
    not noted for later jobs to join, its host control having read slow."""
    failing = ", ".join(check.confirmation)
    if joined := result.get("joined_lasting_failure"):
        since = time.strftime("%H:%M:%S", time.localtime(float(joined["first"])))
        getlogger().warning(
            f"{check.display_name}: the failure of {failing} joined the lasting failure "
            f"job {joined['job']} confirmed on the same nodes (failing since {since}): one "
            f"run on a quiet host confirmed it, instead of up to {check.confirm_runs} over "
            f"{check.confirm_span:g} s")
    elif result.get("confirmation_over_budget"):
        getlogger().warning(
            f"{check.display_name}: the run's confirmations took their budget "
            f"(confirm_budget={check.confirm_budget:g} s): the failure of {failing} was "
            f"confirmed by one run on a quiet host")
    if withheld := result.get("lasting_failure_withheld"):
        getlogger().info(
            f"{check.display_name}: the failure of {failing} is not noted as the lasting "
            f"failure of these nodes, for later jobs to join: the host control read slow "
            f"({withheld})")


def confirmed_verdicts(assessments: list[Assessment], interference: dict[str, Any],
                       contended: bool, first: dict[str, float], quiet: dict[str, int],
                       slow: Mapping[str, SlowHost] | None = None
                       ) -> dict[str, tuple[str, str]]:
    """The band's verdicts qualified by how the values were measured (the module's table).

    ``first``: perf variable -> its first best value, for the values measured again because
    they failed; ``quiet``: perf variable -> confirmation runs that measured it on a quiet host;
    ``slow``: perf variable -> what of the host control that judges it ran slow (none: the
    variable's control did not).
    """
    out = {}
    for a in assessments:
        ran_slow = (slow or {}).get(a.name)
        judged_by_control = (a.verdict == "fail" and ran_slow
                             and (not contended or quiet.get(a.name)))
        if judged_by_control and ran_slow.explains(a):
            out[a.name] = ("inconclusive", ran_slow.reason(a))
        elif judged_by_control and not contended:
            out[a.name] = ("fail", ran_slow.reason(a))
        elif a.verdict == "fail" and contended and quiet.get(a.name):
            # Every measurement failed, among them confirmation runs on a quiet host:
            # other work elsewhere in the job cannot have caused it.
            out[a.name] = ("fail", f"confirmed by {quiet[a.name]} run(s) on a quiet host "
                                   f"(other work took {interference['other_share']:.0%} of "
                                   "the CPU over the job)")
        elif a.verdict == "fail" and contended:
            out[a.name] = ("inconclusive", contention_text(interference) + " while it measured")
        elif a.verdict != "fail" and a.name in first:
            out[a.name] = ("flaky", f"first measured {first[a.name]:g}, did not reproduce")
    return out


class RepeatedMeasurement(ConfirmedValues):
    """Mixin: the job measures through ``fabreg.run.measure``; the check judges the best."""

    #: Fraction of the time limit after which no more repeats start (a confirmation of a
    #: failing value still runs).
    #:
    #: :type: ``float``
    #: :default: ``0.5``
    repeat_budget = variable(float, value=0.5, loggable=False)
    #: Seconds a benchmark may go on after printing its complete results before it is
    #: ended as hung (its values are kept).
    #:
    #: :type: ``float``
    #: :default: ``20.0``
    hang_grace = variable(float, value=20.0, loggable=False)
    #: Measure repeatedly (False: one run, judged as it is).
    #:
    #: :type: ``bool``
    #: :default: ``True``
    measure_repeatedly = variable(typ.Bool, value=True, loggable=False)

    def measurement_plan(self, command: list[str]) -> measure.Plan:
        """What the job measures; ``command`` is the launcher and the benchmark binary."""
        raise NotImplementedError

    def variables_at(self, size: int) -> list[str]:
        """The perf variables measured (not derived) at ``size``."""
        raise NotImplementedError

    def budget_seconds(self) -> float:
        """When repeats stop starting: ``repeat_budget`` of the job's time limit."""
        return self.repeat_budget * float(self.time_limit or 600)

    @run_before("run", always_last=True)
    def run_through_measure_driver(self) -> None:
        if not self.measure_repeatedly:
            return
        command = [*self.launcher_argv(), self.executable]
        self.measurement_plan(command).save(Path(self.stagedir, measure.PLAN))
        self.hand_to_driver("fabreg.run.measure", measure.PLAN, [measure.RESULT])

    def variables_of(self, key: str) -> list[str]:
        return self.variables_at(int(key))

    def measured(self) -> dict[str, Any] | None:
        """What ``measure.json`` says, or None (one plain run, or a dry run)."""
        return self.driver_result(measure.RESULT) if self.measure_repeatedly else None

    def measured_value(self, size: int) -> float | None:
        result = self.measured()
        value = result["best"].get(str(size)) if result else None
        return None if value is None else float(value)

    @run_before("performance")
    def warn_of_a_hang(self) -> None:
        result = self.measured()
        if result is not None and result["hung_after_results"]:
            getlogger().warning(
                f"{self.display_name}: the benchmark printed complete results and then hung; "
                f"ended after {self.hang_grace:g} s ({min(self.hang_grace, KNOWN_HANG_GRACE_S):g}"
                f" s once a launch of the job, or of an earlier job of the run launching the "
                f"same way, had hung), its values are judged")

    @run_before("performance")
    def warn_of_few_measurements(self) -> None:
        """Say so when the time budget ended the repeats before every size was settled: the
        best of fewer is judged (a failing one is still confirmed)."""
        result = self.measured()
        if result is None or not result["launches"] or not result.get("unsettled"):
            return
        fewest = min(len(result["values"].get(size, [])) for size in result["unsettled"])
        first = float(result["launches"][0]["seconds"])
        getlogger().warning(
            f"{self.display_name}: some sizes measured {fewest} of up to {self.repeats} "
            f"times ({', '.join(result['unsettled'])} not settled): the repeat budget "
            f"({self.budget_seconds():.0f} s) was spent, the whole-curve run alone took "
            f"{first:.0f} s; the best of those is judged")

"""Shared pieces of the workload probe checks (streams, tail latency, matmul, sweep).

- ``WorkloadProbes``: fixture that builds fabreg's workload probes (src/probes/fabreg_*.c)
  once per environment, with the environment's MPI compiler wrapper;
- ``ProbeCheck``: an MPI check (transport x nodes matrix) that runs one of those probes,
  with fabric counters and references (from ``FabregCheck``); the checks add how they
  measure: ``MeteredJob`` (one run, other work's CPU time metered over the job) or
  ``RepeatedProbe`` (repeated runs judged by their best, a failure confirmed);
- ``launcher_argv``: the launcher command for an extra launch inside the same job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, run_after, run_before, sanity_function, variable
from reframe.core.exceptions import ReframeError, SanityError

from fabreg import schema
from fabreg.run import providers, repeat_probe
from fabreg.testlib.base import reframe_errors
from fabreg.testlib.build_cache import ProbeBuildCacheMixin
from fabreg.testlib.builds import BuildsApartMixin
from fabreg.testlib.measurement import ConfirmedValues
from fabreg.testlib.mpi import MpiCheck, unavailable_reason
from fabreg.testlib.references import ReferenceKeys

PROBES = ("fabreg_streams", "fabreg_tail_latency", "fabreg_matmul", "fabreg_sweep")


class WorkloadProbes(rfm.CompileOnlyRegressionTest, BuildsApartMixin, ProbeBuildCacheMixin):
    """Fixture: fabreg's workload probes built with one environment's MPI."""

    build_system = "Make"

    @run_after("setup")
    def use_probe_sources(self) -> None:
        self.skip_if(bool(reason := unavailable_reason(self.current_environ)), reason or "")
        with reframe_errors():
            self.sourcesdir = str(providers.probes_source_dir())
        self.build_system.options = list(PROBES)
        self.build_system.max_concurrency = 1

    @sanity_function
    def built(self) -> bool:
        missing = [p for p in PROBES if not Path(self.stagedir, p).is_file()]
        if missing:
            raise ReframeError(f"probes not built: {', '.join(missing)}")
        return True

    def path_of(self, probe: str) -> str:
        return str(Path(self.stagedir, probe))



def launcher_argv(check: Any, num_tasks: int) -> list[str]:
    """The command that starts ``num_tasks`` ranks inside this check's job.

    Used for a second launch in the same job (e.g. the quiet run of the tail
    latency check). The environment's launcher wins, as for the main launch.
    """
    argv = check.current_environ.extras.get("launcher")
    fields = {"num_tasks": num_tasks, "num_nodes": check.num_nodes,
              "num_tasks_per_node": max(1, num_tasks // max(1, check.num_nodes))}
    if argv:
        return [str(a).format(**fields) for a in argv] + list(check.launch_options)
    name = check.current_partition.launcher_type.registered_name
    if name == "srun":
        return ["srun", "-n", str(num_tasks)] + list(check.launch_options)
    if name in ("mpirun", "mpiexec"):
        return [name, "-np", str(num_tasks)] + list(check.launch_options)
    raise ReframeError(f"cannot start a second MPI launch with the {name!r} launcher; "
                       "give the environment a 'launcher' in its extras")


class ProbeCheck(MpiCheck):
    """An MPI check that runs one of fabreg's workload probes.

    Subclasses give ``placement()`` (nodes, ranks per node) for each ``nodes``
    value they accept, mark the others impossible with ``impossible()`` at init,
    and list their references in ``references_wanted()``.
    """

    #: The probe (perflog column), e.g. ``fabreg_streams``.
    #:
    #: :type: ``str``
    #: :default: required (set by the subclass)
    benchmark = variable(str, loggable=True)
    #: Where the binary came from (perflog column).
    #:
    #: :type: ``str``
    #: :default: ``providers.PROBES``
    provider = variable(str, value=providers.PROBES, loggable=True)

    #: The workload probes built with this environment's MPI.
    #:
    #: :type: fixture :class:`WorkloadProbes`
    #: :default: one per environment
    workload_probes = fixture(WorkloadProbes, scope="environment")

    time_limit = "5m"

    def probe_path(self) -> str:
        return self.workload_probes.path_of(self.benchmark)

    def reference_benchmark(self) -> str:
        """The ``benchmark`` of this check's rows in ``checks/references/<system>.yaml``."""
        return self.benchmark

    def references_wanted(self) -> dict[str, tuple[str, int | None, bool]]:
        """perf variable -> (metric, size, required in acceptance mode)."""
        return {}

    def reference_keys(self) -> ReferenceKeys:
        common = {"benchmark": self.reference_benchmark(), "mpi": self.mpi,
                  "transport": self.transport, "nodes": self.nodes}
        return {var: ({**common, "metric": metric, "size": size}, required)
                for var, (metric, size, required) in self.references_wanted().items()}

    @run_before("run")
    def use_probe(self) -> None:
        self.executable = self.probe_path()


class RepeatedProbe(ConfirmedValues):
    """Mixin for a ``ProbeCheck``: the job runs the probe through ``fabreg.run.repeat_probe``
    (``repeats`` runs, each figure judged by its best, a failing one confirmed); the first
    run's output is the job's stdout, for sanity."""

    def figure_units(self) -> dict[str, str]:
        """Perf variable -> its unit: the figures the driver reads and the check judges."""
        raise NotImplementedError

    def baseline_launch(self) -> tuple[list[str], dict[str, str]]:
        """A launch the driver runs before every run, for a figure that is a ratio to it:
        (its command, its figure -> the name recorded); none by default."""
        return [], {}

    @run_before("run", always_last=True)
    def run_through_repeat_driver(self) -> None:
        units = self.figure_units()
        baseline, recorded = self.baseline_launch()
        figures = {name: schema.lower_is_better(name) for name in units}
        figures.update({kept: schema.lower_is_better(name) for name, kept in recorded.items()})
        settings = self.confirmation_settings()
        if self.unjudged_reason():
            settings["repeats"] = 1  # no verdict rests on the figures: one run logs them
        repeat_probe.Plan(
            command=[*self.launcher_argv(), self.probe_path()],
            options=list(self.executable_opts), probe=self.benchmark, figures=figures,
            fail_limits=self.failure_limits(units), warn_limits=self.warning_limits(units),
            baseline=baseline,
            baseline_figures=recorded, hang_note=self.hang_note(), **settings,
        ).save(Path(self.stagedir, repeat_probe.PLAN))
        self.hand_to_driver("fabreg.run.repeat_probe", repeat_probe.PLAN,
                            [repeat_probe.RESULT, "probe-run*.out"])

    def measured(self) -> dict[str, Any] | None:
        return self.driver_result(repeat_probe.RESULT)

    def run_outputs(self) -> list[str]:
        """Every run's output (the first is the job's stdout): sanity that must hold in each
        run, such as no lost message, reads them all."""
        result = self.measured()
        names = [x["output"] for x in result["launches"]] if result else []
        return [self.output_text(name) for name in names] or [self.output_text()]

    def best_of(self, name: str) -> float:
        """The best of the job's runs for figure ``name``."""
        result = self.measured()
        if not result or name not in result["best"]:
            raise SanityError(f"no run of {self.benchmark} gave {name} "
                              f"(see {repeat_probe.RESULT} and probe-run*.out)")
        return float(result["best"][name])

    @run_before("performance")
    def set_perf_variables(self) -> None:
        self.perf_variables = {
            name: sn.make_performance_function(self.best_of, unit, name)
            for name, unit in self.figure_units().items()
        }

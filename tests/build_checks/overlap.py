"""Test-only ReFrame checks for tests/test_builds_apart.py: a slow build beside a job.

Not part of the suite. Each step appends ``<what> <start> <end>`` (epoch seconds) to
the file named by ``FABREG_TEST_TIMELINE``; the test reads whether they overlapped.
"""

import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, run_before, sanity_function

from fabreg.testlib.builds import BuildsApartMixin

TIMELINE = os.environ.get("FABREG_TEST_TIMELINE", "/dev/null")


def _timed(what: str, seconds: int) -> list[str]:
    return [f"t0=$(date +%s.%N); sleep {seconds}; "
            f"echo {what} $t0 $(date +%s.%N) >> {TIMELINE}"]


class _SlowBuild(rfm.CompileOnlyRegressionTest):
    sourcesdir = None
    build_system = "CustomBuild"
    valid_systems = ["local"]
    valid_prog_environs = ["builtin"]

    @run_before("compile")
    def slow(self):
        self.build_system.commands = _timed("build", 4)

    @sanity_function
    def built(self):
        return True


class PlainBuild(_SlowBuild):
    """ReFrame's default: built on the host, counted apart from the partition's jobs."""


class ApartBuild(_SlowBuild, BuildsApartMixin):
    """The suite's fixtures: built through the partition where the CPUs are shared."""


class _Job(rfm.RunOnlyRegressionTest):
    valid_systems = ["local"]
    valid_prog_environs = ["builtin"]
    executable = "true"

    @sanity_function
    def ran(self):
        return sn.assert_true(True)


@rfm.simple_test
class UsesPlainBuild(_Job):
    build = fixture(PlainBuild, scope="environment")
    tags = {"plain"}


@rfm.simple_test
class UsesApartBuild(_Job):
    build = fixture(ApartBuild, scope="environment")
    tags = {"apart"}


@rfm.simple_test
class MeasuredJob(_Job):
    """Stands for a benchmark: a job that must have the CPUs to itself."""

    tags = {"plain", "apart"}

    @run_before("run")
    def timed(self):
        self.executable = "bash"
        self.executable_opts = ["-c", repr(_timed("job", 3)[0])]

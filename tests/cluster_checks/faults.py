"""Test-only ReFrame checks for the emulated cluster's fault handling (tests/test_cluster.py).

Not part of the suite: they hang or wait on purpose. Run with
``--exec-order=name`` so the steps run in their order.
"""

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import performance_function, sanity_function

from fabreg.testlib.jobs import SchedulerEndingMixin


class _OnMinicluster(rfm.RunOnlyRegressionTest, SchedulerEndingMixin):
    valid_systems = ["minicluster"]
    valid_prog_environs = ["openmpi"]
    tags = {"fabreg-cluster-faults"}


class _Figure(_OnMinicluster):
    """A one-node job that reports a figure, so it writes a perflog line."""

    num_tasks = 1
    executable = "echo"
    executable_opts = ["figure 42"]

    @sanity_function
    def printed(self):
        return sn.assert_found(r"figure 42", self.stdout)

    @performance_function("units")
    def figure(self):
        return sn.extractsingle(r"figure (\d+)", self.stdout, 1, int)


@rfm.simple_test
class NodeLossStep1Before(_Figure):
    pass


@rfm.simple_test
class NodeLossStep2Dies(_OnMinicluster):
    """Spans two nodes and runs until the test kills node2 under it."""

    num_tasks = 2
    num_tasks_per_node = 1
    executable = "sleep"
    executable_opts = ["300"]
    time_limit = "5m"

    @sanity_function
    def finished(self):
        return sn.assert_found(r"never printed", self.stdout)


@rfm.simple_test
class NodeLossStep3After(_Figure):
    pass

"""A tiny ReFrame check that writes real perflogs with known values, for the review tests.

It runs no benchmark and measures nothing: the job prints OSU-style lines whose numbers are
computed from the ``scale`` variable, so a test can run real ReFrame sessions
(``-S scale=1.2``) and know exactly which shift the perflogs must show. What it exercises is
the path from ReFrame's own perflogs (its logging, formats, header changes) to the store and
the verdicts; the measurements themselves come from the checks in checks/. Parameters and
performance variable names mirror fabreg's checks (``transport``, ``latency_8B``, ...).
"""

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import (
    parameter,
    performance_function,
    run_before,
    sanity_function,
    variable,
)


@rfm.simple_test
class ScaledPerflogLatency(rfm.RunOnlyRegressionTest):
    valid_systems = ['*']
    valid_prog_environs = ['openmpi', 'mpich']
    transport = parameter(['shm', 'tcp'])
    benchmark = variable(str, value='osu_latency', loggable=True)
    num_nodes = variable(int, value=1, loggable=True)
    mpi = variable(str, value='', loggable=True)
    #: Not loggable: it changes between sessions and must not split a series.
    scale = variable(float, value=1.0, loggable=False)
    #: Logged but describes the run, not the series (as fabreg's checks log it).
    ref_status = variable(str, value='ok', loggable=True)
    executable = 'printf'
    tags = {'fabreg-review-test'}

    @run_before('run')
    def set_output(self):
        self.mpi = self.current_environ.name
        self.ref_status = 'ok' if self.scale < 1.1 else 'fail'
        base = 2.0 if self.transport == 'tcp' else 0.5
        lat8 = base * self.scale
        lat1m = 80.0 * base * self.scale
        bw = 9000.0 / (base * self.scale)
        self.executable_opts = [
            "'# OSU MPI Latency Test\\n# Size Latency (us)\\n"
            f"8 {lat8:.3f}\\n1048576 {lat1m:.3f}\\n# Bandwidth\\n1048576 {bw:.2f}\\n'"
        ]

    @sanity_function
    def validate(self):
        return sn.assert_found(r'^8\s', self.stdout)

    @performance_function('us')
    def latency_8B(self):
        return sn.extractsingle(r'^8\s+(\S+)', self.stdout, 1, float)

    @performance_function('us')
    def latency_1MB(self):
        return sn.extractsingle(r'^1048576\s+(\S+)', self.stdout, 1, float, item=0)

    @performance_function('MB/s')
    def bandwidth_1MB(self):
        return sn.extractsingle(r'^1048576\s+(\S+)', self.stdout, 1, float, item=1)

    @run_before('performance')
    def set_references(self):
        upper = 0.1
        self.reference = {
            '*': {
                'latency_8B': (2.0 if self.transport == 'tcp' else 0.5, None, upper, 'us'),
                'bandwidth_1MB': (9000.0 / (2.0 if self.transport == 'tcp' else 0.5),
                                  -0.1, None, 'MB/s'),
            }
        }

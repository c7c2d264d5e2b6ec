"""OSU benchmarks on GPU (CUDA) buffers, for CUDA-aware MPI (OSU's ``-d cuda``).

Skipped with the reason where there is no GPU, the MPI is not CUDA-aware, or
the binaries are fabreg's probes (host memory only): real OSU built with CUDA
is needed (set ``osu_prefix``, see README). ucx_perftest's CUDA variants are in
checks/ucx_perftest.py.
"""

import reframe as rfm
from reframe.core.builtins import parameter, run_after

from fabreg.run import gpu, providers
from fabreg.testlib.osu import PT2PT, OsuCollective, OsuPointToPoint


class DeviceBuffers(rfm.RegressionTestPlugin):
    """Runs an OSU check on device buffers; its references are rows of ``<benchmark>_cuda``."""

    buffer = parameter(["cuda"])

    @run_after("init")
    def buffer_locations(self) -> None:
        """Both ranks' buffers on the device: OSU's ``D D``, which it reads after all options."""
        if self.benchmark in PT2PT:
            self.operands = ["D", "D"]

    @run_after("setup")
    def device_buffers(self) -> None:
        self.skip_without_device_buffers()
        self.skip_if(self.provider == providers.PROBES,
                     "fabreg's probes use host memory only; give the environment an "
                     "osu_prefix with OSU built against CUDA")
        self.executable_opts = ["-d", self.buffer, *self.executable_opts]

    def skip_without_device_buffers(self) -> None:
        """Skip, naming all that this host lacks for device buffers (no GPU, an MPI without
        CUDA)."""
        reason = gpu.device_buffer_problem(self.buffer, self.mpi)
        self.skip_if(bool(reason), reason or "")

    def skip_if_time_slices(self, figure: str) -> None:
        """What the host lacks for device buffers is said first: the collective's hook that
        skips a figure of time slices runs before this plugin's own."""
        self.skip_without_device_buffers()
        super().skip_if_time_slices(figure)

    def reference_key(self, metric: str, size: int) -> dict[str, object]:
        key = super().reference_key(metric, size)
        return {**key, "benchmark": f"{key['benchmark']}_cuda"}


@rfm.simple_test
class GpuOsuLatency(DeviceBuffers, OsuPointToPoint):
    benchmark = "osu_latency"
    tags = {"osu", "gpu"}


@rfm.simple_test
class GpuOsuBandwidth(DeviceBuffers, OsuPointToPoint):
    benchmark = "osu_bw"
    tags = {"osu", "gpu"}


@rfm.simple_test
class GpuOsuAllreduce(DeviceBuffers, OsuCollective):
    benchmark = "osu_allreduce"
    tags = {"osu", "gpu"}

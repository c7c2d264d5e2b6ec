"""OSU benchmarks on GPU (CUDA) buffers, for CUDA-aware MPI (OSU's ``-d cuda``).

Skipped with the reason where there is no GPU, the MPI is not CUDA-aware, or
the binaries are fabreg's probes (host memory only): real OSU built with CUDA
is needed (set ``osu_prefix``, see README). ucx_perftest's CUDA variants are in
checks/ucx_perftest.py.
"""

import reframe as rfm
from reframe.core.builtins import parameter, run_after

from fabreg import gpu, providers
from fabreg.testlib.osu import PT2PT, OsuCheck


class _DeviceBuffers(OsuCheck):
    buffer = parameter(["cuda"])
    tags = {"osu", "gpu"}

    @run_after("setup")
    def use_device_buffers(self) -> None:
        reason = gpu.device_buffer_problem(self.buffer, self.mpi)
        self.skip_if(bool(reason), reason or "")
        self.skip_if(self.provider == providers.PROBES,
                     "fabreg's probes use host memory only; give the environment an "
                     "osu_prefix with OSU built against CUDA")
        device = ["-d", self.buffer] + (["D", "D"] if self.benchmark in PT2PT else [])
        self.executable_opts = [*device, *self.executable_opts]

    def reference_key(self, metric: str, size: int) -> dict[str, object]:
        return {**super().reference_key(metric, size), "benchmark": f"{self.benchmark}_cuda"}


@rfm.simple_test
class OsuLatencyDevice(_DeviceBuffers):
    benchmark = "osu_latency"


@rfm.simple_test
class OsuBandwidthDevice(_DeviceBuffers):
    benchmark = "osu_bw"


@rfm.simple_test
class OsuAllreduceDevice(_DeviceBuffers):
    benchmark = "osu_allreduce"

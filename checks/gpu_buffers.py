"""OSU benchmarks on GPU (CUDA) buffers, for CUDA-aware MPI (OSU's ``-d cuda``).

Skipped with the reason where there is no GPU, the MPI is not CUDA-aware, or
the binaries are fabreg's probes (host memory only): real OSU built with CUDA
is needed (set ``osu_prefix``, see README). ucx_perftest's CUDA variants are in
checks/ucx_perftest.py.
"""

import reframe as rfm
from reframe.core.builtins import parameter, run_after

from fabreg import gpu, providers
from fabreg.testlib.osu import PT2PT, OsuCollective, OsuPointToPoint


def use_device_buffers(check) -> None:
    """Skip with the reason, or put OSU's ``-d cuda [D D]`` in front of its options."""
    reason = gpu.device_buffer_problem(check.buffer, check.mpi)
    check.skip_if(bool(reason), reason or "")
    check.skip_if(check.provider == providers.PROBES,
                  "fabreg's probes use host memory only; give the environment an "
                  "osu_prefix with OSU built against CUDA")
    device = ["-d", check.buffer] + (["D", "D"] if check.benchmark in PT2PT else [])
    check.executable_opts = [*device, *check.executable_opts]


def device_key(key: dict) -> dict:
    """References of device-buffer runs are their own rows: ``<benchmark>_cuda``."""
    return {**key, "benchmark": f"{key['benchmark']}_cuda"}


class _PointToPointDevice(OsuPointToPoint):
    buffer = parameter(["cuda"])

    @run_after("setup")
    def device_buffers(self) -> None:
        use_device_buffers(self)

    def reference_key(self, metric: str, size: int) -> dict[str, object]:
        return device_key(super().reference_key(metric, size))


class _CollectiveDevice(OsuCollective):
    buffer = parameter(["cuda"])

    @run_after("setup")
    def device_buffers(self) -> None:
        use_device_buffers(self)

    def reference_key(self, metric: str, size: int) -> dict[str, object]:
        return device_key(super().reference_key(metric, size))


@rfm.simple_test
class GpuOsuLatency(_PointToPointDevice):
    benchmark = "osu_latency"
    tags = {"osu", "gpu"}


@rfm.simple_test
class GpuOsuBandwidth(_PointToPointDevice):
    benchmark = "osu_bw"
    tags = {"osu", "gpu"}


@rfm.simple_test
class GpuOsuAllreduce(_CollectiveDevice):
    benchmark = "osu_allreduce"
    tags = {"osu", "gpu"}

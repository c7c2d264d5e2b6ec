"""UCX microbenchmarks (ucx_perftest) per transport, below any MPI.

Latency tests report p50 and average one-way latency; bandwidth tests report
p50 and average send overhead; both report bandwidth and message rate. Run over
``tcp`` (loopback on one node) and ``shm`` on any host, the RDMA transports where
devices exist (skipped with the reason elsewhere), and on CUDA buffers where
UCX and a GPU allow it.
"""

import reframe as rfm
from reframe.core.builtins import parameter

from fabreg.testlib.ucx_perftest import UCX_TRANSPORTS, UcxPerftestCheck


@rfm.simple_test
class UcxPerftestLatency(UcxPerftestCheck):
    """Ping-pong latency of 8-byte messages."""

    ucx_test = parameter(["tag_lat", "ucp_am_lat"])
    transport = parameter(UCX_TRANSPORTS)
    buffer = parameter(["host", "cuda"])
    message_size = 8
    iterations = 10000
    time_metric = "latency"
    tags = {"ucx", "workload"}


@rfm.simple_test
class UcxPerftestBandwidth(UcxPerftestCheck):
    """Streaming bandwidth and message rate of 64 KiB messages."""

    ucx_test = parameter(["tag_bw", "ucp_put_bw", "ucp_am_bw"])
    transport = parameter(UCX_TRANSPORTS)
    buffer = parameter(["host", "cuda"])
    message_size = 65536
    iterations = 2000
    time_metric = "overhead"
    tags = {"ucx", "workload"}

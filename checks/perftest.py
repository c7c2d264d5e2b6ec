"""Raw RDMA read/write/send below MPI (linux-rdma perftest), full size sweeps.

Bandwidth tests sweep queue pairs and post-list length; every test runs with
polling and event-driven completion, except RDMA write, which perftest polls only.
Hosts without an RDMA device skip these with that reason.
"""

import reframe as rfm
from reframe.core.builtins import parameter

from fabreg.testlib.perftest import PerftestCheck


class _Bandwidth(PerftestCheck):
    completion = parameter(["polling", "event"])
    qps = parameter([1, 4])
    post_list = parameter([1, 16])
    tags = {"rdma", "perftest"}


class _Latency(PerftestCheck):
    completion = parameter(["polling", "event"])
    tags = {"rdma", "perftest"}


@rfm.simple_test
class IbWriteBw(_Bandwidth):
    benchmark = "ib_write_bw"


@rfm.simple_test
class IbReadBw(_Bandwidth):
    benchmark = "ib_read_bw"


@rfm.simple_test
class IbSendBw(_Bandwidth):
    benchmark = "ib_send_bw"


@rfm.simple_test
class IbWriteLat(_Latency):
    benchmark = "ib_write_lat"


@rfm.simple_test
class IbReadLat(_Latency):
    benchmark = "ib_read_lat"


@rfm.simple_test
class IbSendLat(_Latency):
    benchmark = "ib_send_lat"

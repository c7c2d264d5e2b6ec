"""Spack recipe for perftest (ib_write_bw, ib_send_lat, ...).

The builtin repository (spack-packages v2025.11) has no perftest. Sites usually
take the distribution's perftest as an external (see docs/spack.md); this recipe
lets the concretizer know the package and builds it where no external exists.
The checksum is the one published with the release by downstream packagers; it
could not be re-verified offline.
"""

from spack_repo.builtin.build_systems.autotools import AutotoolsPackage

from spack.package import *


class Perftest(AutotoolsPackage):
    """InfiniBand/RoCE verbs and RDMA-CM performance tests."""

    homepage = "https://github.com/linux-rdma/perftest"

    version(
        "25.10.0-0.128",
        sha256="750bc48b1d9362996de1d2bbe36d3b25f067b5077177d39c2faeb472bd5a7194",
        url="https://github.com/linux-rdma/perftest/releases/download/25.10.0-0.128/"
        "perftest-25.10.0-0.128.gd01b183.tar.gz",
    )

    depends_on("c", type="build")
    depends_on("rdma-core")
    depends_on("pciutils")

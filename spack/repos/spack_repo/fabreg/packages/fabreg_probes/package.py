"""Spack recipe for fabreg's bundled MPI probes, built from this repository.

The source is the checkout this recipe lives in (``src/probes``), so it builds
without a download. The version is a digest of the probe sources: editing a probe
changes the version and with it the spec hash, so a rebuilt probe is visible in
the perflogs as a build change.
"""

import hashlib
import os

from spack_repo.builtin.build_systems.makefile import MakefilePackage

from spack.package import *

#: ``src/probes`` of the checkout holding this recipe
#: (spack/repos/spack_repo/fabreg/packages/fabreg_probes/package.py).
PROBES_DIR = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 6, "src", "probes"
)
_SOURCE_SUFFIXES = (".c", ".h", ".mk", ".in")


def _source_files(root):
    """Relative paths of the probe sources (build products are left out)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith("Makefile") or name.endswith(_SOURCE_SUFFIXES):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)


def source_digest(root=PROBES_DIR):
    """sha256 over the probe sources' names and contents ("missing" without sources)."""
    files = _source_files(root) if os.path.isdir(root) else []
    if not files:
        return "missing"
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0")
        with open(os.path.join(root, rel), "rb") as handle:
            digest.update(handle.read() + b"\0")
    return digest.hexdigest()


class FabregProbes(MakefilePackage):
    """fabreg's MPI probes: small C benchmarks with OSU-compatible output."""

    homepage = "https://example.invalid/fabreg"
    has_code = False  # nothing to fetch: make reads the sources in the checkout

    version("src." + source_digest()[:12])

    depends_on("c", type="build")
    depends_on("gmake", type="build")
    depends_on("mpi")

    def edit(self, spec, prefix):
        where = os.path.normpath(PROBES_DIR)
        if not os.path.isfile(os.path.join(PROBES_DIR, "Makefile")):
            raise InstallError(f"fabreg-probes: no Makefile in {where}")
        if spec.version != Version("src." + source_digest()[:12]):
            raise InstallError(
                f"fabreg-probes: the sources in {where} changed after concretizing "
                f"{spec.version}; concretize again"
            )

    @property
    def build_directory(self):
        return self.stage.source_path

    def _make_args(self):
        # Out-of-tree build: objects go to the stage, the checkout stays clean.
        return ["-f", os.path.join(os.path.normpath(PROBES_DIR), "Makefile"),
                f"CC={self.spec['mpi'].mpicc}"]

    def build(self, spec, prefix):
        with working_dir(self.build_directory):
            make(*self._make_args())

    def install(self, spec, prefix):
        with working_dir(self.build_directory):
            make(*self._make_args(), "install", f"PREFIX={prefix}")

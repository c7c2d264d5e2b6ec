"""Spack as a benchmark provider: build the suite's environment once per partition.

``SpackStack`` is a partition-scoped fixture. It creates a Spack environment from
the repository's ``spack.yaml`` in its stage, concretizes and installs it into a
shared install tree (so a second session, or a second partition on the same
tree, installs nothing), then records which spec was built for which MPI. The
environment-scoped binaries fixtures pick their benchmark from that record; the
spec's DAG hash and the ``spack.lock`` digest go into every perflog line, so a
rebuilt benchmark shows up as a build change in trend review.

The Spack build does not depend on the ReFrame programming environment it runs
in (Spack brings its own compilers and the MPIs as externals or builds), which
is why one build per partition is enough although ReFrame formally runs it under
the partition's first environment.

Per-partition settings, in the partition's ``extras`` (environment variables of
the same meaning override them):

- ``spack_site`` (``FABREG_SPACK_SITE_CONFIG``): the site file spack.yaml includes;
  default ``spack/sites/<system>.yaml`` when it exists, else spack/sites/default.yaml;
- ``spack_without`` (``FABREG_SPACK_WITHOUT``): parts of the stack the site cannot
  build (e.g. ``mvapich2``);
- ``spack_install_tree`` (``FABREG_SPACK_INSTALL_TREE``): the shared install tree;
  default: what the site file or Spack configure (never the stage).
"""

from __future__ import annotations

import hashlib
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_after, run_before, sanity_function, variable
from reframe.core.exceptions import ReframeError, SanityError
from reframe.core.logging import getlogger

from fabreg.errors import FabregError
from fabreg.run import providers

#: Directory (in the fixture's stage) of the Spack environment made from spack.yaml.
ENV_DIR = "rfm_spack_env"
#: Where the fixture records the installed specs that depend on MPI.
ROOTS_FILE = "spack-mpi-specs.txt"
_FIELDS = "{name}|{version}|{hash}|{prefix}|{^mpi.name}|{^mpi.variants}"

_said: set[str] = set()


@dataclass(frozen=True)
class SpackSpec:
    """One installed benchmark of the environment and the MPI it was built against."""

    name: str
    version: str
    hash: str
    prefix: str
    mpi: str
    mpi_variants: str

    @property
    def short(self) -> str:
        """``name@version/hash7``, as Spack prints it."""
        return f"{self.name}@{self.version}/{self.hash[:7]}"

    def built_with(self, mpi_spec: str) -> bool:
        """Whether this was built against ``mpi_spec`` (``name [variant=value ...]``)."""
        name, *wanted = mpi_spec.split()
        have = set(self.mpi_variants.replace(":=", "=").split())
        return self.mpi == name and all(w.replace(":=", "=") in have for w in wanted)


def parse_spec_records(text: str) -> list[SpackSpec]:
    """Lines of ``spack find --format`` with ``_FIELDS`` -> records (other lines ignored)."""
    records = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 6 and parts[2] and parts[3].startswith(os.sep):
            records.append(SpackSpec(*parts))
    return records


def choose_spec(records: list[SpackSpec], mpi_spec: str,
                packages: tuple[str, ...]) -> SpackSpec | None:
    """The first of ``packages`` (in that order of preference) built against ``mpi_spec``."""
    for package in packages:
        for record in records:
            if record.name == package and record.built_with(mpi_spec):
                return record
    return None


def lock_digest(lockfile: Path) -> str:
    """sha256 (first 16 hex digits) of an environment's spack.lock: what exactly was built."""
    return hashlib.sha256(lockfile.read_bytes()).hexdigest()[:16]


def _setting(extras: dict[str, Any], key: str, env_var: str) -> Any:
    return os.environ[env_var] if os.environ.get(env_var) else extras.get(key)


def site_config(system: str, extras: dict[str, Any]) -> str | None:
    """The site file for ``system`` (absolute path), or None for spack.yaml's default."""
    chosen = _setting(extras, "spack_site", "FABREG_SPACK_SITE_CONFIG")
    root = providers.repository_root()
    if chosen:
        path = Path(chosen) if Path(chosen).is_absolute() else root / chosen
        if not path.is_file():
            raise FabregError(f"Spack site file {path} (for system {system!r}) does not exist")
        return str(path)
    per_system = root / "spack" / "sites" / f"{system}.yaml"
    return str(per_system) if per_system.is_file() else None


def _say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        getlogger().warning(message)


class SpackStack(rfm.RunOnlyRegressionTest):
    """Fixture: the suite's Spack environment, installed once per partition.

    A run-only test (ReFrame allows no other at partition scope) whose job runs
    Spack where ReFrame runs (``local``), like a build. When no environment of the
    partition asks for Spack, or Spack is not there, the job only prints why, and
    the binaries fixtures use the bundled probes.
    """

    #: Whether Spack builds here (False: a note only, checks use the probes).
    #:
    #: :type: ``bool``
    #: :default: ``False``
    active = variable(bool, value=False)
    #: Why Spack is or is not used, for the log.
    #:
    #: :type: ``str``
    #: :default: ``""``
    reason = variable(str, value="")
    #: Digest of the environment's spack.lock after the install ("" until then).
    #:
    #: :type: ``str``
    #: :default: ``""``
    lock = variable(str, value="")

    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    local = True
    num_tasks = 1
    executable = "echo"

    @run_after("setup")
    def plan_build(self) -> None:
        part = self.current_partition
        wanted = [env.name for env in part.environs
                  if self._requested(env.extras) == providers.SPACK]
        if not wanted:
            self._note(f"no environment of {part.fullname} asks for Spack")
            return
        exe, how = providers.find_spack()
        if exe is None and not self.is_dry_run():
            self.reason = f"{how}; benchmarks come from the bundled probes instead"
            _say_once(part.fullname, f"provider spack requested for {', '.join(wanted)} on "
                                     f"{part.fullname}, but {self.reason}")
            self._note(self.reason)
            return
        try:
            manifest = providers.spack_manifest()
            site = site_config(self.current_system.name, part.extras)
        except FabregError as err:
            raise ReframeError(str(err)) from None
        self.active = True
        self.reason = f"Spack ({how})" if exe else f"Spack (dry run; {how})"
        without = _setting(part.extras, "spack_without", "FABREG_SPACK_WITHOUT") or []
        if isinstance(without, str):
            without = without.split()
        env_vars = {"FABREG_SPACK_WITHOUT": shlex.quote(" ".join(without))}
        if site:
            env_vars["FABREG_SPACK_SITE_CONFIG"] = shlex.quote(site)
        if exe is not None and os.environ.get("FABREG_SPACK_ROOT"):
            env_vars["PATH"] = f"{shlex.quote(str(exe.parent))}:$PATH"
        self.env_vars = {**self.env_vars, **env_vars}
        tree = _setting(part.extras, "spack_install_tree", "FABREG_SPACK_INSTALL_TREE")
        self.prerun_cmds = spack_commands(str(manifest), tree)
        self.executable = "spack"
        self.executable_opts = ["-e", ENV_DIR, "install", "--fail-fast"]
        self.postrun_cmds = [f"spack -e {ENV_DIR} find --format '{_FIELDS}' ^mpi > {ROOTS_FILE}"]
        # Kept (flat) in the output directory: what was built, exactly; the stage goes.
        self.keep_files = [ROOTS_FILE, f"{ENV_DIR}/spack.lock", f"{ENV_DIR}/spack.yaml"]

    def _requested(self, extras: dict[str, Any]) -> str:
        try:
            return providers.requested_provider(extras)
        except FabregError as err:
            raise ReframeError(str(err)) from None

    def _note(self, why: str) -> None:
        self.reason = self.reason or why
        self.executable_opts = [shlex.quote(f"fabreg: Spack not used: {why}")]

    @run_before("sanity")
    def read_lock(self) -> None:
        lockfile = Path(self.stagedir, ENV_DIR, "spack.lock")
        if self.active and lockfile.is_file():
            self.lock = lock_digest(lockfile)

    @sanity_function
    def installed(self) -> sn.Deferrable:
        if not self.active:
            return sn.assert_found(r"fabreg: Spack not used", self.stdout)
        errors = [line.strip() for name in (self.stderr, self.stdout)
                  for line in self._read(str(name.evaluate())).splitlines()
                  if line.startswith("==> Error")]
        if errors:
            raise SanityError(f"Spack failed: {errors[0]} (full log: rfm_job.err)")
        return sn.assert_true(bool(self.specs()),
                              f"Spack installed no MPI benchmark (see {ROOTS_FILE})")

    def _read(self, name: str) -> str:
        path = Path(self.stagedir, name)
        return path.read_text(errors="replace") if path.is_file() else ""

    def specs(self) -> list[SpackSpec]:
        """The installed specs that depend on MPI ([] before the install or when inactive)."""
        path = Path(self.stagedir, ROOTS_FILE)
        return parse_spec_records(path.read_text()) if path.is_file() else []


def spack_commands(manifest: str, install_tree: str | None) -> list[str]:
    """Shell commands that make the environment from ``manifest`` and concretize it."""
    cmds = [
        "set -o errexit",
        f"rm -rf {ENV_DIR}",
        f"spack env create -d {ENV_DIR} {shlex.quote(manifest)}",
    ]
    if install_tree:
        opt = shlex.quote(f"config:install_tree:root:{install_tree}")
        cmds.append(f"spack -e {ENV_DIR} config add {opt}")
    cmds.append(f"spack -e {ENV_DIR} concretize")
    return cmds

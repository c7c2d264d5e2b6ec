"""Spack as a benchmark provider: build the suite's environment once per partition.

``SpackStack`` is a partition-scoped fixture. It writes a Spack environment (the
repository's ``spack.yaml``, paths made absolute) into its stage, concretizes and
installs it into a shared install tree (so a second session, or a second partition
on the same tree, installs nothing), then records which spec was built for which
MPI, and copies spack.lock, spack.yaml and that record into its output directory
whether the session's checks pass or not. Before any Spack command it refuses an
environment whose ``develop:`` entry would build one source tree for two MPIs
(``fabreg.run.spack_env``); after the install it checks the same on what was built. The
environment-scoped binaries fixtures pick their benchmark from that record; the
spec's DAG hash and the ``spack.lock`` digest go into every perflog line, so a
rebuilt benchmark shows up as a build change in trend review.

The Spack build does not depend on the ReFrame programming environment it runs
in (Spack brings its own compilers and the MPIs as externals or builds), which
is why one build per partition is enough; it runs under ``builtin`` where the
partition offers that environment (``SpackStack.neutral_environment``).

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
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import reframe as rfm
import reframe.utility.sanity as sn
import yaml
from reframe.core.builtins import run_after, run_before, sanity_function, variable
from reframe.core.exceptions import ReframeError, ReframeFatalError, SanityError
from reframe.core.logging import getlogger
from reframe.core.runtime import runtime

from fabreg.errors import FabregError
from fabreg.run import providers, spack_env

#: Directory (in the fixture's stage) of the Spack environment made from spack.yaml.
ENV_DIR = "rfm_spack_env"
#: Where the fixture records the installed specs that depend on MPI.
ROOTS_FILE = "spack-mpi-specs.txt"
#: The environment's ``develop:`` configuration (merged from every scope), as Spack sees it.
DEVELOP_FILE = "spack-develop.yaml"
#: Copied from the stage into the fixture's output directory after every run, failed or not.
KEPT_FILES = (f"{ENV_DIR}/spack.lock", f"{ENV_DIR}/spack.yaml", ROOTS_FILE, DEVELOP_FILE)
#: The environment the fixture runs under when every partition offers it: no MPI's label.
NEUTRAL_ENVIRON = "builtin"
_FIELDS = "{name}|{version}|{hash}|{prefix}|{^mpi.name}|{^mpi.variants}|{^mpi.prefix}"

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
    #: The MPI's install prefix (its ``bin/mpicc`` says which library the benchmark must load).
    mpi_prefix: str = ""

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
    """Lines of ``spack find --format`` with ``_FIELDS`` -> records (other lines ignored).

    Records without the MPI prefix (six fields, as fabreg wrote them before) still read.
    """
    records = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) in (6, 7) and parts[2] and parts[3].startswith(os.sep):
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


def absolute_manifest(manifest: Path) -> str:
    """``manifest`` with its relative ``include`` and ``repos`` paths made absolute.

    Written straight into the fixture's environment directory: ``spack env create -d
    DIR manifest`` would first read the copy in DIR, where the relative repository
    path does not resolve ("No repo.yaml found", three times a session), and only
    then rewrite it.
    """
    data = yaml.safe_load(manifest.read_text()) or {}
    spack = data.get("spack") or {}
    base = manifest.resolve().parent

    def absolute(path: str) -> str:
        return path if os.path.isabs(path) or path.startswith(("$", "~")) else str(base / path)

    includes = spack.get("include") or []
    spack_includes = [{**entry, "path": absolute(entry["path"])} if isinstance(entry, dict)
                      else absolute(entry) for entry in includes]
    if includes:
        spack["include"] = spack_includes
    repos = spack.get("repos")
    if isinstance(repos, dict):
        spack["repos"] = {name: absolute(path) for name, path in repos.items()}
    elif isinstance(repos, list):
        spack["repos"] = [absolute(path) for path in repos]
    header = f"# Written by fabreg from {manifest}: the same, with absolute paths.\n"
    return header + yaml.safe_dump(data, sort_keys=False)


def shared_develop_sources(develop_yaml: str, records: list[SpackSpec]) -> str | None:
    """Why a ``develop:`` entry makes the MPI builds share one source tree, or None.

    Spack builds a developed autotools package (OSU) in its source directory; a
    second build against another MPI there reuses the first one's objects, and one
    MPI's benchmark ends up linked against the other's library (seen with Spack
    1.1.0: the "MPICH" osu_latency loaded OpenMPI's libmpi.so.40).
    """
    try:
        develop = (yaml.safe_load(develop_yaml) or {}).get("develop") or {}
    except yaml.YAMLError:
        return None
    for package, entry in develop.items():
        mpis = sorted({f"{r.mpi} {r.mpi_variants}".strip() for r in records if r.name == package})
        if len(mpis) > 1:
            path = entry.get("path", "?") if isinstance(entry, dict) else "?"
            names = sorted({m.split()[0] for m in mpis})
            return (f"the environment develops {package} from one source directory ({path}) "
                    f"for {len(mpis)} MPI builds ({', '.join(names)}): Spack builds both "
                    "there and the second reuses the first one's objects; remove the "
                    f"develop entry (spack -e <env> undevelop {package}) or develop it in an "
                    "environment with one MPI (docs/spack.md)")
    return None


def develop_refusal(manifest: str, environ: dict[str, str]) -> str | None:
    """``spack_env.develop_conflict`` of the environment the fixture writes (and its includes)."""
    included = [path.read_text(errors="replace")
                for path in spack_env.include_paths(manifest, environ, Path.cwd())
                if path.is_file()]
    return spack_env.develop_conflict(manifest, environ, included)


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

    @run_after("init")
    def neutral_environment(self) -> None:
        """Run under ``builtin`` when the partition offers it, not under an MPI's name.

        ReFrame gives a partition-scoped fixture the environment of whichever test
        registered it last (``mvapich2`` on ``local``), so the Spack build would be
        staged and logged as that MPI's. Without ``builtin`` in the partition (or with
        ``-p`` leaving it out) ReFrame's choice stands: only the label depends on it.
        Changed here, not through fixture variables, which would enter every OSU
        check's name (and with it every perflog series).
        """
        try:
            partitions = {p.fullname: p for p in runtime().system.partitions}
        except ReframeFatalError:  # no ReFrame session
            return
        chosen = [partitions.get(name) for name in self.valid_systems]
        if chosen and all(part is not None and any(env.name == NEUTRAL_ENVIRON
                                                   for env in part.environs)
                          for part in chosen):
            self.valid_prog_environs = [NEUTRAL_ENVIRON]

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
        without = _setting(part.extras, "spack_without", "FABREG_SPACK_WITHOUT") or []
        if isinstance(without, str):
            without = without.split()
        environ = {**os.environ, "FABREG_SPACK_WITHOUT": " ".join(without)}
        if site:
            environ["FABREG_SPACK_SITE_CONFIG"] = site
        written = absolute_manifest(manifest)
        shared = develop_refusal(written, environ)
        if shared:  # before any Spack command: the builds would overwrite each other
            raise ReframeError(shared)
        self.active = True
        self.reason = f"Spack ({how})" if exe else f"Spack (dry run; {how})"
        env_vars = {"FABREG_SPACK_WITHOUT": shlex.quote(" ".join(without))}
        if site:
            env_vars["FABREG_SPACK_SITE_CONFIG"] = shlex.quote(site)
        if exe is not None and os.environ.get("FABREG_SPACK_ROOT"):
            env_vars["PATH"] = f"{shlex.quote(str(exe.parent))}:$PATH"
        self.env_vars = {**self.env_vars, **env_vars}
        tree = _setting(part.extras, "spack_install_tree", "FABREG_SPACK_INSTALL_TREE")
        envdir = Path(self.stagedir, ENV_DIR)
        envdir.mkdir(parents=True, exist_ok=True)
        (envdir / "spack.yaml").write_text(written)
        self.prerun_cmds = spack_commands(tree)
        self.executable = "spack"
        self.executable_opts = ["-e", ENV_DIR, "install", "--fail-fast"]
        self.postrun_cmds = [f"spack -e {ENV_DIR} find --format '{_FIELDS}' ^mpi > {ROOTS_FILE}"]

    def _requested(self, extras: dict[str, Any]) -> str:
        try:
            return providers.requested_provider(extras)
        except FabregError as err:
            raise ReframeError(str(err)) from None

    def _note(self, why: str) -> None:
        self.reason = self.reason or why
        self.executable_opts = [shlex.quote(f"fabreg: Spack not used: {why}")]

    @run_before("sanity")
    def keep_records(self) -> None:
        """Copy what was built into the output directory now, whatever the outcome.

        ReFrame's ``keep_files`` are copied only when the fixture and every check that
        uses it pass; otherwise they stay in the stage, which the next session deletes.
        """
        if not self.active or self.is_dry_run():
            return
        lockfile = Path(self.stagedir, ENV_DIR, "spack.lock")
        if lockfile.is_file():
            self.lock = lock_digest(lockfile)
        out = Path(self.outputdir)
        out.mkdir(parents=True, exist_ok=True)
        for rel in KEPT_FILES:
            source = Path(self.stagedir, rel)
            if source.is_file():
                shutil.copy2(source, out / source.name)

    @sanity_function
    def installed(self) -> sn.Deferrable:
        if not self.active:
            return sn.assert_found(r"fabreg: Spack not used", self.stdout)
        errors = [line.strip() for name in (self.stderr, self.stdout)
                  for line in self._read(str(name.evaluate())).splitlines()
                  if line.startswith("==> Error")]
        if errors:
            raise SanityError(f"Spack failed: {errors[0]} (full log: rfm_job.err)")
        shared = shared_develop_sources(self._read(DEVELOP_FILE), self.specs())
        if shared:
            raise SanityError(shared)
        return sn.assert_true(bool(self.specs()),
                              f"Spack installed no MPI benchmark (see {ROOTS_FILE})")

    def _read(self, name: str) -> str:
        path = Path(self.stagedir, name)
        return path.read_text(errors="replace") if path.is_file() else ""

    def specs(self) -> list[SpackSpec]:
        """The installed specs that depend on MPI ([] before the install or when inactive)."""
        path = Path(self.stagedir, ROOTS_FILE)
        return parse_spec_records(path.read_text()) if path.is_file() else []


def spack_commands(install_tree: str | None) -> list[str]:
    """Shell commands that concretize the environment in ``ENV_DIR`` (its spack.yaml is
    written by the fixture) and record its ``develop:`` configuration."""
    cmds = ["set -o errexit"]
    if install_tree:
        opt = shlex.quote(f"config:install_tree:root:{install_tree}")
        cmds.append(f"spack -e {ENV_DIR} config add {opt}")
    cmds += [f"spack -e {ENV_DIR} concretize",
             f"spack -e {ENV_DIR} config get develop > {DEVELOP_FILE}"]
    return cmds

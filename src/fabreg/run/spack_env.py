"""What a Spack environment's spack.yaml will build, read before Spack runs.

One question is answered before ``spack install``: does a ``develop:`` entry make
two MPI builds of one package share a source tree? Spack keeps one ``develop:``
entry (one ``path``) per package name, and builds a developed autotools package
(OSU) in its source directory; a second build of it against another MPI
reconfigures there, finds objects newer than their sources and installs the first
MPI's binaries (seen with Spack 1.1.0: the "MPICH" ``osu_latency`` loaded
OpenMPI's ``libmpi.so.40``). ``package_attributes:build_directory`` does not
separate them either: it is one directory for every build of the package.

The spec list is expanded as Spack does for the forms fabreg's spack.yaml uses:
``definitions`` (with their ``when`` conditions, evaluated against the
environment variables), ``$name`` and ``$^name`` references, ``matrix`` with
``exclude``. A condition that needs more than the environment (``platform``,
``target``) cannot be decided here: the answer is then None, and the check after
the install (``fabreg.testlib.spack.shared_develop_sources``) still stands.
"""

from __future__ import annotations

import itertools
import re
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

#: Packages that provide ``mpi`` in Spack's builtin repository (a ``^`` dependency on one
#: of them is the MPI a spec is built against).
MPI_PROVIDERS = frozenset({
    "openmpi", "mpich", "mvapich2", "mvapich", "mvapich2-gdr", "mvapich2x", "intel-mpi",
    "intel-oneapi-mpi", "cray-mpich", "hpcx-mpi", "spectrum-mpi", "mpt", "msmpi",
    "fujitsu-mpi", "mpitrampoline", "mpilander", "mpiwrapper", "nvhpc",
})

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*")


class Undecidable(Exception):
    """The spec list depends on something not known before concretization."""


def _load(text: str) -> dict:
    data = yaml.safe_load(text) or {}
    return data if isinstance(data, dict) else {}


def _spack(text: str) -> dict:
    section = _load(text).get("spack")
    return section if isinstance(section, dict) else {}


def _holds(condition: str, environ: Mapping[str, str]) -> bool:
    """A ``when:`` condition, with the names Spack offers that are known before concretizing."""
    names = {"__builtins__": {}, "env": dict(environ), "re": re,
             "hostname": socket.gethostname()}
    try:
        return bool(eval(condition, names))  # noqa: S307 - Spack evaluates the same string
    except Exception as err:  # noqa: BLE001 - platform, target, ... are Spack's alone
        raise Undecidable(f"when: {condition!r} ({err})") from None


def _definitions(spack: dict, environ: Mapping[str, str]) -> dict[str, list[str]]:
    defined: dict[str, list[str]] = {}
    for entry in spack.get("definitions") or []:
        if not isinstance(entry, dict):
            continue
        condition = entry.get("when")
        if condition is not None and not _holds(str(condition), environ):
            continue
        for name, items in entry.items():
            if name != "when":
                defined.setdefault(name, []).extend(_expand(items or [], defined))
    return defined


def _expand(items: Sequence, defined: Mapping[str, list[str]]) -> list[str]:
    """Spec strings of a list whose items are specs, ``$name`` or ``$^name``."""
    out: list[str] = []
    for item in items:
        text = str(item).strip()
        if text.startswith("$^"):
            out.extend(f"^{spec}" for spec in defined.get(text[2:], []))
        elif text.startswith("$"):
            out.extend(defined.get(text[1:], []))
        else:
            out.append(text)
    return out


def _tokens(spec: str) -> set[str]:
    return set(spec.replace(" =", "=").split())


def root_specs(manifest: str, environ: Mapping[str, str]) -> list[str]:
    """The root spec strings of a spack.yaml, as Spack expands them (raises Undecidable)."""
    spack = _spack(manifest)
    defined = _definitions(spack, environ)
    roots: list[str] = []
    for item in spack.get("specs") or []:
        if isinstance(item, dict) and "matrix" in item:
            rows = [_expand(row, defined) for row in item["matrix"]]
            excluded = [_tokens(e) for e in _expand(item.get("exclude") or [], defined)]
            for combo in itertools.product(*rows):
                spec = " ".join(combo)
                if not any(e <= _tokens(spec) for e in excluded):
                    roots.append(spec)
        elif not isinstance(item, dict):
            roots.extend(_expand([item], defined))
    return roots


def _package(spec: str) -> str:
    m = _NAME.match(spec.strip())
    return m.group(0) if m else ""


def mpi_of(spec: str) -> str | None:
    """The MPI a root spec names as a dependency (``^mpich netmod=ucx``), or None."""
    for part in spec.split("^")[1:]:
        if _package(part) in MPI_PROVIDERS:
            return "^" + " ".join(part.split())
    return None


def include_paths(manifest: str, environ: Mapping[str, str], base: Path) -> list[Path]:
    """The files a spack.yaml includes (``path_override_env_var`` wins), relative to ``base``."""
    paths = []
    for entry in _spack(manifest).get("include") or []:
        if isinstance(entry, dict):
            override = environ.get(str(entry.get("path_override_env_var") or ""))
            path = override or entry.get("path")
        else:
            path = entry
        if path:
            paths.append(base / str(path))  # an absolute path stays as it is
    return paths


def _develop_section(text: str) -> dict:
    """``develop:`` of a spack.yaml (under ``spack:``) or of an included file (top level)."""
    data = _load(text)
    section = (_spack(text) if "spack" in data else data).get("develop")
    return section if isinstance(section, dict) else {}


def develop_conflict(manifest: str, environ: Mapping[str, str],
                     included: Sequence[str] = ()) -> str | None:
    """Why the environment's ``develop:`` entries make MPI builds share a source tree, or None.

    ``manifest`` is the environment's spack.yaml, ``included`` the texts of the
    configuration files it includes (a ``develop:`` section may be in either),
    ``environ`` the variables its ``when`` conditions read. None also when the spec
    list cannot be told before concretizing (the check after the install remains).
    """
    try:
        develop: dict = {}
        for text in (*included, manifest):
            develop.update(_develop_section(text))
        if not develop:
            return None
        roots = root_specs(manifest, environ)
    except (yaml.YAMLError, Undecidable):
        return None
    for package, entry in develop.items():
        builds = sorted({mpi for spec in roots if _package(spec) == package
                         and (mpi := mpi_of(spec)) is not None})
        if len(builds) > 1:
            path = (entry.get("path") if isinstance(entry, dict) else None) or f"<env>/{package}"
            return (f"spack.yaml develops {package} from one source directory ({path}) for "
                    f"{len(builds)} MPI builds ({', '.join(b[1:] for b in builds)}): Spack "
                    "builds each there and a later one reuses the objects of the first, "
                    f"linked against the other MPI; run `spack -e <env> undevelop {package}`, "
                    "or develop it in an environment with one MPI (FABREG_SPACK_WITHOUT, "
                    "docs/spack.md)")
    return None

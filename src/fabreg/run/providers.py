"""Where a benchmark binary comes from: Spack, real OSU under an install prefix, or fabreg's probes.

The choice is made per environment and logged with every result (perflog column
``provider``), so a figure can always be traced to the code that produced it.
What is asked for (``requested_provider``) and what is used can differ: Spack
asked for on a host without Spack falls back to the probes, and says so.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fabreg.errors import FabregError

PROBES = "fabreg-probes"
OSU_PREFIX = "osu-prefix"
SPACK = "spack"

#: Values of ``FABREG_PROVIDER`` / environment ``extras['provider']``; ``auto`` takes the
#: environment's ``osu_prefix`` when set, else the probes.
REQUESTS = ("auto", SPACK, "prefix", "probes")

# Sub-directories where OSU's `make install` (and Spack's package) put the MPI benchmarks.
_OSU_SUBDIRS = (
    "libexec/osu-micro-benchmarks/mpi/pt2pt",
    "libexec/osu-micro-benchmarks/mpi/collective",
    "libexec/osu-micro-benchmarks/mpi/one-sided",
    "libexec/osu-micro-benchmarks/mpi/startup",
    "bin",
)


@dataclass(frozen=True)
class Provider:
    """A resolved benchmark source: ``kind`` plus where its binaries are."""

    kind: str
    location: str

    def describe(self) -> str:
        return f"{self.kind} ({self.location})"


#: ``src/`` of the checkout: this module is ``src/fabreg/run/providers.py``.
_SRC_DIR = Path(__file__).resolve().parents[2]

def probes_source_dir() -> Path:
    """The bundled probes' sources (``src/probes`` next to this package, or $FABREG_PROBES_SRC)."""
    override = os.environ.get("FABREG_PROBES_SRC")
    path = Path(override) if override else _SRC_DIR / "probes"
    if not (path / "Makefile").is_file():
        raise FabregError(
            f"bundled probes not found at {path} (no Makefile); install fabreg from a source "
            "checkout (pip install -e .) or set FABREG_PROBES_SRC to the repository's src/probes"
        )
    return path


def find_osu_binary(prefix: str | Path, benchmark: str) -> Path | None:
    """The path of ``benchmark`` (e.g. ``osu_latency``) under an OSU install prefix."""
    for sub in _OSU_SUBDIRS:
        candidate = Path(prefix) / sub / benchmark
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def osu_prefix_problem(prefix: str | Path, benchmarks: list[str]) -> str | None:
    """Why an OSU prefix cannot serve ``benchmarks``, or None when it can."""
    if not Path(prefix).is_dir():
        return f"OSU prefix {prefix} does not exist"
    missing = [b for b in benchmarks if find_osu_binary(prefix, b) is None]
    if missing:
        return (f"OSU prefix {prefix} lacks {', '.join(missing)} "
                f"(looked in {', '.join(_OSU_SUBDIRS)})")
    return None


def requested_provider(extras: dict[str, object]) -> str:
    """What an environment asks for: extras['provider'], else $FABREG_PROVIDER, else auto."""
    value = str(extras.get("provider") or os.environ.get("FABREG_PROVIDER") or "auto")
    if value not in REQUESTS:
        where = "extras['provider']" if extras.get("provider") else "FABREG_PROVIDER"
        raise FabregError(f"{where}={value!r}: choose one of {', '.join(REQUESTS)}")
    return value


def repository_root() -> Path:
    """The checkout holding spack.yaml and src/ (this package lives in its src/)."""
    return _SRC_DIR.parent


def spack_manifest() -> Path:
    """The suite's Spack environment: $FABREG_SPACK_MANIFEST, else spack.yaml of the checkout."""
    override = os.environ.get("FABREG_SPACK_MANIFEST")
    path = Path(override) if override else repository_root() / "spack.yaml"
    if not path.is_file():
        raise FabregError(f"Spack environment manifest not found at {path} "
                          "(set FABREG_SPACK_MANIFEST to the repository's spack.yaml)")
    return path


def find_spack() -> tuple[Path | None, str]:
    """The ``spack`` executable ($FABREG_SPACK_ROOT/bin/spack, else PATH) and how it was found.

    Without one, the second item says why, in words fit for a log line.
    """
    root = os.environ.get("FABREG_SPACK_ROOT")
    if root:
        exe = Path(root) / "bin" / "spack"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe, f"FABREG_SPACK_ROOT={root}"
        return None, f"FABREG_SPACK_ROOT={root} has no executable bin/spack"
    found = shutil.which("spack")
    if found:
        return Path(found), "spack on PATH"
    return None, "no Spack: FABREG_SPACK_ROOT is unset and spack is not on PATH"

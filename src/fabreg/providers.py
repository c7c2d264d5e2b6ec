"""Where a benchmark binary comes from: real OSU under an install prefix, or fabreg's probes.

The choice is made per environment and logged with every result (perflog column
``provider``), so a figure can always be traced to the code that produced it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fabreg.errors import FabregError

PROBES = "fabreg-probes"
OSU_PREFIX = "osu-prefix"

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


def probes_source_dir() -> Path:
    """The bundled probes' sources (``src/probes`` next to this package, or $FABREG_PROBES_SRC)."""
    override = os.environ.get("FABREG_PROBES_SRC")
    path = Path(override) if override else Path(__file__).resolve().parents[1] / "probes"
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

"""Which MPI library a benchmark binary loads, and whether it is the environment's MPI.

A binary that exists is not yet the right binary: an "OpenMPI" ``osu_latency``
linked against libmpich (a Spack ``develop:`` source shared by two MPI builds did
exactly that) starts under ``mpirun`` as N singletons or not at all, and its
figures would be logged as OpenMPI's. The check compares real files: the MPI
library the dynamic loader resolves for the binary (``ldd``) against the library
the MPI's compiler wrapper links (``mpicc -show``: its ``-L`` directories and
``-l`` names), both followed through symlinks. Debian's ``/usr/lib/<arch>/libmpi.so``
alternatives link, MPICH's ``libmpi.so.12 -> libmpich.so.12`` and Spack's
prefixes of symlinks all end on the one file that really is loaded.
"""

from __future__ import annotations

import os
import re
import shlex
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

# Library stems of MPI's language bindings and tools: a C benchmark's MPI is the C library.
_BINDINGS = ("cxx", "mpifh", "usempi", "java", "fort", "f77", "f90", "f08", "++")
_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(.*?)(?:\s+\(0x[0-9a-f]+\))?\s*$")
_STATIC = ("not a dynamic executable", "statically linked")


def library_stem(name: str) -> str:
    """``libmpich.so.12.2.1`` -> ``mpich``; ``libmpi.so`` -> ``mpi``."""
    base = Path(name).name
    base = base[3:] if base.startswith("lib") else base
    return base.split(".so")[0]


def is_mpi_library(name: str) -> bool:
    """Whether a library (file name, soname or ``-l`` name) is an MPI's C library.

    ``mpi`` (Open MPI, MVAPICH2, Intel MPI), ``mpich``, vendor builds such as Cray's
    ``mpi_gnu_123``; not the C++/Fortran/Java bindings (``mpi_cxx``, ``mpi_mpifh``).
    """
    stem = library_stem(name) if (".so" in name or name.startswith("lib")) else name
    if stem in ("mpi", "mpich"):
        return True
    if not stem.startswith(("mpi_", "mpich_")):
        return False
    return not any(b in stem for b in _BINDINGS)


@dataclass(frozen=True)
class Linkage:
    """The MPI libraries one binary loads, as ``ldd`` resolved them."""

    binary: str
    #: soname -> resolved path (None: the loader did not find it).
    libraries: dict[str, str | None] = field(default_factory=dict)
    #: A static executable: nothing to compare (and nothing can be swapped under it).
    static: bool = False
    #: False when the text is no ``ldd`` listing (ldd missing, the file unreadable).
    readable: bool = True


def parse_ldd(binary: str, text: str) -> Linkage:
    """``ldd BINARY`` output -> the MPI libraries it loads (other libraries ignored)."""
    if any(marker in text for marker in _STATIC):
        return Linkage(binary, {}, static=True)
    found: dict[str, str | None] = {}
    listed = False
    for line in text.splitlines():
        match = _LDD_LINE.match(line)
        listed = listed or bool(match)
        if not match or not is_mpi_library(match.group(1)):
            continue
        target = match.group(2).strip()
        found[match.group(1)] = None if target == "not found" else target
    return Linkage(binary, found, readable=listed)


def _default_library_dirs() -> list[str]:
    """Where the linker looks without ``-L`` (the usual Linux directories)."""
    dirs = ["/usr/local/lib64", "/usr/local/lib", "/lib64", "/usr/lib64"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs += [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"]
    return [*dirs, "/usr/lib", "/lib"]


def wrapper_link_flags(show: str) -> tuple[list[str], list[str]]:
    """``mpicc -show`` text -> (library directories in search order, ``-l`` names).

    Directories are ``-L`` then run paths (``-Wl,-rpath,DIR``, ``-Wl,-rpath -Wl,DIR``,
    ``-Wl,-rpath=DIR``, ``-Wl,-R,DIR``).
    """
    try:
        words = shlex.split(show)
    except ValueError:
        words = show.split()
    libdirs: list[str] = []
    rpaths: list[str] = []
    names: list[str] = []
    linker_args: list[str] = []
    pending = ""
    for i, word in enumerate(words):
        if pending:
            (libdirs if pending == "-L" else names).append(word)
            pending = ""
        elif word in ("-L", "-l"):
            pending = word
        elif word.startswith("-L"):
            libdirs.append(word[2:])
        elif word.startswith("-l"):
            names.append(word[2:])
        elif word.startswith("-Wl,"):
            linker_args += word[4:].split(",")
        elif word == "-Xlinker" and i + 1 < len(words):
            linker_args.append(words[i + 1])
    take_next = False
    for arg in linker_args:
        if take_next:
            rpaths.append(arg)
            take_next = False
        elif arg in ("-rpath", "--rpath", "-R"):
            take_next = True
        elif arg.startswith(("-rpath=", "--rpath=")):
            rpaths.append(arg.split("=", 1)[1])
    return libdirs + rpaths, names


#: A linker script standing for the library (``INPUT(libmpi.so.12)``): what a Python wheel
#: ships instead of the ``libmpi.so -> libmpi.so.12`` symlink it cannot hold (PyPI's mpich).
_LD_SCRIPT = re.compile(r"^\s*(?:INPUT|GROUP)\s*\(\s*([^\s)]+)")


def _linker_script_target(path: Path) -> Path | None:
    """The library a small linker-script ``.so`` names, if it is one."""
    try:
        if path.stat().st_size > 4096:
            return None
        match = _LD_SCRIPT.match(path.read_text(errors="replace"))
    except OSError:
        return None
    if match is None:
        return None
    target = Path(match.group(1))
    return target if target.is_absolute() else path.parent / target


def _resolve(name: str, dirs: list[str]) -> str | None:
    """The real file ``-l<name>`` links from ``dirs`` (the ``.so``, else a versioned one)."""
    for directory in dirs:
        plain = Path(directory) / f"lib{name}.so"
        if plain.exists():
            script = _linker_script_target(plain)
            if script is not None and script.exists():
                return os.path.realpath(script)
            return os.path.realpath(plain)
        versioned = sorted(Path(directory).glob(f"lib{name}.so.*")) if Path(
            directory).is_dir() else []
        if versioned:
            return os.path.realpath(versioned[0])
    return None


@dataclass(frozen=True)
class ExpectedMpi:
    """The MPI a binary must load: its name, where that was read, its library files."""

    mpi: str
    #: How the libraries were found, for messages (e.g. ``mpicc.openmpi -show``).
    source: str
    #: Real paths of the MPI's C libraries (empty: the wrapper told nothing usable).
    libraries: frozenset[str]


def expected_from_wrapper(mpi: str, source: str, show: str) -> ExpectedMpi:
    """The MPI libraries that ``show`` (a wrapper's ``-show`` output) links against."""
    libdirs, names = wrapper_link_flags(show)
    search = libdirs + _default_library_dirs()
    found = {_resolve(name, search) for name in names if is_mpi_library(name)}
    return ExpectedMpi(mpi, source, frozenset(p for p in found if p))


def linkage_problem(linkage: Linkage, expected: ExpectedMpi) -> str | None:
    """Why ``linkage`` is not ``expected``'s MPI, in one line; None when it is.

    A static binary, an unreadable listing or an expectation without libraries
    cannot be judged: None too (``unverifiable`` says why).
    """
    name = Path(linkage.binary).name
    if unverifiable(linkage, expected):
        return None
    missing = [soname for soname, path in linkage.libraries.items() if path is None]
    if missing:
        return (f"{name} ({linkage.binary}): the loader finds no {', '.join(missing)}; "
                f"expected {expected.mpi}'s {_list(expected.libraries)}")
    if not linkage.libraries:
        return (f"{name} ({linkage.binary}) loads no MPI library; expected {expected.mpi}'s "
                f"{_list(expected.libraries)} (from {expected.source})")
    loaded = {os.path.realpath(path) for path in linkage.libraries.values() if path}
    foreign = sorted(loaded - expected.libraries)
    if foreign:
        return (f"{name} ({linkage.binary}) loads {', '.join(foreign)}, not {expected.mpi}'s "
                f"{_list(expected.libraries)} (from {expected.source}): it was built "
                f"against another MPI")
    return None


def unverifiable(linkage: Linkage, expected: ExpectedMpi) -> str | None:
    """Why the linkage of ``linkage.binary`` cannot be checked, or None when it can."""
    if linkage.static:
        return f"{linkage.binary} is statically linked"
    if not linkage.readable:
        return f"ldd could not list the libraries of {linkage.binary}"
    if not expected.libraries:
        return f"{expected.source} names no MPI library that exists here"
    return None


def _list(paths: frozenset[str]) -> str:
    return " or ".join(sorted(paths)) or "MPI library"

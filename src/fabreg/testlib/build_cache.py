"""ProbeBuildCacheMixin: the bundled probes are compiled once per source and compiler.

Every ReFrame session compiled the probes again for each MPI (2-5 s each on a 2-core VM,
one at a time on ``local``, where builds wait for the measured jobs), although nothing they
are built from had changed: a nightly, ``make run`` and every test session paid it. The
build now keeps what ``make`` produced in a cache entry named by a digest of all it was
built from: the probe sources, the ``make`` command (compiler wrapper, flags, targets), and
what the wrapper says it runs (``-show``, ``--version``), read in the build job itself,
after the environment's modules are loaded. A later build with the same digest copies the
entry into its stage directory and ``make`` finds nothing to do; the binaries' MPI linkage
is still checked as after any build (``fabreg.testlib.osu``). An entry is written whole or
not at all (renamed into place), so builds racing for one digest leave one entry, and a
cache that cannot be written costs only the saving. A build that uses an entry marks it used
(its time); one that writes an entry removes those unused for :data:`UNUSED_DAYS` days (the
builds of an MPI or suite version a site no longer runs), so a nightly's cache holds what it
still builds, not every build since it began.

A stage directory is ReFrame's copy of the whole source folder, which holds what an in-tree
``make`` left there (with whichever MPI: its objects would link another MPI's programs, its
programs would be up to date); every build removes those first, cache or not, and the digest
reads the sources alone.

Where: ``$FABREG_BUILD_CACHE``, else ``$XDG_CACHE_HOME/fabreg/probes``, else
``~/.cache/fabreg/probes``; ``FABREG_BUILD_CACHE=off`` compiles every time.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import reframe as rfm
from reframe.core.buildsystems import Make
from reframe.core.builtins import run_before

from fabreg.run import providers

#: The environment variable naming the cache's directory (``off``: no cache).
CACHE_VARIABLE = "FABREG_BUILD_CACHE"
#: The shell variable of the build script that holds this build's cache entry.
ENTRY = "fabreg_build_entry"
#: Days an entry may go unused before a build that writes a new one removes it.
UNUSED_DAYS = 30


def cache_root() -> Path | None:
    """The cache's directory, or None where ``$FABREG_BUILD_CACHE`` turns it off."""
    chosen = os.environ.get(CACHE_VARIABLE)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "no") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fabreg" / "probes"


def products(sources: Path, targets: list[str]) -> list[str]:
    """The files ``make`` leaves for ``targets`` (none: every program) in the probes'
    Makefile, each after what it is made from: the helpers' objects, their archive, the
    programs. Copied in this order, each is newer than what it depends on, as ``make``
    wants to find nothing to do."""
    names = sorted(p.name for p in sources.glob("*.c"))
    helpers = [n for n in names if n.startswith("probe_")]
    programs = targets or [n[:-2] for n in names if n not in helpers]
    return [*(n[:-2] + ".o" for n in helpers), "libprobe.a", *programs]


def source_files(sources: Path) -> list[Path]:
    """What the probes are built from: the C sources and headers, and the Makefile."""
    return [p for p in sorted(sources.iterdir())
            if p.is_file() and (p.suffix in (".c", ".h") or p.name == "Makefile")]


def stale_products_command(sources: Path) -> str:
    """The build script's first line: remove every file the Makefile makes that the stage's
    copy of ``sources`` brought along (an in-tree build's)."""
    return "rm -f " + " ".join(shlex.quote(n) for n in products(sources, []))


def cache_commands(root: Path, sources: Path, make: str, compiler: str,
                   targets: list[str]) -> tuple[list[str], list[str]]:
    """The build script's lines before ``make`` (name this build's entry; copy it in where
    it exists) and after it (keep what ``make`` built where no entry exists yet). Nothing in
    them fails the build."""
    files = " ".join(shlex.quote(p.name) for p in source_files(sources))
    cc, top = shlex.quote(compiler), shlex.quote(str(root))
    digest = (f"{{ sha256sum {files}; echo {shlex.quote(make)}; {cc} -show; "
              f"{cc} --version; }} 2>&1 | sha256sum | cut -c1-32")
    made = products(sources, targets)
    kept = " ".join(f'"${ENTRY}"/{shlex.quote(n)}' for n in made)
    before = [
        f"{ENTRY}={top}/$({digest}) || {ENTRY}=''",
        f'if [ -n "${ENTRY}" ] && [ -d "${ENTRY}" ] && cp {kept} . ; then '
        f'touch "${ENTRY}" 2>/dev/null || true; '
        f'echo "fabreg: the probes from the build cache ${ENTRY}"; fi',
    ]
    built = " ".join(shlex.quote(n) for n in made)
    quoted_targets = " ".join(shlex.quote(t) for t in targets)
    after = [
        f'if [ -n "${ENTRY}" ] && [ ! -d "${ENTRY}" ] && make -q {quoted_targets} '
        f'>/dev/null 2>&1 && mkdir -p {top} 2>/dev/null; then '
        f'fabreg_new=$(mktemp -d {top}/.new-XXXXXX 2>/dev/null) && '
        f'{{ cp {built} "$fabreg_new"/ && chmod 755 "$fabreg_new" && '
        f'mv -T "$fabreg_new" "${ENTRY}"; }} 2>/dev/null || rm -rf "$fabreg_new"; '
        f"find {top} -mindepth 1 -maxdepth 1 -type d -mtime +{UNUSED_DAYS} "
        f"-exec rm -rf {{}} + 2>/dev/null || true; fi",
    ]
    return before, after


class ProbeBuildCacheMixin(rfm.RegressionTestPlugin):
    """Build the bundled probes from their sources alone, and reuse an earlier build with the
    same sources and compiler."""

    def _probe_sources(self) -> Path | None:
        """The bundled probes' folder, where this build makes them with ``make``."""
        if not isinstance(self.build_system, Make) or not self.sourcesdir:
            return None
        sources = providers.probes_source_dir()
        return sources if Path(self.sourcesdir).resolve() == sources.resolve() else None

    @run_before("compile")
    def start_from_the_sources_alone(self) -> None:
        if (sources := self._probe_sources()) is not None:
            self.prebuild_cmds = [stale_products_command(sources), *self.prebuild_cmds]

    @run_before("compile")
    def reuse_an_earlier_build(self) -> None:
        root, sources = cache_root(), self._probe_sources()
        if root is None or sources is None:
            return
        make = " ".join(self.build_system.emit_build_commands(self.current_environ))
        compiler = self.build_system.cc or self.current_environ.cc
        before, after = cache_commands(root, sources, make, compiler,
                                       list(self.build_system.options))
        self.prebuild_cmds = [*self.prebuild_cmds, *before]
        self.postbuild_cmds = [*after, *self.postbuild_cmds]

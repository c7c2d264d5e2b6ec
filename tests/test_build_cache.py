"""The probes' build cache (``fabreg.testlib.build_cache``): real builds with the real MPI
compiler wrappers, in a bash script as ReFrame writes it, and in real ReFrame sessions."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CHECKS, have, run_reframe

from fabreg.run import providers
from fabreg.testlib import build_cache
from fabreg.testlib.workloads import PROBES


def test_the_products_come_after_what_they_are_made_from():
    made = build_cache.products(providers.probes_source_dir(), [])
    helpers = [n for n in made if n.endswith(".o")]
    assert helpers and made[:len(helpers)] == helpers
    assert made[len(helpers)] == "libprobe.a"
    assert {"osu_latency", "fabreg_streams"} <= set(made[len(helpers) + 1:])
    some = build_cache.products(providers.probes_source_dir(), list(PROBES))
    assert some[len(helpers) + 1:] == list(PROBES)


@pytest.mark.parametrize("env, expected", [
    ({"FABREG_BUILD_CACHE": "/x/cache"}, Path("/x/cache")),
    ({"FABREG_BUILD_CACHE": "off"}, None),
    ({"FABREG_BUILD_CACHE": ""}, None),
    ({"XDG_CACHE_HOME": "/x/xdg"}, Path("/x/xdg/fabreg/probes")),
    ({"HOME": "/x/home"}, Path("/x/home/.cache/fabreg/probes")),
])
def test_where_the_cache_lies(monkeypatch, env, expected):
    for name in ("FABREG_BUILD_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert build_cache.cache_root() == expected


def _build(work: Path, cache: Path, sources: Path, compiler: str) -> str:
    """The probes built in ``work`` by a bash script as ReFrame writes one (its ERR trap
    included), with the cache's lines around ``make``; what it printed."""
    work.mkdir()
    for path in sources.iterdir():
        shutil.copy(path, work)
    make = f'make -j 1 CC="{compiler}" CFLAGS="-O2" fabreg_streams'
    before, after = build_cache.cache_commands(cache, sources, make, compiler,
                                               ["fabreg_streams"])
    script = "\n".join(["trap 'exit $?' ERR", build_cache.stale_products_command(sources),
                         *before, make, *after])
    done = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.openmpi") or not have("mpicc.mpich"),
                    reason="needs Open MPI's and MPICH's compiler wrappers")
def test_a_build_is_kept_reused_and_told_apart_by_source_and_compiler(tmp_path):
    sources, cache = tmp_path / "probes", tmp_path / "cache"
    shutil.copytree(providers.probes_source_dir(), sources)
    first = _build(tmp_path / "first", cache, sources, "mpicc.openmpi")
    assert "mpicc.openmpi" in first and "from the build cache" not in first
    (entry,) = cache.iterdir()
    assert entry.stat().st_mode & 0o777 == 0o755  # others may read it, as a shared cache
    assert sorted(p.name for p in entry.iterdir()) == sorted(
        build_cache.products(sources, ["fabreg_streams"]))
    days = 24 * 3600
    unused = time.time() - (build_cache.UNUSED_DAYS + 10) * days
    os.utime(entry, (unused, unused))
    again = _build(tmp_path / "again", cache, sources, "mpicc.openmpi")
    assert f"the probes from the build cache {entry}" in again
    assert entry.stat().st_mtime > time.time() - days  # marked used
    assert "'fabreg_streams' is up to date" in again and "mpicc.openmpi " not in again
    assert (tmp_path / "again" / "fabreg_streams").stat().st_size > 0
    # a build that writes an entry removes those unused for UNUSED_DAYS, and only those
    for name, age in (("stale", build_cache.UNUSED_DAYS + 10), ("recent", 10)):
        (cache / name).mkdir()
        os.utime(cache / name, (time.time() - age * days,) * 2)
    # another MPI's wrapper, then a changed source: built, each kept apart
    other = _build(tmp_path / "other", cache, sources, "mpicc.mpich")
    assert "mpicc.mpich" in other and "from the build cache" not in other
    assert not (cache / "stale").exists() and (cache / "recent").is_dir() and entry.is_dir()
    (cache / "recent").rmdir()
    with (sources / "probe_common.c").open("a") as f:
        f.write("\n/* changed */\n")
    changed = _build(tmp_path / "changed", cache, sources, "mpicc.openmpi")
    assert "from the build cache" not in changed
    assert len(list(cache.iterdir())) == 3
    # a cache that cannot be made (here under a file, which stops root too) costs only the
    # saving: the build itself succeeds
    (tmp_path / "a-file").write_text("")
    built = _build(tmp_path / "unwritable", tmp_path / "a-file" / "cache", sources,
                   "mpicc.openmpi")
    assert "mpicc.openmpi" in built and (tmp_path / "unwritable" / "fabreg_streams").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.openmpi"), reason="OpenMPI is not installed")
def test_a_second_session_takes_the_probes_from_the_cache_and_checks_them(tmp_path):
    cache = tmp_path / "cache"
    outputs = []
    for session in ("first", "second"):
        (tmp_path / session).mkdir()
        proc = run_reframe("-r", "-n", "OsuLatency", "-p", "openmpi", "-S", "repeats=1",
                           perflog_dir=tmp_path / session / "perflogs", cwd=tmp_path / session,
                           env={"FABREG_BUILD_CACHE": str(cache)}, checks=CHECKS / "osu.py")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        # the fixture's stage directory (its dependents run from it) or its output directory
        build = next((tmp_path / session).rglob("OsuBinaries_*/rfm_build.out"))
        outputs.append(build.read_text())
    first, second = outputs
    assert "mpicc.openmpi" in first and "from the build cache" not in first
    assert "from the build cache" in second and "Nothing to be done" in second
    # the binaries' MPI linkage was read again after the copy, as after any build
    ldd = next((tmp_path / "second").rglob("OsuBinaries_*/rfm_ldd_osu_latency.txt"))
    assert "libmpi" in ldd.read_text()


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.openmpi") or not have("mpicc.mpich"),
                    reason="needs Open MPI's and MPICH's compiler wrappers")
def test_an_in_tree_build_of_another_mpi_is_not_taken_for_this_ones(tmp_path):
    """A user ran ``make`` in the probes' folder with Open MPI's wrapper: ReFrame copies its
    objects and programs into every stage, where make would find them up to date (and link
    Open MPI's objects into MPICH's programs). The MPICH session builds from the sources,
    and its cache entry is named by the sources alone."""
    sources = tmp_path / "probes"
    shutil.copytree(providers.probes_source_dir(), sources)
    clean_digest_input = build_cache.source_files(sources)
    made = subprocess.run(["make", "-j", "2", "CC=mpicc.openmpi"], cwd=sources,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    assert (sources / "probe_common.o").is_file() and (sources / "osu_latency").is_file()
    assert build_cache.source_files(sources) == clean_digest_input
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "mpich", "-S", "repeats=1",
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path,
                       env={"FABREG_PROBES_SRC": str(sources),
                            "FABREG_BUILD_CACHE": str(tmp_path / "cache")},
                       checks=CHECKS / "osu.py")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    build = next(tmp_path.rglob("OsuBinaries_*/rfm_build.out")).read_text()
    assert "mpicc.mpich" in build and "probe_common.c" in build, build
    ldd = next(tmp_path.rglob("OsuBinaries_*/rfm_ldd_osu_latency.txt")).read_text()
    assert "libmpich" in ldd and "libmpi.so" not in ldd, ldd

"""Linkage verification on real binaries: the probes built here against OpenMPI and MPICH.

Each build must be accepted for its own MPI and rejected for the other, with the
real ``ldd`` and the real compiler wrappers' ``-show`` output; the text parsers are
checked on their own for the forms other wrappers and loaders print.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import CHECKS, REPO, have, run_reframe

from fabreg.run.linkage import (
    ExpectedMpi,
    Linkage,
    expected_from_wrapper,
    is_mpi_library,
    linkage_problem,
    parse_ldd,
    wrapper_link_flags,
)

WRAPPERS = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich"}
needs_both = pytest.mark.skipif(not all(have(w) for w in WRAPPERS.values()) or not have("ldd"),
                                reason="needs Debian's OpenMPI and MPICH (mpicc.openmpi, "
                                       "mpicc.mpich) and ldd")


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[str, Path]:
    """osu_latency of the suite's probes, built out of tree against each MPI."""
    built = {}
    for mpi, wrapper in WRAPPERS.items():
        out = tmp_path_factory.mktemp(f"probes-{mpi}")
        subprocess.run(["make", "-f", str(REPO / "src" / "probes" / "Makefile"),
                        f"CC={wrapper}", "osu_latency"], cwd=out, check=True,
                       capture_output=True, timeout=300)
        built[mpi] = out / "osu_latency"
    return built


def _ldd(binary: Path) -> Linkage:
    text = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                          check=True).stdout
    return parse_ldd(str(binary), text)


def _expected(mpi: str) -> ExpectedMpi:
    wrapper = WRAPPERS[mpi]
    show = subprocess.run([wrapper, "-show"], capture_output=True, text=True, check=True).stdout
    return expected_from_wrapper(mpi, f"{wrapper} -show", show)


@needs_both
@pytest.mark.parametrize("mpi", sorted(WRAPPERS))
def test_a_probe_is_accepted_for_its_own_mpi(mpi, probes):
    expected = _expected(mpi)
    assert expected.libraries, expected  # the wrapper named a library that exists
    linkage = _ldd(probes[mpi])
    assert linkage.libraries and not linkage.static
    assert linkage_problem(linkage, expected) is None


@needs_both
@pytest.mark.parametrize(("built", "claimed"), [("openmpi", "mpich"), ("mpich", "openmpi")])
def test_a_probe_is_rejected_for_the_other_mpi_with_a_one_line_reason(built, claimed, probes):
    expected = _expected(claimed)
    problem = linkage_problem(_ldd(probes[built]), expected)
    assert problem is not None and "\n" not in problem
    loaded = {os.path.realpath(p) for p in _ldd(probes[built]).libraries.values() if p}
    # It names the binary, the library it found and the MPI (and library) it expected.
    assert problem.startswith(f"osu_latency ({probes[built]}) loads ")
    assert all(path in problem for path in loaded)
    assert f"not {claimed}'s " in problem and f"from {WRAPPERS[claimed]} -show" in problem
    assert all(path in problem for path in expected.libraries)


@needs_both
def test_the_two_mpis_resolve_to_different_files():
    openmpi, mpich = _expected("openmpi"), _expected("mpich")
    assert openmpi.libraries.isdisjoint(mpich.libraries)
    assert any("libmpi.so" in p for p in openmpi.libraries)
    assert any("libmpich" in p for p in mpich.libraries)


def test_ldd_forms_not_found_and_static():
    text = """\
\tlinux-vdso.so.1 (0x00007ffd5c3e2000)
\tlibmpi.so.40 => /lib/x86_64-linux-gnu/libmpi.so.40 (0x00007f1c2e000000)
\tlibmpi_cxx.so.40 => /lib/x86_64-linux-gnu/libmpi_cxx.so.40 (0x00007f1c2dff0000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1c2de0f000)
"""
    linkage = parse_ldd("/x/osu_bw", text)
    assert linkage.libraries == {"libmpi.so.40": "/lib/x86_64-linux-gnu/libmpi.so.40"}
    missing = parse_ldd("/x/osu_bw", "\tlibmpich.so.12 => not found\n")
    assert missing.libraries == {"libmpich.so.12": None}
    expected = ExpectedMpi("mpich", "mpicc -show", frozenset({"/opt/mpich/lib/libmpich.so.12"}))
    assert linkage_problem(missing, expected) == (
        "osu_bw (/x/osu_bw): the loader finds no libmpich.so.12; expected mpich's "
        "/opt/mpich/lib/libmpich.so.12")
    static = parse_ldd("/x/osu_bw", "\tnot a dynamic executable\n")
    assert static.static and linkage_problem(static, expected) is None
    none = parse_ldd("/x/osu_bw", "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n")
    assert "loads no MPI library" in linkage_problem(none, expected)


def test_wrapper_flags_in_the_forms_wrappers_print():
    # Open MPI (--showme), MPICH/MVAPICH2 (-show) with run paths, Spack-style -Xlinker.
    dirs, names = wrapper_link_flags(
        "gcc -I/o/include -pthread -L/o/lib -Wl,-rpath -Wl,/o/lib -Wl,--enable-new-dtags -lmpi")
    assert (dirs, names) == (["/o/lib", "/o/lib"], ["mpi"])
    dirs, names = wrapper_link_flags(
        "gcc -I/m/include -L/m/lib -Wl,-rpath,/m/lib -Wl,-rpath=/r -Xlinker -R -Xlinker /x "
        "-lmpifort -lmpi -lmpicxx")
    assert dirs == ["/m/lib", "/m/lib", "/r", "/x"]
    assert [n for n in names if is_mpi_library(n)] == ["mpi"]


@pytest.mark.parametrize(("name", "mpi"), [
    ("libmpi.so.40", True), ("libmpich.so.12", True), ("mpi", True), ("mpich", True),
    ("mpi_gnu_123", True), ("libmpi_gnu_123.so.12", True), ("libmpi_cxx.so.40", False),
    ("libmpi_mpifh.so.40", False), ("libmpi_usempif08.so.40", False), ("mpifort", False),
    ("libmpichcxx.so.12", False), ("libm.so.6", False), ("libmpi_java.so.40", False),
])
def test_which_libraries_are_an_mpis_c_library(name, mpi):
    assert is_mpi_library(name) is mpi


def test_a_wrapper_that_names_no_existing_library_gives_no_expectation(tmp_path):
    expected = expected_from_wrapper("openmpi", "cc -show", f"cc -L{tmp_path} -lmpi_nothere")
    assert expected.libraries == frozenset()


def test_a_linker_script_so_as_pypis_mpich_ships_resolves_to_the_library_it_names(tmp_path):
    """The mpich wheel holds ``libmpi.so`` = ``INPUT(libmpi.so.12)`` (a wheel has no symlinks):
    its binaries load libmpi.so.12, which is mpich's own library, not another MPI's."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libmpi.so").write_text("INPUT(libmpi.so.12)\n")
    (lib / "libmpi.so.12").write_bytes(b"\x7fELF" + b"\0" * 64)
    show = f"cc -I{tmp_path}/include -L{lib} -Wl,-rpath -Wl,{lib} -lmpi"
    expected = expected_from_wrapper("mpich", "mpicc -show", show)
    assert expected.libraries == frozenset({str((lib / "libmpi.so.12").resolve())})
    loaded = parse_ldd("osu_latency", f"\tlibmpi.so.12 => {lib}/libmpi.so.12 (0x00007f)\n")
    assert linkage_problem(loaded, expected) is None


@pytest.mark.slow
@needs_both
def test_an_osu_prefix_built_against_mpich_fails_the_openmpi_binaries_fixture(tmp_path):
    """Through real ReFrame: the fixture fails with the one-line reason, no check runs."""
    prefix = tmp_path / "osu-mpich"
    build = tmp_path / "build"
    build.mkdir()
    subprocess.run(["make", "-f", str(REPO / "src" / "probes" / "Makefile"), "CC=mpicc.mpich",
                    "install", f"PREFIX={prefix}"], cwd=build, check=True, capture_output=True,
                   timeout=600)
    env = {"FABREG_OSU_PREFIX_OPENMPI": str(prefix), "FABREG_PROVIDER": "auto"}
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "openmpi",
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path, env=env,
                       checks=CHECKS / "osu.py")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    expected = _expected("openmpi")
    loaded = sorted(os.path.realpath(p) for p in _ldd(prefix / "bin" / "osu_latency")
                    .libraries.values() if p)
    assert (f"osu_latency ({prefix / 'bin' / 'osu_latency'}) loads {', '.join(loaded)}, not "
            f"openmpi's {' or '.join(sorted(expected.libraries))} (from mpicc.openmpi -show): "
            "it was built against another MPI [provider osu-prefix]") in out
    assert "dependencies failed" in out and "Traceback" not in out
    assert not (tmp_path / "perflogs" / "local" / "default" / "OsuLatency.log").exists()

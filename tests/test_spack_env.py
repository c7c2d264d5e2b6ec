"""spack.yaml read before Spack runs: a ``develop:`` source shared by two MPI builds is refused.

Spack is not needed (nor faked): these are spack.yaml texts and the variables their
``when`` conditions read, the checkout's own spack.yaml among them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fabreg.run import spack_env

REPO = Path(__file__).resolve().parents[1]
CHECKOUT = (REPO / "spack.yaml").read_text()
#: What `spack develop osu-micro-benchmarks@7.2` adds to an environment's spack.yaml
#: (docs/spack.md, "Pitfalls": the "OpenMPI" osu_latency linked against libmpich).
DEVELOP_OSU = "  develop:\n    osu-micro-benchmarks:\n      spec: osu-micro-benchmarks@=7.2\n"

LITERAL = """\
spack:
  specs:
  - osu-micro-benchmarks@7.2 ^openmpi
  - osu-micro-benchmarks@7.2 ^mpich
  - ucx
  develop:
    {package}:
      spec: {package}@=main
      path: /src/{package}
"""

PLATFORM_WHEN = """\
spack:
  definitions:
  - mpis: [openmpi, mpich]
    when: platform == 'linux'
  specs:
  - matrix:
    - [osu-micro-benchmarks]
    - [$^mpis]
  develop:
    osu-micro-benchmarks:
      spec: osu-micro-benchmarks@=7.2
"""

EXCLUDED = """\
spack:
  definitions:
  - mpis: [openmpi, mpich]
  specs:
  - matrix:
    - [osu-micro-benchmarks]
    - [$^mpis]
    exclude: [osu-micro-benchmarks ^mpich]
  develop:
    osu-micro-benchmarks:
      spec: osu-micro-benchmarks@=7.2
"""

CASES = [
    # (spack.yaml, FABREG_SPACK_WITHOUT, refused for)
    (CHECKOUT + DEVELOP_OSU, "mvapich2", "mpich netmod=ucx, openmpi fabrics=ucx"),
    (CHECKOUT + DEVELOP_OSU, "", "mpich netmod=ucx, mvapich2 fabrics=mrail, mvapich2 "
                                 "fabrics=nemesis, openmpi fabrics=ucx"),
    # Two MVAPICH2 builds (mrail, nemesis) share the tree as well.
    (CHECKOUT + DEVELOP_OSU, "openmpi mpich", "mvapich2 fabrics=mrail, mvapich2 fabrics=nemesis"),
    (CHECKOUT + DEVELOP_OSU, "mpich mvapich2", None),  # one MPI: the documented way to develop
    (CHECKOUT + DEVELOP_OSU, "mvapich2 osu-micro-benchmarks", None),  # OSU not built at all
    (CHECKOUT, "mvapich2", None),  # nothing developed
    (CHECKOUT + DEVELOP_OSU.replace("osu-micro-benchmarks", "fabreg-probes"), "mvapich2",
     "mpich netmod=ucx, openmpi fabrics=ucx"),
    (CHECKOUT + DEVELOP_OSU.replace("osu-micro-benchmarks", "ucx"), "mvapich2", None),
    (LITERAL.format(package="osu-micro-benchmarks"), "", "mpich, openmpi"),
    (LITERAL.format(package="ucx"), "", None),  # one build, whatever depends on it
    (EXCLUDED, "", None),
    # A condition only Spack can decide: no verdict before the install (the check after it stays).
    (PLATFORM_WHEN, "", None),
]


@pytest.mark.parametrize(("manifest", "without", "refused"), CASES)
def test_develop_conflict(manifest, without, refused):
    reason = spack_env.develop_conflict(manifest, {"FABREG_SPACK_WITHOUT": without})
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and "\n" not in reason
        assert f"MPI builds ({refused})" in reason


def test_refusal_names_the_source_and_the_ways_out():
    env = {"FABREG_SPACK_WITHOUT": "mvapich2"}
    reason = spack_env.develop_conflict(CHECKOUT + DEVELOP_OSU, env)
    assert reason == (
        "spack.yaml develops osu-micro-benchmarks from one source directory "
        "(<env>/osu-micro-benchmarks) for 2 MPI builds (mpich netmod=ucx, openmpi fabrics=ucx): "
        "Spack builds each there and a later one reuses the objects of the first, linked "
        "against the other MPI; run `spack -e <env> undevelop osu-micro-benchmarks`, or "
        "develop it in an environment with one MPI (FABREG_SPACK_WITHOUT, docs/spack.md)")
    literal = spack_env.develop_conflict(LITERAL.format(package="osu-micro-benchmarks"), {})
    assert "one source directory (/src/osu-micro-benchmarks)" in literal


def test_develop_in_an_included_file_counts():
    site = "develop:\n  osu-micro-benchmarks:\n    spec: osu-micro-benchmarks@=7.2\n"
    env = {"FABREG_SPACK_WITHOUT": "mvapich2"}
    assert spack_env.develop_conflict(CHECKOUT, env) is None
    assert "osu-micro-benchmarks" in spack_env.develop_conflict(CHECKOUT, env, [site])


def test_unreadable_yaml_is_left_to_spack():
    assert spack_env.develop_conflict("spack: [unclosed\n  develop:", {}) is None


def test_root_specs_and_includes_of_the_checkout():
    roots = spack_env.root_specs(CHECKOUT, {"FABREG_SPACK_WITHOUT": "mvapich2"})
    assert "osu-micro-benchmarks@7.2 ^openmpi fabrics=ucx" in roots
    assert [spack_env.mpi_of(r) for r in roots if r.startswith("fabreg-probes")] == [
        "^openmpi fabrics=ucx", "^mpich netmod=ucx"]
    assert spack_env.include_paths(CHECKOUT, {}, REPO) == [REPO / "spack/sites/default.yaml"]
    assert spack_env.include_paths(CHECKOUT, {"FABREG_SPACK_SITE_CONFIG": "/site.yaml"},
                                   REPO) == [Path("/site.yaml")]

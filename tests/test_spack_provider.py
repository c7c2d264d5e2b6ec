"""Provider selection and the Spack fixture's record of what it built (no Spack needed)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from fabreg.errors import FabregError
from fabreg.run import providers
from fabreg.testlib.osu import SPACK_OSU_PACKAGES
from fabreg.testlib.spack import (
    absolute_manifest,
    choose_spec,
    lock_digest,
    parse_spec_records,
    shared_develop_sources,
    site_config,
)

# The shape of `spack find --format '{name}|{version}|{hash}|{prefix}|{^mpi.name}|{^mpi.variants}'`
# as Spack 1.1 printed it here (variants abridged), plus an MVAPICH2 pair and noise.
FIND_OUTPUT = """\
fabreg-probes|src.6205c0fa30e5|e6tkf4wm632rg7tkiu5lhej24abtk6tz|/t/linux-zen2/fabreg-probes-src.6205c0fa30e5-e6tkf4wm632rg7tkiu5lhej24abtk6tz|mpich|~cuda+hydra build_system=autotools device:=ch4 netmod:=ucx pmi=default
fabreg-probes|src.6205c0fa30e5|u3mfunbavamc2ul5urbmdye6adddogtc|/t/linux-zen2/fabreg-probes-src.6205c0fa30e5-u3mfunbavamc2ul5urbmdye6adddogtc|openmpi|+atomics~cuda build_system=autotools fabrics:=ucx schedulers:=none
osu-micro-benchmarks|7.2|aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa|/t/linux-zen2/osu-micro-benchmarks-7.2-aaaaaaa|openmpi|+atomics~cuda build_system=autotools fabrics:=ucx schedulers:=none
osu-micro-benchmarks|7.2|bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb|/t/linux-zen2/osu-micro-benchmarks-7.2-bbbbbbb|mvapich2|~cuda build_system=autotools fabrics=mrail threads=multiple
osu-micro-benchmarks|7.2|cccccccccccccccccccccccccccccccc|/t/linux-zen2/osu-micro-benchmarks-7.2-ccccccc|mvapich2|~cuda build_system=autotools fabrics=sock threads=multiple
==> Warning: something Spack said
"""  # noqa: E501


def test_records_parse_and_noise_is_ignored():
    records = parse_spec_records(FIND_OUTPUT)
    assert [r.name for r in records] == ["fabreg-probes"] * 2 + ["osu-micro-benchmarks"] * 3
    assert records[1].short == "fabreg-probes@src.6205c0fa30e5/u3mfunb"
    assert records[1].mpi == "openmpi"


def test_real_osu_is_preferred_over_the_probes_per_mpi():
    records = parse_spec_records(FIND_OUTPUT)
    assert choose_spec(records, "openmpi", SPACK_OSU_PACKAGES).name == "osu-micro-benchmarks"
    assert choose_spec(records, "mpich", SPACK_OSU_PACKAGES).name == "fabreg-probes"
    assert choose_spec(records, "intel-mpi", SPACK_OSU_PACKAGES) is None


def test_mpi_variants_pick_between_builds_of_one_mpi():
    records = parse_spec_records(FIND_OUTPUT)
    assert choose_spec(records, "mvapich2 fabrics=sock", SPACK_OSU_PACKAGES).hash[0] == "c"
    assert choose_spec(records, "mvapich2 fabrics=mrail", SPACK_OSU_PACKAGES).hash[0] == "b"
    # Multi-valued variants print as `name:=value`; both spellings match.
    assert choose_spec(records, "openmpi fabrics:=ucx", ("fabreg-probes",)).mpi == "openmpi"
    assert choose_spec(records, "mpich netmod=ofi", SPACK_OSU_PACKAGES) is None


def test_lock_digest_is_the_files_sha256(tmp_path):
    lock = tmp_path / "spack.lock"
    lock.write_text('{"_meta": {"lockfile-version": 6}}')
    before = lock_digest(lock)
    assert before == hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    lock.write_text('{"_meta": {"lockfile-version": 7}}')
    assert lock_digest(lock) != before


@pytest.mark.parametrize("value", ["spack", "prefix", "probes", "auto"])
def test_requested_provider_from_extras_then_environment(value, monkeypatch):
    monkeypatch.setenv("FABREG_PROVIDER", "probes")
    assert providers.requested_provider({"provider": value}) == value
    assert providers.requested_provider({}) == "probes"
    monkeypatch.delenv("FABREG_PROVIDER")
    assert providers.requested_provider({}) == "auto"


def test_bad_provider_names_where_it_came_from(monkeypatch):
    monkeypatch.delenv("FABREG_PROVIDER", raising=False)
    with pytest.raises(FabregError, match=r"extras\['provider'\]='spak': choose one of"):
        providers.requested_provider({"provider": "spak"})


def test_find_spack_says_why_not(monkeypatch, tmp_path):
    monkeypatch.setenv("FABREG_SPACK_ROOT", str(tmp_path))
    exe, how = providers.find_spack()
    assert exe is None and how == f"FABREG_SPACK_ROOT={tmp_path} has no executable bin/spack"


def test_site_file_per_system_then_default(monkeypatch, tmp_path):
    monkeypatch.delenv("FABREG_SPACK_SITE_CONFIG", raising=False)
    assert site_config("local", {}) == str(REPO / "spack" / "sites" / "local.yaml")
    assert site_config("nosuchsystem", {}) is None  # spack.yaml's default.yaml
    assert site_config("x", {"spack_site": "spack/sites/default.yaml"}) == str(
        REPO / "spack" / "sites" / "default.yaml")
    monkeypatch.setenv("FABREG_SPACK_SITE_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(FabregError, match="missing.yaml .for system 'local'. does not exist"):
        site_config("local", {"spack_site": "spack/sites/default.yaml"})


def test_manifest_override_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("FABREG_SPACK_MANIFEST", str(tmp_path / "spack.yaml"))
    with pytest.raises(FabregError, match="Spack environment manifest not found"):
        providers.spack_manifest()
    monkeypatch.delenv("FABREG_SPACK_MANIFEST")
    assert providers.spack_manifest() == Path(REPO / "spack.yaml")


def test_records_carry_the_mpi_prefix_and_old_six_field_records_still_read():
    seven = ("osu-micro-benchmarks|7.2|dddddddddddddddddddddddddddddddd|/t/osu-7.2-ddd|openmpi|"
             "fabrics:=ucx|/site/prefixes/openmpi\n")
    (record,) = parse_spec_records(seven)
    assert record.mpi_prefix == "/site/prefixes/openmpi"
    assert all(r.mpi_prefix == "" for r in parse_spec_records(FIND_OUTPUT))


def test_absolute_manifest_makes_the_repository_and_include_paths_absolute(tmp_path):
    text = absolute_manifest(REPO / "spack.yaml")
    spack = yaml.safe_load(text)["spack"]
    assert spack["repos"] == {"fabreg": str(REPO / "spack/repos/spack_repo/fabreg")}
    assert spack["include"] == [{"path": str(REPO / "spack/sites/default.yaml"),
                                 "path_override_env_var": "FABREG_SPACK_SITE_CONFIG"}]
    # Everything else is the manifest's own: the definitions and their conditions.
    assert spack["definitions"] == yaml.safe_load((REPO / "spack.yaml").read_text())[
        "spack"]["definitions"]
    other = tmp_path / "site" / "spack.yaml"
    other.parent.mkdir()
    other.write_text("spack:\n  include: [sites/x.yaml, /abs/y.yaml, $SITE/z.yaml]\n"
                     "  repos: [repo]\n  specs: [zlib]\n")
    spack = yaml.safe_load(absolute_manifest(other))["spack"]
    assert spack["include"] == [str(other.parent / "sites/x.yaml"), "/abs/y.yaml",
                                "$SITE/z.yaml"]
    assert spack["repos"] == [str(other.parent / "repo")]


DEVELOP = """\
develop:
  osu-micro-benchmarks:
    spec: osu-micro-benchmarks@=7.2
    path: /src/osu-micro-benchmarks-7.2
"""


def test_a_develop_source_shared_by_two_mpi_builds_is_named():
    records = parse_spec_records(FIND_OUTPUT)
    problem = shared_develop_sources(DEVELOP, records)
    assert problem.startswith("the environment develops osu-micro-benchmarks from one source "
                              "directory (/src/osu-micro-benchmarks-7.2) for 3 MPI builds "
                              "(mvapich2, openmpi): ")
    assert "\n" not in problem
    # One MPI build of the developed package, or no develop entry: nothing to say.
    one = [r for r in records if r.name != "osu-micro-benchmarks" or r.mpi == "openmpi"]
    assert shared_develop_sources(DEVELOP, one) is None
    assert shared_develop_sources("develop: {}\n", records) is None

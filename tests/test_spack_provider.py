"""Provider selection and the Spack fixture's record of what it built (no Spack needed)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import REPO

from fabreg.errors import FabregError
from fabreg.run import providers
from fabreg.testlib.osu import SPACK_OSU_PACKAGES
from fabreg.testlib.spack import choose_spec, lock_digest, parse_spec_records, site_config

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

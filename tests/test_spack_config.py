"""The Spack side of the suite without Spack: the environment files, the recipes, the helper.

spack.yaml and the files it includes must parse and name every package the checks
use; its ``when`` conditions are evaluated the way Spack evaluates them (a Python
expression over ``env``); the probes recipe's digest and make steps run for real.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, have, mvapich2_mrail_prefix, mvapich2_prefix

from fabreg.testlib.osu import SPACK_OSU_PACKAGES

SPACK_YAML = REPO / "spack.yaml"
SITES = REPO / "spack" / "sites"
FABREG_REPO = REPO / "spack" / "repos" / "spack_repo" / "fabreg"
PROBES_RECIPE = FABREG_REPO / "packages" / "fabreg_probes" / "package.py"
TEMPLATE = REPO / "docs" / "spack-site-template.yaml"


def manifest() -> dict:
    return yaml.safe_load(SPACK_YAML.read_text())["spack"]


def active_lists(without: str) -> dict[str, list[str]]:
    """The definitions Spack would build with FABREG_SPACK_WITHOUT=``without``."""
    lists: dict[str, list[str]] = {}
    for entry in manifest()["definitions"]:
        when = entry.get("when")
        (name, specs), = ((k, v) for k, v in entry.items() if k != "when")
        if when is None or eval(when, {"env": {"FABREG_SPACK_WITHOUT": without}}):
            lists.setdefault(name, []).extend(specs)
    return lists


def test_spack_yaml_includes_the_site_file_and_the_project_repository():
    spack = manifest()
    (include,) = spack["include"]
    assert include["path"] == "spack/sites/default.yaml"
    assert include["path_override_env_var"] == "FABREG_SPACK_SITE_CONFIG"
    assert (REPO / include["path"]).is_file()
    assert (REPO / spack["repos"]["fabreg"]) == FABREG_REPO
    repo = yaml.safe_load((FABREG_REPO / "repo.yaml").read_text())["repo"]
    assert repo["namespace"] == "fabreg"
    assert repo["api"].startswith("v2.")  # Spack 1.x package API
    # Spack 1.x: package directories are Python module names.
    assert {p.name for p in (FABREG_REPO / "packages").iterdir()} >= {"fabreg_probes",
                                                                       "perftest"}


def test_full_stack_names_every_package_and_variant_the_checks_need():
    lists = active_lists("")
    assert set(lists["mpi_benchmarks"]) == {"fabreg-probes", "osu-micro-benchmarks@7.2"}
    # Every package the OSU checks can take their binaries from is in the environment.
    for package in SPACK_OSU_PACKAGES:
        assert any(spec.split("@")[0] == package for spec in lists["mpi_benchmarks"])
    assert lists["mpis"] == ["openmpi fabrics=ucx", "mpich netmod=ucx",
                             "mvapich2 fabrics=mrail", "mvapich2 fabrics=nemesis"]
    assert lists["fabric"] == ["ucx +verbs +rdmacm +rc +ud +dc", "perftest"]
    spack = manifest()
    assert {"matrix": [["$mpi_benchmarks"], ["$^mpis"]]} in spack["specs"]
    assert "$fabric" in spack["specs"] and "$mpis" in spack["specs"]
    assert spack["concretizer"]["unify"] == "when_possible"


def test_without_drops_exactly_the_named_parts():
    lists = active_lists("mvapich2 osu-micro-benchmarks")
    assert lists["mpi_benchmarks"] == ["fabreg-probes"]
    assert lists["mpis"] == ["openmpi fabrics=ucx", "mpich netmod=ucx"]
    assert lists["fabric"] == ["ucx +verbs +rdmacm +rc +ud +dc", "perftest"]
    assert "mpis" not in active_lists("openmpi mpich mvapich2")


def test_site_files_parse_and_local_is_offline_and_external_only():
    for path in [*SITES.glob("*.yaml"), TEMPLATE]:
        assert isinstance(yaml.safe_load(path.read_text()), dict), path
    local = yaml.safe_load((SITES / "local.yaml").read_text())
    assert local["include"] == [{"path": "$FABREG_SPACK_LOCAL_DIR/externals.yaml"}]
    packages = local["packages"]
    assert packages["all"]["buildable"] is False
    built = {name for name, conf in packages.items() if conf.get("buildable")}
    assert built == {"fabreg-probes", "osu-micro-benchmarks", "compiler-wrapper", "gcc-runtime"}
    assert local["bootstrap"]["enable"] is False
    # `mirrors::` replaces Spack's default (network) mirror by the local one.
    text = (SITES / "local.yaml").read_text()
    assert "\nmirrors::\n" in text
    assert local["mirrors:"] == {"local": {"url": "$FABREG_SPACK_LOCAL_DIR/mirror",
                                           "binary": False}}


def test_template_covers_what_a_site_overrides():
    text = TEMPLATE.read_text()
    for key in ("externals:", "buildable: false", "install_tree:", "mirrors::", "bootstrap:",
                "compilers:"):
        assert key in text, key
    # Builds target the compute nodes, not the login node that runs ReFrame.
    template = yaml.safe_load(text)
    assert template["packages"]["all"]["require"].startswith("target=")


def _recipe_functions() -> dict:
    """The recipe's plain-Python helpers, run without Spack (the rest needs Spack's API)."""
    tree = ast.parse(PROBES_RECIPE.read_text())
    keep = [node for node in tree.body
            if isinstance(node, ast.FunctionDef)
            or (isinstance(node, ast.Assign) and node.targets[0].id == "_SOURCE_SUFFIXES")]
    namespace: dict = {"os": os, "hashlib": __import__("hashlib"), "PROBES_DIR": None}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(PROBES_RECIPE), "exec"), namespace)
    return namespace


def test_probes_recipe_points_at_this_checkouts_probes():
    # The recipe derives src/probes from its own location: 6 levels up, then src/probes.
    parts = PROBES_RECIPE.relative_to(REPO).parts
    assert len(parts) == 7 and "*[os.pardir] * 6" in PROBES_RECIPE.read_text()
    assert (REPO / "src" / "probes" / "Makefile").is_file()


def test_probes_version_follows_the_sources_and_ignores_build_products(tmp_path):
    digest = _recipe_functions()["source_digest"]
    src = tmp_path / "probes"
    shutil.copytree(REPO / "src" / "probes", src)
    before = digest(str(src))
    assert len(before) == 64
    (src / "probe_common.o").write_bytes(b"\x7fELF")
    (src / "osu_latency").write_bytes(b"\x7fELF")
    assert digest(str(src)) == before
    with (src / "osu_latency.c").open("a") as handle:
        handle.write("\n/* edited */\n")
    assert digest(str(src)) != before
    assert digest(str(tmp_path / "nothing")) == "missing"


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.openmpi"), reason="OpenMPI (mpicc.openmpi) not installed")
def test_probes_recipe_make_steps_build_out_of_tree_into_a_prefix(tmp_path):
    """What the recipe's build and install phases run, against a tmp stage and prefix."""
    text = PROBES_RECIPE.read_text()
    assert '"-f", os.path.join(os.path.normpath(PROBES_DIR), "Makefile")' in text
    assert 'make(*self._make_args(), "install", f"PREFIX={prefix}")' in text
    src = REPO / "src" / "probes"
    before = sorted(p.name for p in src.iterdir())
    stage, prefix = tmp_path / "stage", tmp_path / "prefix"
    stage.mkdir()
    args = ["make", "-f", str(src / "Makefile"), "CC=mpicc.openmpi"]
    subprocess.run(args, cwd=stage, check=True, capture_output=True)
    subprocess.run([*args, "install", f"PREFIX={prefix}"], cwd=stage, check=True,
                   capture_output=True)
    installed = sorted(p.name for p in (prefix / "bin").iterdir())
    assert "osu_latency" in installed and "osu_allreduce" in installed
    assert all(os.access(prefix / "bin" / name, os.X_OK) for name in installed)
    assert sorted(p.name for p in src.iterdir()) == before  # the checkout stays clean


@pytest.mark.skipif(not (have("mpicc.openmpi") and have("mpicc.mpich")),
                    reason="needs Debian's OpenMPI and MPICH (mpicc.openmpi, mpicc.mpich)")
def test_debian_externals_give_each_mpi_its_own_prefix(tmp_path):
    out = tmp_path / "site"
    proc = subprocess.run(["bash", str(REPO / "ci" / "spack-debian-externals.sh"), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    packages = yaml.safe_load((out / "externals.yaml").read_text())["packages"]
    ompi, mpich = packages["openmpi"]["externals"][0], packages["mpich"]["externals"][0]
    assert ompi["prefix"] == str(out / "prefixes" / "openmpi")
    assert mpich["prefix"] == str(out / "prefixes" / "mpich")
    assert Path(ompi["prefix"], "bin", "mpicc").resolve() == Path(
        shutil.which("mpicc.openmpi")).resolve()
    assert Path(mpich["prefix"], "bin", "mpicc").resolve() == Path(
        shutil.which("mpicc.mpich")).resolve()
    # Hydra finds its proxy next to mpiexec.
    assert (Path(mpich["prefix"]) / "bin" / "hydra_pmi_proxy").exists()
    assert Path(mpich["prefix"], "include", "mpi.h").is_file()
    version = subprocess.run(["ompi_info", "--version"], capture_output=True,
                             text=True).stdout.split()[2].lstrip("v")
    assert ompi["spec"].startswith(f"openmpi@{version}")
    assert all(conf["buildable"] is False for conf in packages.values())
    assert packages["gcc"]["externals"][0]["extra_attributes"]["compilers"]["c"] == "/usr/bin/gcc"
    assert (out / "mirror").is_dir()


def test_debian_externals_usage_error_is_one_line(tmp_path):
    proc = subprocess.run(["bash", str(REPO / "ci" / "spack-debian-externals.sh")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "usage:" in proc.stderr


def test_debian_externals_describe_each_mvapich2_build_by_its_device(tmp_path):
    prefixes = {p.resolve() for p in (mvapich2_prefix(), mvapich2_mrail_prefix()) if p}
    builds = {}
    for prefix in prefixes:  # the device as the build reports it: ch3:mrail -> mrail
        info = subprocess.run([str(prefix / "bin" / "mpichversion")], capture_output=True,
                              text=True, check=True).stdout
        device = next(line.split()[-1] for line in info.splitlines()
                      if line.startswith("MVAPICH2 Device:"))
        builds[device.split(":")[1]] = prefix
    if not builds:
        pytest.skip("no MVAPICH2 build: ci/build-mvapich2.sh SRC ~/.cache/fabreg/mvapich2 "
                    "(and ... mvapich2-mrail mrail), see docs/mpis.md")
    out = tmp_path / "site"
    proc = subprocess.run(["bash", str(REPO / "ci" / "spack-debian-externals.sh"), str(out),
                           *map(str, builds.values())],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    mvapich2 = yaml.safe_load((out / "externals.yaml").read_text())["packages"]["mvapich2"]
    assert mvapich2["buildable"] is False
    described = {e["prefix"]: e["spec"] for e in mvapich2["externals"]}
    assert described == {str(prefix): f"mvapich2@2.3.7 fabrics={fabrics}"
                         for fabrics, prefix in builds.items()}


def test_debian_externals_refuse_a_prefix_that_holds_no_mvapich2(tmp_path):
    script = str(REPO / "ci" / "spack-debian-externals.sh")
    proc = subprocess.run(["bash", script, str(tmp_path / "a"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"spack-debian-externals: '{tmp_path}' is not an MVAPICH2 "
                                   "install: it has no bin/mpichversion")
    if have("mpichversion"):  # Debian's MPICH: an mpichversion that names no MVAPICH2
        prefix = Path(shutil.which("mpichversion")).parent.parent
        proc = subprocess.run(["bash", script, str(tmp_path / "b"), str(prefix)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2
        assert proc.stderr.strip().count("\n") == 0
        assert "its mpichversion names no MVAPICH2 version" in proc.stderr

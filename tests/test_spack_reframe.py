"""The Spack provider through real ReFrame: dry-run scripts, fallback, and a real offline build.

Without Spack (as in CI) ReFrame's dry run still writes the scripts the Spack
provider would run, which are checked here; a real run falls back to the probes
and says so. With Spack (FABREG_SPACK_ROOT names a checkout, or ``spack`` on
PATH) one check runs on probes that Spack built offline against the system MPI.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import CHECKS, REPO, have, run_reframe

from fabreg.run.providers import find_spack


def _no_spack_env() -> dict[str, str]:
    """Environment overrides under which the suite cannot find Spack."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if not (Path(p) / "spack").exists())
    return {"PATH": path, "FABREG_SPACK_ROOT": ""}


def _perflog_rows(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"))) for line in lines[1:]]


def test_dry_run_writes_one_spack_build_per_partition_with_env_specs_and_shared_tree(tmp_path):
    tree = tmp_path / "shared-tree"
    env = {**_no_spack_env(), "FABREG_PROVIDER": "spack", "FABREG_SPACK_INSTALL_TREE": str(tree),
           "FABREG_SPACK_WITHOUT": "", "FABREG_SPACK_SITE_CONFIG": ""}
    proc = run_reframe("--dry-run", "-n", "OsuLatency", "-n", "OsuBandwidth", "-n",
                       "OsuAllreduce", perflog_dir=tmp_path / "perflogs", cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    scripts = sorted(tmp_path.glob("stage/local/default/*/SpackStack_*/rfm_job.sh"))
    assert len(scripts) == 1, scripts  # once per partition, not per test or environment
    # Under the environment without an MPI, not under whichever MPI registered it last.
    assert scripts[0].parts[-3] == "builtin", scripts[0]
    lines = scripts[0].read_text().splitlines()
    expected = [
        "export FABREG_SPACK_WITHOUT='mvapich2 osu-micro-benchmarks'",
        f"export FABREG_SPACK_SITE_CONFIG={REPO / 'spack' / 'sites' / 'local.yaml'}",
        "set -o errexit",
        f"spack -e rfm_spack_env config add config:install_tree:root:{tree}",
        "spack -e rfm_spack_env concretize",
        "spack -e rfm_spack_env config get develop > spack-develop.yaml",
        "spack -e rfm_spack_env install --fail-fast",
    ]
    positions = [lines.index(line) for line in expected]
    assert positions == sorted(positions), lines
    assert any(line.startswith("spack -e rfm_spack_env find --format") and "^mpi" in line
               for line in lines)
    # The environment is written by the fixture with absolute paths: Spack never reads a
    # relative repository path from the stage ("No repo.yaml found").
    manifest = yaml.safe_load((scripts[0].parent / "rfm_spack_env" / "spack.yaml").read_text())
    assert manifest["spack"]["repos"] == {"fabreg": str(REPO / "spack" / "repos" / "spack_repo"
                                                       / "fabreg")}
    assert manifest["spack"]["include"][0]["path"] == str(REPO / "spack/sites/default.yaml")
    assert "spack env create" not in scripts[0].read_text()
    for mpi in ("openmpi", "mpich"):
        (build,) = tmp_path.glob(f"stage/local/default/{mpi}/OsuBinaries_*/rfm_build.sh")
        assert (f"would use <spack: osu-micro-benchmarks or fabreg-probes ^{mpi}>"
                in build.read_text())


def test_dry_run_honours_partition_settings_overridden_by_environment(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("concretizer:\n  reuse: true\n")
    env = {**_no_spack_env(), "FABREG_PROVIDER": "spack", "FABREG_SPACK_WITHOUT": "mvapich2",
           "FABREG_SPACK_SITE_CONFIG": str(site), "FABREG_SPACK_INSTALL_TREE": ""}
    proc = run_reframe("--dry-run", "-n", "OsuLatency", perflog_dir=tmp_path / "p",
                       cwd=tmp_path, env=env, checks=CHECKS / "osu.py")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (script,) = tmp_path.glob("stage/local/default/*/SpackStack_*/rfm_job.sh")
    text = script.read_text()
    assert "export FABREG_SPACK_WITHOUT=mvapich2\n" in text
    assert f"export FABREG_SPACK_SITE_CONFIG={site}\n" in text
    assert "install_tree" not in text  # the site's or Spack's own tree, never the stage


def test_develop_source_shared_by_two_mpis_is_refused_before_any_spack_command(tmp_path):
    # What `spack develop osu-micro-benchmarks` leaves in the checkout's spack.yaml.
    manifest = tmp_path / "spack.yaml"
    manifest.write_text((REPO / "spack.yaml").read_text() + "  develop:\n"
                        "    osu-micro-benchmarks:\n      spec: osu-micro-benchmarks@=7.2\n")
    env = {**_no_spack_env(), "FABREG_PROVIDER": "spack", "FABREG_SPACK_WITHOUT": "mvapich2",
           "FABREG_SPACK_MANIFEST": str(manifest), "FABREG_SPACK_INSTALL_TREE": ""}
    proc = run_reframe("--dry-run", "-n", "OsuLatency", "-p", "openmpi",
                       perflog_dir=tmp_path / "p", cwd=tmp_path, env=env,
                       checks=CHECKS / "osu.py")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out[-3000:]
    assert ("spack.yaml develops osu-micro-benchmarks from one source directory "
            "(<env>/osu-micro-benchmarks) for 2 MPI builds (mpich netmod=ucx, openmpi "
            "fabrics=ucx)") in out
    assert not list(tmp_path.glob("stage/**/SpackStack_*/rfm_job.sh"))  # no Spack script
    assert "Traceback" not in out


def test_unknown_provider_is_one_clear_error(tmp_path):
    env = {**_no_spack_env(), "FABREG_PROVIDER": "conda"}
    proc = run_reframe("--dry-run", "-n", "OsuLatency", perflog_dir=tmp_path / "p",
                       cwd=tmp_path, env=env, checks=CHECKS / "osu.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "FABREG_PROVIDER='conda': choose one of auto, spack, prefix, probes" in out
    assert "Traceback" not in out


@pytest.mark.slow
@pytest.mark.skipif(not have("mpicc.openmpi"), reason="OpenMPI (mpicc.openmpi) not installed")
def test_without_spack_the_spack_provider_falls_back_to_the_probes_and_says_so(tmp_path):
    env = {**_no_spack_env(), "FABREG_PROVIDER": "spack"}
    env["FABREG_SPACK_ROOT"] = str(tmp_path / "no-spack-here")
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(CHECKS / "osu.py", checks)  # no references: figures are not the point
    perflogs = tmp_path / "perflogs"
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "openmpi", checks=checks,
                       perflog_dir=perflogs, cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert ("provider spack requested for openmpi on local:default, but "
            f"FABREG_SPACK_ROOT={tmp_path / 'no-spack-here'} has no executable bin/spack; "
            "benchmarks come from the bundled probes instead") in " ".join(out.split())
    rows = _perflog_rows(perflogs / "local" / "default" / "OsuLatency.log")
    assert rows
    for row in rows:
        assert row["provider"] == "fabreg-probes"
        assert row["spack_hash"] == "" and row["spack_lock"] == ""


SPACK_COLUMNS = ("provider", "spack_spec", "spack_hash", "spack_lock")


# --- with a real Spack ---------------------------------------------------------------------

SPACK, SPACK_HOW = find_spack()
needs_spack = pytest.mark.skipif(
    SPACK is None, reason=f"Spack not available ({SPACK_HOW}); set FABREG_SPACK_ROOT to a "
                          "Spack 1.x checkout configured for offline use (docs/spack.md)")
needs_debian_mpis = pytest.mark.skipif(
    not (have("mpicc.openmpi") and have("mpicc.mpich")),
    reason="needs Debian's OpenMPI and MPICH as the system MPIs")


@pytest.fixture(scope="module")
def local_site(tmp_path_factory) -> Path:
    """This host's MPIs described to Spack by the suite's helper (FABREG_SPACK_LOCAL_DIR)."""
    out = tmp_path_factory.mktemp("spack-local")
    subprocess.run(["bash", str(REPO / "ci" / "spack-debian-externals.sh"), str(out)],
                   check=True, capture_output=True)
    return out


def _spack_env(local_site: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, FABREG_SPACK_LOCAL_DIR=str(local_site), **extra)
    if SPACK is not None:
        env["PATH"] = f"{SPACK.parent}{os.pathsep}{env['PATH']}"
    return env


@pytest.mark.slow
@needs_spack
@needs_debian_mpis
@pytest.mark.parametrize("site", ["default.yaml", "local.yaml", "template"])
def test_site_files_validate_against_spacks_schema(site, local_site, tmp_path):
    path = (REPO / "docs" / "spack-site-template.yaml" if site == "template"
            else REPO / "spack" / "sites" / site)
    env = _spack_env(local_site, FABREG_SPACK_SITE_CONFIG=str(path))
    envdir = tmp_path / "env"
    subprocess.run(["spack", "env", "create", "-d", str(envdir), str(REPO / "spack.yaml")],
                   env=env, check=True, capture_output=True, text=True)
    proc = subprocess.run(["spack", "-e", str(envdir), "config", "get", "packages"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "fabreg-probes" in proc.stdout or site == "default.yaml"
    if site == "local.yaml":  # offline: the local file mirror only, no bootstrap downloads
        mirrors = subprocess.run(["spack", "-e", str(envdir), "mirror", "list"], env=env,
                                 capture_output=True, text=True, check=True).stdout
        assert mirrors.split() == ["local", "[s", "]", f"file://{local_site / 'mirror'}"]
        bootstrap = subprocess.run(["spack", "-e", str(envdir), "config", "get", "bootstrap"],
                                   env=env, capture_output=True, text=True, check=True).stdout
        assert "enable: false" in bootstrap


@pytest.mark.slow
@needs_spack
@needs_debian_mpis
def test_spack_builds_the_probes_offline_and_a_check_runs_on_them(local_site, tmp_path):
    """Concretize and install offline against Debian's MPIs, then run OsuLatency on it."""
    tree = tmp_path / "tree"
    env = _spack_env(local_site, FABREG_PROVIDER="spack", FABREG_SPACK_INSTALL_TREE=str(tree),
                     FABREG_SPACK_WITHOUT="mvapich2 osu-micro-benchmarks",
                     FABREG_SPACK_SITE_CONFIG="")
    env["FABREG_SPACK_ROOT"] = str(SPACK.parents[1])
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(CHECKS / "osu.py", checks)  # no references: figures are not the point
    perflogs = tmp_path / "perflogs"
    started = time.monotonic()
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "openmpi", checks=checks,
                       perflog_dir=perflogs, cwd=tmp_path, env=env, timeout=3600)
    elapsed = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    print(f"Spack provider, fresh install tree: {elapsed:.0f} s")
    rows = _perflog_rows(perflogs / "local" / "default" / "OsuLatency.log")
    assert rows and all(r == {**rows[0], **{k: r[k] for k in r if k not in SPACK_COLUMNS}}
                        for r in rows)  # one build for every variant of the check
    row = rows[0]
    assert row["provider"] == "spack"
    assert row["spack_spec"].startswith("fabreg-probes@src.")
    (prefix,) = tree.glob(f"*/fabreg-probes-*-{row['spack_hash']}")
    assert (prefix / "bin" / "osu_latency").is_file()
    # The fixture keeps the lock file it installed from in its output directory.
    (lock,) = tmp_path.glob("output/local/default/*/SpackStack_*/spack.lock")
    assert row["spack_lock"] == hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    assert {p.name for p in lock.parent.iterdir()} >= {
        "spack.lock", "spack.yaml", "spack-mpi-specs.txt", "spack-develop.yaml"}
    # Spack read no relative repository path from the stage.
    assert "No repo.yaml found" not in out
    # Built against OpenMPI's own prefix, not whatever /usr/bin/mpicc points at.
    ldd = subprocess.run(["ldd", str(prefix / "bin" / "osu_latency")], capture_output=True,
                         text=True).stdout
    assert "libmpi.so.40" in ldd and "libmpich" not in ldd


@pytest.mark.slow
@needs_spack
def test_a_failed_spack_build_fails_the_fixture_with_spacks_error_and_runs_nothing(tmp_path):
    env = _spack_env(tmp_path / "no-externals-here", FABREG_PROVIDER="spack",
                     FABREG_SPACK_SITE_CONFIG="", FABREG_SPACK_INSTALL_TREE=str(tmp_path / "t"))
    checks = tmp_path / "checks"
    checks.mkdir()
    shutil.copy(CHECKS / "osu.py", checks)
    proc = run_reframe("-r", "-n", "OsuLatency", "-p", "openmpi", checks=checks,
                       perflog_dir=tmp_path / "perflogs", cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert ("Spack failed: ==> Error: Required path ($FABREG_SPACK_LOCAL_DIR/externals.yaml) "
            f"does not exist at ({tmp_path / 'no-externals-here' / 'externals.yaml'})") in out
    assert "[dependencies failed]" in out  # no silent fallback to the probes
    assert not (tmp_path / "perflogs" / "local" / "default" / "OsuLatency.log").exists()
    # What Spack was given is in the output directory although the fixture failed.
    (kept,) = tmp_path.glob("output/local/default/*/SpackStack_*/spack.yaml")
    assert "FABREG_SPACK_SITE_CONFIG" in kept.read_text()

"""Shared test fixtures: where the repository, the golden outputs and the tools are."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from fabreg.cluster.layout import BRIDGE
from fabreg.testlib.build_cache import CACHE_VARIABLE

REPO = Path(__file__).resolve().parents[1]
#: Real outputs of OSU 7.2, UCX 1.13 ucx_perftest and perftest 4.5 (tests/data/golden/README.md).
GOLDEN = Path(os.environ.get("FABREG_GOLDEN", REPO / "tests" / "data" / "golden"))
REFRAME = Path(sys.executable).parent / "reframe"
#: The suite's checks as users run them (``-c checks/``). A session that tests one family
#: loads its file alone (``CHECKS / "osu.py"``): ReFrame instantiates every case of what it
#: loads, and the whole folder costs each session about 1.3 s more on a 2-core host.
CHECKS = REPO / "checks"
#: The emulated cluster's bridge: it exists while a ``fabreg cluster up`` cluster is up.
CLUSTER_BRIDGE = Path("/sys/class/net") / BRIDGE


#: This pytest process's temporary directory for the tools, and ``$TMPDIR`` before it.
_OWN_TMPDIR = pytest.StashKey[tuple[str, str | None]]()


def pytest_configure(config: pytest.Config) -> None:
    """Give the tools the tests start a temporary directory of this pytest process's own.

    Every ReFrame session writes a debug log, ``rfm-*.log``, into ``$TMPDIR`` before it reads
    the site config, and never removes it (so do MPI libraries with files of theirs); a test
    run starts hundreds. Its own directory, removed at the end, leaves ``/tmp`` as it found it.
    The tests' own temporary paths (pytest's ``tmp_path``) stay where they were. The workers
    of pytest-xdist share their controller's.

    The probes' build cache (``fabreg.testlib.build_cache``) lies there too: the run's first
    ReFrame session of each MPI compiles them, later ones reuse that build, and nothing of an
    earlier run (or of the user's own cache) is reused.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    tempfile.gettempdir()  # this process keeps the system's
    own = tempfile.mkdtemp(prefix="fabreg-tests-")
    os.chmod(own, 0o1777)  # as /tmp: the normal user of tests/test_site_cluster.py writes here
    config.stash[_OWN_TMPDIR] = (own, os.environ.get("TMPDIR"))
    os.environ["TMPDIR"] = own
    os.environ.setdefault(CACHE_VARIABLE, os.path.join(own, "build-cache"))
    os.environ.setdefault(*OMPI_PROMPT_ABORT)


#: Open MPI's ``mpirun`` ends a job whose rank exited non-zero 1-2 s after the exit (its
#: ``odls_base_sigkill_timeout``, 1 s, between SIGTERM and SIGKILL of the ranks left), where
#: a run that succeeds ends in 0.3 s on this host. The tests start a hundred runs that fail
#: on purpose (bad options, wrong rank counts, corrupted data): with no wait, what they
#: assert is the same and the probes' tests take 55 s instead of 93 s. Users' runs keep the
#: default.
OMPI_PROMPT_ABORT = ("OMPI_MCA_odls_base_sigkill_timeout", "0")


def pytest_unconfigure(config: pytest.Config) -> None:
    own, before = config.stash.get(_OWN_TMPDIR, (None, None))
    if own is None:
        return
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    shutil.rmtree(own, ignore_errors=True)


@pytest.fixture(scope="session")
def golden() -> Path:
    """Real benchmark outputs kept with the tests: a clone tests its parsers on them."""
    if not GOLDEN.is_dir():
        raise FileNotFoundError(f"golden outputs not found at {GOLDEN} (FABREG_GOLDEN)")
    return GOLDEN


def run_reframe(*args: str, perflog_dir: Path, cwd: Path, timeout: int = 900,
                env: dict[str, str] | None = None,
                checks: Path | Sequence[Path] = CHECKS,
                config: Path = REPO / "reframe-config.py") -> subprocess.CompletedProcess[str]:
    """Run the real ReFrame of this virtualenv on the repository's config and checks (a
    folder, or the check files a session needs)."""
    full_env = dict(os.environ, FABREG_PERFLOG_DIR=str(perflog_dir), **(env or {}))
    full_env.pop("RFM_CONFIG_FILES", None)
    loaded = [checks] if isinstance(checks, (str, os.PathLike)) else list(checks)
    cmd = [str(REFRAME), "-C", str(config), *(a for c in loaded for a in ("-c", str(c))),
           "--prefix", str(cwd), *args]
    return subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


#: Where docs/mpis.md suggests building MVAPICH2 (ci/build-mvapich2.sh SRC PREFIX).
MVAPICH2_CACHE = Path.home() / ".cache" / "fabreg" / "mvapich2"


#: ... and its InfiniBand device (ci/build-mvapich2.sh SRC PREFIX mrail).
MVAPICH2_MRAIL_CACHE = Path.home() / ".cache" / "fabreg" / "mvapich2-mrail"


def _built(variable: str, cache: Path) -> Path | None:
    """The MPI build ``$variable`` names, else the one at ``cache``; None if neither holds one."""
    given = os.environ.get(variable)
    prefix = Path(given) if given else cache
    if (prefix / "bin" / "mpicc").exists() and (prefix / "bin" / "mpiexec").exists():
        return prefix
    return None


def mvapich2_prefix() -> Path | None:
    """A real MVAPICH2 build: $FABREG_MVAPICH2_PREFIX, else ~/.cache/fabreg/mvapich2."""
    return _built("FABREG_MVAPICH2_PREFIX", MVAPICH2_CACHE)


def mvapich2_mrail_prefix() -> Path | None:
    """A real MVAPICH2 ``ch3:mrail`` build: $FABREG_MVAPICH2_MRAIL_PREFIX, else
    ~/.cache/fabreg/mvapich2-mrail."""
    return _built("FABREG_MVAPICH2_MRAIL_PREFIX", MVAPICH2_MRAIL_CACHE)


def fabreg(*args: str, db: Path | None = None, check: bool = False,
           env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a child process (as a user would)."""
    full_env = dict(os.environ if env is None else env)
    if db is not None:
        full_env["FABREG_DB"] = str(db)
    proc = subprocess.run([sys.executable, "-m", "fabreg.cli", *args], env=full_env,
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"fabreg {' '.join(args)} -> {proc.returncode}\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def synthetic_store(root: Path, **generate_args: object) -> Path:
    """``root/fabreg.db``: nightly perflogs of ``fabreg.review.synthetic.generate`` (its
    arguments) in ``root/perflogs``, ingested by the real CLI."""
    from fabreg.review.synthetic import generate

    generate(root / "perflogs", **generate_args)
    db = root / "fabreg.db"
    fabreg("ingest", "-q", str(root / "perflogs"), db=db, check=True)
    return db


def assert_days_indexed(db: Path) -> None:
    """The store's ``samples`` are filed under the UTC day of their run, and ``days`` and
    ``newest_day`` (what the readers seek by) say what the values say."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        misfiled = conn.execute("SELECT COUNT(*) FROM samples v LEFT JOIN runs r "
                                "ON r.id = v.run_id WHERE r.id IS NULL "
                                "OR v.day != CAST(r.time / 86400 AS INTEGER)").fetchone()[0]
        days = conn.execute("SELECT day FROM days ORDER BY day").fetchall()
        held = conn.execute("SELECT DISTINCT day FROM samples ORDER BY day").fetchall()
        newest = conn.execute("SELECT series_id, day FROM newest_day ORDER BY 1").fetchall()
        wanted = conn.execute("SELECT series_id, MAX(day) FROM samples GROUP BY series_id "
                              "ORDER BY 1").fetchall()
    assert misfiled == 0
    assert set(held) <= set(days)  # a day whose values a perflog took over may stay listed
    assert newest == wanted


@pytest.fixture
def run_fabreg():
    return fabreg


def reframe_binary() -> str | None:
    """The ReFrame next to this interpreter (the project's .venv), else on PATH."""
    here = Path(sys.executable).parent / "reframe"
    return str(here) if here.exists() else shutil.which("reframe")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Say at once, not half an hour later, that the cluster tests cannot run: a kept
    ``fabreg cluster up`` cluster owns the bridge every one of them brings up its own on.
    Under CI (where each of them would fail) the run ends here with that one line."""
    cluster_tests = [i for i in session.items if i.get_closest_marker("cluster")]
    if not cluster_tests or not CLUSTER_BRIDGE.exists():
        return
    reason = (f"a fabreg cluster is already up on this machine (bridge {BRIDGE}): "
              f"{len(cluster_tests)} cluster test(s) bring up their own; "
              "run `fabreg cluster down` first")
    if os.environ.get("CI"):
        pytest.exit(reason, returncode=1)
    session.config.get_terminal_writer().line(f"warning: {reason}; they will skip", yellow=True)

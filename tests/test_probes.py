"""fabreg's probes built with each installed MPI and run on 2 real ranks.

The probes must print exactly what OSU 7.x prints (so that one parser serves
both): the header lines are those of real OSU 7.2 (checked against the golden
outputs in tests/data/golden), the rows are read with
the suite's parser and re-rendered in OSU's column widths, and the error cases
must exit non-zero with one clear line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO

from fabreg.run.parsers.osu import OsuResult, parse_osu, powers_of_two, table_problem

pytestmark = pytest.mark.slow

PROBES_SRC = REPO / "src" / "probes"
PT2PT = ["osu_latency", "osu_bw", "osu_bibw"]
COLLECTIVES = ["osu_allreduce", "osu_bcast", "osu_alltoall", "osu_reduce", "osu_allgather"]
ALL = PT2PT + COLLECTIVES
# Small runs: the point is the structure, not the figures.
QUICK = {"osu_latency": ["-i", "50", "-x", "5"], "osu_bw": ["-i", "4", "-x", "1"],
         "osu_bibw": ["-i", "4", "-x", "1"]}
COLL_QUICK = ["-i", "20", "-x", "2"]
# Size ranges: from 1 B where the figure cannot round to 0.00 on a loaded host; bandwidth
# from 256 B (at 1 B, 64 x 4 messages taking > 51 ms would print 0.00 MB/s, as OSU would).
RANGES = {"osu_bw": (256, 16384), "osu_bibw": (256, 16384)}
MAX = 64


def size_range(program: str) -> tuple[int, int]:
    return RANGES.get(program, (1, MAX))


@dataclass(frozen=True)
class Mpi:
    name: str
    cc: str
    launcher: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def missing(self) -> list[str]:
        return [tool for tool in (self.cc, self.launcher[0]) if shutil.which(tool) is None]


MPIS = {
    "openmpi": Mpi("openmpi", "mpicc.openmpi", ("mpirun.openmpi", "-np"),
                   (("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"))),
    "mpich": Mpi("mpich", "mpicc.mpich", ("mpiexec.mpich", "-n")),
}


@dataclass(frozen=True)
class Built:
    mpi: Mpi
    bindir: Path

    def run(self, program: str, *args: str, ranks: int = 2) -> subprocess.CompletedProcess[str]:
        cmd = [*self.mpi.launcher, str(ranks), str(self.bindir / program), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                              env=dict(os.environ, **dict(self.mpi.env)))


def make(mpi: Mpi, workdir: Path, *targets: str, srcdir: Path = PROBES_SRC,
         **variables: str) -> subprocess.CompletedProcess[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    assigns = [f"{k}={v}" for k, v in {"CC": mpi.cc, **variables}.items()]
    return subprocess.run(["make", "-f", str(srcdir / "Makefile"), *assigns, *targets],
                          cwd=workdir, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="session", params=sorted(MPIS))
def built(request, tmp_path_factory) -> Built:
    """The probes built once per MPI, out of tree, with that MPI's compiler wrapper."""
    mpi = MPIS[request.param]
    if missing := mpi.missing():
        pytest.skip(f"{mpi.name} not installed here (missing {', '.join(missing)})")
    bindir = tmp_path_factory.mktemp(f"probes-{mpi.name}")
    proc = make(mpi, bindir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ours = [line for line in proc.stderr.splitlines()
            if "warning" in line.lower() and re.search(r"\b(osu|fabreg|probe)_\w+\.[ch]", line)]
    assert ours == [], proc.stderr
    return Built(mpi, bindir)


@pytest.fixture(scope="session")
def openmpi_or_mpich() -> Mpi:
    for mpi in MPIS.values():
        if not mpi.missing():
            return mpi
    pytest.skip("neither OpenMPI nor MPICH is installed here")


# OSU 7.2's header lines, as printed before the first row (checked against the golden
# outputs by test_expected_headers_are_real_osu_headers).
TITLES = {
    "osu_latency": "Latency", "osu_bw": "Bandwidth", "osu_bibw": "Bi-Directional Bandwidth",
    "osu_allreduce": "Allreduce Latency", "osu_bcast": "Broadcast Latency",
    "osu_alltoall": "All-to-All Personalized Exchange Latency",
    "osu_reduce": "Reduce Latency", "osu_allgather": "Allgather Latency",
}


def expected_header(program: str, full: bool = False, validation: bool = False) -> list[str]:
    title = f"# OSU MPI {TITLES[program]} Test v7.2"
    check = "        Validation" if validation else ""
    if program in PT2PT:
        column = "Latency (us)" if program == "osu_latency" else "Bandwidth (MB/s)"
        return [title, f"# Size    {column:>18}{check}", "# Datatype: MPI_CHAR."]
    extra = "   Min Latency(us)   Max Latency(us)  Iterations" if full else ""
    return ["", title, "# Datatype: MPI_CHAR.", f"# Size       Avg Latency(us){extra}{check}"]


def golden_header(golden: Path, name: str) -> list[str]:
    """Header lines of a real OSU 7.2 output: after the '# command:' line, before the rows."""
    lines = (golden / "osu-7.2" / name).read_text().splitlines()
    assert lines[0].startswith("# command:")
    return _header(lines[1:])


def _header(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if re.match(r"^\d", line):
            break
        out.append(line)
    return out


def probe_header(stdout: str, program: str) -> list[str]:
    """Header lines of a probe's output, after its own identification line."""
    lines = stdout.splitlines()
    assert lines[0] == f"# fabreg probe {program} (OSU 7.x-compatible output)"
    return _header(lines[1:])


def row_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.match(r"^\d", line)]


def rendered(result: OsuResult, size: int) -> str:
    """A row as OSU prints it: %-10d, then %18.2f per figure, %12d iterations, %18s verdict."""
    row, text = result.rows[size], f"{size:<10d}"
    for column in result.columns:
        value = row[column]
        if column == "Iterations":
            text += f"{int(value):>12d}"
        elif column == "Validation":
            text += f"{value:>18}"
        else:
            text += f"{value:>18.2f}"
    return text


def assert_table(stdout: str, program: str, low: int, high: int) -> OsuResult:
    """Every size low..high (powers of two) has one well-formed row with positive figures."""
    result = parse_osu(stdout)
    sizes = powers_of_two(low, high)
    assert table_problem(result, program, sizes) is None, stdout
    assert result.sizes == sizes
    assert result.datatype == "MPI_CHAR"
    lines = row_lines(stdout)
    assert len(lines) == len(sizes), stdout
    for line, size in zip(lines, sizes):
        assert line == rendered(result, size)
        for column, value in result.rows[size].items():
            if column != "Validation":
                assert float(value) > 0, f"{program} {column} at {size}: {value}"
    return result


# --- build ------------------------------------------------------------------------------------

def test_every_probe_is_built(built):
    for program in ALL:
        path = built.bindir / program
        assert path.is_file() and os.access(path, os.X_OK), program


def test_makefile_builds_new_standalone_probes_installs_and_cleans(openmpi_or_mpich, tmp_path):
    """A new *.c beside the others becomes a program; install puts all into PREFIX/bin."""
    src = tmp_path / "src"
    shutil.copytree(PROBES_SRC, src, ignore=shutil.ignore_patterns("osu_*", "fabreg_*"))
    shutil.copy(PROBES_SRC / "osu_latency.c", src)
    (src / "hello_standalone.c").write_text(
        '#include <mpi.h>\n#include <stdio.h>\n'
        'int main(int c, char **v) { MPI_Init(&c, &v); puts("standalone"); '
        'MPI_Finalize(); return 0; }\n')
    build, prefix = tmp_path / "build", tmp_path / "prefix"
    proc = make(openmpi_or_mpich, build, "install", srcdir=src, PREFIX=str(prefix))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (prefix / "bin").iterdir()) == [
        "hello_standalone", "osu_latency"]
    assert not (build / "probe_common").exists()  # the helper is not a program
    proc = make(openmpi_or_mpich, build, "clean", srcdir=src)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in build.iterdir()) == []


# --- output format ----------------------------------------------------------------------------

GOLDEN_HEADERS = [
    ("openmpi-shm-osu_latency.txt", "osu_latency", {}),
    ("mpich-shm-osu_latency.txt", "osu_latency", {}),
    ("openmpi-shm-osu_latency-validation.txt", "osu_latency", {"validation": True}),
    ("openmpi-shm-osu_bw.txt", "osu_bw", {}),
    ("mpich-shm-osu_bw.txt", "osu_bw", {}),
    ("openmpi-shm-osu_bibw.txt", "osu_bibw", {}),
    *[(f"openmpi-shm-{p}-2ranks.txt", p, {}) for p in COLLECTIVES],
    ("openmpi-shm-osu_allreduce-validation.txt", "osu_allreduce", {"validation": True}),
    ("openmpi-shm-osu_allreduce-4ranks-full.txt", "osu_allreduce", {"full": True}),
    ("mpich-shm-osu_bcast-4ranks-full.txt", "osu_bcast", {"full": True}),
]


@pytest.mark.parametrize("name,program,flags", GOLDEN_HEADERS)
def test_expected_headers_are_real_osu_headers(golden, name, program, flags):
    """The header lines the probes are held to are byte for byte those of real OSU 7.2."""
    assert golden_header(golden, name) == expected_header(program, **flags)


@pytest.mark.parametrize("program", PT2PT)
def test_pt2pt_header_and_rows(built, program):
    low, high = size_range(program)
    proc = built.run(program, "-m", f"{low}:{high}", *QUICK[program])
    assert proc.returncode == 0, proc.stderr
    assert probe_header(proc.stdout, program) == expected_header(program)
    result = assert_table(proc.stdout, program, low, high)
    assert result.columns == [
        "Latency (us)" if program == "osu_latency" else "Bandwidth (MB/s)"]


@pytest.mark.parametrize("program", COLLECTIVES)
def test_collective_header_and_rows(built, program):
    proc = built.run(program, "-m", f"1:{MAX}", *COLL_QUICK)
    assert proc.returncode == 0, proc.stderr
    assert probe_header(proc.stdout, program) == expected_header(program)
    result = assert_table(proc.stdout, program, 1, MAX)
    assert result.columns == ["Avg Latency(us)"]


def test_size_range_is_honoured(built):
    proc = built.run("osu_latency", "-m", "128:2048", *QUICK["osu_latency"])
    assert proc.returncode == 0, proc.stderr
    assert parse_osu(proc.stdout).sizes == [128, 256, 512, 1024, 2048]
    proc = built.run("osu_allreduce", "-m", "4096:", *COLL_QUICK)  # MIN only: MAX stays 1 MiB
    assert parse_osu(proc.stdout).sizes == powers_of_two(4096, 1 << 20)


@pytest.mark.parametrize("program", ALL)
def test_validation_column_passes(built, program):
    low, high = size_range(program)
    proc = built.run(program, "-c", "-m", f"{low}:{high}", *QUICK.get(program, COLL_QUICK))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert probe_header(proc.stdout, program) == expected_header(program, validation=True)
    result = assert_table(proc.stdout, program, low, high)
    assert result.columns[-1] == "Validation"
    assert result.validation_failures == []
    assert {row["Validation"] for row in result.rows.values()} == {"Pass"}


@pytest.mark.parametrize("program", COLLECTIVES)
def test_full_format_adds_min_max_iterations(built, program):
    proc = built.run(program, "-f", "-m", f"1:{MAX}", "-i", "30", "-x", "3")
    assert proc.returncode == 0, proc.stderr
    assert probe_header(proc.stdout, program) == expected_header(program, full=True)
    result = assert_table(proc.stdout, program, 1, MAX)
    assert result.columns == ["Avg Latency(us)", "Min Latency(us)", "Max Latency(us)",
                              "Iterations"]
    for row in result.rows.values():
        assert row["Iterations"] == 30
        assert row["Min Latency(us)"] <= row["Avg Latency(us)"] <= row["Max Latency(us)"]


def test_full_and_validation_together(built):
    proc = built.run("osu_bcast", "-f", "-c", "-m", "1:16", *COLL_QUICK)
    assert proc.returncode == 0, proc.stderr
    assert probe_header(proc.stdout, "osu_bcast") == expected_header(
        "osu_bcast", full=True, validation=True)
    result = assert_table(proc.stdout, "osu_bcast", 1, 16)
    assert result.columns[-2:] == ["Iterations", "Validation"]


def test_osu_default_iteration_counts(built):
    """OSU's defaults: 1000 iterations up to 8 KiB, 100 above (collectives)."""
    proc = built.run("osu_allreduce", "-f", "-m", "8192:16384")
    assert proc.returncode == 0, proc.stderr
    result = parse_osu(proc.stdout)
    assert result.rows[8192]["Iterations"] == 1000
    assert result.rows[16384]["Iterations"] == 100


def test_bandwidth_window_option(built):
    proc = built.run("osu_bw", "-W", "8", "-m", "1024:2048", "-i", "3", "-x", "1")
    assert proc.returncode == 0, proc.stderr
    assert_table(proc.stdout, "osu_bw", 1024, 2048)


# --- validation really checks the data --------------------------------------------------------

def test_validation_reports_fail_on_corrupted_data(openmpi_or_mpich, tmp_path):
    """A copy whose sender writes a shifted pattern must print Fail and exit non-zero."""
    src = tmp_path / "src"
    shutil.copytree(PROBES_SRC, src)
    code = (src / "probe_common.c").read_text()
    needle = "p[k] = probe_pattern(from, to, k, iter);"
    assert code.count(needle) == 1, "probe_fill changed; update this test"
    (src / "probe_common.c").write_text(code.replace(
        needle, "p[k] = probe_pattern(from, to, k, iter + 1);"))
    proc = make(openmpi_or_mpich, tmp_path / "build", srcdir=src)
    assert proc.returncode == 0, proc.stderr
    broken = Built(openmpi_or_mpich, tmp_path / "build")
    for program in ["osu_latency", "osu_bw", "osu_allreduce", "osu_alltoall"]:
        proc = broken.run(program, "-c", "-m", "1:8", "-i", "3", "-x", "1")
        assert proc.returncode != 0, program
        result = parse_osu(proc.stdout)
        assert result.validation_failures == [1], proc.stdout
        assert f"{program}: error: data validation failed at message size 1" in proc.stderr


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("program", PT2PT)
def test_pt2pt_needs_exactly_two_ranks(built, program):
    proc = built.run(program, "-m", "1:8", ranks=1)
    assert proc.returncode != 0
    assert "This test requires exactly two processes" in proc.stderr
    assert row_lines(proc.stdout) == []


def test_collective_needs_two_ranks(built):
    proc = built.run("osu_allreduce", "-m", "1:8", ranks=1)
    assert proc.returncode != 0
    assert "This test requires at least two processes" in proc.stderr


def test_bad_message_size_fails_unlike_osu(built):
    """Real OSU 7.2 exits 0 with an empty table on -m abc; the probes refuse it."""
    proc = built.run("osu_latency", "-m", "abc")
    assert proc.returncode != 0
    assert "osu_latency: error: invalid -m value 'abc'" in proc.stderr
    assert parse_osu(proc.stdout).title is None
    assert row_lines(proc.stdout) == []


@pytest.mark.parametrize("program,args,message", [
    ("osu_latency", ["-m", "8:4"], "MIN 8 is larger than MAX 4"),
    ("osu_latency", ["-m", "1:2:3"], "invalid -m value '1:2:3'"),
    ("osu_latency", ["-i", "0"], "invalid -i value '0'"),
    ("osu_latency", ["-x", "-1"], "invalid -x value '-1'"),
    ("osu_latency", ["-f"], "unknown option '-f'"),  # OSU's pt2pt tests have no -f either
    ("osu_latency", ["-W", "4"], "unknown option '-W'"),
    ("osu_bw", ["-W", "0"], "invalid -W value '0'"),
    ("osu_allreduce", ["-q"], "unknown option '-q'"),
    ("osu_bcast", ["stray"], "unexpected argument 'stray'"),
    ("osu_reduce", ["-m"], "option -m needs a value"),
])
def test_bad_options_give_one_line_and_fail(built, program, args, message):
    proc = built.run(program, *args)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if f"{program}: error:" in line]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert row_lines(proc.stdout) == []


def test_help_exits_zero(built):
    proc = built.run("osu_bw", "-h")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: osu_bw [options]")
    assert "-W, --window-size" in proc.stdout
    assert row_lines(proc.stdout) == []

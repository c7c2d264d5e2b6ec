#!/usr/bin/env python3
"""Detection power and false alarms of the MPI linkage check, on the builds of this host.

``OsuBinaries`` refuses a binary that does not load its environment's MPI library
(``fabreg.run.linkage``). This script judges every benchmark binary of every build
it is given against every MPI it knows: a build judged against its own MPI must be
accepted (otherwise: a false alarm), against another MPI rejected (otherwise: a
miss). Builds: the suite's probes, built here against each MPI's wrapper, plus real
OSU install prefixes named like the checks name them (``FABREG_OSU_PREFIX_<MPI>``)
or given with ``--osu NAME=MPI=PREFIX`` (several versions side by side), and builds
known to be labelled with the wrong MPI (``--mislabelled NAME=CLAIMED=PREFIX``, e.g. the
"MPICH" OSU of a Spack ``develop:`` source shared by two MPI builds), which must be
rejected for the MPI they claim.

Usage (from the repository, with the project virtualenv):
    .venv/bin/python ci/bench/linkage_bench.py
    .venv/bin/python ci/bench/linkage_bench.py --osu 7.2=openmpi=/opt/osu/7.2-openmpi ...

Exit status: 0 when the table was printed and nothing was missed or falsely refused,
1 otherwise, 2 when fewer than two MPIs are installed (nothing to tell apart).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fabreg.run.linkage import ExpectedMpi, expected_from_wrapper, linkage_problem, parse_ldd
from fabreg.run.providers import find_osu_binary

REPO = Path(__file__).resolve().parents[2]
#: MPI name -> compiler wrapper, for the MPIs a Debian/Ubuntu host installs side by side.
WRAPPERS = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich", "mvapich2": "mpicc.mvapich2"}
BENCHMARKS = ["osu_latency", "osu_bw", "osu_bibw", "osu_allreduce", "osu_bcast",
              "osu_alltoall", "osu_reduce", "osu_allgather"]


def expected(mpi: str) -> ExpectedMpi:
    wrapper = WRAPPERS[mpi]
    show = subprocess.run([wrapper, "-show"], capture_output=True, text=True).stdout
    return expected_from_wrapper(mpi, f"{wrapper} -show", show)


def build_probes(mpi: str, where: Path) -> dict[str, Path]:
    subprocess.run(["make", "-f", str(REPO / "src" / "probes" / "Makefile"),
                    f"CC={WRAPPERS[mpi]}", *BENCHMARKS], cwd=where, check=True,
                   capture_output=True, timeout=600)
    return {name: where / name for name in BENCHMARKS}


def prefix_builds(specs: list[str]) -> list[tuple[str, str, dict]]:
    """``NAME=MPI=PREFIX`` -> (label, MPI, {benchmark: path}) for what the prefix holds."""
    builds = []
    for label, mpi, prefix in (spec.split("=", 2) for spec in specs):
        found = {name: find_osu_binary(prefix, name) for name in BENCHMARKS}
        builds.append((f"{label} ({prefix})", mpi, {k: v for k, v in found.items() if v}))
    return builds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--osu", action="append", default=[], metavar="NAME=MPI=PREFIX",
                        help="a real OSU install prefix built against MPI (repeatable)")
    parser.add_argument("--mislabelled", action="append", default=[],
                        metavar="NAME=CLAIMED=PREFIX",
                        help="a prefix whose binaries claim MPI CLAIMED but load another")
    args = parser.parse_args()
    mpis = [mpi for mpi, wrapper in WRAPPERS.items() if shutil.which(wrapper)]
    if len(mpis) < 2 or not shutil.which("ldd"):
        print(f"linkage_bench: needs two MPIs and ldd (found: {', '.join(mpis) or 'none'})")
        return 2
    expectations = {mpi: expected(mpi) for mpi in mpis}
    with tempfile.TemporaryDirectory(prefix="fabreg-linkage-") as tmp:
        builds = []
        for mpi in mpis:
            where = Path(tmp, mpi)
            where.mkdir()
            builds.append((f"probes ({WRAPPERS[mpi]})", mpi, build_probes(mpi, where)))
        builds += prefix_builds(args.osu + [
            f"osu={mpi}={os.environ[f'FABREG_OSU_PREFIX_{mpi.upper()}']}" for mpi in mpis
            if os.environ.get(f"FABREG_OSU_PREFIX_{mpi.upper()}")])
        mislabelled = prefix_builds(args.mislabelled)
        print(f"{'build':<44} {'built for':<13} {'judged as':<9} {'binaries':>8} "
              f"{'accepted':>8} {'rejected':>8}  verdict")
        misses = false_alarms = judged_own = judged_other = 0
        for label, built_for, binaries in builds + mislabelled:
            listings = {name: parse_ldd(str(path), subprocess.run(
                ["ldd", str(path)], capture_output=True, text=True).stdout)
                for name, path in binaries.items()}
            known = (label, built_for, binaries) not in mislabelled
            for mpi in (mpis if known else [built_for]):
                rejected = sum(linkage_problem(found, expectations[mpi]) is not None
                               for found in listings.values())
                accepted = len(listings) - rejected
                own = known and mpi == built_for
                wrong = rejected if own else accepted
                if own:
                    false_alarms += wrong
                    judged_own += len(listings)
                else:
                    misses += wrong
                    judged_other += len(listings)
                verdict = ("right" if not wrong else
                           f"{wrong} false alarm(s)" if own else f"{wrong} missed")
                claim = built_for if known else f"not {built_for}"
                print(f"{label[:44]:<44} {claim:<13} {mpi:<9} {len(listings):>8} "
                      f"{accepted:>8} {rejected:>8}  {verdict}")
    print(f"\ndetection: {judged_other - misses}/{judged_other} binaries judged against "
          f"another MPI rejected; false alarms: {false_alarms}/{judged_own} binaries judged "
          "against their own MPI refused")
    return 0 if not (misses or false_alarms) else 1


if __name__ == "__main__":
    sys.exit(main())
